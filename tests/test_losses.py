import jax
from jax.sharding import NamedSharding, PartitionSpec
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from docent_jax import losses
from docent_jax import parallel


def test_margin_loss_matches_hand_computed_hinge():
  positive = np.array([2.0, 0.0])
  negative = np.array([[0.5, 1.5], [-2.0, 0.5]])
  # max(0, 1 - 2 + 0.5)=0, max(0, 1 - 2 + 1.5)=0.5, max(0, 1 - 0 - 2)=0, max(0, 1 - 0 + 0.5)=1.5
  assert float(losses.margin_loss(positive, negative, margin=1.0)) == pytest.approx(2.0 / 4)


def test_negative_log_likelihood_balances_positives_and_negatives():
  positive = np.array([0.0])
  negative = np.array([[0.0, 0.0, 0.0]])
  assert float(losses.negative_log_likelihood(positive, negative)) == pytest.approx(np.log(2.0))
  confident = losses.negative_log_likelihood(np.array([10.0]), np.array([[-10.0, -10.0]]))
  assert float(confident) < 1e-4


def test_unknown_loss_lists_valid_names():
  with pytest.raises(ValueError, match="margin.*nll"):
    losses.get_link_prediction_loss("hinge")


@pytest.fixture(scope="module")
def mesh():
  return parallel.create_mesh(ml_collections.ConfigDict({"shape": (2, 4)}))


def _normal(seed, *shape):
  return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


def _assert_trees_close(actual, expected, atol=2e-5):
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-5, atol=atol)


def test_in_batch_softmax_masks_other_copies_of_the_same_entity():
  queries, entities = _normal(0, 4, 3), _normal(1, 4, 3)
  ids = jnp.array([7, 2, 7, 5])
  loss, metrics = losses.in_batch_softmax_loss(queries, entities, ids, scale=2.0)
  logits = 2.0 * np.asarray(queries) @ np.asarray(entities).T
  expected = []
  for i in range(4):
    # Candidates: the own positive plus every row holding a different entity.
    keep = [j for j in range(4) if j == i or ids[j] != ids[i]]
    expected.append(np.log(np.sum(np.exp(logits[i, keep]))) - logits[i, i])
  assert float(loss) == pytest.approx(np.mean(expected), rel=1e-5)
  assert float(metrics["duplicate_fraction"]) == 0.5
  # Identical rows for identical ids would tie with the positive if they were not masked.
  unit = jnp.eye(3)[jnp.array([0, 1, 0, 2])]
  _, metrics = losses.in_batch_softmax_loss(unit, unit, jnp.array([4, 1, 4, 9]), scale=10.0)
  assert float(metrics["accuracy"]) == 1.0


def test_in_batch_softmax_on_a_mesh_equals_one_device(mesh):
  queries, entities, ids = _normal(2, 16, 8), _normal(3, 16, 8), jnp.arange(16) % 11

  def loss(q, e, ids):
    return losses.in_batch_softmax_loss(q, e, ids, scale=5.0)[0]

  expected = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(queries, entities, ids)
  batch = NamedSharding(mesh, PartitionSpec("data"))
  sharded = [jax.device_put(x, batch) for x in (queries, entities, ids)]
  actual = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(*sharded)
  assert actual[1][0].sharding.spec == PartitionSpec("data")
  _assert_trees_close(actual, expected)


def _dense_entity_loss(queries, table, ids, scale):
  return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(scale * queries @ table.T, ids))


@pytest.mark.parametrize("num_entities, use_mesh", [(512, True), (50, True), (50, False)])
def test_full_softmax_equals_dense_softmax_in_value_and_gradients(mesh, num_entities, use_mesh):
  queries, table = _normal(4, 12, 16), _normal(5, num_entities, 16)
  ids = jnp.asarray(np.random.default_rng(6).integers(0, num_entities, 12))
  ids = ids.at[0].set(num_entities - 1)  # The last row, next to any padding.
  on_mesh = mesh if use_mesh else None
  if use_mesh:
    rows = PartitionSpec(("data", "model")) if num_entities % 8 == 0 else PartitionSpec()
    table = jax.device_put(table, NamedSharding(mesh, rows))

  def loss(q, t):
    return losses.full_softmax_loss(q, t, ids, 3.0, mesh=on_mesh)

  (value, metrics), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(queries, table)
  expected = jax.value_and_grad(_dense_entity_loss, argnums=(0, 1))(queries, np.asarray(table), ids, 3.0)
  _assert_trees_close((value, grads), expected)
  dense_logits = 3.0 * queries @ np.asarray(table).T
  assert float(metrics["accuracy"]) == pytest.approx(np.mean(np.argmax(dense_logits, -1) == ids))


