"""A model's text encoder as an ONNX graph (opset 17), built from its host arrays with `onnx.helper`: what
onnxruntime (and any runtime that reads ONNX) runs without JAX or PyTorch.

The graph reads a tokenizer's int64 `input_ids`, `attention_mask` and `token_type_ids` [batch, sequence] (both
dimensions dynamic) and computes what the model's `encode` does: the BERT or RoBERTa of `modules.bert`, the pooling,
the optional linear map and the optional L2 normalisation, giving `sentence_embedding` [batch, dim]; a
cross-encoder gives its pair's `logits` [batch] instead. A bi-encoder's pair head ("pair_features") scores two
texts' vectors, so it is no part of this single-text graph.

Weights keep their Hugging Face names; a `Linear` weight, stored transposed ([in, out]) so that `MatMul` reads it
as it is, is named with a ".T" suffix.
"""
from collections.abc import Callable
import os
import pathlib
from typing import BinaryIO

import numpy as np
import onnx
from onnx import helper
from onnx import numpy_helper

from docent_jax.export import encoder as encoders
from docent_jax.modules import bert

OPSET = 17  # The first with LayerNormalization.
# ONNX 1.12's IR version, the first that carries opset 17: the oldest runtimes that run the graph read it.
_IR_VERSION = 8
# A proto past 2 GB cannot be serialised (nor can one tensor past it be held in one): a model whose weights take
# more is written with them in a file beside it. Its nodes and names take well under the 16 MB left.
_MAX_INLINE_BYTES = onnx.checker.MAXIMUM_PROTOBUF - 2**24
# Where each weight starts in that file: a page boundary, so that a runtime can map it in place.
_EXTERNAL_ALIGNMENT = 4096
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# What JAX's attention puts in place of a padded key's score (`bert.attend`): a key's score plus this rounds to
# this (so a fully padded row attends uniformly, as in JAX) and its softmax probability is exactly zero.
_MASK_FILL = np.finfo(np.float32).min * 0.7


# Makes the initializer of a weight from its float32 value and name (as `numpy_helper.from_array`): its data
# inside the proto, or written elsewhere.
_WeightStore = Callable[[np.ndarray, str], onnx.TensorProto]


