"""BERT encoder and masked-language-model head in Flax linen, numerically matching Hugging Face's.

The same modules are RoBERTa's (`BertConfig.model_type = 'roberta'`), which differs from BERT only in its
position ids: they count the non-padding tokens from `pad_token_id + 1`, and padding takes row `pad_token_id`.

Parameters carry logical axis names ('vocab', 'embed', 'mlp', 'heads', 'position', 'token_type',
'norm'); `docent_jax.parallel` maps them to mesh axes. The query, key and value projections are
fused into one kernel of shape [embed, 3, heads] so that each layer does one matmul for all three.
"""
import contextlib
import contextvars
import dataclasses
import functools
from typing import Any, Callable, Iterator, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Dtype = Any


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Hugging Face `BertConfig` (or `RobertaConfig`) fields the model uses; defaults are BERT-base's."""
  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  initializer_range: float = 0.02
  pad_token_id: int = 0
  model_type: str = "bert"  # One of MODEL_TYPES; 'roberta' takes RoBERTa's position ids and checkpoint names.
  # Not a Hugging Face field: recompute each layer's activations in the backward pass instead of keeping them
  # (less memory for one more forward pass per layer); params and results are unchanged.
  remat: bool = False
  # Not a Hugging Face field: the operand dtype of every matmul ('float32' or 'bfloat16'). Products accumulate and
  # return in float32; params, layer norms, softmax, GELU and residuals keep the model's dtype (`matmul`).
  matmul_dtype: str = "float32"

  def __post_init__(self):
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                       f"{self.num_attention_heads}.")
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f"Unsupported hidden_act {self.hidden_act!r}; valid: {sorted(ACTIVATIONS)}.")
    if self.matmul_dtype not in MATMUL_DTYPES:
      raise ValueError(f"Unsupported matmul_dtype {self.matmul_dtype!r}; valid: {list(MATMUL_DTYPES)}.")
    if self.model_type not in MODEL_TYPES:
      raise ValueError(f"Unsupported model_type {self.model_type!r}; valid: {list(MODEL_TYPES)}.")

  @classmethod
  def from_hf_dict(cls, d: dict[str, Any]) -> "BertConfig":
    """From a Hugging Face config.json dict; keys the model does not use are ignored."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in d.items() if key in names})

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_attention_heads

  @property
  def first_position(self) -> int:
    """The position-table row of the first token: 0, or RoBERTa's `pad_token_id + 1`."""
    return self.pad_token_id + 1 if self.model_type == "roberta" else 0


MODEL_TYPES = ("bert", "roberta")
MATMUL_DTYPES = ("float32", "bfloat16")
# How far bf16 matmul operands may move MiniLM's final hidden states from float32's (largest element; 0.026 on
# tools/bench_encoder.py's batch of 32 x 64), where float32 matches PyTorch's to 1e-4.
BF16_MATMUL_ATOL = 0.05


# Hugging Face's names: 'gelu' is the exact (erf) GELU, 'gelu_new' the tanh approximation.
ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}


class BertOutput(NamedTuple):
  last_hidden_state: jax.Array  # [batch, length, hidden]
  pooler_output: jax.Array | None  # [batch, hidden], None without a pooler


def matmul(config: BertConfig) -> Callable[..., jax.Array]:
  """`lax.dot_general` with operands in `config.matmul_dtype`, accumulated and returned in float32.

  With bfloat16 operands, CPUs with AVX512_BF16 or AMX, TPUs and GPUs multiply at their bf16 rate, while
  everything between the matmuls stays in the model's dtype. The gradient's matmuls take bfloat16 operands too
  (`_bf16_dot_general`).
  """
  if config.matmul_dtype == "float32":
    return jax.lax.dot_general
  return _bf16_dot_general


def _bf16_dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any, precision: Any = None,
                      preferred_element_type: Any = None, **unused: Any) -> jax.Array:
  """`lax.dot_general`'s signature (as `jnp.einsum` and `nn.Dense` call it); the result is always float32."""
  del preferred_element_type, unused
  return _bf16_product(lhs, rhs, dimension_numbers, precision)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _bf16_product(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any, precision: Any) -> jax.Array:
  return jax.lax.dot_general(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16), dimension_numbers, precision,
                             preferred_element_type=jnp.float32)


