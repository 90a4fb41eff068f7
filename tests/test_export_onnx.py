"""The ONNX graph of a text encoder (`export.onnx_graph`) under onnxruntime against the Flax model it is built from:
BERT and RoBERTa, both poolings, a linear map, normalisation, a cross-encoder's head, dynamic shapes, and the file."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnxruntime
import pytest

from docent_jax.export import encoder as encoders
from docent_jax.export import onnx_graph
from docent_jax.inference import protocol
from docent_jax.modules import bert
from docent_jax.modules import entity_table
from docent_jax.modules import pair_classifier
from docent_jax.modules import pretrained

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=40)
CONFIGS = {
    "bert": bert.BertConfig(**TINY, hidden_act="gelu"),
    # RoBERTa's padding is id 1, its positions start at row 2, and it has one token type.
    "roberta": bert.BertConfig(**TINY, hidden_act="gelu_new", pad_token_id=1, type_vocab_size=1,
                               model_type="roberta"),
}
LENGTHS = [7, 3, 9, 1, 5]
PROJECTION_DIM = 16


def _tokens(config: bert.BertConfig, lengths: list[int], seed: int = 0) -> dict[str, np.ndarray]:
  """int64 inputs of texts of `lengths` tokens (0: padding only), padded with the model's pad id to the longest;
  a BERT's second half of each text is segment 1."""
  rng = np.random.default_rng(seed)
  length = max(max(lengths), 1)
  mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
  ids = rng.integers(config.pad_token_id + 1, config.vocab_size, size=mask.shape)
  ids = np.where(mask == 1, ids, config.pad_token_id)
  types = (np.arange(length)[None, :] >= np.array(lengths)[:, None] // 2) * mask
  if config.type_vocab_size == 1:
    types = np.zeros_like(types)
  return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types.astype(np.int64)}


def _bert_params(config: bert.BertConfig, seed: int = 0) -> dict:
  ids = jnp.zeros((1, 4), jnp.int32)
  params = bert.BertModel(config, add_pooler=False).init(jax.random.key(seed), ids, jnp.ones_like(ids))["params"]
  # Random LayerNorm and bias params too (they start at 1 and 0), so that every tensor's name and layout counts.
  leaves, tree = jax.tree_util.tree_flatten(nn.unbox(params))
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  return jax.tree_util.tree_unflatten(
      tree, [leaf + 0.1 * jax.random.normal(key, leaf.shape) for leaf, key in zip(leaves, keys)])


def _encoder(config: bert.BertConfig, bert_params: dict, *, pooling: str, projection=None, normalize: bool = False,
             head: str | None = None, head_weights=None) -> encoders.ExportedEncoder:
  layout = protocol.TextEncoderLayout(bert_config=config, bert_path=("bert",), pooling=pooling, max_len=32,
                                      normalize=normalize, head=head)
  return encoders.ExportedEncoder(layout=layout, state_dict=pretrained.bert_state_dict(bert_params, config),
                                  projection=projection, head=head_weights, similarity="cosine", tokenizer=None)


def _session(model: onnx.ModelProto | str) -> onnxruntime.InferenceSession:
  options = onnxruntime.SessionOptions()
  options.intra_op_num_threads = 1
  model = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
  return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _flax_vectors(config: bert.BertConfig, bert_params: dict, inputs: dict[str, np.ndarray], *, pooling: str,
                  projection=None, normalize: bool = False) -> np.ndarray:
  """The text vectors as the model computes them in JAX."""
  mask = jnp.asarray(inputs["attention_mask"], jnp.int32)
  hidden = bert.BertModel(config, add_pooler=False).apply(
      {"params": bert_params}, jnp.asarray(inputs["input_ids"], jnp.int32), mask,
      jnp.asarray(inputs["token_type_ids"], jnp.int32)).last_hidden_state
  vectors = hidden[:, 0] if pooling == "cls" else bert.mean_pool(hidden, mask)
  if projection is not None:
    weight, bias = projection
    vectors = vectors @ jnp.asarray(weight).T + jnp.asarray(bias)
  if normalize:
    vectors = entity_table.l2_normalize(vectors)
  return np.asarray(vectors)


