"""DOCENT-HYBRID on the tiny review corpus: training, the entity-conditioned MLM, masking, sharding."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax import experiment
from docent_jax import parallel
from docent_jax import trainer as trainers
from docent_jax.data import tokenization
from docent_jax.modules import hybrid_encoder
from docent_jax.objectives import docent_hybrid
from review_fixtures import tiny_config
import tiny_training


def hybrid_config(reviews_dir, reviews_tfds_dir, negatives="in_batch", mesh_shape=None):
  config = tiny_config(reviews_dir, reviews_tfds_dir, negatives, variant="hybrid")
  config.loss.mlm_weight = 0.5
  config.mesh.shape = mesh_shape or config.mesh.shape
  return config


def trainer_and_batch(config):
  trainer = trainers.Trainer(config, "unused")
  state = trainer.initial_state()
  batch = parallel.global_batch(next(iter(trainer.objective.train_batches(0))), trainer.mesh)
  return trainer, state, batch


@pytest.fixture(scope="module")
def one_device(reviews_dir, reviews_tfds_dir):
  return trainer_and_batch(hybrid_config(reviews_dir, reviews_tfds_dir, mesh_shape=(1, 1)))


@pytest.fixture(scope="module")
def eight_devices(reviews_dir, reviews_tfds_dir):
  return trainer_and_batch(hybrid_config(reviews_dir, reviews_tfds_dir, mesh_shape=(2, 4)))


def test_hybrid_trains_and_writes_search_metrics_beside_bm25(reviews_dir, reviews_tfds_dir, tmp_path):
  config = hybrid_config(reviews_dir, reviews_tfds_dir)
  # The tag runs and the other baselines are DUAL's and FULL's too: their tests train them.
  config.finetune, config.baselines = {}, {}
  config.evals = {"search": config.evals.search, "bm25": config.evals.bm25}
  results = experiment.train_and_evaluate(config, tmp_path)
  assert json.loads((tmp_path / "results.json").read_text()) == results
  for model in ("docent_hybrid", "bm25"):
    for split in ("test", "all"):
      assert 0.0 < results[f"{model}/{split}/search_mrr"] <= 1.0
  assert results["docent_hybrid/all/search_num_queries"] == 4
  tiny_training.assert_loads_as_evaluated(tmp_path / "docent_hybrid",
                                          tiny_training.entity_and_text_vectors(["a quiet film about the sea"]))


def test_loss_adds_weighted_mlm_and_mlm_gradient_reaches_the_entity_rows(one_device):
  trainer, state, batch = one_device
  objective = trainer.objective
  _, metrics = jax.jit(objective.loss)(state.params, batch, jax.random.key(0))
  assert float(metrics["loss"]) == pytest.approx(float(metrics["entity_loss"]) + 0.5 * float(metrics["mlm_loss"]),
                                                 rel=1e-6)
  # A fresh head predicts about uniformly over the vocabulary.
  assert float(metrics["mlm_loss"]) == pytest.approx(np.log(objective.module.config.vocab_size), rel=0.2)
  assert int(metrics["mlm_num_masked"]) >= len(batch["entity"])

  # The MLM term alone: its gradient reaches exactly the rows of the batch's entities, through g(e).
  grads, _ = jax.jit(jax.grad(objective.masked_lm_loss, has_aux=True))(state.params, batch, jax.random.key(1))
  row_norms = np.linalg.norm(np.asarray(grads["entities"]["embedding"]), axis=1)
  in_batch = np.zeros(len(row_norms), bool)
  in_batch[np.asarray(batch["entity"])] = True
  assert (row_norms[in_batch] > 1e-8).all()
  assert (row_norms[~in_batch] == 0.0).all()
  assert float(grads["log_scale"]) == 0.0  # The scale only enters L_E.


def test_mlm_logits_depend_on_the_entity(one_device):
  trainer, state, batch = one_device
  model = trainer.objective.module
  positions = jnp.tile(jnp.arange(4), (len(batch["entity"]), 1))
  logits = lambda entity: model.apply({"params": state.params}, batch["tokens"], entity, positions,
                                      method=hybrid_encoder.HybridEncoder.masked_lm_logits)
  assert logits(batch["entity"]).shape == (len(batch["entity"]), 4, model.config.vocab_size)
  other = (batch["entity"] + 1) % trainer.objective.corpus.num_entities
  assert float(jnp.max(jnp.abs(logits(batch["entity"]) - logits(other)))) > 1e-4


def test_masked_positions_are_never_special_tokens_or_padding(one_device):
  objective = one_device[0].objective
  texts = ["A space crew explores distant planets.", "Ghosts!", "I liked it, movie 3, a lot more than the others."]
  tokens = tokenization.tokenize_texts(objective.tokenizer, texts, 32)
  special = np.isin(tokens, objective.tokenizer.all_special_ids)
  assert (tokens[:, 0] == objective.tokenizer.cls_token_id).all() and (tokens == 0).any()
  for seed in range(5):
    corrupted, positions, labels, predicted = map(np.asarray, jax.jit(objective.mask_batch)(
        jnp.asarray(tokens), jax.random.key(seed)))
    np.testing.assert_array_equal(labels, np.take_along_axis(tokens, positions, axis=1))
    assert predicted.any(axis=1).all()
    chosen = np.zeros_like(special)
    np.put_along_axis(chosen, positions, predicted, axis=1)
    assert not (chosen & special).any()
    np.testing.assert_array_equal(corrupted[~chosen], tokens[~chosen])


@pytest.mark.parametrize("negatives", ["in_batch", "full"])
def test_loss_and_grads_on_a_mesh_match_one_device(reviews_dir, reviews_tfds_dir, one_device, eight_devices,
                                                   negatives):
  def loss_and_grads(trainer, state, batch):
    config = hybrid_config(reviews_dir, reviews_tfds_dir, negatives)
    objective = docent_hybrid.DocentHybridObjective(config, trainer.mesh)
    (loss, metrics), grads = jax.jit(jax.value_and_grad(objective.loss, has_aux=True))(
        state.params, batch, jax.random.key(5))
    return float(loss), float(metrics["mlm_loss"]), jax.device_get(grads)

  loss_1, mlm_1, grads_1 = loss_and_grads(*one_device)
  loss_8, mlm_8, grads_8 = loss_and_grads(*eight_devices)
  assert loss_8 == pytest.approx(loss_1, rel=1e-5)
  assert mlm_8 == pytest.approx(mlm_1, rel=1e-5)
  flat_1 = dict(jax.tree_util.tree_flatten_with_path(grads_1)[0])
  assert any(jax.tree_util.keystr(path).startswith("['mlm_head']") for path in flat_1)
  for path, value in jax.tree_util.tree_flatten_with_path(grads_8)[0]:
    np.testing.assert_allclose(value, flat_1[path], atol=1e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path))