def _bf16_product_forward(lhs, rhs, dimension_numbers, precision):
  lhs16, rhs16 = lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16)
  out = jax.lax.dot_general(lhs16, rhs16, dimension_numbers, precision, preferred_element_type=jnp.float32)
  # Empty arrays carry the operands' dtypes (residuals must be arrays) for the gradients.
  return out, (lhs16, rhs16, jnp.zeros((0,), lhs.dtype), jnp.zeros((0,), rhs.dtype))


def _bf16_product_backward(dimension_numbers, precision, residuals, cotangent):
  lhs16, rhs16, lhs_like, rhs_like = residuals
  cotangent16 = cotangent.astype(jnp.bfloat16)
  (lhs_contracting, rhs_contracting), (lhs_batch, rhs_batch) = dimension_numbers
  lhs_grad = _product_transpose(cotangent16, rhs16, lhs16.ndim, (lhs_contracting, rhs_contracting),
                                (lhs_batch, rhs_batch), precision, cotangent_lhs_first=True)
  rhs_grad = _product_transpose(cotangent16, lhs16, rhs16.ndim, (rhs_contracting, lhs_contracting),
                                (rhs_batch, lhs_batch), precision, cotangent_lhs_first=False)
  return lhs_grad.astype(lhs_like.dtype), rhs_grad.astype(rhs_like.dtype)


_bf16_product.defvjp(_bf16_product_forward, _bf16_product_backward)


# The platform the products are compiled for, where it is not the default backend's (`compiling_for`).
_TARGET_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar("target_platform", default=None)


@contextlib.contextmanager
def compiling_for(platform: str) -> Iterator[None]:
  """Traces inside compile products for `platform` ('tpu', 'gpu', 'cpu'), e.g. a TPU step compiled on a CPU host."""
  token = _TARGET_PLATFORM.set(platform)
  try:
    yield
  finally:
    _TARGET_PLATFORM.reset(token)


def target_platform() -> str:
  return _TARGET_PLATFORM.get() or jax.default_backend()


def _contracts_trailing(ndim: int, contracting: list[int]) -> bool:
  return sorted(contracting) == list(range(ndim - len(contracting), ndim))


# XLA:CPU splits the copied axis into blocks of this many rows (`transposed_copy`).
_COPY_BLOCK = 16


