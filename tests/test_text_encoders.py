"""Entity text encoders: shapes, padding invariance, and where pretrained weights go."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax.modules import bert
from docent_jax.modules import text_encoders

CONFIG = bert.BertConfig.from_hf_dict(dict(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=32))


def _init(name, config=CONFIG):
  encoder = text_encoders.create_encoder(name, config, dim=8, dtype=jnp.float32)
  tokens = jnp.array([[2, 7, 9, 3, 0, 0, 0, 0]])
  return encoder, nn.unbox(encoder.init(jax.random.key(0), tokens)["params"])


@pytest.mark.parametrize("name", ["bert", "bert_mean", "bow", "cnn"])
@pytest.mark.parametrize("pad", [0, 1])  # BERT's padding id, and RoBERTa's.
def test_encoders_map_texts_to_dim_and_ignore_extra_padding(name, pad):
  encoder, params = _init(name, dataclasses.replace(CONFIG, pad_token_id=pad))
  short = jnp.array([[2, 7, 9, 3, pad, pad], [2, 5, 3, pad, pad, pad]])
  long = jnp.pad(short, ((0, 0), (0, 6)), constant_values=pad)
  out_short = encoder.apply({"params": params}, short)
  assert out_short.shape == (2, 8) and out_short.dtype == jnp.float32
  np.testing.assert_allclose(encoder.apply({"params": params}, long), out_short, atol=1e-5)
  assert not np.allclose(out_short[0], out_short[1])


def test_bag_of_words_is_the_mean_of_word_embeddings_then_projection():
  encoder, params = _init("bow")
  table = params["word_embeddings"]["embedding"]
  expected = table[jnp.array([2, 7, 3])].mean(0) @ params["projection"]["kernel"] + params["projection"]["bias"]
  np.testing.assert_allclose(encoder.apply({"params": params}, jnp.array([[2, 7, 3, 0]]))[0], expected, atol=1e-6)


def test_bag_of_words_with_dim_zero_is_the_mean_itself_of_the_embeddings_width():
  encoder = text_encoders.create_encoder("bow", CONFIG, dim=0, dtype=jnp.float32)
  tokens = jnp.array([[2, 7, 3, 0]])
  params = nn.unbox(encoder.init(jax.random.key(0), tokens)["params"])
  assert set(params) == {"word_embeddings"}
  expected = params["word_embeddings"]["embedding"][jnp.array([2, 7, 3])].mean(0)
  np.testing.assert_allclose(encoder.apply({"params": params}, tokens)[0], expected, atol=1e-6)
  assert text_encoders.output_dim(0, CONFIG) == CONFIG.hidden_size and text_encoders.output_dim(8, CONFIG) == 8


def test_bert_mean_with_dim_zero_is_the_mean_of_berts_outputs_over_the_word_pieces():
  encoder = text_encoders.create_encoder("bert_mean", CONFIG, dim=0, dtype=jnp.float32)
  tokens = jnp.array([[2, 7, 3, 0, 0]])
  params = nn.unbox(encoder.init(jax.random.key(0), tokens)["params"])
  assert set(params) == {"bert"}
  hidden = bert.BertModel(CONFIG, add_pooler=False).apply({"params": params["bert"]}, tokens[:, :3],
                                                          jnp.ones((1, 3), jnp.int32)).last_hidden_state
  np.testing.assert_allclose(encoder.apply({"params": params}, tokens)[0], hidden[0].mean(0), atol=1e-5)


@pytest.mark.parametrize("name, dim", [("bert", 0), ("cnn", 0), ("bow", -1)])
def test_dim_zero_is_refused_outside_bag_of_words(name, dim):
  with pytest.raises(ValueError, match=f"config.model.dim = {dim}"):
    text_encoders.create_encoder(name, CONFIG, dim, jnp.float32)


@pytest.mark.parametrize("name", ["bert", "bert_mean", "bow", "cnn"])
def test_pretrained_subtree_addresses_existing_params(name):
  _, params = _init(name)
  bert_params = nn.unbox(bert.BertModel(CONFIG).init(jax.random.key(1), jnp.ones((1, 4), jnp.int32),
                                                     jnp.ones((1, 4), jnp.int32))["params"])
  subtree = text_encoders.pretrained_subtree(name, bert_params)
  for key in subtree:
    assert key in params
  if not name.startswith("bert"):
    assert subtree["word_embeddings"]["embedding"].shape == params["word_embeddings"]["embedding"].shape


def test_unknown_encoder_lists_valid_ones():
  with pytest.raises(ValueError, match="bert.*bow.*cnn"):
    text_encoders.create_encoder("lstm", CONFIG, 8, jnp.float32)