def test_a_padded_tables_padding_rows_never_count(mesh):
  # An EntityTable's 50 entities padded to 56 rows, split over the 8 devices: value and gradients as the dense
  # softmax over the 50, and no gradient for the padding.
  num_entities = 50
  queries, table = _normal(12, 12, 16), _normal(13, 56, 16)
  ids = jnp.asarray(np.random.default_rng(14).integers(0, num_entities, 12)).at[0].set(num_entities - 1)
  table = jax.device_put(table, NamedSharding(mesh, PartitionSpec(("data", "model"))))

  def loss(q, t):
    return losses.full_softmax_loss(q, t, ids, 3.0, mesh=mesh, num_rows=num_entities)[0]

  value, (query_grad, table_grad) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(queries, table)
  expected = jax.value_and_grad(_dense_entity_loss, argnums=(0, 1))(queries, np.asarray(table)[:num_entities], ids,
                                                                    3.0)
  _assert_trees_close((value, (query_grad, table_grad[:num_entities])), expected)
  assert not np.asarray(table_grad[num_entities:]).any()
  assert np.isnan(jax.jit(lambda: losses.full_softmax_loss(queries, table, ids.at[1].set(num_entities), mesh=mesh,
                                                            num_rows=num_entities)[0])())


def test_full_softmax_logits_per_device_are_one_shard_of_the_table(mesh):
  batch, num_entities, dim = 12, 512, 16
  queries = jax.device_put(_normal(7, batch, dim), NamedSharding(mesh, PartitionSpec("data")))
  table = jax.device_put(_normal(8, num_entities, dim), NamedSharding(mesh, PartitionSpec(("data", "model"))))
  ids = jnp.arange(batch) * 40

  def loss(q, t):
    return losses.full_softmax_loss(q, t, ids, 3.0, mesh=mesh)[0]

  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  hlo = step.lower(queries, table).compile().as_text()
  assert f"f32[{batch},{num_entities // 8}]" in hlo
  assert f"f32[{batch},{num_entities}]" not in hlo and f"f32[{num_entities},{dim}]" not in hlo
  _, (_, table_grad) = step(queries, table)
  assert table_grad.sharding.spec == PartitionSpec(("data", "model"))


def test_labels_outside_the_vocabulary_give_nan(mesh):
  queries, table = _normal(9, 2, 4), _normal(10, 16, 4)
  full_softmax = jax.jit(lambda ids: losses.full_softmax_loss(queries, table, ids, mesh=mesh)[0])
  for ids in (jnp.array([3, 16]), jnp.array([-1, 3])):
    assert np.isnan(full_softmax(ids))
  logits = _normal(11, 1, 2, 5)
  assert np.isnan(losses.masked_lm_loss(logits, jnp.array([[1, 5]]), jnp.array([[True, True]]))[0])
  with pytest.raises(ValueError, match="table"):
    losses.full_softmax_loss(queries, _normal(0, 16, 5), jnp.array([0, 1]))


def test_masked_lm_loss_averages_masked_positions_only():
  logits = _normal(12, 2, 3, 5)
  labels = jnp.array([[1, -100, 4], [0, 2, 999]])
  mask = jnp.array([[True, False, True], [True, True, False]])
  loss, metrics = losses.masked_lm_loss(logits, labels, mask)
  log_probs = np.asarray(jax.nn.log_softmax(logits))
  expected = -np.mean([log_probs[0, 0, 1], log_probs[0, 2, 4], log_probs[1, 0, 0], log_probs[1, 1, 2]])
  assert float(loss) == pytest.approx(expected, rel=1e-6)
  correct = [np.argmax(log_probs[b, t]) == labels[b, t] for b, t in ((0, 0), (0, 2), (1, 0), (1, 1))]
  assert float(metrics["accuracy"]) == pytest.approx(np.mean(correct)) and int(metrics["num_masked"]) == 4


@pytest.mark.parametrize("use_mesh", [True, False])
def test_split_softmax_equals_softmax_over_concatenated_vocabulary(mesh, use_mesh):
  vocab, num_entities, dim = 20, 64, 8
  hidden, words, bias, entities = _normal(13, 10, dim), _normal(14, vocab, dim), _normal(15, vocab), _normal(
      16, num_entities, dim)
  labels = jnp.array([0, 19, 20, 83, 5, 50, 70, 3, -100, 40])
  mask = jnp.arange(10) != 8
  on_mesh = mesh if use_mesh else None
  if use_mesh:
    entities = jax.device_put(entities, NamedSharding(mesh, PartitionSpec(("data", "model"))))

  def loss(h, w, b, e):
    return losses.split_softmax_loss(h, w, b, e, labels, mask, mesh=on_mesh)

  def dense(h, w, b, e):
    logits = h @ jnp.concatenate([w, e]).T + jnp.concatenate([b, jnp.zeros(num_entities)])
    per_token = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(mask, labels, 0))
    return jnp.sum(per_token * mask) / jnp.sum(mask)

  args = (hidden, words, bias, entities)
  (value, metrics), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(*args)
  expected = jax.value_and_grad(dense, argnums=(0, 1, 2, 3))(*(np.asarray(a) for a in args))
  _assert_trees_close((value, grads), expected)
  assert float(metrics["entity_fraction"]) == pytest.approx(5 / 9)