def transposed_copy(x: jax.Array, axes: list[int]) -> jax.Array:
  """`jnp.transpose(x, axes)` as a copy in row-major order, which XLA keeps.

  XLA folds a plain transpose into the product that reads it, which makes that product's lhs contract a
  leading axis again. Splitting the axis that becomes last into blocks, and merging them after the transpose,
  leaves a reshape that only a row-major copy satisfies; the barrier keeps the simplifier from undoing it.
  """
  last = axes[-1]
  blocks = x.reshape(x.shape[:last] + (x.shape[last] // _COPY_BLOCK, _COPY_BLOCK) + x.shape[last + 1:])
  block_axes = []
  for axis in axes:
    block_axes += [axis, axis + 1] if axis == last else [axis if axis < last else axis + 1]
  copied = jnp.transpose(blocks, block_axes).reshape(tuple(x.shape[axis] for axis in axes))
  return jax.lax.optimization_barrier(copied)


def _product_transpose(cotangent: jax.Array, other: jax.Array, ndim: int, contracting: tuple, batch: tuple,
                       precision: Any, cotangent_lhs_first: bool) -> jax.Array:
  """The gradient of one operand of `dot_general` (with `ndim` axes; `contracting` and `batch` list its axes
  first, then the other operand's), as a bf16 x bf16 -> f32 product of the cotangent and the other operand.

  Written out (as `lax`'s own transpose rule) because the vjp of the float32-output product multiplies a
  float32 cotangent, and XLA:CPU runs a bf16-output product at the float32 rate. XLA:CPU has a bf16 kernel
  only where the product's lhs contracts its last axes (`_cpu_product`).
  """
  own_contracting, other_contracting = contracting
  own_batch, other_batch = batch
  own_kept = [axis for axis in range(ndim) if axis not in own_contracting and axis not in own_batch]
  other_kept = [axis for axis in range(other.ndim) if axis not in other_contracting and axis not in other_batch]
  # The cotangent's axes: batch, then the lhs's kept axes, then the rhs's.
  num_batch = len(own_batch)
  if cotangent_lhs_first:
    cotangent_other = list(range(num_batch + len(own_kept), num_batch + len(own_kept) + len(other_kept)))
  else:
    cotangent_other = list(range(num_batch, num_batch + len(other_kept)))
  # The product's axes: batch, own kept, then own contracting in the order of the other's contracting axes.
  own_contracting_by_other = [own_contracting[i] for i in sorted(range(len(other_contracting)),
                                                                 key=lambda i: other_contracting[i])]
  own_order = [*own_batch, *own_kept, *own_contracting_by_other]
  if target_platform() == "cpu" and not _contracts_trailing(cotangent.ndim, cotangent_other):
    return _cpu_product(cotangent, other, cotangent_other, other_kept, list(other_batch), precision,
                        (own_batch, own_kept, own_contracting_by_other))
  product = jax.lax.dot_general(cotangent, other, ((cotangent_other, other_kept),
                                                   (list(range(num_batch)), list(other_batch))),
                                precision, preferred_element_type=jnp.float32)
  return jnp.transpose(product, np.argsort(own_order))


def _cpu_product(cotangent: jax.Array, other: jax.Array, cotangent_other: list[int], other_kept: list[int],
                 other_batch: list[int], precision: Any, own_axes: tuple) -> jax.Array:
  """`_product_transpose`'s product where the cotangent contracts leading axes (a weight's gradient contracts
  the tokens), for XLA:CPU: one operand is copied with its contracting axes last and goes first, so that the
  product runs on the bf16 kernel, choosing the one whose result is already in the gradient's axis order (XLA
  would fold a transpose after the product back into it). Where neither is, it multiplies float32.
  """
  own_batch, own_kept, own_contracting = own_axes
  batch_axes = list(range(len(other_batch)))
  cotangent_kept = [axis for axis in range(len(batch_axes), cotangent.ndim) if axis not in cotangent_other]
  other_contracted = [axis for axis in range(other.ndim) if axis not in other_kept and axis not in other_batch]
  arrangements = (
      # The cotangent first: the result's axes are batch, own kept, own contracting.
      ([*own_batch, *own_kept, *own_contracting], cotangent, [*batch_axes, *cotangent_kept, *cotangent_other],
       other, other_kept, other_batch),
      # The other operand first: batch, own contracting, own kept.
      ([*own_batch, *own_contracting, *own_kept], other, [*other_batch, *other_contracted, *other_kept],
       cotangent, cotangent_other, batch_axes),
  )
  for result_axes, lhs, lhs_axes, rhs, rhs_contracting, rhs_batch in arrangements:
    if result_axes == sorted(result_axes) and lhs.shape[lhs_axes[-1]] % _COPY_BLOCK == 0:
      lhs_contracting = list(range(lhs.ndim - len(rhs_contracting), lhs.ndim))
      return jax.lax.dot_general(transposed_copy(lhs, lhs_axes), rhs,
                                 ((lhs_contracting, rhs_contracting), (batch_axes, rhs_batch)),
                                 precision, preferred_element_type=jnp.float32)
  product = jax.lax.dot_general(cotangent.astype(jnp.float32), other.astype(jnp.float32),
                                ((cotangent_other, other_kept), (batch_axes, other_batch)), precision)
  return jnp.transpose(product, np.argsort([*own_batch, *own_kept, *own_contracting]))


def _normal(config: BertConfig, axes: tuple[str | None, ...]) -> nn.initializers.Initializer:
  return nn.with_logical_partitioning(nn.initializers.normal(config.initializer_range), axes)


def _dense(features: int, config: BertConfig, axes: tuple[str | None, str | None], dtype: Dtype,
           param_dtype: Dtype, name: str) -> nn.Dense:
  return nn.Dense(features, dtype=dtype, param_dtype=param_dtype, name=name, dot_general=matmul(config),
                  kernel_init=_normal(config, axes),
                  bias_init=nn.with_logical_partitioning(nn.initializers.zeros, axes[-1:]))


class LayerNorm(nn.Module):
  """LayerNorm over the last axis, statistics in float32, as PyTorch computes it (two-pass variance).

  Spelled out rather than `nn.LayerNorm`, whose [batch, length, hidden] product of scale and inverse
  deviation XLA on CPU materialises for the backward pass.
  """
  epsilon: float
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    features = x.shape[-1]
    scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("norm",)), (features,),
                       self.param_dtype)
    bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)), (features,),
                      self.param_dtype)
    x = x.astype(jnp.float32)
    centered = x - jnp.mean(x, axis=-1, keepdims=True)
    normalized = centered * jax.lax.rsqrt(jnp.mean(jnp.square(centered), axis=-1, keepdims=True) + self.epsilon)
    return (normalized * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(self.dtype)


def _layer_norm(config: BertConfig, dtype: Dtype, param_dtype: Dtype, name: str) -> LayerNorm:
  return LayerNorm(config.layer_norm_eps, dtype=dtype, param_dtype=param_dtype, name=name)


def dropout(x: jax.Array, rate: float, rng: jax.Array) -> jax.Array:
  """Inverted dropout from 16 random bits per element (drop probability round(rate * 2^16) / 2^16).

  On CPU drawing the random bits is most of dropout's cost, so each 32-bit draw serves two
  elements. The draw keeps x's leading axes, so a batch-sharded x needs no resharding.
  """
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"Dropout rate must be in [0, 1); got {rate}.")
  last = x.shape[-1]
  words = jax.random.bits(rng, (*x.shape[:-1], (last + 1) // 2), jnp.uint32)
  halves = jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(*x.shape[:-1], 2 * ((last + 1) // 2))
  keep = halves[..., :last] >= jnp.uint16(round(rate * 65536))
  return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros((), x.dtype))


def _maybe_dropout(module: nn.Module, x: jax.Array, rate: float, deterministic: bool) -> jax.Array:
  if deterministic or rate == 0.0:
    return x
  return dropout(x, rate, module.make_rng("dropout"))


def attend(query: jax.Array, key: jax.Array, value: jax.Array, mask: jax.Array,
           dropout_rate: float = 0.0, dropout_rng: jax.Array | None = None,
           dot_general: Callable[..., jax.Array] = jax.lax.dot_general) -> jax.Array:
  """Scaled dot-product attention over [batch, length, heads, head_dim] inputs.

  `mask` ([batch, 1, 1, length], True = attend) hides padded keys. Without a dropout key (and with plain
  matmuls) this is `jax.nn.dot_product_attention`; with one, the attention probabilities get dropout as in
  BERT, which that function does not offer, so the same computation is spelled out, its two matmuls by
  `dot_general` (`matmul`).
  """
  if dropout_rng is None and dot_general is jax.lax.dot_general:
    return jax.nn.dot_product_attention(query, key, value, mask=mask, implementation="xla")
  scores = jnp.einsum("bqhd,bkhd->bhqk", query, key, _dot_general=dot_general).astype(query.dtype)
  scores = scores / jnp.sqrt(query.shape[-1]).astype(query.dtype)
  # Same fill value as jax.nn.dot_product_attention, so both paths agree on fully padded rows.
  scores = jnp.where(mask, scores.astype(jnp.float32), jnp.finfo(jnp.float32).min * 0.7)
  probs = jax.nn.softmax(scores, axis=-1)
  if dropout_rng is not None:
    probs = dropout(probs, dropout_rate, dropout_rng)
  return jnp.einsum("bhqk,bkhd->bqhd", probs.astype(value.dtype), value, _dot_general=dot_general).astype(value.dtype)


class BertEmbeddings(nn.Module):
  """Word + position + token-type embeddings, then LayerNorm and dropout."""
  config: BertConfig
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  def setup(self):
    config = self.config
    embed = lambda num, axis, name: nn.Embed(
        num, config.hidden_size, dtype=self.dtype, param_dtype=self.param_dtype, name=name,
        embedding_init=_normal(config, (axis, "embed")))
    self.word_embeddings = embed(config.vocab_size, "vocab", "word_embeddings")
    self.position_embeddings = embed(config.max_position_embeddings, "position", "position_embeddings")
    self.token_type_embeddings = embed(config.type_vocab_size, "token_type", "token_type_embeddings")
    self.layer_norm = _layer_norm(config, self.dtype, self.param_dtype, "layer_norm")

  def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array, *, deterministic: bool,
               input_embeddings: jax.Array | None = None) -> jax.Array:
    """`input_embeddings` [batch, length, hidden], when given, replace the word-piece lookup of `input_ids`."""
    config = self.config
    length = input_ids.shape[-1]
    if length > config.max_position_embeddings - config.first_position:
      raise ValueError(f"Sequence length {length} exceeds the model's "
                       f"{config.max_position_embeddings - config.first_position} positions (max_position_embeddings "
                       f"{config.max_position_embeddings}, the first at row {config.first_position}).")
    if input_embeddings is None:
      words = self.word_embeddings(input_ids)
    elif input_embeddings.shape != (*input_ids.shape, config.hidden_size):
      raise ValueError(f"input_embeddings {input_embeddings.shape} must be input_ids' shape {input_ids.shape} "
                       f"+ ({config.hidden_size},).")
    else:
      words = input_embeddings.astype(self.dtype)
    if config.model_type == "roberta":  # transformers' create_position_ids_from_input_ids.
      real = (input_ids != config.pad_token_id).astype(jnp.int32)
      positions = self.position_embeddings(jnp.cumsum(real, axis=-1) * real + config.pad_token_id)
    else:
      positions = self.position_embeddings.embedding[:length].astype(self.dtype)
    x = words + positions + self.token_type_embeddings(token_type_ids)
    return _maybe_dropout(self, self.layer_norm(x), config.hidden_dropout_prob, deterministic)


class BertAttention(nn.Module):
  """Self-attention with a fused QKV projection, output projection, dropout, residual and LayerNorm."""
  config: BertConfig
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, *, deterministic: bool) -> jax.Array:
    config = self.config
    hidden = config.hidden_size
    kernel = self.param("qkv_kernel", _normal(config, ("embed", None, "heads")), (hidden, 3, hidden),
                        self.param_dtype)
    bias = self.param("qkv_bias", nn.with_logical_partitioning(nn.initializers.zeros, (None, "heads")),
                      (3, hidden), self.param_dtype)
    # One matmul for query, key and value; the kernel keeps its 3 axes so that 'heads' sharding
    # (explicit-mode meshes included) passes straight through to the per-head split below.
    qkv = jnp.einsum("...d,dth->...th", x.astype(self.dtype), kernel.astype(self.dtype),
                     _dot_general=matmul(config)).astype(self.dtype) + bias.astype(self.dtype)
    qkv = qkv.reshape(*x.shape[:-1], 3, config.num_attention_heads, config.head_dim)
    dropout_rng = None
    if not deterministic and config.attention_probs_dropout_prob > 0.0:
      dropout_rng = self.make_rng("dropout")
    context = attend(qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :], mask,
                     config.attention_probs_dropout_prob, dropout_rng, matmul(config))
    context = context.reshape(*x.shape[:-1], hidden)
    out = _dense(hidden, config, ("heads", "embed"), self.dtype, self.param_dtype, "output")(context)
    out = _maybe_dropout(self, out, config.hidden_dropout_prob, deterministic)
    return _layer_norm(config, self.dtype, self.param_dtype, "layer_norm")(out + x)


