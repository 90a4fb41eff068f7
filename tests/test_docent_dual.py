"""DOCENT-DUAL end to end on a tiny review corpus: training, search evaluation, sharded full softmax."""
import json
import shutil

import jax
import numpy as np
import pytest

from configs import docent
import docent_jax
from docent_jax import parallel
from docent_jax import train
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.evaluation import movie_search
from review_fixtures import tiny_config

def test_dual_trains_and_writes_search_and_tag_metrics_beside_baselines(docent_dual_run):
  workdir, results = docent_dual_run
  assert json.loads((workdir / "results.json").read_text()) == results
  for model in ("docent_dual", "bm25", "bos"):
    for split in ("test", "all"):
      assert 0.0 < results[f"{model}/{split}/search_mrr"] <= 1.0
      assert 0.0 <= results[f"{model}/{split}/search_recall@10"] <= 1.0
  assert results["docent_dual/all/search_num_queries"] == 4  # One query per theme tag.
  # The theme words are in every review of the tagged movies: BM25 finds them all first.
  assert results["bm25/all/search_recall@10"] == pytest.approx(1.0)
  # Tag prediction on the held-out movies, each with one tag (vote threshold 1 in tiny_config).
  num_test = results["docent_dual/test/tags_num_entities"]
  assert num_test >= 1
  for model in ("docent_dual", "bos_bert", "top_tags", "tfidf"):
    assert results[f"{model}/test/tags_num_entities"] == num_test
    for metric in ("map", "auc", "p@1", "p@5", "ndcg@10", "ndcg@20"):
      assert 0.0 <= results[f"{model}/test/tags_{metric}"] <= 1.0
  # A movie's theme word is in its own reviews only.
  assert results["tfidf/test/tags_map"] == pytest.approx(1.0)
  assert results["docent_dual/test/tags_open0.5_num_train_tags"] == 2
  assert not any("genres" in key for key in results)  # The tiny corpus has no genres: that run is skipped.
  # Each tag-prediction task is a fine-tuning run of its own, from the trained model's params.
  for run in ("docent_dual_tags", "docent_dual_tags_open"):
    assert (workdir / run / "checkpoints" / "8").is_dir(), run
    assert list((workdir / run).glob("events.out.tfevents.*")), run
  assert not (workdir / "docent_dual_genres" / "checkpoints").exists()


def test_a_loaded_dual_model_searches_its_movies_as_its_evaluation_did(docent_dual_run, reviews_dir,
                                                                      reviews_tfds_dir):
  workdir, results = docent_dual_run
  model = docent_jax.load(workdir / "docent_dual")
  data = train.Trainer(tiny_config(reviews_dir, reviews_tfds_dir), "unused").objective.evaluation_data()
  assert movie_search.search_movies(model, data) == pytest.approx(
      {key.removeprefix("docent_dual/"): value for key, value in results.items()
       if key.startswith("docent_dual/") and "/search_" in key}, abs=1e-6)
  ids, table = model.entities()
  assert ids == data.corpus.entity_ids and table.shape[0] == len(ids)
  # search ranks the movies by the cosine of the query's vector with their rows, as the evaluation does.
  (found,) = model.search([data.corpus.tags[0]], k=3)
  query = model.encode([data.corpus.tags[0]])[0]
  cosine = table @ query / np.linalg.norm(table, axis=1) / np.linalg.norm(query)
  np.testing.assert_allclose([score for _, score in found], np.sort(cosine)[::-1][:3], atol=1e-5)


def test_full_softmax_on_a_mesh_matches_one_device(reviews_dir, reviews_tfds_dir):
  def loss_and_grads(shape):
    config = tiny_config(reviews_dir, reviews_tfds_dir, negatives="full")
    config.mesh.shape = shape
    trainer = train.Trainer(config, "unused")
    state = trainer.initial_state()
    batch = parallel.global_batch(next(iter(trainer.objective.train_batches(0))), trainer.mesh)
    grad_fn = jax.jit(jax.value_and_grad(trainer.objective.loss, has_aux=True))
    (loss, _), grads = grad_fn(state.params, batch, jax.random.key(5))
    table = state.params["entities"]["embedding"]
    return float(loss), jax.device_get(grads), table.sharding.spec

  loss_1, grads_1, _ = loss_and_grads((1, 1))
  loss_8, grads_8, spec = loss_and_grads((2, 4))
  assert spec == jax.sharding.PartitionSpec(("data", "model"), None)  # Entity rows split over all 8 devices.
  assert loss_8 == pytest.approx(loss_1, rel=1e-5)
  for (path, a), (_, b) in zip(jax.tree_util.tree_flatten_with_path(grads_8)[0],
                               jax.tree_util.tree_flatten_with_path(grads_1)[0]):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path))


def test_unknown_negatives_and_variant_are_refused(reviews_dir, reviews_tfds_dir):
  config = tiny_config(reviews_dir, reviews_tfds_dir, negatives="sampled")
  with pytest.raises(ValueError, match="in_batch.*full"):
    train.Trainer(config, "unused")
  with pytest.raises(ValueError, match="valid: \\['dual', 'full', 'hybrid'\\]"):
    docent.get_config("dual_encoder")


@pytest.mark.parametrize("tags", ["none", "training movies only"])
def test_a_corpus_without_usable_tags_trains_and_reports_the_rest(reviews_dir, reviews_tfds_dir, tmp_path, tags):
  data = tmp_path / "reviews"
  shutil.copytree(reviews_dir, data)
  if tags == "none":
    (data / "tags.tsv").unlink()
  else:
    corpus = review_corpus.load_review_corpus(str(reviews_dir), data_dir=reviews_tfds_dir)
    held_out = {corpus.entity_ids[e] for split in ("validation", "test") for e in corpus.entity_split[split]}
    lines = (reviews_dir / "tags.tsv").read_text().splitlines()
    (data / "tags.tsv").write_text("".join(f"{line}\n" for line in lines if line.split("\t")[0] not in held_out))
  config = tiny_config(data, reviews_tfds_dir)
  config.baselines = {}  # The baselines read the same tags as the model's own tag runs.
  results = train.train_and_evaluate(config, tmp_path / "run")
  assert (tmp_path / "run" / "docent_dual" / "checkpoints" / "6").is_dir()
  assert not [key for key in results if "/test/search" in key]
  if tags == "none":
    assert not [key for key in results if "search" in key or "tags" in key]
  else:
    assert 0.0 < results["docent_dual/all/search_mrr"] <= 1.0
