"""Filtered link prediction: rank the true head and tail of each triple among candidate entities.

Protocol (BLP; the "filtered" setting of Bordes et al. 2013):
  * Every eval triple (h, r, t) makes two queries: (h, r, ?) with target t and (?, r, t) with
    target h. The target is ranked among `candidate_entities` ('dynamic' setting: all entities of
    the KG; 'transfer' setting: the test entities only).
  * Every other true answer of the query, from `filter_triples` or from the eval triples
    themselves, is left out of the ranking. A tie counts half (see `metrics`).
  * A query whose target is not a candidate cannot be ranked; it is skipped, counted in
    `{direction}/num_skipped` and logged. In BLP's settings this does not happen: 'dynamic' ranks
    among all entities and 'transfer' test triples hold test entities only.

Implementation: candidate embeddings are gathered once, into blocks. Each batch of queries is one
jitted call that scores the candidates block by block (a matmul for the bilinear functions) and
counts, per query, the candidates above or tied with the target; only the [Q] ranks come back.
Known answers live in a CSR map (query key -> candidate positions), padded per batch to
[Q, width] with width a power of two, so there is no dense [T, N] filter and only a few shapes
are compiled. On a mesh the candidate blocks are split over all its devices, like a trainer's entity
table: each device ranks every query of a batch against its own blocks and the counts are summed, so
no device holds all candidates, the [Q, N] scores or a gathered copy of a row-sharded table.
"""
import dataclasses
import functools
import math
from typing import Any

from absl import logging
import jax
from jax import lax
from jax.experimental import multihost_utils
import jax.numpy as jnp
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
import numpy as np

from docent_jax import parallel
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.evaluation import metrics
from docent_jax.evaluation import registry
from docent_jax.modules import entity_table
from docent_jax.modules import relations

Array = jax.Array | np.ndarray


@dataclasses.dataclass(frozen=True)
class _KnownAnswers:
  """Sorted query keys and, per key, the candidate positions of its true answers (CSR)."""

  keys: np.ndarray  # [K] int64, sorted and unique
  starts: np.ndarray  # [K + 1] offsets into `positions`
  positions: np.ndarray  # int32 candidate positions, grouped by key

  @classmethod
  def build(cls, keys: np.ndarray, positions: np.ndarray) -> "_KnownAnswers":
    order = np.lexsort((positions, keys))
    keys, positions = keys[order], positions[order]
    unique_keys, starts = np.unique(keys, return_index=True)
    return cls(unique_keys, np.append(starts, len(keys)), positions.astype(np.int32))

  def spans(self, query_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, count) of each query key's answers; count 0 for unknown keys."""
    index = np.searchsorted(self.keys, query_keys)
    found = index < len(self.keys)
    found[found] = self.keys[index[found]] == query_keys[found]
    index = np.where(found, index, 0)
    counts = np.where(found, self.starts[index + 1] - self.starts[index], 0)
    return self.starts[index], counts

  def padded(self, starts: np.ndarray, counts: np.ndarray, width: int, fill: int) -> np.ndarray:
    """[Q, width] answer positions, padded with `fill`."""
    slot = np.arange(width)
    valid = slot[None, :] < counts[:, None]
    offsets = np.where(valid, starts[:, None] + slot[None, :], 0)
    values = self.positions[offsets] if self.positions.size else np.zeros(offsets.shape, np.int32)
    return np.where(valid, values, fill).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("scoring_fn", "predict_tails", "num_candidates", "mesh"))
