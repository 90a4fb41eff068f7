"""Losses shared by the objectives.

Link-prediction losses take scores and return a scalar mean. The softmax losses (in-batch, full
entity softmax, masked LM, word pieces plus entities) return (scalar mean loss, metrics); a label
outside its vocabulary makes the loss NaN rather than silently scoring another row.
"""
from collections.abc import Callable, Sequence
import math

import jax
from jax import lax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec
import optax

from docent_jax import parallel

# Mesh axes over which entity tables are split by rows (see parallel.DEFAULT_RULES).
ENTITY_AXES: tuple[str, ...] = dict(parallel.DEFAULT_RULES)["entity"]


def margin_loss(positive: jax.Array, negative: jax.Array, margin: float = 1.0) -> jax.Array:
  """Hinge on each (positive, negative) pair: mean of max(0, margin - s+ + s-).

  positive: [B]; negative: [B, K].
  """
  return jnp.mean(jax.nn.relu(margin - positive[:, None] + negative))


def negative_log_likelihood(positive: jax.Array, negative: jax.Array, margin: float = 1.0) -> jax.Array:
  """Binary cross-entropy of sigmoid scores: true triples labelled 1, corrupted ones 0.

  Positives and negatives are averaged separately and then together, so the number of negatives
  per triple does not change the balance. `margin` is unused; it keeps one signature for all losses.
  """
  del margin
  return 0.5 * (jnp.mean(jax.nn.softplus(-positive)) + jnp.mean(jax.nn.softplus(negative)))


LINK_PREDICTION_LOSSES: dict[str, Callable[..., jax.Array]] = {
    "margin": margin_loss,
    "nll": negative_log_likelihood,
}


def get_link_prediction_loss(name: str) -> Callable[..., jax.Array]:
  if name not in LINK_PREDICTION_LOSSES:
    raise ValueError(f"Unknown loss {name!r}; valid: {sorted(LINK_PREDICTION_LOSSES)}.")
  return LINK_PREDICTION_LOSSES[name]


def _check_queries(queries: jax.Array, labels: jax.Array, what: str) -> None:
  if queries.ndim != 2 or labels.shape != queries.shape[:1]:
    raise ValueError(f"{what}: expected queries [B, d] and labels [B], got {queries.shape} and {labels.shape}.")


def _check_table(table: jax.Array, dim: int, what: str) -> None:
  if table.ndim != 2 or table.shape[1] != dim:
    raise ValueError(f"{what}: table {table.shape} must be [rows, {dim}].")


def in_batch_softmax_loss(queries: jax.Array, entity_embeddings: jax.Array, entity_ids: jax.Array,
                          scale: float = 1.0) -> tuple[jax.Array, dict[str, jax.Array]]:
  """RELIC's loss with in-batch negatives: -log P(e_i | q_i), softmax over the batch's entities.

  queries, entity_embeddings: [B, d] (row i is the positive entity of query i); entity_ids: [B].
  Logits are scale * q @ E^T; pass L2-normalised vectors for RELIC's scaled cosine. Another row of
  the batch holding the same entity is not a negative, so it is masked. Under `jit` with the batch
  split over devices the [B, B] logits span the global batch (XLA gathers the entity rows).
  """
  _check_queries(queries, entity_ids, "in_batch_softmax_loss")
  if entity_embeddings.shape != queries.shape:
    raise ValueError(f"in_batch_softmax_loss: entity_embeddings {entity_embeddings.shape} must match "
                     f"queries {queries.shape}.")
  logits = scale * jnp.einsum("bd,cd->bc", queries, entity_embeddings, preferred_element_type=jnp.float32)
  duplicate = (entity_ids[:, None] == entity_ids[None, :]) & ~jnp.eye(len(entity_ids), dtype=bool)
  logits = jnp.where(duplicate, -jnp.inf, logits)
  positive = jnp.diagonal(logits)
  per_example = jax.nn.logsumexp(logits, axis=-1) - positive
  metrics = {
      "accuracy": jnp.mean(jnp.argmax(logits, axis=-1) == jnp.arange(len(entity_ids))),
      "positive_logit": jnp.mean(positive),
      "duplicate_fraction": jnp.mean(jnp.any(duplicate, axis=-1)),
  }
  return jnp.mean(per_example), metrics


def _mesh_axes(mesh: Mesh | None, axes: str | Sequence[str] | None) -> tuple[str, ...]:
  if mesh is None or axes is None:
    return ()
  axes = (axes,) if isinstance(axes, str) else tuple(axes)
  unknown = [a for a in axes if a not in mesh.shape]
  if unknown:
    raise ValueError(f"Axes {unknown} are not axes of the mesh {dict(mesh.shape)}.")
  return axes


