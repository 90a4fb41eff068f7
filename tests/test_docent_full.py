"""DOCENT-FULL on the tiny review corpus: input layout, masking, training, search, tag prediction, sharded rows."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax import experiment
from docent_jax import parallel
from docent_jax import trainer as trainers
from docent_jax.modules import bert
from docent_jax.modules import docent_full as docent_full_model
from docent_jax.modules import masking
from docent_jax.modules import pretrained
from docent_jax.objectives import docent_full
from review_fixtures import tiny_config
import tiny_training


def full_config(reviews_dir, reviews_tfds_dir):
  return tiny_config(reviews_dir, reviews_tfds_dir, variant="full")


@pytest.fixture(scope="module")
def objective(reviews_dir, reviews_tfds_dir):
  config = full_config(reviews_dir, reviews_tfds_dir)
  return docent_full.DocentFullObjective(config, parallel.create_mesh(config.mesh))


def test_two_segment_layout_and_entity_slot(objective):
  ids = objective.special_ids
  cls, sep, mask, pad = ids["cls"], ids["sep"], ids["mask"], ids["pad"]
  sentences = jnp.array([[cls, 7, 8, 9, sep, pad, pad, pad],
                         [cls, 1, 2, 3, 4, 5, 6, sep]], jnp.int32)
  tokens, types = objective.layout(sentences)
  np.testing.assert_array_equal(tokens, [[cls, mask, sep, 7, 8, 9, sep, pad],
                                         [cls, mask, sep, 1, 2, 3, 4, sep]])  # Truncated, still ends in [SEP].
  np.testing.assert_array_equal(types, [[0, 0, 0, 1, 1, 1, 1, 0],
                                        [0, 0, 0, 1, 1, 1, 1, 1]])

  params = nn.unbox(jax.jit(objective.init_variables)(jax.random.key(0)))
  entity_ids, visible = jnp.array([5, 9]), jnp.array([True, False])
  embedded = objective.module.apply({"params": params}, tokens, entity_ids, visible,
                                   method=docent_full_model.DocentFull.embed_inputs)
  words = np.asarray(bert.word_embedding_matrix(params["bert"]))
  entities = np.asarray(params["entities"]["embedding"])
  np.testing.assert_array_equal(embedded[0, docent_full_model.ENTITY_POSITION], entities[5])
  np.testing.assert_array_equal(embedded[1, docent_full_model.ENTITY_POSITION], words[mask])  # Masked entity.
  others = np.arange(tokens.shape[1]) != docent_full_model.ENTITY_POSITION
  np.testing.assert_array_equal(embedded[:, others], words[np.asarray(tokens)[:, others]])


def test_masking_never_touches_special_positions(objective, monkeypatch):
  # A small cap and a high rate, so that chosen positions beyond the cap must be restored.
  monkeypatch.setattr(masking, "_PREDICTION_HEADROOM", 0.5)
  monkeypatch.setattr(objective.config.loss, "mlm_rate", 0.5)
  sentences = jnp.asarray(next(iter(objective.train_batches(0)))["tokens"])
  tokens, _ = objective.layout(sentences)
  tokens = np.asarray(tokens)
  ids = objective.special_ids
  special = (np.arange(tokens.shape[1]) < docent_full_model.SENTENCE_START) | np.isin(
      tokens, [ids["cls"], ids["sep"], ids["pad"]])
  corrupt = jax.jit(objective.corrupt)
  k = docent_full.max_predictions(tokens.shape[1], 0.5)
  capped, entity_masked = 0, []
  for seed in range(20):
    out = jax.device_get(corrupt(sentences, jax.random.key(seed)))
    changed = out["tokens"] != tokens
    assert not changed[special].any()
    np.testing.assert_array_equal(out["attention_mask"], tokens != ids["pad"])
    assert out["word_positions"].shape == (len(tokens), k)
    predicted = np.zeros_like(changed)
    for row, (positions, keep) in enumerate(zip(out["word_positions"], out["word_mask"])):
      predicted[row, positions[keep]] = True
    assert not (predicted & special).any()
    assert not (changed & ~predicted).any()  # Only predicted positions are corrupted.
    np.testing.assert_array_equal(out["word_labels"], np.take_along_axis(tokens, out["word_positions"], axis=1))
    capped += int((out["word_mask"].sum(axis=1) == k).sum())
    entity_masked.append(~out["entity_visible"])
  assert capped > 0
  assert 0.3 < np.mean(entity_masked) < 0.7  # entity_mask_rate 0.5 over 160 examples.


def test_full_trains_and_writes_search_metrics_beside_baselines(reviews_dir, reviews_tfds_dir, tmp_path):
  config = full_config(reviews_dir, reviews_tfds_dir)
  config.train.num_steps = config.train.checkpoint_every_steps = 3
  results = experiment.train_and_evaluate(config, tmp_path)
  for split in ("test", "all"):
    assert 0.0 < results[f"docent_full/{split}/search_mrr"] <= 1.0
    assert 0.0 <= results[f"docent_full/{split}/search_recall@10"] <= 1.0
  assert results["docent_full/all/search_num_queries"] == 4  # One query per theme tag.
  for baseline in ("bm25/all/search_mrr", "bos/all/search_mrr", "tfidf/test/tags_auc", "bos_bert/test/tags_auc"):
    assert baseline in results
  assert results["docent_full/test/tags_num_entities"] == results["bos_bert/test/tags_num_entities"] >= 1
  for metric in ("map", "auc", "p@1", "ndcg@10"):
    assert 0.0 <= results[f"docent_full/test/tags_{metric}"] <= 1.0
  for metric in ("auc", "seen_auc"):
    assert 0.0 <= results[f"docent_full/all/tags_open0.5_{metric}"] <= 1.0
  tiny_training.assert_loads_as_evaluated(tmp_path / "docent_full",
                                          tiny_training.entity_and_text_vectors(["a quiet film about the sea"]))


def test_tag_prediction_runs_report_dual_keys_and_leave_the_entity_rows_alone(reviews_dir, reviews_tfds_dir,
                                                                              docent_dual_run, tmp_path):
  runs = {c.name: c for c in experiment.model_configs(full_config(reviews_dir, reviews_tfds_dir))}
  model = trainers.Trainer(runs["docent_full"], tmp_path / "full")
  params = model.initial_state().params
  rows = np.asarray(params["entities"]["embedding"])
  keys = set()
  for task in ("tags", "tags_open_50pct"):
    stage = trainers.Trainer(runs[f"docent_full_{task}"], tmp_path / f"full_{task}")
    stage.objective.start_from(model.objective.model(params))
    fitted, computed = stage.train()
    assert "entities" not in fitted  # The entity rows are inputs of the scorer, not its parameters.
    keys |= {k.removeprefix("docent_full/") for k in stage.report(stage.objective.model(fitted), computed)}
  np.testing.assert_array_equal(params["entities"]["embedding"], rows)
  _, dual_results = docent_dual_run
  assert keys == {k.removeprefix("docent_dual/") for k in dual_results if k.startswith("docent_dual/") and "tags" in k}
  assert {"test/tags_auc", "test/tags_map", "all/tags_open0.5_auc", "all/tags_open0.5_seen_auc"} <= keys


def test_entity_rows_stay_sharded_in_the_train_step_and_loss_matches_one_device(reviews_dir, reviews_tfds_dir):
  def run(shape):
    config = full_config(reviews_dir, reviews_tfds_dir)
    config.mesh.shape = shape
    trainer = trainers.Trainer(config, "unused")
    state = trainer.initial_state()
    batch = parallel.global_batch(next(iter(trainer.objective.train_batches(0))), trainer.mesh)
    compiled = trainer.compile_train_step(state).lower(state, batch).compile()
    (state_in, _), _ = compiled.input_shardings
    state_out, _ = compiled.output_shardings
    specs = (state_in.params["entities"]["embedding"].spec, state_out.params["entities"]["embedding"].spec)
    _, metrics = compiled(state, batch)
    return specs, jax.device_get(metrics)

  _, metrics_1 = run((1, 1))
  specs, metrics_8 = run((2, 4))
  rows_over_all = jax.sharding.PartitionSpec(("data", "model"), None)
  assert specs == (rows_over_all, rows_over_all)
  assert metrics_1["entity_loss"] > 0 and metrics_1["mlm_loss"] > 0
  assert metrics_1["loss"] == pytest.approx(
      metrics_1["entity_loss"] + full_config(reviews_dir, reviews_tfds_dir).loss.mlm_weight * metrics_1["mlm_loss"])
  # Same masks, dropout and loss on 8 devices as on one; the gradient norm checks the backward pass.
  for key in ("loss", "entity_loss", "mlm_loss", "num_masked_words", "entity_mask_fraction", "grad_norm"):
    assert metrics_8[key] == pytest.approx(metrics_1[key], rel=1e-5), key


def test_sentence_mean_rows_start_at_the_words_of_their_reviews(reviews_dir, reviews_tfds_dir):
  config = full_config(reviews_dir, reviews_tfds_dir)
  assert config.model.entity_init == "sentence_mean"
  trainer = trainers.Trainer(config, "unused")
  params = trainer.initial_state().params
  table = np.asarray(params["entities"]["embedding"])
  num_entities = trainer.objective.corpus.num_entities
  # Padded to a multiple of model.entity_rows_multiple with rows that are never an entity.
  assert len(table) % config.model.entity_rows_multiple == 0 and not table[num_entities:].any()
  rows = table[:num_entities]
  words = np.asarray(bert.word_embedding_matrix(params["bert"]))
  # The rows were placed by the word table the model starts from (a fixed random BERT here).
  fixed = pretrained.pretrained_or_fixed_bert(None, trainer.objective.bert_config, config.seed)
  np.testing.assert_array_equal(words, bert.word_embedding_matrix(fixed))
  np.testing.assert_allclose(np.linalg.norm(rows, axis=1), np.linalg.norm(words, axis=1).mean(), rtol=1e-5)
  # Movies of one theme share their reviews' theme words: each row is nearer to its theme's rows.
  themes = np.array([int(entity[1:]) % 4 for entity in trainer.objective.corpus.entity_ids])
  unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
  cosine = unit @ unit.T
  same_theme = (themes[:, None] == themes[None, :]) & ~np.eye(len(themes), dtype=bool)
  other_theme = themes[:, None] != themes[None, :]
  for movie in range(len(themes)):
    assert cosine[movie, same_theme[movie]].min() > cosine[movie, other_theme[movie]].max(), movie