class BertLayer(nn.Module):
  """One transformer block: attention, then the feed-forward network with residual and LayerNorm."""
  config: BertConfig
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, deterministic: bool) -> jax.Array:
    config = self.config
    x = BertAttention(config, self.dtype, self.param_dtype, name="attention")(x, mask, deterministic=deterministic)
    h = _dense(config.intermediate_size, config, ("embed", "mlp"), self.dtype, self.param_dtype,
               "intermediate")(x)
    h = ACTIVATIONS[config.hidden_act](h)
    h = _dense(config.hidden_size, config, ("mlp", "embed"), self.dtype, self.param_dtype, "output")(h)
    h = _maybe_dropout(self, h, config.hidden_dropout_prob, deterministic)
    return _layer_norm(config, self.dtype, self.param_dtype, "output_layer_norm")(h + x)


class BertModel(nn.Module):
  """BERT (or RoBERTa) encoder: embeddings, `num_hidden_layers` blocks and (optionally) the first-token pooler.

  Params: 'embeddings' (word table at ['embeddings']['word_embeddings']['embedding']), 'layer_0',
  'layer_1', ..., and 'pooler' when `add_pooler`.
  """
  config: BertConfig
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  add_pooler: bool = True

  def setup(self):
    self.embeddings = BertEmbeddings(self.config, self.dtype, self.param_dtype)
    # `deterministic` (argument 3, counting the module) picks Python branches, so it stays static under remat.
    layer = nn.remat(BertLayer, static_argnums=(3,)) if self.config.remat else BertLayer
    self.layers = [layer(self.config, self.dtype, self.param_dtype, name=f"layer_{i}")
                   for i in range(self.config.num_hidden_layers)]
    if self.add_pooler:
      self.pooler = _dense(self.config.hidden_size, self.config, ("embed", None), self.dtype, self.param_dtype,
                           "pooler")

  def __call__(self, input_ids: jax.Array, attention_mask: jax.Array, token_type_ids: jax.Array | None = None,
               *, deterministic: bool = True, input_embeddings: jax.Array | None = None) -> BertOutput:
    """`input_ids`, `attention_mask` (1 = real token) and `token_type_ids`: int [batch, length].

    `input_embeddings` [batch, length, hidden], when given, are used instead of the word-piece
    embeddings of `input_ids` (e.g. to put rows of another table at some positions); position and
    token-type embeddings are added to them as usual.
    """
    if token_type_ids is None:
      token_type_ids = jnp.zeros_like(input_ids)
    x = self.embeddings(input_ids, token_type_ids, deterministic=deterministic, input_embeddings=input_embeddings)
    mask = attention_mask[:, None, None, :].astype(bool)
    for layer in self.layers:
      x = layer(x, mask, deterministic)
    pooled = jnp.tanh(self.pooler(x[:, 0])) if self.add_pooler else None
    return BertOutput(last_hidden_state=x, pooler_output=pooled)

  def word_embedding_matrix(self) -> jax.Array:
    """The [vocab, hidden] input embedding table, for a tied MLM decoder."""
    return self.embeddings.word_embeddings.embedding