def _filtered_ranks(scoring_fn: relations.ScoringFunction, predict_tails: bool, num_candidates: int,
                    entity_embeddings: jax.Array, relation_embeddings: jax.Array, candidate_blocks: jax.Array,
                    block_starts: jax.Array, block_lengths: jax.Array, given_entity: jax.Array, relation: jax.Array,
                    target_entity: jax.Array, target: jax.Array, known: jax.Array,
                    mesh: Mesh | None = None) -> jax.Array:
  """Tie-averaged filtered rank of each query's target among the candidates: [Q].

  candidate_blocks: [num_blocks, block_size, d]; block b holds the candidates at positions
  block_starts[b] + [0, block_lengths[b]), then zero padding (see `_candidate_layout`). With `mesh`,
  the three are split over all its devices and the query arrays are replicated. target: [Q] candidate
  positions of the targets, whose entities are `target_entity`. known: [Q, W] candidate positions of
  true answers, padded with `num_candidates`. Scores exist only one [Q, block_size] block at a time,
  which stays in cache.
  """
  given = entity_embeddings[given_entity]
  relation = relation_embeddings[relation]
  target_embeddings = entity_embeddings[target_entity]
  block_size = candidate_blocks.shape[1]
  # Left out of the counts: the target (it ties with itself) and every other known answer.
  excluded = jnp.concatenate([jnp.where(known == target[:, None], num_candidates, known), target[:, None]], axis=1)
  axes = mesh.axis_names if mesh is not None else ()

  def score(candidates):
    if predict_tails:
      return scoring_fn.score_tails(given, relation, candidates)
    return scoring_fn.score_heads(relation, given, candidates)

  def half_ranks(scores, target_score):
    # Two per higher score, one per tie: integer half-ranks stay exact however many candidates.
    return jnp.where(scores > target_score, 2, jnp.where(scores == target_score, 1, 0))

  def count_block(total, block_start_length):
    block, start, length = block_start_length
    # The targets ride along as extra candidates, so their scores come out of the same product
    # as the block's, and a candidate with the target's embedding ties with it exactly.
    scores = score(jnp.concatenate([block, target_embeddings]))
    block_scores = scores[:, :block_size]
    target_score = jnp.diagonal(scores[:, block_size:])[:, None]
    in_range = jnp.arange(block_size) < length
    total += jnp.sum(jnp.where(in_range, half_ranks(block_scores, target_score), 0), axis=1)
    # Padding in `known` (num_candidates) is past every block's candidates.
    local = excluded - start
    inside = (local >= 0) & (local < length)
    excluded_scores = jnp.take_along_axis(block_scores, jnp.clip(local, 0, block_size - 1), axis=1)
    total -= jnp.sum(jnp.where(inside, half_ranks(excluded_scores, target_score), 0), axis=1)
    return total, target_score[:, 0]

  def count(blocks, starts, lengths):
    """Half-ranks over these blocks (summed over the mesh) and whether any target score is not finite."""
    total = jnp.zeros(given.shape[0], jnp.int32)
    if axes:
      total = lax.pcast(total, axes, to="varying")  # Each device counts its own blocks.
    total, target_scores = lax.scan(count_block, total, (blocks, starts, lengths))
    not_finite = (~jnp.isfinite(target_scores[0])).astype(jnp.int32)
    if axes:
      total, not_finite = lax.psum(total, axes), lax.psum(not_finite, axes)
    return total, not_finite

  if axes:
    count = jax.shard_map(count, mesh=mesh, in_specs=(PartitionSpec(axes),) * 3,
                          out_specs=(PartitionSpec(), PartitionSpec()))
  total, not_finite = count(candidate_blocks, block_starts, block_lengths)
  return jnp.where(not_finite == 0, 1.0 + 0.5 * total.astype(jnp.float32), jnp.nan)