def sharded_logsumexp(queries: jax.Array, table: jax.Array, labels: jax.Array, scale: float = 1.0, *,
                      mesh: Mesh | None = None, axes: str | Sequence[str] | None = ENTITY_AXES,
                      num_rows: int | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Per query: log-sum-exp of scale * q @ table^T over all rows, the logit of row `labels`, the max.

  queries [B, d] (every device sees all of them), table [N, d] split by rows over the mesh `axes`,
  labels [B]. Each device scores the queries against its own rows only, so the largest logits block
  on a device is [B, N / shards]; maxima and sums of exponentials are combined with pmax / psum and
  the positive logit comes from the shard holding its row. Without a mesh this is one block. A
  table whose rows do not divide over the shards is padded with rows that never count; so are the rows from
  `num_rows` on (default: N), an `EntityTable`'s own padding. The positive logit of a label outside
  [0, num_rows) is NaN. Returns three [B] arrays.
  """
  num_rows = table.shape[0] if num_rows is None else num_rows
  axes = _mesh_axes(mesh, axes)
  num_shards = math.prod(mesh.shape[a] for a in axes) if axes else 1
  table = jnp.pad(table, ((0, -table.shape[0] % num_shards), (0, 0)))
  padding = table.shape[0] > num_rows
  block = table.shape[0] // num_shards

  def local(q, rows, labels):
    offset = lax.axis_index(axes) * block if axes else 0
    logits = scale * jnp.einsum("bd,nd->bn", q, rows, preferred_element_type=jnp.float32)
    if padding:
      logits = jnp.where(offset + jnp.arange(block) < num_rows, logits, -jnp.inf)
    index = labels - offset
    mine = (index >= 0) & (index < block)
    positive = jnp.take_along_axis(logits, jnp.clip(index, 0, block - 1)[:, None], axis=1)[:, 0]
    positive = jnp.where(mine, positive, 0.0)
    # The max only keeps exp() in range and its gradient cancels, so it is not differentiated.
    top = lax.stop_gradient(jnp.max(logits, axis=-1))
    if axes:
      top = lax.pmax(top, axes)
    sum_exp = jnp.sum(jnp.exp(logits - top[:, None]), axis=-1)
    if axes:
      sum_exp, positive = lax.psum(sum_exp, axes), lax.psum(positive, axes)
    return top + jnp.log(sum_exp), positive, top

  if axes:
    replicated = PartitionSpec()
    local = jax.shard_map(local, mesh=mesh, in_specs=(replicated, PartitionSpec(axes), replicated),
                          out_specs=(replicated,) * 3)
  log_sum_exp, positive, top = local(queries, table, labels)
  return log_sum_exp, jnp.where((labels >= 0) & (labels < num_rows), positive, jnp.nan), top


def full_softmax_loss(queries: jax.Array, table: jax.Array, entity_ids: jax.Array, scale: float = 1.0, *,
                      mesh: Mesh | None = None, axes: str | Sequence[str] | None = ENTITY_AXES,
                      num_rows: int | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
  """-log P(e_i | q_i) with a softmax over every row of the (row-sharded) entity table.

  queries [B, d], table [N, d] (rows from `num_rows` on are padding), entity_ids [B]. The [B, N] logits are
  never formed on one device; see `sharded_logsumexp` (`axes`: the mesh axes splitting the table's rows).
  """
  _check_queries(queries, entity_ids, "full_softmax_loss")
  _check_table(table, queries.shape[1], "full_softmax_loss")
  log_sum_exp, positive, top = sharded_logsumexp(queries, table, entity_ids, scale, mesh=mesh, axes=axes,
                                                 num_rows=num_rows)
  metrics = {"accuracy": jnp.mean(positive >= top), "positive_logit": jnp.mean(positive)}
  return jnp.mean(log_sum_exp - positive), metrics


def _masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
  return jnp.sum(jnp.where(mask, values, 0.0)) / jnp.maximum(jnp.sum(mask), 1)


def masked_lm_loss(logits: jax.Array, labels: jax.Array, mask: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Mean cross-entropy over masked positions: logits [B, L, V], labels [B, L], mask [B, L].

  Labels of unmasked positions are ignored (any value); a masked label outside [0, V) gives NaN.
  """
  if logits.shape[:-1] != labels.shape or mask.shape != labels.shape:
    raise ValueError(f"masked_lm_loss: logits {logits.shape}, labels {labels.shape} and mask {mask.shape} "
                     "must be [B, L, V], [B, L], [B, L].")
  mask = mask.astype(bool)
  vocab_size = logits.shape[-1]
  valid = (labels >= 0) & (labels < vocab_size)
  per_token = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                              jnp.where(valid, labels, 0))
  per_token = jnp.where(valid, per_token, jnp.nan)
  correct = jnp.argmax(logits, axis=-1) == labels
  metrics = {"accuracy": _masked_mean(correct, mask), "num_masked": jnp.sum(mask)}
  return _masked_mean(per_token, mask), metrics


def split_softmax_loss(hidden: jax.Array, word_table: jax.Array, word_bias: jax.Array, entity_table: jax.Array,
                       labels: jax.Array, mask: jax.Array | None = None, *, mesh: Mesh | None = None,
                       axes: str | Sequence[str] | None = ENTITY_AXES,
                       num_entities: int | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Cross-entropy over word pieces and entities together, without concatenating the two tables.

  hidden [M, d] (the masked positions' outputs), word_table [V, d] with word_bias [V] (replicated,
  as BERT's output layer), entity_table [N, d] (row-sharded over `axes`), labels [M] in [0, V + N):
  a label v < V is a word piece, V + e is entity e. Logits are hidden @ [word_table; entity_table]^T
  (+ word_bias on the words); the entity part is `sharded_logsumexp`. mask [M] (default all true)
  drops padding positions; a kept label outside [0, V + N) gives NaN. Entity rows from `num_entities` on
  (default: N) are the table's padding: never a label, never in the softmax.
  """
  _check_queries(hidden, labels, "split_softmax_loss")
  _check_table(word_table, hidden.shape[1], "split_softmax_loss (word_table)")
  _check_table(entity_table, hidden.shape[1], "split_softmax_loss (entity_table)")
  vocab_size = word_table.shape[0]
  if word_bias.shape != (vocab_size,):
    raise ValueError(f"split_softmax_loss: word_bias {word_bias.shape} must be [{vocab_size}].")
  mask = jnp.ones(labels.shape, bool) if mask is None else mask.astype(bool)
  word_logits = jnp.einsum("md,vd->mv", hidden, word_table, preferred_element_type=jnp.float32) + word_bias
  is_word = labels < vocab_size
  word_positive = jnp.take_along_axis(word_logits, jnp.clip(labels, 0, vocab_size - 1)[:, None], axis=1)[:, 0]
  # Word labels are sent to entity row 0 so that only labels past both vocabularies become NaN.
  entity_labels = jnp.where(is_word, 0, labels - vocab_size)
  entity_lse, entity_positive, entity_top = sharded_logsumexp(hidden, entity_table, entity_labels, mesh=mesh,
                                                              axes=axes, num_rows=num_entities)
  log_sum_exp = jnp.logaddexp(jax.nn.logsumexp(word_logits, axis=-1), entity_lse)
  positive = jnp.where(is_word, jnp.where(labels >= 0, word_positive, jnp.nan), entity_positive)
  top = jnp.maximum(jnp.max(word_logits, axis=-1), entity_top)
  metrics = {
      "accuracy": _masked_mean(positive >= top, mask),
      "entity_fraction": _masked_mean(~is_word, mask),
  }
  return _masked_mean(log_sum_exp - positive, mask), metrics


def supcon_loss(embeddings: jax.Array, labels: jax.Array,
                temperature: float = 0.07) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Supervised contrastive loss L^sup_out of Khosla et al. (2020) over the rows of a batch.

  embeddings [B, d] (L2-normalised here), labels [B]. The positives P(i) of anchor i are the other
  rows with its label; its loss is -1/|P(i)| sum_{p in P(i)} log(exp(z_i.z_p / t) / sum_{a != i}
  exp(z_i.z_a / t)). The mean runs over anchors with at least one positive; the others are only
  counted. With two views of each example and one label per example this is SimCLR's NT-Xent.
  Under `jit` with the batch split over devices the [B, B] logits span the global batch.
  """
  _check_queries(embeddings, labels, "supcon_loss")
  z = embeddings.astype(jnp.float32)
  z = z * lax.rsqrt(jnp.maximum(jnp.sum(z * z, axis=-1, keepdims=True), 1e-12))
  self_pair = jnp.eye(len(labels), dtype=bool)
  logits = jnp.where(self_pair, -jnp.inf, jnp.einsum("bd,cd->bc", z, z) / temperature)
  log_prob = logits - jax.nn.logsumexp(logits, axis=-1, keepdims=True)
  positive = (labels[:, None] == labels[None, :]) & ~self_pair
  num_positives = jnp.sum(positive, axis=-1)
  has_positive = num_positives > 0
  per_anchor = -jnp.sum(jnp.where(positive, log_prob, 0.0), axis=-1) / jnp.maximum(num_positives, 1)
  nearest = jnp.argmax(logits, axis=-1)
  metrics = {
      "accuracy": _masked_mean(labels[nearest] == labels, has_positive),
      "anchors_without_positive": jnp.sum(~has_positive),
      "positives_per_anchor": _masked_mean(num_positives, has_positive),
  }
  return _masked_mean(per_anchor, has_positive), metrics