class _Graph:
  """The nodes and initializers of one graph under construction; each node is named after its one output."""

  def __init__(self, tensors: dict[str, np.ndarray], store: _WeightStore):
    self.tensors = tensors  # The weights by name, in torch's layout.
    self.store = store
    self.nodes: list[onnx.NodeProto] = []
    self.initializers: dict[str, onnx.TensorProto] = {}

  def weight(self, name: str, transpose: bool = False) -> str:
    """The initializer of the weight `name` (a `Linear` weight transposed to [in, out])."""
    value = np.asarray(self.tensors[name], np.float32)
    if transpose:
      name, value = f"{name}.T", value.T
    if name not in self.initializers:
      self.initializers[name] = self.store(np.ascontiguousarray(value), name)
    return name

  def constant(self, name: str, value: np.ndarray) -> str:
    """A small constant, kept in the proto (once, however many nodes read it)."""
    if name not in self.initializers:
      self.initializers[name] = numpy_helper.from_array(np.asarray(value), name)
    return name

  def floats(self, value: float) -> str:
    """A float32 scalar."""
    return self.constant(f"float32({float(value)!r})", np.array(value, np.float32))

  def ints(self, value: int | list[int]) -> str:
    """An int64 scalar, or a vector (a shape, axes)."""
    return self.constant(f"int64({value!r})", np.array(value, np.int64))

  def op(self, op_type: str, inputs: list[str], output: str, **attributes) -> str:
    self.nodes.append(helper.make_node(op_type, inputs, [output], name=output, **attributes))
    return output

  def linear(self, x: str, weight: str, bias: str, output: str) -> str:
    """x @ weight.T + bias, of a `Linear`'s weights."""
    product = self.op("MatMul", [x, self.weight(weight, transpose=True)], f"{output}.matmul")
    return self.op("Add", [product, self.weight(bias)], output)

  def layer_norm(self, x: str, prefix: str, epsilon: float, output: str) -> str:
    return self.op("LayerNormalization", [x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")],
                   output, axis=-1, epsilon=epsilon)


def _activation(g: _Graph, x: str, name: str, output: str) -> str:
  """Hugging Face's `hidden_act` `name` of x, as `bert.ACTIVATIONS` computes it."""
  if name == "gelu":  # Exact: x / 2 * (1 + erf(x / sqrt(2))).
    erf = g.op("Erf", [g.op("Mul", [x, g.floats(np.sqrt(0.5))], f"{output}.scaled")], f"{output}.erf")
    cdf = g.op("Add", [erf, g.floats(1.0)], f"{output}.cdf")
    return g.op("Mul", [g.op("Mul", [x, g.floats(0.5)], f"{output}.half"), cdf], output)
  if name in ("gelu_new", "gelu_pytorch_tanh"):  # x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
    cube = g.op("Mul", [g.op("Mul", [x, x], f"{output}.square"), x], f"{output}.cube")
    inner = g.op("Add", [x, g.op("Mul", [cube, g.floats(0.044715)], f"{output}.cubic")], f"{output}.inner")
    tanh = g.op("Tanh", [g.op("Mul", [inner, g.floats(np.sqrt(2 / np.pi))], f"{output}.scaled")], f"{output}.tanh")
    cdf = g.op("Mul", [g.op("Add", [tanh, g.floats(1.0)], f"{output}.tanh1"), g.floats(0.5)], f"{output}.cdf")
    return g.op("Mul", [x, cdf], output)
  if name == "relu":
    return g.op("Relu", [x], output)
  if name in ("silu", "swish"):
    return g.op("Mul", [x, g.op("Sigmoid", [x], f"{output}.sigmoid")], output)
  if name == "tanh":
    return g.op("Tanh", [x], output)
  raise ValueError(f"No ONNX graph of hidden_act {name!r}.")


def _embeddings(g: _Graph, config: bert.BertConfig) -> str:
  """[batch, sequence, hidden]: word + position + token-type embeddings, then LayerNorm."""
  words = g.op("Gather", [g.weight("embeddings.word_embeddings.weight"), "input_ids"], "embeddings.words")
  table = g.weight("embeddings.position_embeddings.weight")
  if config.model_type == "roberta":  # Non-padding tokens count from pad_token_id + 1; padding takes that row.
    pad = g.op("Equal", ["input_ids", g.ints(config.pad_token_id)], "embeddings.is_pad")
    real = g.op("Cast", [g.op("Not", [pad], "embeddings.is_real")], "embeddings.real", to=onnx.TensorProto.INT64)
    count = g.op("CumSum", [real, g.ints(1)], "embeddings.count")
    ids = g.op("Add", [g.op("Mul", [count, real], "embeddings.real_count"), g.ints(config.pad_token_id)],
               "embeddings.position_ids")
    positions = g.op("Gather", [table, ids], "embeddings.positions")
  else:  # Rows 0 .. sequence - 1, the same for every text.
    length = g.op("Shape", ["input_ids"], "embeddings.length", start=1, end=2)
    positions = g.op("Slice", [table, g.ints([0]), length, g.ints([0])], "embeddings.positions")
  types = g.op("Gather", [g.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"],
               "embeddings.token_types")
  summed = g.op("Add", [g.op("Add", [words, positions], "embeddings.words_positions"), types], "embeddings.sum")
  return g.layer_norm(summed, "embeddings.LayerNorm", config.layer_norm_eps, "embeddings.output")


def _attention(g: _Graph, x: str, mask_bias: str, config: bert.BertConfig, prefix: str) -> str:
  """One layer's self-attention, output projection, residual and LayerNorm."""
  heads = g.ints([0, 0, config.num_attention_heads, config.head_dim])  # 0: the input's batch and sequence.

  def split(part: str, perm: list[int]) -> str:
    name = f"{prefix}.attention.self.{part}"
    projected = g.linear(x, f"{name}.weight", f"{name}.bias", name)
    return g.op("Transpose", [g.op("Reshape", [projected, heads], f"{name}.heads")], f"{name}.transposed",
                perm=perm)

  query = split("query", [0, 2, 1, 3])  # [batch, heads, sequence, head_dim]
  key = split("key", [0, 2, 3, 1])  # [batch, heads, head_dim, sequence]
  value = split("value", [0, 2, 1, 3])
  name = f"{prefix}.attention.self"
  scores = g.op("Mul", [g.op("MatMul", [query, key], f"{name}.dot"), g.floats(1 / np.sqrt(config.head_dim))],
                f"{name}.scores")
  masked = g.op("Add", [scores, mask_bias], f"{name}.masked_scores")
  probs = g.op("Softmax", [masked], f"{name}.probs", axis=-1)
  context = g.op("Transpose", [g.op("MatMul", [probs, value], f"{name}.context_heads")],
                 f"{name}.context_transposed", perm=[0, 2, 1, 3])
  context = g.op("Reshape", [context, g.ints([0, 0, config.hidden_size])], f"{name}.context")
  name = f"{prefix}.attention.output"
  out = g.linear(context, f"{name}.dense.weight", f"{name}.dense.bias", f"{name}.dense")
  return g.layer_norm(g.op("Add", [out, x], f"{name}.residual"), f"{name}.LayerNorm", config.layer_norm_eps,
                      f"{name}.output")


def _layer(g: _Graph, x: str, mask_bias: str, config: bert.BertConfig, index: int) -> str:
  """Transformer block `index`: attention, then the feed-forward network with residual and LayerNorm."""
  prefix = f"encoder.layer.{index}"
  x = _attention(g, x, mask_bias, config, prefix)
  h = g.linear(x, f"{prefix}.intermediate.dense.weight", f"{prefix}.intermediate.dense.bias",
               f"{prefix}.intermediate.dense")
  h = _activation(g, h, config.hidden_act, f"{prefix}.intermediate.activation")
  h = g.linear(h, f"{prefix}.output.dense.weight", f"{prefix}.output.dense.bias", f"{prefix}.output.dense")
  return g.layer_norm(g.op("Add", [h, x], f"{prefix}.output.residual"), f"{prefix}.output.LayerNorm",
                      config.layer_norm_eps, f"{prefix}.output")


def _pool(g: _Graph, hidden: str, pooling: str) -> str:
  """[batch, hidden]: the first token's output ("cls"), or the mean over the tokens where attention_mask is 1,
  over at least one (`bert.mean_pool`)."""
  if pooling == "cls":
    return g.op("Gather", [hidden, g.ints(0)], "pooled", axis=1)
  if pooling == "mean":
    mask = g.op("Cast", ["attention_mask"], "pooling.mask", to=onnx.TensorProto.FLOAT)
    weights = g.op("Unsqueeze", [mask, g.ints([-1])], "pooling.weights")  # [batch, sequence, 1]
    total = g.op("ReduceSum", [g.op("Mul", [hidden, weights], "pooling.weighted"), g.ints([1])], "pooling.total",
                 keepdims=0)
    count = g.op("ReduceSum", [weights, g.ints([1])], "pooling.count", keepdims=0)  # [batch, 1]
    return g.op("Div", [total, g.op("Max", [count, g.floats(1.0)], "pooling.denominator")], "pooled")
  raise ValueError(f"No ONNX graph of pooling {pooling!r}.")


def _tensors(encoder: encoders.ExportedEncoder) -> dict[str, np.ndarray]:
  """The graph's weights by name: the BERT's (Hugging Face's names), the linear map's and a cross-encoder's head's."""
  tensors = {name: value for name, value in encoder.state_dict.items() if not name.startswith("pooler.")}
  if encoder.projection is not None:
    tensors["projection.weight"], tensors["projection.bias"] = encoder.projection
  if encoder.layout.head == "cross_encoder":
    tensors["head.weight"], tensors["head.bias"] = encoder.head
  return tensors


def _model(encoder: encoders.ExportedEncoder, store: _WeightStore) -> onnx.ModelProto:
  """The unchecked model of `encoder_graph`, its weights made by `store`."""
  layout = encoder.layout
  config = layout.bert_config
  cross_encoder = layout.head == "cross_encoder"
  if cross_encoder and (encoder.projection is not None or layout.normalize):
    raise ValueError("A cross-encoder's head reads the pooled vector itself; this layout also maps or normalises it.")
  g = _Graph(_tensors(encoder), store)

  x = _embeddings(g, config)
  # [batch, 1, 1, sequence], added to every layer's scores: 0 for the tokens attended to, else the fill.
  keys = g.op("Unsqueeze", ["attention_mask", g.ints([1, 2])], "mask.keys")
  is_pad = g.op("Equal", [keys, g.ints(0)], "mask.is_pad")
  mask_bias = g.op("Where", [is_pad, g.floats(_MASK_FILL), g.floats(0.0)], "mask.bias")
  for i in range(config.num_hidden_layers):
    x = _layer(g, x, mask_bias, config, i)
  vector = _pool(g, x, layout.pooling)

  if encoder.projection is not None:
    vector = g.linear(vector, "projection.weight", "projection.bias", "projected")
  if layout.normalize:  # x / max(|x|, 1e-12): a zero vector stays zero, as sentence-transformers' Normalize.
    norm = g.op("ReduceL2", [vector], "norm", axes=[-1], keepdims=1)
    vector = g.op("Div", [vector, g.op("Max", [norm, g.floats(1e-12)], "norm.clamped")], "normalized")
  if cross_encoder:
    logit = g.linear(vector, "head.weight", "head.bias", "head")  # [batch, 1]
    g.op("Squeeze", [logit, g.ints([1])], "logits")
    output = helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["batch"])
  else:
    g.op("Identity", [vector], "sentence_embedding")
    output = helper.make_tensor_value_info("sentence_embedding", onnx.TensorProto.FLOAT, ["batch", encoder.dim])

  inputs = [helper.make_tensor_value_info(name, onnx.TensorProto.INT64, ["batch", "sequence"]) for name in INPUTS]
  graph = helper.make_graph(g.nodes, f"{config.model_type}_text_encoder", inputs, [output],
                            initializer=list(g.initializers.values()))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=_IR_VERSION,
                           producer_name="docent_jax")


