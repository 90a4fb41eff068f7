"""A learned table of entity embeddings, split by rows over the mesh (RELIC's and DOCENT's g(e)).

The table's logical axes are ('entity', 'embed'): `parallel.DEFAULT_RULES` split its rows over every
device and keep each row whole. Looking rows up inside `jit` needs no gathered table: XLA reads each
id from the device that holds its row and sums the partial results.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp


def l2_normalize(x: jax.Array) -> jax.Array:
  """Unit vectors along the last axis; a zero vector stays zero instead of becoming NaN."""
  x = jnp.asarray(x, jnp.float32)
  return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), 1e-24))


class EntityTable(nn.Module):
  """`num_entities` rows of size `dim`, normal-initialised; rows are L2-normalised if `normalize`."""
  num_entities: int
  dim: int
  normalize: bool = False
  stddev: float = 0.02
  param_dtype: jnp.dtype = jnp.float32

  def setup(self):
    if self.num_entities < 1 or self.dim < 1:
      raise ValueError(f"EntityTable needs num_entities >= 1 and dim >= 1, got {self.num_entities} x {self.dim}.")
    self.embedding = self.param(
        "embedding", nn.with_logical_partitioning(nn.initializers.normal(self.stddev), ("entity", "embed")),
        (self.num_entities, self.dim), self.param_dtype)

  def __call__(self, ids: jax.Array) -> jax.Array:
    """Rows of `ids` (any shape of int ids in [0, num_entities)) -> [..., dim]."""
    # Out-of-range ids give NaN rows rather than a clamped or (negative ids) wrapped-around row.
    ids = jnp.where(ids < 0, self.num_entities, ids)
    rows = jnp.take(self.embedding, ids, axis=0, mode="fill", fill_value=jnp.nan)
    return l2_normalize(rows) if self.normalize else rows

  def table(self) -> jax.Array:
    """The whole table [num_entities, dim], with the table's sharding (normalising is row-wise)."""
    return l2_normalize(self.embedding) if self.normalize else self.embedding