def _candidate_layout(candidates: np.ndarray, candidate_block: int,
                      num_shards: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The candidates in blocks: ids [num_blocks, block_size] (-1: padding), first positions and lengths [num_blocks].

  Shard k of `num_shards` (the devices that the blocks are split over) holds the candidate positions
  [k * P, (k + 1) * P), P = ceil(C / num_shards), in whole blocks of at most `candidate_block` rows,
  padded at the end of each shard. So when the candidates are all entities in order, each device's
  candidates are the rows of an evenly row-split table that it holds. Blocks are sized to a shard's
  candidates rather than to `candidate_block` (40,943 candidates on 8 devices: 16 blocks of 2,560,
  not 16 of 4,096), rounded up to a multiple of 128, an accelerator's lane width.
  """
  per_shard = -(-len(candidates) // num_shards)
  blocks_per_shard = -(-per_shard // candidate_block)
  block_size = min(candidate_block, -(-per_shard // (128 * blocks_per_shard)) * 128)
  shard_starts = np.arange(num_shards)[:, None] * per_shard
  starts = shard_starts + np.arange(blocks_per_shard) * block_size
  lengths = np.clip(np.minimum(shard_starts + per_shard, len(candidates)) - starts, 0, block_size)
  positions = starts[..., None] + np.arange(block_size)
  ids = np.where(np.arange(block_size) < lengths[..., None], candidates[np.minimum(positions, len(candidates) - 1)], -1)
  return tuple(x.reshape(-1, *x.shape[2:]).astype(np.int32) for x in (ids, starts, lengths))


def _row_axes(table: jax.Array) -> tuple[str, ...]:
  """The mesh axes splitting a table's rows (none for a replicated or unsharded table)."""
  if not isinstance(table.sharding, NamedSharding) or not table.sharding.spec:
    return ()
  axes = table.sharding.spec[0]
  return (axes,) if isinstance(axes, str) else tuple(axes or ())


def _ring_shifts(candidate_ids: np.ndarray, rows_per_shard: int, mesh: Mesh,
                 row_axes: tuple[str, ...]) -> tuple[int, ...]:
  """The shifts along the ring of table shards at which some device's ids meet the shard holding their rows.

  candidate_ids: [num_blocks, block_size], split by blocks over all mesh axes; the table's rows are split
  over `row_axes`, `rows_per_shard` each. Shift s takes the ids of the device at ring position r to
  the table shard r + s (see `_candidate_blocks`).
  """
  coordinates = dict(zip(mesh.axis_names, np.unravel_index(np.arange(mesh.size), tuple(mesh.shape.values()))))
  ring_position = np.ravel_multi_index([coordinates[a] for a in row_axes], [mesh.shape[a] for a in row_axes])
  ids = candidate_ids.reshape(mesh.size, -1)
  shifts = (ids // rows_per_shard - ring_position[:, None]) % math.prod(mesh.shape[a] for a in row_axes)
  return tuple(np.unique(shifts[ids >= 0]).tolist())


@functools.partial(jax.jit, static_argnames=("mesh", "row_axes", "shifts"))
def _candidate_blocks(entity_embeddings: jax.Array, candidate_ids: jax.Array, mesh: Mesh | None = None,
                      row_axes: tuple[str, ...] = (), shifts: tuple[int, ...] = ()) -> jax.Array:
  """[num_blocks, block_size, d] embeddings of candidate_ids [num_blocks, block_size]; an id of -1 gives zeros.

  With `mesh`, the ids and blocks are split over all its devices and `row_axes` are the mesh axes
  splitting the table's rows. XLA would gather such a table whole onto every device before a gather
  of this many ids, so instead each device's ids and rows travel along the ring of table shards, each
  shard filling in the rows it holds. Only the shifts from `_ring_shifts` (at least one) are visited:
  just 0, no communication, when every device's candidates are rows it holds, as `_candidate_layout`
  lays out all entities in order.
  """
  if mesh is None or not row_axes:
    # A negative id would wrap around to a row from the end; one past the end gives the fill value.
    ids = jnp.where(candidate_ids < 0, entity_embeddings.shape[0], candidate_ids)
    return jnp.take(entity_embeddings, ids, axis=0, mode="fill", fill_value=0)
  ring_size = math.prod(mesh.shape[a] for a in row_axes)

  def move(ids_and_rows, shift):
    return lax.ppermute(ids_and_rows, row_axes, [(i, (i + shift) % ring_size) for i in range(ring_size)])

  def local(table_shard, ids):
    rows_per_shard = table_shard.shape[0]
    first_row = lax.axis_index(row_axes) * rows_per_shard
    position, rows = 0, None
    for shift in shifts:
      if shift != position:
        ids, rows = move((ids, rows), shift - position)
        position = shift
      index = ids - first_row
      mine = (index >= 0) & (index < rows_per_shard)
      # One past the last row gives the fill value, so other shards' ids read no row of this one.
      found = jnp.take(table_shard, jnp.where(mine, index, rows_per_shard), axis=0, mode="fill", fill_value=0)
      rows = found if rows is None else jnp.where(mine[..., None], found, rows)
    # Back to the device that the ids came from.
    return move((ids, rows), ring_size - position)[1] if position else rows

  everywhere = PartitionSpec(mesh.axis_names)
  return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(row_axes), everywhere),
                       out_specs=everywhere)(entity_embeddings, candidate_ids)


