"""Pair classifiers: the bi-encoder's pooling, features and head, the cross-encoder's reading, sharding names."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from docent_jax import parallel
from docent_jax.modules import tag_scorers
from docent_jax.modules import bert
from docent_jax.modules import pair_classifier

CONFIG = bert.BertConfig.from_hf_dict(dict(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=32, hidden_dropout_prob=0.1))
# Two pairs of offers; padding id 0.
TOKENS = jnp.array([[[2, 7, 9, 3, 0, 0], [2, 5, 3, 0, 0, 0]],
                    [[2, 11, 3, 0, 0, 0], [2, 11, 12, 13, 3, 0]]])


def _params(model, inputs=TOKENS):
  return nn.unbox(model.init(jax.random.key(0), inputs)["params"])


def _head(params, features):
  kernel, bias = params["head"]["output"]["kernel"], params["head"]["output"]["bias"]
  return (features @ kernel + bias)[:, 0]


def test_bi_encoder_encodes_offers_by_mean_pooled_bert_and_scores_the_pair_features():
  model = pair_classifier.PairClassifier(CONFIG)
  params = _params(model)
  offers = TOKENS.reshape(4, -1)
  vectors = model.apply({"params": params}, offers, method="encode")
  # The offer encoder is the mean-pooled BERT used elsewhere (e.g. for tag texts).
  expected = tag_scorers.pool(bert.BertModel(CONFIG, add_pooler=False), params["bert"], offers, "mean")
  np.testing.assert_allclose(vectors, expected, atol=1e-6)
  u, v = vectors[0::2], vectors[1::2]
  features = jnp.concatenate([u, v, jnp.abs(u - v), u * v], axis=1)
  np.testing.assert_allclose(pair_classifier.pair_features(u, v), features)
  logits = model.apply({"params": params}, TOKENS)
  assert logits.shape == (2,) and logits.dtype == jnp.float32
  np.testing.assert_allclose(logits, _head(params, features), atol=1e-6)
  np.testing.assert_allclose(model.apply({"params": params}, jnp.stack([u, v], axis=1), method="classify"),
                             logits, atol=1e-6)
  # Extra padding changes nothing; swapping the offers changes the features' order, hence the logit.
  np.testing.assert_allclose(model.apply({"params": params}, jnp.pad(TOKENS, ((0, 0), (0, 0), (0, 4)))), logits,
                             atol=1e-5)
  assert not np.allclose(model.apply({"params": params}, TOKENS[:, ::-1]), logits)


def test_mean_pool_ignores_masked_positions():
  hidden = jnp.arange(12.0).reshape(2, 3, 2)
  mask = jnp.array([[1, 1, 0], [0, 0, 0]])
  np.testing.assert_allclose(bert.mean_pool(hidden, mask), [[1.0, 2.0], [0.0, 0.0]])


def test_cross_encoder_reads_both_offers_with_token_types_and_scores_cls():
  model = pair_classifier.CrossEncoder(CONFIG)
  ids = jnp.array([[1, 7, 9, 4, 5, 4, 0, 0], [1, 11, 4, 11, 12, 4, 0, 0]])
  types = jnp.array([[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 0, 0]])
  inputs = jnp.stack([ids, types], axis=1)
  params = _params(model, inputs)
  logits = model.apply({"params": params}, inputs)
  assert logits.shape == (2,)
  hidden = bert.BertModel(CONFIG, add_pooler=False).apply({"params": params["bert"]}, ids, (ids != 0).astype(jnp.int32),
                                                          types).last_hidden_state
  np.testing.assert_allclose(logits, _head(params, hidden[:, 0]), atol=1e-6)
  assert not np.allclose(model.apply({"params": params}, jnp.stack([ids, jnp.zeros_like(types)], axis=1)), logits)
  np.testing.assert_allclose(model.apply({"params": params}, jnp.pad(inputs, ((0, 0), (0, 0), (0, 3)))), logits,
                             atol=1e-5)
  with pytest.raises(ValueError, match="token types 0 and 1"):
    _params(pair_classifier.CrossEncoder(dataclasses.replace(CONFIG, type_vocab_size=1)), inputs)


def test_models_mask_the_tokenizers_padding_id():
  """RoBERTa pads with id 1: given `pad_token_id=1`, both models read 1-padded inputs as the others read 0-padded."""
  one_padded = jnp.where(TOKENS == 0, 1, TOKENS)
  model = pair_classifier.PairClassifier(CONFIG)
  params = _params(model)
  one_padding_model = pair_classifier.PairClassifier(CONFIG, pad_token_id=1)
  np.testing.assert_allclose(one_padding_model.apply({"params": params}, one_padded),
                             model.apply({"params": params}, TOKENS), atol=1e-6)
  # A RoBERTa cross-encoder: one token type, and its position ids skip the padding too.
  roberta = dataclasses.replace(CONFIG, model_type="roberta", type_vocab_size=1, pad_token_id=1)
  cross_encoder = pair_classifier.CrossEncoder(roberta, pad_token_id=1)
  inputs = jnp.stack([one_padded[:, 0], jnp.zeros_like(one_padded[:, 0])], axis=1)
  params = _params(cross_encoder, inputs)
  more_padding = jnp.concatenate([inputs, jnp.stack([jnp.ones((2, 3), int), jnp.zeros((2, 3), int)], axis=1)], axis=2)
  np.testing.assert_allclose(cross_encoder.apply({"params": params}, more_padding),
                             cross_encoder.apply({"params": params}, inputs), atol=1e-5)


def test_head_dropout_acts_only_in_training():
  model = pair_classifier.PairClassifier(CONFIG)
  params = _params(model)
  train = lambda seed: model.apply({"params": params}, TOKENS, deterministic=False,
                                   rngs={"dropout": jax.random.key(seed)})
  np.testing.assert_array_equal(train(1), train(1))
  assert not np.allclose(train(1), train(2))
  np.testing.assert_array_equal(model.apply({"params": params}, TOKENS), model.apply({"params": params}, TOKENS))


def test_inputs_must_be_pairs():
  model = pair_classifier.PairClassifier(CONFIG)
  params = _params(model)
  with pytest.raises(ValueError, match=r"\[batch, 2, ...\]; got shape \(2, 6\)"):
    model.apply({"params": params}, TOKENS[:, 0])
  with pytest.raises(ValueError, match=r"got shape \(1, 3, 16\)"):
    model.apply({"params": params}, jnp.zeros((1, 3, 16)), method="classify")


@pytest.mark.parametrize("model_class", [pair_classifier.PairClassifier, pair_classifier.CrossEncoder])
def test_params_carry_logical_axis_names_for_the_sharding_rules(model_class):
  model = model_class(CONFIG)
  abstract = jax.eval_shape(model.init, jax.random.key(0), TOKENS)["params"]
  specs = nn.get_partition_spec(abstract)
  assert specs["head"]["output"]["kernel"] == jax.sharding.PartitionSpec("embed", None)
  assert specs["bert"]["layer_0"]["intermediate"]["kernel"] == jax.sharding.PartitionSpec("embed", "mlp")
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": (2, 4)}))
  shardings = parallel.param_shardings(abstract, mesh, parallel.DEFAULT_RULES)
  assert shardings["bert"]["layer_0"]["intermediate"]["kernel"].spec == jax.sharding.PartitionSpec(None, "model")
  assert shardings["head"]["output"]["kernel"].spec == jax.sharding.PartitionSpec(None, None)
