import gc
import weakref
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from docent_jax import parallel


def _mesh(shape):
  return parallel.create_mesh(ml_collections.ConfigDict({"shape": shape}))


def test_mesh_fills_minus_one_with_remaining_devices():
  assert dict(_mesh((-1, 2)).shape) == {"data": 4, "model": 2}
  with pytest.raises(ValueError, match="does not divide"):
    _mesh((-1, 3))
  with pytest.raises(ValueError, match="needs 16 devices"):
    _mesh((4, 4))


class _Tables(nn.Module):
  @nn.compact
  def __call__(self, x):
    entities = self.param("entities", nn.with_logical_partitioning(nn.initializers.normal(), ("entity", "features")),
                          (64, 8))
    relations = self.param("relations", nn.with_logical_partitioning(nn.initializers.normal(), ("relation", None)),
                           (11, 8))
    mlp = nn.Dense(16, kernel_init=nn.with_logical_partitioning(nn.initializers.normal(), ("embed", "mlp")))
    return mlp(entities[x] + relations[x % 11])


def test_rules_shard_tables_by_rows_and_replicate_uneven_dimensions():
  mesh = _mesh((2, 4))
  abstract = jax.eval_shape(_Tables().init, jax.random.key(0), jnp.zeros((2,), jnp.int32))
  shardings = parallel.param_shardings(abstract, mesh, parallel.DEFAULT_RULES)["params"]
  assert shardings["entities"].spec == jax.sharding.PartitionSpec(("data", "model"), None)
  assert shardings["relations"].spec == jax.sharding.PartitionSpec(None, None)  # 11 rows do not split 8 ways.
  assert shardings["Dense_0"]["kernel"].spec == jax.sharding.PartitionSpec(None, "model")


def test_rules_from_config_override_defaults():
  config = ml_collections.ConfigDict({"rules": (("mlp", None), ("vocab", "model"))})
  rules = dict(parallel.rules_from_config(config))
  assert rules["mlp"] is None and rules["vocab"] == "model" and rules["entity"] == ("data", "model")


def test_global_batch_splits_over_data_axis_and_pads():
  mesh = _mesh((4, 2))
  batch = parallel.global_batch({"x": np.arange(8)}, mesh)
  assert batch["x"].sharding.spec == jax.sharding.PartitionSpec("data")
  np.testing.assert_array_equal(np.asarray(batch["x"]), np.arange(8))
  padded, n = parallel.pad_to_multiple(np.ones((5, 2)), 4)
  assert padded.shape == (8, 2) and n == 5 and padded[5:].sum() == 0


class _Scaler:
  """Counts its traces: each is a compilation."""

  def __init__(self):
    self.traces = 0

  def scale(self, params, x):
    self.traces += 1
    return {"scaled": x * params["factor"], "sum": x.sum(axis=1)}


def test_map_batches_compiles_a_method_once_and_does_not_keep_its_object():
  mesh = _mesh((4, 2))
  scaler = _Scaler()
  inputs = np.arange(30, dtype=np.float32).reshape(10, 3)
  for factor in (2.0, 3.0):  # Two evaluations: new params, the same method.
    out = parallel.map_batches(scaler.scale, {"factor": jnp.float32(factor)}, inputs, batch_size=8, mesh=mesh)
    np.testing.assert_allclose(out["scaled"], inputs * factor)
    np.testing.assert_allclose(out["sum"], inputs.sum(axis=1))
  assert scaler.traces == 1
  other = _Scaler()  # Another object compiles its own.
  parallel.map_batches(other.scale, {"factor": jnp.float32(1.0)}, inputs, batch_size=8, mesh=mesh)
  assert other.traces == 1
  collected = weakref.ref(scaler)
  del scaler
  gc.collect()
  assert collected() is None