def _auto_axes(mesh: Mesh) -> Mesh:
  """The same mesh with automatic sharding propagation, so the ranking code needs no annotations."""
  return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def _on_device(array: Array, mesh: Mesh | None) -> jax.Array:
  """A jax.Array; sharded arrays keep their layout (on automatic axes), others go to `mesh`."""
  if isinstance(array, jax.Array) and isinstance(array.sharding, NamedSharding):
    return jax.device_put(array, NamedSharding(_auto_axes(array.sharding.mesh), array.sharding.spec))
  if isinstance(array, jax.Array) or mesh is None:
    return jnp.asarray(array)
  return jax.device_put(array, parallel.replicated(mesh))


def _check_triples(triples: Array, name: str, num_entities: int, num_relations: int) -> np.ndarray:
  triples = np.asarray(triples)
  if triples.ndim != 2 or triples.shape[1] != 3 or not np.issubdtype(triples.dtype, np.integer):
    raise ValueError(f"{name} must be an integer array [T, 3] of (head, relation, tail); "
                     f"got {triples.dtype} {triples.shape}.")
  for column, (what, limit) in enumerate((("head", num_entities), ("relation", num_relations),
                                          ("tail", num_entities))):
    bad = np.flatnonzero((triples[:, column] < 0) | (triples[:, column] >= limit))
    if bad.size:
      raise ValueError(f"{name} row {bad[0]}: {what} index {triples[bad[0], column]} is outside [0, {limit}) "
                       f"({bad.size} such rows).")
  return triples.astype(np.int64)


def _check_candidates(candidate_entities: Array, num_entities: int) -> np.ndarray:
  candidates = np.asarray(candidate_entities)
  if candidates.ndim != 1 or not candidates.size or not np.issubdtype(candidates.dtype, np.integer):
    raise ValueError(f"candidate_entities must be a non-empty 1-D integer array; got {candidates.dtype} "
                     f"{candidates.shape}.")
  bad = np.flatnonzero((candidates < 0) | (candidates >= num_entities))
  if bad.size:
    raise ValueError(f"candidate_entities[{bad[0]}] = {candidates[bad[0]]} is outside [0, {num_entities}).")
  unique, counts = np.unique(candidates, return_counts=True)
  if (counts > 1).any():
    raise ValueError(f"candidate_entities holds entity {unique[counts > 1][0]} more than once "
                     f"({int((counts > 1).sum())} duplicated entities).")
  return candidates.astype(np.int64)