def _supcon_double_loop(embeddings, labels, temperature):
  """L^sup_out written out anchor by anchor in float64; returns (mean loss, anchors without positive)."""
  z = np.asarray(embeddings, np.float64)
  z = z / np.linalg.norm(z, axis=1, keepdims=True)
  per_anchor, without = [], 0
  for i in range(len(z)):
    denominator = sum(np.exp(z[i] @ z[a] / temperature) for a in range(len(z)) if a != i)
    positives = [p for p in range(len(z)) if p != i and labels[p] == labels[i]]
    if not positives:
      without += 1
      continue
    per_anchor.append(-np.mean([np.log(np.exp(z[i] @ z[p] / temperature) / denominator) for p in positives]))
  return np.mean(per_anchor), without


@pytest.mark.parametrize("temperature", [0.07, 0.5])
def test_supcon_loss_matches_the_double_loop_formula(temperature):
  embeddings = 3.0 * _normal(17, 12, 5)  # Not unit length: the loss normalises.
  labels = jnp.array([0, 1, 0, 2, 3, 3, 3, 4, 5, 6, 1, 0])  # Rows 3, 7, 8 and 9 have no positive.
  loss, metrics = losses.supcon_loss(embeddings, labels, temperature)
  expected, without = _supcon_double_loop(embeddings, np.asarray(labels), temperature)
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert int(metrics["anchors_without_positive"]) == without == 4
  assert float(metrics["positives_per_anchor"]) == pytest.approx((3 * 2 + 2 * 1 + 3 * 2) / 8)
  grads = jax.jit(jax.grad(lambda e: losses.supcon_loss(e, labels, temperature)[0]))(embeddings)
  assert np.all(np.isfinite(grads)) and np.any(grads != 0)


def test_supcon_loss_of_two_views_per_example_is_nt_xent():
  num_examples, temperature = 6, 0.1
  views = _normal(18, 2 * num_examples, 8)
  labels = jnp.repeat(jnp.arange(num_examples), 2)  # Rows 2k and 2k + 1 are two views of example k.
  loss, metrics = losses.supcon_loss(views, labels, temperature)
  # SimCLR's NT-Xent: a softmax over all other rows, the other view the target.
  z = views / jnp.linalg.norm(views, axis=1, keepdims=True)
  logits = jnp.where(jnp.eye(2 * num_examples, dtype=bool), -jnp.inf, z @ z.T / temperature)
  other_view = jnp.arange(2 * num_examples) ^ 1
  nt_xent = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, other_view))
  assert float(loss) == pytest.approx(float(nt_xent), rel=1e-5)
  assert int(metrics["anchors_without_positive"]) == 0
  assert float(metrics["accuracy"]) == pytest.approx(float(jnp.mean(jnp.argmax(logits, axis=1) == other_view)))
  # Identical views of distinct examples: every anchor's nearest row is its positive.
  identical = jnp.repeat(jnp.eye(num_examples), 2, axis=0)
  assert float(losses.supcon_loss(identical, labels)[1]["accuracy"]) == 1.0


def test_supcon_loss_without_any_positive_is_zero_with_finite_gradients():
  embeddings = _normal(19, 5, 4)
  labels = jnp.arange(5)
  loss, metrics = losses.supcon_loss(embeddings, labels)
  assert float(loss) == 0.0 and int(metrics["anchors_without_positive"]) == 5
  grads = jax.jit(jax.grad(lambda e: losses.supcon_loss(e, labels)[0]))(embeddings)
  assert np.all(np.isfinite(grads))
  with pytest.raises(ValueError, match="supcon_loss"):
    losses.supcon_loss(embeddings, jnp.arange(4))


def test_supcon_loss_on_a_mesh_equals_one_device(mesh):
  embeddings, labels = _normal(20, 16, 8), jnp.arange(16) % 6

  def loss(e, labels):
    return losses.supcon_loss(e, labels)[0]

  expected = jax.jit(jax.value_and_grad(loss))(embeddings, labels)
  batch = NamedSharding(mesh, PartitionSpec("data"))
  actual = jax.jit(jax.value_and_grad(loss))(jax.device_put(embeddings, batch), jax.device_put(labels, batch))
  assert actual[1].sharding.spec == PartitionSpec("data")
  _assert_trees_close(actual, expected)