def _fits_inline(encoder: encoders.ExportedEncoder) -> bool:
  return sum(np.asarray(value).nbytes for value in _tensors(encoder).values()) <= _MAX_INLINE_BYTES


def encoder_graph(encoder: encoders.ExportedEncoder) -> onnx.ModelProto:
  """The ONNX model (opset 17) of `encoder`, weights inside: int64 `input_ids`, `attention_mask` and
  `token_type_ids` [batch, sequence] to `sentence_embedding` [batch, dim], or a cross-encoder's `logits` [batch].
  Checked by `onnx.checker` where it can be serialised, its weights under 2 GB; a larger one is for `save_onnx`
  (which checks the files it writes), and one weight over 2 GB cannot be held in a proto at all."""
  model = _model(encoder, numpy_helper.from_array)
  if _fits_inline(encoder):
    onnx.checker.check_model(model)
  return model


def _external_weight(file: BinaryIO, location: str) -> _WeightStore:
  """Makes initializers whose data it appends to `file`, which the model finds as `location` beside it."""

  def store(value: np.ndarray, name: str) -> onnx.TensorProto:
    file.write(bytes(-file.tell() % _EXTERNAL_ALIGNMENT))
    offset = file.tell()
    file.write(memoryview(value.astype("<f4", copy=False)))  # ONNX's data is little-endian.
    tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=value.shape,
                              data_location=onnx.TensorProto.EXTERNAL)
    for key, entry in (("location", location), ("offset", offset), ("length", value.nbytes)):
      tensor.external_data.add(key=key, value=str(entry))
    return tensor

  return store


def save_onnx(encoder: encoders.ExportedEncoder, path: str | os.PathLike) -> None:
  """Writes the model of `encoder_graph(encoder)` to the file `path` (a local `.onnx`), weights included; one whose
  weights are over 2 GB keeps them in `<name>.data` beside it (ONNX's external data), which must travel with it."""
  path = pathlib.Path(path)
  if _fits_inline(encoder):
    onnx.save_model(encoder_graph(encoder), path)
    return
  # Each weight goes to the file as the graph is built: the model is never held whole in one proto.
  data = path.with_name(f"{path.name}.data")
  with data.open("wb") as file:
    model = _model(encoder, _external_weight(file, data.name))
  onnx.save_model(model, path)
  onnx.checker.check_model(path)