def _direction_ranks(scoring_fn: relations.ScoringFunction, predict_tails: bool, tables: tuple[jax.Array, ...],
                     eval_triples: np.ndarray, known_triples: np.ndarray, candidate_position: np.ndarray,
                     num_candidates: int, num_relations: int, batch_size: int,
                     mesh: Mesh | None) -> tuple[np.ndarray, int]:
  """Ranks of the rankable queries of one direction, and how many were skipped."""
  given_column, target_column = (0, 2) if predict_tails else (2, 0)
  known = _KnownAnswers.build(known_triples[:, given_column] * num_relations + known_triples[:, 1],
                              candidate_position[known_triples[:, target_column]])
  target = candidate_position[eval_triples[:, target_column]]
  rankable = target >= 0
  queries, target = eval_triples[rankable], target[rankable]
  num_skipped = int((~rankable).sum())
  if num_skipped:
    # Counted in the metrics (`num_skipped`); the same split skips the same queries at every evaluation.
    logging.log_first_n(logging.WARNING, "Skipped %d of %d %s-prediction queries: their target is not among the "
                        "%d candidates (counted in num_skipped).", 2, num_skipped, len(eval_triples),
                        "tail" if predict_tails else "head", num_candidates)
  starts, counts = known.spans(queries[:, given_column] * num_relations + queries[:, 1])
  progress = parallel.Progress(len(queries), f"{'tail' if predict_tails else 'head'}-prediction queries ranked")
  fetched, pending = [], []

  def fetch(ranks: jax.Array, n: int) -> None:
    fetched.append((np.asarray(multihost_utils.process_allgather(ranks, tiled=True)) if mesh is not None
                    else np.asarray(ranks))[:n])
    progress.advance(n)

  for begin in range(0, len(queries), batch_size):
    end = min(begin + batch_size, len(queries))
    # The last batch is padded to the full size so that it reuses the compiled shape.
    rows = np.minimum(np.arange(begin, begin + batch_size), end - 1)
    width = 1 << (int(counts[begin:end].max(initial=1)) - 1).bit_length()
    batch = (queries[rows, given_column].astype(np.int32), queries[rows, 1].astype(np.int32),
             queries[rows, target_column].astype(np.int32), target[rows].astype(np.int32),
             known.padded(starts[rows], counts[rows], width, num_candidates))
    if mesh is not None:
      # Every device ranks the whole batch against its own candidate blocks.
      batch = tuple(jax.device_put(x, parallel.replicated(mesh)) for x in batch)
    pending.append((_filtered_ranks(scoring_fn, predict_tails, num_candidates, *tables, *batch, mesh=mesh),
                    end - begin))
    # One batch in flight while the host prepares the next; the one before is fetched.
    if len(pending) > 1:
      fetch(*pending.pop(0))
  for ranks, n in pending:
    fetch(ranks, n)
  return (np.concatenate(fetched) if fetched else np.zeros(0, np.float32)), num_skipped