def attention_mask(tokens: jax.Array, config: BertConfig) -> jax.Array:
  """int32 mask of `tokens`: 1 where a token is not the model's padding (`pad_token_id`: BERT's 0, RoBERTa's 1)."""
  return (tokens != config.pad_token_id).astype(jnp.int32)


def mean_pool(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
  """[N, d] mean of `hidden` [N, L, d] over the positions where `attention_mask` [N, L] is 1."""
  weights = attention_mask[..., None].astype(hidden.dtype)
  return (hidden * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1.0)


def mean_pooled(encoder: "BertModel", params: Any, tokens: jax.Array, *, pad_token_id: int = 0,
                deterministic: bool = True, rng: jax.Array | None = None) -> jax.Array:
  """Text vectors [N, d] (float32): `encoder`'s outputs for token ids [N, L] averaged over the non-padding tokens."""
  mask = (tokens != pad_token_id).astype(jnp.int32)
  hidden = encoder.apply({"params": params}, tokens, mask, deterministic=deterministic,
                         rngs={} if rng is None else {"dropout": rng}).last_hidden_state
  return mean_pool(hidden, mask).astype(jnp.float32)


def word_embedding_matrix(bert_params: dict[str, Any]) -> jax.Array:
  """The [vocab, hidden] input embedding table from (unboxed) `BertModel` params."""
  return bert_params["embeddings"]["word_embeddings"]["embedding"]


class BertMLMHead(nn.Module):
  """Masked-LM head: dense + activation + LayerNorm, then a decoder tied to the word embeddings."""
  config: BertConfig
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32

  def setup(self):
    config = self.config
    self.transform = _dense(config.hidden_size, config, ("embed", None), self.dtype, self.param_dtype, "transform")
    self.transform_layer_norm = _layer_norm(config, self.dtype, self.param_dtype, "transform_layer_norm")
    self.bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
                           (config.vocab_size,), self.param_dtype)

  def __call__(self, hidden_states: jax.Array, embedding_matrix: jax.Array) -> jax.Array:
    """Vocabulary logits [..., vocab] from hidden states [..., hidden] and the [vocab, hidden] table."""
    x = self.predict_states(hidden_states)
    # Contract the hidden axis of both directly, so the table is never transposed in memory.
    logits = matmul(self.config)(x, embedding_matrix.astype(self.dtype), (((x.ndim - 1,), (1,)), ((), ())))
    logits = logits.astype(self.dtype)
    return logits + self.bias.astype(self.dtype)

  def predict_states(self, hidden_states: jax.Array) -> jax.Array:
    """The transformed states [..., hidden] that the decoder scores against output embeddings.

    For outputs over more than the word pieces (e.g. word pieces plus entity rows), score these
    against every table, adding `output_bias()` to the word-piece logits only.
    """
    # RoBERTa's head applies exact GELU whatever the encoder's hidden_act.
    activation = "gelu" if self.config.model_type == "roberta" else self.config.hidden_act
    return self.transform_layer_norm(ACTIVATIONS[activation](self.transform(hidden_states)))

  def output_bias(self) -> jax.Array:
    """The [vocab] bias of the word-piece logits."""
    return self.bias
