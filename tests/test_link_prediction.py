"""Filtered link prediction against a naive per-triple numpy reference."""
import math
import re

import jax
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np
import pytest

import kg_fixtures
from configs import default
from docent_jax import config_schema
from docent_jax import parallel
from docent_jax.data import pipeline
from docent_jax.evaluation import link_prediction
from docent_jax.evaluation import metrics
from docent_jax.objectives import blp

NUM_ENTITIES, NUM_RELATIONS, DIM = 40, 3, 4


def _distmult(head, relation, tail):
  return np.sum(head * relation * tail, axis=-1)


def _transe(head, relation, tail):
  normalize = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  return -np.sum(np.abs(normalize(head) + relation - normalize(tail)), axis=-1)


REFERENCE_SCORES = {"distmult": _distmult, "transe": _transe}


def _reference(name, entities, relations, eval_triples, candidates, filter_triples):
  """Ranks of each (triple, direction) one at a time, straight from the definition."""
  score = REFERENCE_SCORES[name]
  triple_score = lambda h, r, t: score(entities[h], relations[r], entities[t])
  known = {tuple(t) for t in filter_triples} | {tuple(t) for t in eval_triples}
  ranks = {"tail": [], "head": []}
  for h, r, t in eval_triples:
    for direction, target in (("tail", t), ("head", h)):
      if target not in candidates:
        continue
      corrupt = (lambda c: (h, r, c)) if direction == "tail" else (lambda c: (c, r, t))
      target_score = triple_score(*corrupt(target))
      higher = tied = 0
      for c in candidates:
        if c == target or corrupt(c) in known:
          continue
        s = triple_score(*corrupt(c))
        higher += s > target_score
        tied += s == target_score
      ranks[direction].append(1 + higher + tied / 2)
  return ranks


def _small_kg(seed):
  """Entities are signed unit vectors and relations small integers: every score is exact, with many ties."""
  rng = np.random.default_rng(seed)
  entities = np.zeros((NUM_ENTITIES, DIM), np.float32)
  entities[np.arange(NUM_ENTITIES), rng.integers(0, DIM, NUM_ENTITIES)] = rng.choice([-1.0, 1.0], NUM_ENTITIES)
  relations = rng.integers(-2, 3, (NUM_RELATIONS, DIM)).astype(np.float32)
  triples = np.stack([rng.integers(0, NUM_ENTITIES, 150), rng.integers(0, NUM_RELATIONS, 150),
                      rng.integers(0, NUM_ENTITIES, 150)], axis=1)
  triples = np.unique(triples, axis=0)
  rng.shuffle(triples)
  return entities, relations, triples[:25], triples[25:]


@pytest.mark.parametrize("name", ["distmult", "transe"])
@pytest.mark.parametrize("setting", ["dynamic", "transfer"])
@pytest.mark.parametrize("candidate_block", [6, 4096])  # blocks with padding at the end; one block
def test_matches_naive_reference(name, setting, candidate_block):
  entities, relations, eval_triples, filter_triples = _small_kg(seed=0)
  # 'transfer' ranks among a subset, so some targets are not candidates and get skipped.
  candidates = np.arange(NUM_ENTITIES) if setting == "dynamic" else np.arange(0, NUM_ENTITIES, 2)
  expected = _reference(name, entities, relations, eval_triples, set(candidates.tolist()), filter_triples)
  result = link_prediction.evaluate_link_prediction(name, entities, relations, eval_triples, candidates,
                                                    filter_triples, batch_size=7, candidate_block=candidate_block)
  all_ranks = expected["tail"] + expected["head"]
  assert result["num_queries"] == len(all_ranks)
  for direction in ("tail", "head"):
    assert result[f"{direction}/num_skipped"] == len(eval_triples) - len(expected[direction])
    for key, value in metrics.ranking_metrics(np.array(expected[direction])).items():
      assert result[f"{direction}/{key}"] == pytest.approx(value, abs=1e-6), (direction, key)
  for key, value in metrics.ranking_metrics(np.array(all_ranks)).items():
    assert result[key] == pytest.approx(value, abs=1e-6), key
  if setting == "transfer":
    assert 0 < result["tail/num_skipped"] < len(eval_triples)


