import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from docent_jax import parallel
from docent_jax.modules import entity_table

NUM_ENTITIES, DIM = 512, 16


@pytest.fixture(scope="module")
def variables():
  return entity_table.EntityTable(NUM_ENTITIES, DIM).init(jax.random.key(0), jnp.zeros((2,), jnp.int32))


def test_table_is_normal_initialised_and_split_by_rows_over_the_mesh(variables):
  table = np.asarray(variables["params"]["embedding"].unbox())
  assert table.shape == (NUM_ENTITIES, DIM)
  assert abs(table.mean()) < 2e-3 and table.std() == pytest.approx(0.02, rel=0.05)
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": (2, 4)}))
  shardings = parallel.param_shardings(variables, mesh, parallel.DEFAULT_RULES)
  assert shardings["params"]["embedding"].spec == PartitionSpec(("data", "model"), None)


def test_lookup_and_table_with_and_without_normalisation(variables):
  params = {"params": {"embedding": variables["params"]["embedding"].unbox()}}
  table = np.asarray(params["params"]["embedding"])
  ids = jnp.array([[3, 0], [511, 3]])
  plain = entity_table.EntityTable(NUM_ENTITIES, DIM)
  np.testing.assert_array_equal(plain.apply(params, ids), table[np.asarray(ids)])
  np.testing.assert_array_equal(plain.apply(params, method="table"), table)
  normalized = entity_table.EntityTable(NUM_ENTITIES, DIM, normalize=True)
  unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
  np.testing.assert_allclose(normalized.apply(params, ids), unit[np.asarray(ids)], rtol=1e-6)
  np.testing.assert_allclose(normalized.apply(params, method="table"), unit, rtol=1e-6)


def test_out_of_range_ids_give_nan_rows_not_another_entity(variables):
  rows = entity_table.EntityTable(NUM_ENTITIES, DIM).apply(variables, jnp.array([NUM_ENTITIES, -1, 5]))
  assert np.isnan(rows[:2]).all() and np.isfinite(rows[2]).all()


def test_sharded_lookup_reads_rows_without_gathering_the_table(variables):
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": (2, 4)}))
  shardings = parallel.param_shardings(variables, mesh, parallel.DEFAULT_RULES)
  params = jax.device_put(nn.unbox(variables), nn.unbox(shardings))
  ids = jax.device_put(jnp.array([0, 70, 140, 511, 64, 3, 200, 300]), NamedSharding(mesh, PartitionSpec("data")))
  module = entity_table.EntityTable(NUM_ENTITIES, DIM, normalize=True)
  lookup = jax.jit(module.apply)
  np.testing.assert_allclose(lookup(params, ids), module.apply(nn.unbox(variables), np.asarray(ids)), rtol=1e-6)
  hlo = lookup.lower(params, ids).compile().as_text()
  assert f"f32[{NUM_ENTITIES // 8},{DIM}]" in hlo and f"f32[{NUM_ENTITIES},{DIM}]" not in hlo


def test_bad_sizes_are_rejected():
  with pytest.raises(ValueError, match="num_entities >= 1"):
    entity_table.EntityTable(0, DIM).init(jax.random.key(0), jnp.zeros((1,), jnp.int32))


def test_rows_are_padded_to_split_evenly_and_padding_ids_are_no_entity():
  table = entity_table.EntityTable(812, DIM, rows_multiple=128)
  variables = table.init(jax.random.key(0), jnp.zeros((2,), jnp.int32))
  assert variables["params"]["embedding"].unbox().shape == (896, DIM)  # 812 -> 7 x 128: 112 rows on each of 8.
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": (2, 4)}))
  shardings = parallel.param_shardings(variables, mesh, parallel.DEFAULT_RULES)
  assert shardings["params"]["embedding"].spec == PartitionSpec(("data", "model"), None)
  rows = table.apply(variables, jnp.array([811, 812, 895]))
  assert np.isfinite(rows[0]).all() and np.isnan(rows[1:]).all()
  padded = entity_table.pad_rows(np.ones((812, DIM), np.float32), 128)
  assert padded.shape == (896, DIM) and padded[:812].all() and not padded[812:].any()
