"""A learned table of entity embeddings, split by rows over the mesh (RELIC's and DOCENT's g(e)).

The table's logical axes are ('entity', 'embed'): `parallel.DEFAULT_RULES` split its rows over every
device and keep each row whole. Looking rows up inside `jit` needs no gathered table: XLA reads each
id from the device that holds its row and sums the partial results. Rows only split over devices that divide
them (`jit` needs equal shards), so the table holds `num_rows`: `num_entities` padded to a multiple of
`rows_multiple`; the padding rows are never an entity (losses and search leave them out).
"""
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def l2_normalize(x: jax.Array) -> jax.Array:
  """Unit vectors along the last axis; a zero vector stays zero instead of becoming NaN."""
  x = jnp.asarray(x, jnp.float32)
  return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), 1e-24))


def padded_rows(num_entities: int, rows_multiple: int) -> int:
  """`num_entities` rounded up to a multiple of `rows_multiple`: the rows of an `EntityTable`."""
  return -(-num_entities // rows_multiple) * rows_multiple


def configured_rows_multiple(model_config: Any) -> int:
  """`model.entity_rows_multiple` of a config; 1 (no padding) for runs saved before tables were padded."""
  return int(model_config.get("entity_rows_multiple", 1))


def pad_rows(rows: np.ndarray, rows_multiple: int) -> np.ndarray:
  """Entity rows [num_entities, dim] (e.g. computed to start from) as an `EntityTable`'s param: zero padding
  rows appended."""
  return np.pad(rows, ((0, padded_rows(len(rows), rows_multiple) - len(rows)), (0, 0)))


class EntityTable(nn.Module):
  """`num_entities` rows of size `dim` (padded to a multiple of `rows_multiple`), normal-initialised; rows are
  L2-normalised if `normalize`."""
  num_entities: int
  dim: int
  normalize: bool = False
  stddev: float = 0.02
  param_dtype: jnp.dtype = jnp.float32
  rows_multiple: int = 1

  def setup(self):
    if self.num_entities < 1 or self.dim < 1 or self.rows_multiple < 1:
      raise ValueError(f"EntityTable needs num_entities >= 1, dim >= 1 and rows_multiple >= 1, got "
                       f"{self.num_entities} x {self.dim}, rows_multiple={self.rows_multiple}.")
    self.embedding = self.param(
        "embedding", nn.with_logical_partitioning(nn.initializers.normal(self.stddev), ("entity", "embed")),
        (padded_rows(self.num_entities, self.rows_multiple), self.dim), self.param_dtype)

  def __call__(self, ids: jax.Array) -> jax.Array:
    """Rows of `ids` (any shape of int ids in [0, num_entities)) -> [..., dim]."""
    # Out-of-range ids (padding rows included) give NaN rows rather than a clamped or wrapped-around row.
    ids = jnp.where((ids < 0) | (ids >= self.num_entities), self.embedding.shape[0], ids)
    rows = jnp.take(self.embedding, ids, axis=0, mode="fill", fill_value=jnp.nan)
    return l2_normalize(rows) if self.normalize else rows

  def table(self) -> jax.Array:
    """The whole table [num_rows, dim] with its padding rows, with the table's sharding (normalising is
    row-wise): rows from `num_entities` on are padding."""
    return l2_normalize(self.embedding) if self.normalize else self.embedding