def test_filtering_changes_ranks_and_matches_reference_without_filter():
  entities, relations, eval_triples, filter_triples = _small_kg(seed=1)
  candidates = np.arange(NUM_ENTITIES)
  no_filter = np.zeros((0, 3), np.int64)
  unfiltered = link_prediction.evaluate_link_prediction("distmult", entities, relations, eval_triples, candidates,
                                                        no_filter)
  expected = _reference("distmult", entities, relations, eval_triples, set(candidates.tolist()), no_filter)
  assert unfiltered["mrr"] == pytest.approx(
      metrics.ranking_metrics(np.array(expected["tail"] + expected["head"]))["mrr"], abs=1e-6)
  filtered = link_prediction.evaluate_link_prediction("distmult", entities, relations, eval_triples, candidates,
                                                      filter_triples)
  assert filtered["mrr"] > unfiltered["mrr"]


@pytest.mark.parametrize("candidates", [np.arange(NUM_ENTITIES), np.arange(NUM_ENTITIES - 1, 0, -3)])
def test_random_embeddings_on_a_mesh_match_a_single_device(candidates):
  rng = np.random.default_rng(2)
  _, _, eval_triples, filter_triples = _small_kg(seed=2)
  entities = rng.normal(size=(NUM_ENTITIES, 8)).astype(np.float32)
  relations = rng.normal(size=(NUM_RELATIONS, 8)).astype(np.float32)
  args = ("complex", entities, relations, eval_triples, candidates, filter_triples)
  single = link_prediction.evaluate_link_prediction(*args, batch_size=16, candidate_block=16)
  mesh = jax.make_mesh((jax.device_count(), 1), (parallel.DATA_AXIS, parallel.MODEL_AXIS))
  sharded = link_prediction.evaluate_link_prediction(*args, batch_size=16, candidate_block=16, mesh=mesh)
  assert sharded == pytest.approx(single, abs=1e-6)
  # An entity table already split by rows, as in training, on the mesh's explicit axes.
  entity_rows = jax.device_put(entities, NamedSharding(mesh, PartitionSpec((parallel.DATA_AXIS, parallel.MODEL_AXIS))))
  sharded_table = link_prediction.evaluate_link_prediction(args[0], entity_rows, *args[2:], batch_size=16,
                                                           candidate_block=16, mesh=mesh)
  assert sharded_table == pytest.approx(single, abs=1e-6)


def _mesh():
  return link_prediction._auto_axes(jax.make_mesh((2, 4), (parallel.DATA_AXIS, parallel.MODEL_AXIS)))