def evaluate_link_prediction(scoring_fn: relations.ScoringFunction | str, entity_embeddings: Array,
                             relation_embeddings: Array, eval_triples: Array, candidate_entities: Array,
                             filter_triples: Array, batch_size: int = 256, candidate_block: int = 4096,
                             mesh: Mesh | None = None) -> dict[str, float | int]:
  """Filtered MRR and Hits@1/3/10 of head and tail prediction (see the module docstring).

  Args:
    scoring_fn: a `relations.ScoringFunction` or its registered name.
    entity_embeddings: [N, d] embeddings of all entities of the KG, by global entity index.
    relation_embeddings: [R, relation_dim(d)].
    eval_triples: [T, 3] integer (head, relation, tail) triples to evaluate.
    candidate_entities: [C] unique global entity indices to rank among.
    filter_triples: [K, 3] known true triples (e.g. train + dev + test); the eval triples are
      always added.
    batch_size: queries per jitted call.
    candidate_block: at most this many candidates are scored at once; bounds the scores held to
      [batch_size, candidate_block].
    mesh: optional mesh; the candidates are split over all its devices (see the module docstring).
      Tables passed as sharded jax.Arrays keep their layout; others are replicated.

  Returns:
    'mrr', 'hits@1', 'hits@3', 'hits@10' over both directions, the same per direction under
    'tail/' and 'head/', and 'num_queries', 'tail/num_skipped', 'head/num_skipped'.
  """
  if isinstance(scoring_fn, str):
    scoring_fn = relations.get_scoring_function(scoring_fn)
  if batch_size < 1 or candidate_block < 1:
    raise ValueError(f"batch_size and candidate_block must be positive, got {batch_size} and {candidate_block}.")
  if np.ndim(entity_embeddings) != 2 or np.ndim(relation_embeddings) != 2:
    raise ValueError(f"Expected entity_embeddings [N, d] and relation_embeddings [R, dr]; got shapes "
                     f"{np.shape(entity_embeddings)} and {np.shape(relation_embeddings)}.")
  (num_entities, entity_dim), (num_relations, relation_dim) = np.shape(entity_embeddings), np.shape(relation_embeddings)
  if relation_dim != scoring_fn.relation_dim(entity_dim):
    raise ValueError(f"{scoring_fn.name} with entity dim {entity_dim} needs relation dim "
                     f"{scoring_fn.relation_dim(entity_dim)}; relation_embeddings has {relation_dim}.")
  eval_triples = _check_triples(eval_triples, "eval_triples", num_entities, num_relations)
  filter_triples = _check_triples(filter_triples, "filter_triples", num_entities, num_relations)
  candidates = _check_candidates(candidate_entities, num_entities)
  if not len(eval_triples):
    raise ValueError("eval_triples is empty.")

  mesh = _auto_axes(mesh) if mesh is not None else None
  entity_embeddings = _on_device(entity_embeddings, mesh)
  relation_embeddings = _on_device(relation_embeddings, mesh)
  for name, table in (("entity_embeddings", entity_embeddings), ("relation_embeddings", relation_embeddings)):
    if not bool(jnp.isfinite(table).all()):
      raise ValueError(f"{name} holds NaN or infinite values.")
  layout = _candidate_layout(candidates, candidate_block, mesh.size if mesh is not None else 1)
  row_axes = _row_axes(entity_embeddings) if mesh is not None else ()
  shifts = ()
  if row_axes:
    rows_per_shard = num_entities // math.prod(mesh.shape[a] for a in row_axes)
    shifts = _ring_shifts(layout[0], rows_per_shard, mesh, row_axes)
  if mesh is not None:
    layout = tuple(jax.device_put(x, NamedSharding(mesh, PartitionSpec(mesh.axis_names))) for x in layout)
  candidate_ids, block_starts, block_lengths = layout
  candidate_blocks = _candidate_blocks(entity_embeddings, candidate_ids, mesh, row_axes, shifts)
  tables = (entity_embeddings, relation_embeddings, candidate_blocks, block_starts, block_lengths)

  candidate_position = np.full(num_entities, -1, np.int64)
  candidate_position[candidates] = np.arange(len(candidates))
  # One int64 key per triple makes the de-duplication a flat sort.
  all_triples = np.concatenate([filter_triples, eval_triples])
  keys = np.unique((all_triples[:, 0] * num_relations + all_triples[:, 1]) * num_entities + all_triples[:, 2])
  known_triples = np.stack([keys // num_entities // num_relations, keys // num_entities % num_relations,
                            keys % num_entities], axis=1)
  results: dict[str, float | int] = {}
  all_ranks = []
  for direction, predict_tails in (("tail", True), ("head", False)):
    # Answers that are not candidates are never ranked, so they need no filtering.
    target_column = 2 if predict_tails else 0
    direction_known = known_triples[candidate_position[known_triples[:, target_column]] >= 0]
    ranks, num_skipped = _direction_ranks(scoring_fn, predict_tails, tables, eval_triples, direction_known,
                                          candidate_position, len(candidates), num_relations, batch_size, mesh)
    results[f"{direction}/num_skipped"] = num_skipped
    if ranks.size:
      results.update({f"{direction}/{k}": v for k, v in metrics.ranking_metrics(ranks).items()})
    all_ranks.append(ranks)
  ranks = np.concatenate(all_ranks)
  if not ranks.size:
    raise ValueError(f"No eval triple has a head or tail among the {len(candidates)} candidates.")
  results.update(metrics.ranking_metrics(ranks))
  results["num_queries"] = int(ranks.size)
  return results