def _assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
  """Row-wise cosine >= 0.99999 and elementwise within 1e-5."""
  assert actual.shape == expected.shape and actual.dtype == np.float32
  cosine = np.sum(actual * expected, -1) / (np.linalg.norm(actual, axis=-1) * np.linalg.norm(expected, axis=-1))
  assert np.all(cosine >= 0.99999), cosine
  np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-5)


def _projection(config: bert.BertConfig, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return (rng.normal(0, 0.2, (PROJECTION_DIM, config.hidden_size)).astype(np.float32),
          rng.normal(0, 0.1, PROJECTION_DIM).astype(np.float32))


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("projected,normalize", [(False, False), (True, False), (False, True), (True, True)])
def test_graph_computes_the_flax_vectors(model_type, pooling, projected, normalize):
  config = CONFIGS[model_type]
  params = _bert_params(config)
  projection = _projection(config) if projected else None
  model = onnx_graph.encoder_graph(_encoder(config, params, pooling=pooling, projection=projection,
                                            normalize=normalize))
  onnx.checker.check_model(model, full_check=True)
  inputs = _tokens(config, LENGTHS)
  (vectors,) = _session(model).run(["sentence_embedding"], inputs)
  expected = _flax_vectors(config, params, inputs, pooling=pooling, projection=projection, normalize=normalize)
  assert vectors.shape == (len(LENGTHS), PROJECTION_DIM if projected else config.hidden_size)
  _assert_close(vectors, expected)
  if normalize:
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh"])
def test_every_activation(hidden_act):
  config = dataclasses.replace(CONFIGS["bert"], hidden_act=hidden_act, num_hidden_layers=1)
  params = _bert_params(config, seed=3)
  inputs = _tokens(config, LENGTHS, seed=3)
  (vectors,) = _session(onnx_graph.encoder_graph(_encoder(config, params, pooling="mean"))).run(None, inputs)
  _assert_close(vectors, _flax_vectors(config, params, inputs, pooling="mean"))


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_cross_encoder_logits(model_type):
  config = CONFIGS[model_type]
  module = pair_classifier.CrossEncoder(config, pad_token_id=config.pad_token_id)
  inputs = _tokens(config, LENGTHS, seed=4)
  pairs = jnp.stack([jnp.asarray(inputs["input_ids"], jnp.int32), jnp.asarray(inputs["token_type_ids"], jnp.int32)],
                    axis=1)
  params = nn.unbox(module.init(jax.random.key(4), pairs)["params"])
  dense = params["head"]["output"]
  dense = {"kernel": dense["kernel"], "bias": dense["bias"] + 0.3}  # A bias of its own (it starts at zero).
  params = {**params, "head": {"output": dense}}
  head = (np.asarray(dense["kernel"]).T, np.asarray(dense["bias"]))
  model = onnx_graph.encoder_graph(_encoder(config, params["bert"], pooling="cls", head="cross_encoder",
                                            head_weights=head))
  onnx.checker.check_model(model, full_check=True)
  assert [output.name for output in model.graph.output] == ["logits"]
  (logits,) = _session(model).run(["logits"], inputs)
  assert logits.shape == (len(LENGTHS),)
  np.testing.assert_allclose(logits, np.asarray(module.apply({"params": params}, pairs)), rtol=0, atol=1e-5)


def test_pair_features_head_is_left_out():
  """A bi-encoder's pair head scores two texts' vectors: its graph is the single-text encoder's."""
  config = CONFIGS["bert"]
  params = _bert_params(config)
  encoder = _encoder(config, params, pooling="mean", head="pair_features",
                     head_weights=(np.ones((1, 4 * config.hidden_size), np.float32), np.zeros(1, np.float32)))
  inputs = _tokens(config, LENGTHS)
  (vectors,) = _session(onnx_graph.encoder_graph(encoder)).run(["sentence_embedding"], inputs)
  _assert_close(vectors, _flax_vectors(config, params, inputs, pooling="mean"))


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_batch_and_sequence_are_dynamic(model_type):
  config = CONFIGS[model_type]
  params = _bert_params(config, seed=5)
  encoder = _encoder(config, params, pooling="mean", projection=_projection(config), normalize=True)
  model = onnx_graph.encoder_graph(encoder)
  assert [(tensor.name, tensor.type.tensor_type.elem_type) for tensor in model.graph.input] == [
      (name, onnx.TensorProto.INT64) for name in ("input_ids", "attention_mask", "token_type_ids")]
  for tensor in [*model.graph.input, *model.graph.output]:
    assert tensor.type.tensor_type.shape.dim[0].dim_param == "batch"
  assert all(tensor.type.tensor_type.shape.dim[1].dim_param == "sequence" for tensor in model.graph.input)
  session = _session(model)
  for seed, lengths in enumerate([[2, 5], [12, 1, 30], [4]]):
    inputs = _tokens(config, lengths, seed=seed)
    (vectors,) = session.run(None, inputs)
    assert vectors.shape == (len(lengths), PROJECTION_DIM)
    _assert_close(vectors, _flax_vectors(config, params, inputs, pooling="mean", projection=encoder.projection,
                                         normalize=True))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_fully_padded_rows_as_in_jax(pooling):
  """A row of padding only attends uniformly (JAX's fill), and its mean is over at least one token."""
  config = CONFIGS["roberta"]
  params = _bert_params(config, seed=6)
  inputs = _tokens(config, [4, 0, 2], seed=6)
  (vectors,) = _session(onnx_graph.encoder_graph(_encoder(config, params, pooling=pooling))).run(None, inputs)
  expected = _flax_vectors(config, params, inputs, pooling=pooling)
  np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-5)
  if pooling == "mean":
    np.testing.assert_array_equal(vectors[1], 0.0)