@pytest.mark.parametrize("row_axes", [(parallel.DATA_AXIS, parallel.MODEL_AXIS), (parallel.MODEL_AXIS,), ()])
def test_candidate_blocks_never_gather_a_sharded_table_whole(row_axes):
  """The blocks come out split over every device, and no device holds more than a shard of the table or blocks.

  XLA's own gather of a sharded table would put every candidate's row on every device (the table
  gathered whole, or all the ids' rows summed over devices).
  """
  mesh = _mesh()
  rng = np.random.default_rng(4)
  table = rng.normal(size=(64, 8)).astype(np.float32)
  ids = np.append(rng.permutation(64)[:45], [-1, -1, -1]).reshape(16, 3).astype(np.int32)
  ring_size = math.prod(mesh.shape[a] for a in row_axes)
  shifts = link_prediction._ring_shifts(ids, 64 // ring_size, mesh, row_axes) if row_axes else ()
  everywhere = NamedSharding(mesh, PartitionSpec(mesh.axis_names))
  args = (jax.device_put(table, NamedSharding(mesh, PartitionSpec(row_axes or None))), jax.device_put(ids, everywhere),
          mesh, row_axes, shifts)
  blocks = link_prediction._candidate_blocks(*args)
  np.testing.assert_array_equal(np.asarray(blocks), np.where(ids[..., None] >= 0, table[ids], 0.0))
  assert blocks.sharding.shard_shape(blocks.shape) == (2, 3, 8)
  if row_axes:
    hlo = link_prediction._candidate_blocks.lower(*args).compile().as_text()
    largest = max(math.prod(int(n) for n in dims.split(",")) for dims in re.findall(r"f32\[([\d,]+)\]", hlo))
    assert largest <= max(table.size // ring_size, blocks.size // 8)


def test_all_entities_in_order_are_each_devices_own_rows():
  """The layout of all entities needs no rows from another device; blocks cover the candidates in order."""
  candidates = np.arange(61)
  ids, starts, lengths = link_prediction._candidate_layout(candidates, 4, 8)
  assert ids.shape == (16, 4)  # 8 candidates per device, in 2 blocks of 4.
  for block_ids, start, length in zip(ids, starts, lengths):
    np.testing.assert_array_equal(block_ids[:length], candidates[start:start + length])
    assert (block_ids[length:] == -1).all()
  np.testing.assert_array_equal(ids[ids >= 0], candidates)
  # A 64-row table split over the 8 devices holds 8 rows each: blocks 2k and 2k + 1 are device k's own rows.
  assert link_prediction._ring_shifts(ids, 8, _mesh(), (parallel.DATA_AXIS, parallel.MODEL_AXIS)) == (0,)


def test_candidates_all_on_other_devices_take_one_shift_there_and_back():
  mesh = _mesh()
  table = np.random.default_rng(5).normal(size=(64, 8)).astype(np.float32)
  # Device k's two blocks of 3 hold rows of table shard k + 3 (8 rows a shard) only.
  ids = np.array([[(k + 3) % 8 * 8 + j for j in range(3)] for k in range(8) for _ in range(2)], np.int32)
  ids[1, 2] = -1
  rows = NamedSharding(mesh, PartitionSpec((parallel.DATA_AXIS, parallel.MODEL_AXIS)))
  shifts = link_prediction._ring_shifts(ids, 8, mesh, (parallel.DATA_AXIS, parallel.MODEL_AXIS))
  assert shifts == (3,)
  blocks = link_prediction._candidate_blocks(jax.device_put(table, rows), jax.device_put(ids, rows), mesh,
                                             (parallel.DATA_AXIS, parallel.MODEL_AXIS), shifts)
  np.testing.assert_array_equal(np.asarray(blocks), np.where(ids[..., None] >= 0, table[ids], 0.0))


def test_bad_input_is_named():
  entities, relations, eval_triples, filter_triples = _small_kg(seed=3)
  candidates = np.arange(NUM_ENTITIES)
  bad_triples = eval_triples.copy()
  bad_triples[3, 2] = NUM_ENTITIES
  with pytest.raises(ValueError, match=r"eval_triples row 3: tail index 40 is outside \[0, 40\)"):
    link_prediction.evaluate_link_prediction("distmult", entities, relations, bad_triples, candidates, filter_triples)
  with pytest.raises(ValueError, match="relation dim 4; relation_embeddings has 2"):
    link_prediction.evaluate_link_prediction("distmult", entities, relations[:, :2], eval_triples, candidates,
                                             filter_triples)
  with pytest.raises(ValueError, match="holds entity 5 more than once"):
    link_prediction.evaluate_link_prediction("distmult", entities, relations, eval_triples, np.array([5, 5, 6]),
                                             filter_triples)
  broken = entities.copy()
  broken[7, 0] = np.nan
  with pytest.raises(ValueError, match="entity_embeddings holds NaN"):
    link_prediction.evaluate_link_prediction("distmult", broken, relations, eval_triples, candidates, filter_triples)
  with pytest.raises(ValueError, match="No eval triple"):
    link_prediction.evaluate_link_prediction("distmult", entities, relations, np.array([[0, 0, 1]]),
                                             np.array([2]), filter_triples)


def test_in_batch_negatives_never_draw_either_entity_of_their_triple():
  batch_size, num_negatives = 4, 64
  index, corrupt_head = blp.sample_negatives(jax.random.key(0), batch_size, num_negatives)
  index, corrupt_head = np.asarray(index), np.asarray(corrupt_head)
  for i in range(batch_size):
    drawn = set(index[i].tolist())
    assert not drawn & {i, batch_size + i}
    assert drawn == set(range(2 * batch_size)) - {i, batch_size + i}  # Every other slot, over 64 draws.
  assert corrupt_head.any() and not corrupt_head.all()


def test_shorter_half_first_splits_rows_by_length_and_orders_them_back():
  head = np.array([[5, 5, 5, 5, 0, 0], [5, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5]])
  tail = np.array([[5, 5, 0, 0, 0, 0], [5, 5, 5, 5, 5, 0], [5, 5, 5, 0, 0, 0]])
  split = pipeline.shorter_half_first(head, tail, short_width=3, pad_id=0)
  assert split["short_tokens"].shape == (3, 3) and split["long_tokens"].shape == (3, 6)
  rows = np.concatenate([head, tail])
  padded_short = np.pad(split["short_tokens"], ((0, 0), (0, 3)))
  np.testing.assert_array_equal(np.concatenate([padded_short, split["long_tokens"]])[split["entity_order"]], rows)
  # A shorter half that does not fit stays at full width; another padding id counts as padding.
  assert pipeline.shorter_half_first(head, tail, short_width=2, pad_id=0)["short_tokens"].shape == (3, 6)
  assert pipeline.shorter_half_first(head + 1, tail + 1, short_width=3, pad_id=1)["short_tokens"].shape == (3, 3)


def test_encoding_the_shorter_half_cut_short_gives_the_same_loss_and_gradient(kg_dir, tfds_dir):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)  # On 2 data shards.
  config.model.bert.hidden_dropout_prob = config.model.bert.attention_probs_dropout_prob = 0.0  # Same vectors.
  objective = blp.BlpObjective(config, parallel.create_mesh(config.mesh))
  params = objective.init_variables(jax.random.key(0))
  rng = np.random.default_rng(0)
  batch_size, width = 8, config.data.max_len
  lengths = rng.integers(2, width + 1, size=(2, batch_size))
  tokens = [np.where(np.arange(width) < n[:, None], rng.integers(1000, 2000, (batch_size, width)), 0).astype(np.int32)
            for n in lengths]
  batch = {"head": np.arange(batch_size), "relation": np.zeros(batch_size, np.int32), "head_tokens": tokens[0],
           "tail_tokens": tokens[1]}
  loss_and_gradient = jax.jit(jax.value_and_grad(lambda p, b: objective.loss(p, b, jax.random.key(1))[0]))
  reference = loss_and_gradient(params, batch)
  for short_width in (int(np.sort(lengths.ravel())[batch_size - 1]), 2):  # Cut short; at full width.
    split = {**batch, **pipeline.shorter_half_first(tokens[0], tokens[1], short_width, pad_id=0)}
    assert split["short_tokens"].shape[1] == (short_width if short_width > 2 else width)
    loss, gradient = loss_and_gradient(params, split)
    np.testing.assert_allclose(loss, reference[0], rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4), gradient, reference[1])


def test_a_negative_short_half_width_is_a_config_error():
  config = default.get_config()
  config.model.short_half_width = -8
  with pytest.raises(ValueError, match="config.model.short_half_width = -8"):
    config_schema.check_config(config, parallel.create_mesh(config.mesh))
