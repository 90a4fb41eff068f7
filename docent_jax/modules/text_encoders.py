"""Text -> vector encoders for entity descriptions: BERT [CLS] or mean, bag of words (BE-BOW), CNN (DKRL).

All read the same word-piece ids (padding id 0) and end in a linear map to `dim` (or none, `UNPROJECTED`), so an
objective can swap them with one config value. The bag-of-words and CNN encoders start from BERT's
input word-piece embeddings, as in the BLP paper's baselines.
"""
import functools
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from docent_jax.modules import bert


def _projection(dim: int, dtype: jnp.dtype, name: str = "projection") -> nn.Dense:
  return nn.Dense(dim, dtype=dtype, name=name,
                  kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(), ("embed", "features")),
                  bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("features",)))


def _embed_words(tokens: jax.Array, config: bert.BertConfig, dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
  """Word-piece embeddings with padding zeroed, and the [B, L, 1] padding mask."""
  mask = bert.attention_mask(tokens, config)[..., None].astype(dtype)
  table = nn.Embed(config.vocab_size, config.hidden_size, dtype=dtype, name="word_embeddings",
                   embedding_init=nn.with_logical_partitioning(
                       nn.initializers.normal(config.initializer_range), ("vocab", "embed")))
  return table(tokens) * mask, mask


class BertEncoder(nn.Module):
  """BLP's encoder: the [CLS] output of BERT, linearly mapped to `dim`. With `pooling` "mean", the mean of BERT's
  outputs over the description's word pieces instead, as Sentence-BERT pools (BLP's SBERT baselines); with `dim`
  0 that mean itself, of BERT's width."""
  config: bert.BertConfig
  dim: int
  dtype: jnp.dtype = jnp.float32
  pooling: str = "cls"

  @nn.compact
  def __call__(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    mask = bert.attention_mask(tokens, self.config)
    output = bert.BertModel(self.config, dtype=self.dtype, add_pooler=False, name="bert")(
        tokens, attention_mask=mask, deterministic=deterministic)
    pooled = (bert.mean_pool(output.last_hidden_state, mask) if self.pooling == "mean"
              else output.last_hidden_state[:, 0])
    if not self.dim:
      return pooled.astype(jnp.float32)
    return _projection(self.dim, self.dtype)(pooled).astype(jnp.float32)


class BagOfWordsEncoder(nn.Module):
  """BE-BOW: mean of the input word-piece embeddings of the description, then a linear map to `dim`; with
  `dim` 0 the mean itself, of the embeddings' width, as in BLP's BE-BOW."""
  config: bert.BertConfig
  dim: int
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    del deterministic
    embedded, mask = _embed_words(tokens, self.config, self.dtype)
    mean = embedded.sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)
    if not self.dim:
      return mean.astype(jnp.float32)
    return _projection(self.dim, self.dtype)(mean).astype(jnp.float32)


class CnnEncoder(nn.Module):
  """DKRL-style: two convolutions over word-piece embeddings with max- then mean-pooling."""
  config: bert.BertConfig
  dim: int
  dtype: jnp.dtype = jnp.float32
  kernel_size: int = 2
  pool_size: int = 2

  @nn.compact
  def __call__(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    del deterministic
    x, mask = _embed_words(tokens, self.config, self.dtype)
    conv_init = nn.with_logical_partitioning(nn.initializers.xavier_uniform(), (None, "embed", "features"))
    x = jnp.tanh(nn.Conv(self.dim, (self.kernel_size,), padding="SAME", dtype=self.dtype,
                         kernel_init=conv_init, name="conv1")(x))
    # Padding must not win the max-pool: push padded positions far down first.
    x = jnp.where(mask > 0, x, -1e4)
    x = nn.max_pool(x, (self.pool_size,), strides=(self.pool_size,), padding="SAME")
    pooled_mask = nn.max_pool(mask, (self.pool_size,), strides=(self.pool_size,), padding="SAME")
    x = jnp.where(pooled_mask > 0, x, 0.0)
    # One logical axis per kernel dimension: the output channels split as the first convolution's do.
    conv2_init = nn.with_logical_partitioning(nn.initializers.xavier_uniform(), (None, None, "features"))
    x = jnp.tanh(nn.Conv(self.dim, (self.kernel_size,), padding="SAME", dtype=self.dtype,
                         kernel_init=conv2_init, name="conv2")(x)) * pooled_mask
    return (x.sum(axis=1) / jnp.maximum(pooled_mask.sum(axis=1), 1.0)).astype(jnp.float32)


ENCODERS = {"bert": BertEncoder, "bert_mean": functools.partial(BertEncoder, pooling="mean"),
            "bow": BagOfWordsEncoder, "cnn": CnnEncoder}
# Encoders whose vectors may be their pooled inputs as they are (`dim` 0).
UNPROJECTED = ("bow", "bert_mean")


def create_encoder(name: str, config: bert.BertConfig, dim: int, dtype: jnp.dtype) -> nn.Module:
  """Encoder `name` with vectors of width `dim` (bow: 0 for the embeddings' own width, `output_dim`)."""
  if name not in ENCODERS:
    raise ValueError(f"Unknown encoder {name!r}; valid: {sorted(ENCODERS)}.")
  if dim < 0 or (dim == 0 and name not in UNPROJECTED):
    raise ValueError(f"config.model.dim = {dim}: must be at least 1 (0, no linear map, is for the encoders "
                     f"{list(UNPROJECTED)}).")
  return ENCODERS[name](config=config, dim=dim, dtype=dtype, name="encoder")


def output_dim(dim: int, config: bert.BertConfig) -> int:
  """The width of the vectors an encoder created with `dim` returns."""
  return dim or config.hidden_size


_IDENTITY = "torch.nn.modules.linear.Identity"


def pretrained_subtree(name: str, bert_params: dict, modules: Any = None, dim: int = 0) -> dict:
  """The part of a pretrained BERT's params that seeds encoder `name`, keyed like the encoder's own. From a
  sentence-transformers directory (`modules`, `pretrained.SentenceTransformerModules`) whose pooling is the
  encoder's, its one linear Dense module of the encoder's shape also seeds the linear map to `dim`, so that the
  encoder starts as the directory's model computes (a model exported by `docent_jax.export` comes back as it was)."""
  if name not in ("bert", "bert_mean"):
    return {"word_embeddings": bert_params["embeddings"]["word_embeddings"]}
  tree = {"bert": bert_params}
  if modules is None:
    return tree
  pooling = "mean" if name == "bert_mean" else "cls"
  if modules.pooling != pooling:
    # Worth a warning only where a linear map is left behind; BLP's [CLS] over a mean-pooled model is the paper's.
    log = logging.warning if modules.dense else functools.partial(logging.vlog, 1)
    log("%s pools by %s, the encoder %r by %s: its Pooling and Dense modules are not used "
        "(config.model.encoder=%s pools as it does).", modules.transformer_dir, modules.pooling, name, pooling,
        "bert_mean" if modules.pooling == "mean" else "bert")
    return tree
  hidden = bert_params["embeddings"]["layer_norm"]["scale"].shape[0]
  if len(modules.dense) == 1 and modules.dense[0][2] == _IDENTITY and modules.dense[0][0].shape == (dim, hidden):
    weight, bias, _ = modules.dense[0]
    tree["projection"] = {"kernel": np.ascontiguousarray(weight.T), "bias": bias}
  elif modules.dense:
    logging.warning("%s: its Dense modules (%s) are not one linear map from %d to config.model.dim = %d; the "
                    "encoder's linear map starts fresh.", modules.transformer_dir,
                    [tuple(d[0].shape) for d in modules.dense], hidden, dim)
  return tree