def test_cross_encoder_takes_no_projection():
  config = CONFIGS["bert"]
  encoder = _encoder(config, _bert_params(config), pooling="cls", projection=_projection(config),
                     head="cross_encoder", head_weights=(np.ones((1, PROJECTION_DIM), np.float32),
                                                         np.zeros(1, np.float32)))
  with pytest.raises(ValueError, match="cross-encoder"):
    onnx_graph.encoder_graph(encoder)


@pytest.mark.parametrize("external", [False, True])
def test_save_onnx(tmp_path, monkeypatch, external):
  """One file of graph and weights; past the 2 GB a proto holds (here: past 0 bytes), the weights beside it."""
  config = CONFIGS["roberta"]
  params = _bert_params(config, seed=7)
  encoder = _encoder(config, params, pooling="mean", projection=_projection(config), normalize=True)
  path = tmp_path / "model.onnx"
  if external:
    monkeypatch.setattr(onnx_graph, "_MAX_INLINE_BYTES", 0)
    (tmp_path / "model.onnx.data").write_bytes(b"a previous export's weights")
  onnx_graph.save_onnx(encoder, path)
  assert sorted(p.name for p in tmp_path.iterdir()) == (["model.onnx", "model.onnx.data"] if external
                                                        else ["model.onnx"])
  weights = sum(np.asarray(value).nbytes for value in encoder.state_dict.values())
  assert (path.stat().st_size < weights) == external
  if external:  # Written anew, not appended to the old file.
    assert not (tmp_path / "model.onnx.data").read_bytes().startswith(b"a previous")
  onnx.checker.check_model(str(path), full_check=True)
  inputs = _tokens(config, LENGTHS, seed=7)
  (vectors,) = _session(str(path)).run(None, inputs)
  _assert_close(vectors, _flax_vectors(config, params, inputs, pooling="mean", projection=encoder.projection,
                                       normalize=True))