def lowered_ranking(scoring_fn: relations.ScoringFunction, num_entities: int, entity_dim: int, num_relations: int,
                    mesh: Mesh, batch_size: int = 256, candidate_block: int = 4096, known_width: int = 16) -> Any:
  """The filtered ranking of one batch of `batch_size` queries against all `num_entities` entities, lowered from
  shapes alone (ahead-of-time compiles: `docent_jax.compile_for_tpu`), laid out as `evaluate_link_prediction`
  lays out `rank_split`'s table: rows padded to split over every device, candidate blocks on the device that
  holds their rows. `known_width`: true answers per query filtered out (the batch's largest, a power of 2)."""
  mesh = _auto_axes(mesh)
  num_rows = entity_table.padded_rows(num_entities, mesh.size)
  ids, starts, lengths = _candidate_layout(np.arange(num_entities), candidate_block, mesh.size)
  spread = NamedSharding(mesh, PartitionSpec(mesh.axis_names))
  everywhere = parallel.replicated(mesh)

  def shaped(shape: tuple[int, ...], dtype: Any, sharding: NamedSharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

  tables = (shaped((num_rows, entity_dim), jnp.float32, spread),
            shaped((num_relations, scoring_fn.relation_dim(entity_dim)), jnp.float32, everywhere),
            shaped((*ids.shape, entity_dim), jnp.float32, spread), shaped(starts.shape, jnp.int32, spread),
            shaped(lengths.shape, jnp.int32, spread))
  queries = tuple(shaped((batch_size,), jnp.int32, everywhere) for _ in range(4))
  known = shaped((batch_size, known_width), jnp.int32, everywhere)
  return _filtered_ranks.lower(scoring_fn, True, num_entities, *tables, *queries, known, mesh=mesh)


QUERY_BATCH_SIZE = 512  # Queries ranked against every entity at a time.


@registry.register_lowered("link_prediction")
def lowered_block_ranking(model: Any, shapes: dict[str, int], mesh: Mesh, vector_width: int,
                          entries: list[dict[str, Any]]) -> dict[str, tuple[Any, dict[str, Any]]]:
  """The filtered ranking of one batch of queries (the entries' largest `query_batch_size`) against every entity."""
  queries = max(entry.get("query_batch_size", QUERY_BATCH_SIZE) for entry in entries)
  lowered = lowered_ranking(model.scoring, shapes["num_entities"], vector_width, shapes["num_relations"], mesh,
                            batch_size=queries)
  return {"block_ranking": (lowered, {"num_entities": shapes["num_entities"], "queries": queries})}


@registry.register("link_prediction")
def rank_split(model: Any, graph: knowledge_graph.KnowledgeGraph, split: str = "test",
               query_batch_size: int = QUERY_BATCH_SIZE) -> dict[str, float]:
  """A link prediction model (`inference.link_prediction`) ranking the triples of `graph`'s `split`.

  Filtered ranking among the entities known by then (validation: training and validation entities; test: those of
  every split, i.e. all but, in a transductive graph, entities of no triple; BLP's 'dynamic' setting, `<split>/mrr`, ...) and, where the split has its own unseen entities, among those only
  ('transfer', `<split>/transfer_mrr`, ...). Entities are encoded from the graph's descriptions and relations
  looked up by name, so the model may come from another run (an unknown relation is an error naming it).
  """
  # Laid out like the trainer's tables, so that each device ranks against its own rows; padded with rows that are
  # never a candidate, so that they split over the devices (a table that does not split is replicated).
  vectors, _ = parallel.pad_to_multiple(model.encode_set(graph.entity_texts), model.mesh.size)
  embeddings = parallel.shard_rows(vectors, model.mesh)
  relation_embeddings = model.relation_vectors(graph.relation_ids)
  known_by = ("train", "validation") if split == "validation" else ("train", "validation", "test")
  known = np.sort(np.concatenate([graph.entity_split[name] for name in known_by]))
  settings = {"": known,
              "transfer_": graph.entity_split[split]}
  if not len(settings["transfer_"]):
    logging.log_first_n(logging.INFO, "%s: no %s entity is unseen in training (a transductive split); the transfer "
                        "setting does not apply and is not reported.", 2, graph.name, split)
    del settings["transfer_"]
  results = {}
  for prefix, candidates in settings.items():
    found = evaluate_link_prediction(
        model.scoring, embeddings, relation_embeddings, graph.triples[split], candidates, graph.all_triples(),
        batch_size=query_batch_size, mesh=model.mesh)
    results.update({f"{split}/{prefix}{name}": value for name, value in found.items()})
  return results