def test_shard_rows_splits_rows_over_every_device_or_replicates_uneven_ones():
  mesh = _mesh((2, 4))
  rows = np.arange(48, dtype=np.float32).reshape(16, 3)
  sharded = parallel.shard_rows(rows, mesh)
  assert {tuple(s.data.shape) for s in sharded.addressable_shards} == {(2, 3)}
  np.testing.assert_array_equal(parallel.fetch(sharded), rows)
  uneven = parallel.shard_rows(rows[:15], mesh)
  assert uneven.sharding.is_fully_replicated
  np.testing.assert_array_equal(parallel.fetch(uneven), rows[:15])


@pytest.mark.parametrize("pad", [0, 1])  # BERT's padding id, and RoBERTa's.
def test_map_token_batches_cuts_rows_to_length_buckets_and_keeps_their_order(pad):
  mesh = _mesh((4, 2))
  rng = np.random.default_rng(0)
  lengths = np.concatenate([[2, 8, 9, 16, 17, 24, 25, 32], rng.integers(2, 33, size=40)])
  tokens = np.full((len(lengths), 32), pad, np.int32)
  for row, length in enumerate(lengths):
    tokens[row, :length] = rng.integers(2, 100, size=length)
  widths = []

  def weighted_sum_fn():  # A new function object for each call: jax.jit caches compilations per function.
    def weighted_sum(params, batch):  # Depends on every token and its position, not on trailing padding.
      widths.append(batch.shape[1])
      positions = jnp.arange(1, batch.shape[1] + 1)
      return jnp.where(batch != pad, batch * positions, 0).sum(axis=1) * params
    return weighted_sum

  expected = np.where(tokens != pad, tokens * np.arange(1, 33), 0).sum(axis=1) * 2
  out = parallel.map_token_batches(weighted_sum_fn(), 2, tokens, pad_id=pad, batch_size=8, mesh=mesh)
  np.testing.assert_array_equal(out, expected)
  assert sorted(widths) == [8, 16, 24, 32]  # One compilation per bucket.
  widths.clear()
  out = parallel.map_token_batches(weighted_sum_fn(), 2, tokens[lengths > 16], pad_id=pad, batch_size=8, mesh=mesh,
                                   buckets=(4, 16, 40))
  np.testing.assert_array_equal(out, expected[lengths > 16])
  assert widths == [32]  # Only the full width holds rows over 16; a bucket past the width is dropped.


def test_bucketed_encoding_reports_one_progress_count_over_every_bucket(monkeypatch, caplog):
  monkeypatch.setattr(parallel, "_PROGRESS_SECONDS", 0.0)  # A line for every batch.
  tokens = np.zeros((40, 32), np.int32)
  for row in range(40):
    tokens[row, :2 + row % 30] = 5  # Rows in every bucket of 8, 16, 24 and 32 tokens.
  with caplog.at_level("INFO", logger="absl"):
    parallel.map_token_batches(lambda params, batch: batch.sum(axis=1), None, tokens, pad_id=0, batch_size=8,
                               mesh=_mesh((1, 1)), what="texts")
  counts = [tuple(map(int, line.split(" texts")[0].split(" / "))) for line in caplog.messages if " texts (" in line]
  assert [total for _, total in counts] == [40] * len(counts)
  done = [n for n, _ in counts]
  assert done == sorted(done) and done[-1] == 40


def test_progress_estimates_the_time_left_from_the_cost_done(monkeypatch, caplog):
  monkeypatch.setattr(parallel, "_PROGRESS_SECONDS", 0.0)
  clock = iter([0.0, 10.0, 20.0])  # Start, then one report each 10 s.
  monkeypatch.setattr(parallel, "time", types.SimpleNamespace(time=lambda: next(clock)))
  with caplog.at_level("INFO", logger="absl"):
    progress = parallel.Progress(4, "texts", total_cost=10.0)
    progress.advance(2, cost=2.0)  # Half the texts, a fifth of the cost, in 10 s: 40 s to go.
    progress.advance(1, cost=3.0)  # Half the cost in 20 s: 20 s to go.
  assert caplog.messages == ["2 / 4 texts (5.0 s each, ETA 40s).",
                             "3 / 4 texts (6.7 s each, ETA 20s)."]
