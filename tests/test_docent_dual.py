"""DOCENT-DUAL end to end on a tiny review corpus: training, search evaluation (tag queries and a query file),
the open-vocabulary tag curve, sharded full softmax."""
import itertools
import json
import shutil

import jax
import numpy as np
import pytest

from configs import docent
import docent_jax
from docent_jax import config_schema
from docent_jax import experiment
from docent_jax import parallel
from docent_jax import trainer as trainers
from docent_jax.data.reviews import search_queries
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.evaluation import movie_search
from docent_jax.evaluation import registry
from docent_jax.modules import tag_scorers
from review_fixtures import tiny_config
import tiny_training

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
  # Open vocabulary: 2 of the 4 tags are fit on every movie, the other 2 scored on every movie; each tag's 4
  # movies have it as their one positive, so 8 movies are evaluated on either half.
  open_vocabulary = {k.removeprefix("docent_dual/all/tags_open0.5_"): v for k, v in results.items()
                     if k.startswith("docent_dual/all/tags_open0.5_")}
  assert open_vocabulary["num_train_tags"] == open_vocabulary["num_heldout_tags"] == 2
  assert open_vocabulary["num_entities"] == open_vocabulary["seen_num_entities"] == 8
  for metric in ("auc", "map", "seen_auc", "seen_map"):
    assert 0.0 <= open_vocabulary[metric] <= 1.0
  assert not any("genres" in key for key in results)  # The tiny corpus has no genres: that run is skipped.
  # Each tag-prediction task is a fine-tuning run of its own, from the trained model's params.
  for run in ("docent_dual_tags", "docent_dual_tags_open_50pct"):
    assert (workdir / run / "checkpoints" / "8").is_dir(), run
    assert list((workdir / run).glob("events.out.tfevents.*")), run
  assert not (workdir / "docent_dual_genres" / "checkpoints").exists()


def test_a_loaded_dual_model_searches_its_movies_as_its_evaluation_did(docent_dual_run, reviews_dir,
                                                                      reviews_tfds_dir):
  workdir, results = docent_dual_run
  model = docent_jax.load(workdir / "docent_dual")
  tiny_training.assert_loads_as_evaluated(workdir / "docent_dual",
                                          tiny_training.entity_and_text_vectors(["a quiet film about the sea"]))
  data = trainers.Trainer(tiny_config(reviews_dir, reviews_tfds_dir), "unused").objective.evaluation_data()
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
    trainer = trainers.Trainer(config, "unused")
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
    trainers.Trainer(config, "unused")
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
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  assert (tmp_path / "run" / "docent_dual" / "checkpoints" / "6").is_dir()
  assert not [key for key in results if "/test/search" in key]
  if tags == "none":
    assert not [key for key in results if "search" in key or "tags" in key]
  else:
    assert 0.0 < results["docent_dual/all/search_mrr"] <= 1.0


# Hand-written natural-language queries over the tiny corpus (movie m<i> has theme i % 4: space, horror, romance,
# western); the romance query names a movie the corpus does not have.
_QUERIES = [
    {"query": "astronauts exploring alien planets", "relevant": ["m0", "m4", "m8", "m12"]},
    {"query": "ghosts screaming at midnight", "relevant": ["m1", "m5", "m9", "m13"]},
    {"query": "two lovers in paris", "relevant": ["m2", "m6", "m10", "m14", "m99"]},
    {"query": "a cowboy in a dusty saloon", "relevant": ["m3", "m7", "m11", "m15"]},
]


def test_a_query_file_runs_through_the_configs_search_evaluators(docent_dual_run, reviews_dir, reviews_tfds_dir,
                                                                 tmp_path):
  workdir, run_results = docent_dual_run
  queries = tmp_path / "queries.jsonl"
  queries.write_text("".join(json.dumps(query) + "\n" for query in _QUERIES))
  config = tiny_config(reviews_dir, reviews_tfds_dir)
  config.data.search_queries = str(queries)
  runs = {run.name: run for run in experiment.model_configs(config)}
  results = {}
  for name in ("docent_dual", "bos"):  # BM25 reports with the model; bag-of-sentences search is a run of its own.
    trainer = trainers.Trainer(runs[name], tmp_path / name)
    results.update(trainer.report(docent_jax.load(workdir / name), {}))
  for model in ("docent_dual", "bm25", "bos"):
    assert results[f"{model}/queries/search_num_queries"] == len(_QUERIES)
    assert 0.0 < results[f"{model}/queries/search_mrr"] <= 1.0
    # The tag queries are searched as in training's own evaluation.
    for split in ("test", "all"):
      assert results[f"{model}/{split}/search_mrr"] == pytest.approx(run_results[f"{model}/{split}/search_mrr"])
  # Each query's words are in every review of its theme's movies and in no other movie's.
  assert results["bm25/queries/search_mrr"] == pytest.approx(1.0)
  assert results["bm25/queries/search_recall@10"] == pytest.approx(1.0)

  lines = [json.dumps(_QUERIES[0]), '{"query": "ghosts", "relevant": ["m1"]', json.dumps(_QUERIES[1])]
  queries.write_text("\n".join(lines) + "\n")
  (search,) = [spec for spec in registry.specs(config) if spec.name == "search"]
  with pytest.raises(search_queries.QueryFormatError, match=f"{queries}:2: not valid JSON"):
    search.run(docent_jax.load(workdir / "docent_dual"), trainer.objective.evaluation_data())


def test_the_tag_curve_config_runs_one_open_vocabulary_run_per_fraction():
  runs = experiment.model_configs(docent.get_config("hybrid,imdb_movielens,tag_curve"))
  assert [run.name for run in runs] == ["docent_hybrid"] + [
      f"docent_hybrid_tags_open_{percent}pct" for percent in (10, 25, 50, 75, 90)]
  assert [run.tags.vocabulary_fraction for run in runs[1:]] == list(docent.TAG_CURVE_FRACTIONS)
  assert {(run.seed, run.model_init, run.tags.scorer, run.tags.label_set) for run in runs[1:]} == {
      (0, "docent_hybrid", "dual", "tags")}
  assert list(runs[0].evals) == ["search"]
  assert {run.tags.scorer for run in experiment.model_configs(docent.get_config("full,,tag_curve"))[1:]} == {
      "pair_classifier"}
  with pytest.raises(ValueError, match="unknown setting 'curve'"):
    docent.get_config("dual,imdb_movielens,curve")
  with pytest.raises(ValueError, match="whole percent"):
    docent.tag_curve(docent.get_config("dual"), (0.125,))


def _labels_of(rows: np.ndarray, label_rows: np.ndarray, pad_id: int) -> set[int]:
  """The label whose token row each of `rows` is."""
  width = max(rows.shape[1], label_rows.shape[1])
  rows, label_rows = (np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=pad_id) for x in (rows, label_rows))
  matches = (rows[:, None, :] == label_rows[None, :, :]).all(axis=2)
  assert (matches.sum(axis=1) == 1).all()
  return set(np.argmax(matches, axis=1).tolist())


_CURVE_FRACTIONS = (0.25, 0.5)


def test_the_tag_curve_never_fits_a_held_out_tag_and_reports_every_fraction(reviews_dir, reviews_tfds_dir,
                                                                            tmp_path):
  config = docent.tag_curve(tiny_config(reviews_dir, reviews_tfds_dir), _CURVE_FRACTIONS)
  results = experiment.train_and_evaluate(config, tmp_path)
  prefixes = {key.split("/")[2].rpartition("_num_train_tags")[0] for key in results if "num_train_tags" in key}
  assert prefixes == {f"tags_open{fraction:g}" for fraction in _CURVE_FRACTIONS}
  parent = docent_jax.load(tmp_path / "docent_dual")
  corpus = review_corpus.load_review_corpus(str(reviews_dir), data_dir=reviews_tfds_dir)
  votes = corpus.tag_votes.toarray()
  runs = experiment.model_configs(config)[1:]
  fitted = []
  for run in runs:
    objective = trainers.Trainer(run, tmp_path / run.name).objective
    objective.start_from(parent)
    train_tags, heldout_tags = set(objective.train_tags.tolist()), set(objective.heldout_tags.tolist())
    assert not train_tags & heldout_tags and train_tags | heldout_tags == set(range(len(corpus.tags)))
    # The tags held out at the largest fraction are held out at every point.
    common_tags = set(objective.common_tags.tolist())
    assert len(common_tags) == 2 and common_tags <= heldout_tags
    # Fit on every movie with a training tag, not only the training movies.
    np.testing.assert_array_equal(objective.train_items, np.flatnonzero(votes[:, sorted(train_tags)].any(axis=1)))
    # Every tag a fitting step reads is a training tag.
    label_rows = tag_scorers.label_tokens(objective.tokenizer, corpus.tags, run.data.max_len)
    read = set()
    for batch in itertools.islice(objective.train_batches(run.seed), run.train.num_steps):
      read |= _labels_of(batch["tag_tokens"], label_rows, objective.tokenizer.pad_token_id)
    assert read and read <= train_tags
    fitted.append(train_tags)
    prefix = f"docent_dual/all/tags_open{run.tags.vocabulary_fraction:g}_"
    assert (results[prefix + "num_train_tags"], results[prefix + "num_heldout_tags"]) == (
        len(train_tags), len(heldout_tags))
    # The held-out tags are scored on every movie that has one of them: each has one tag, so it lacks another.
    assert results[prefix + "num_entities"] == votes[:, sorted(heldout_tags)].any(axis=1).sum()
    # The 2 common tags: their 8 movies at every point.
    assert (results[prefix + "num_common_tags"], results[prefix + "common_num_entities"]) == (2, 8)
    assert 0.0 <= results[prefix + "auc"] <= 1.0 and 0.0 <= results[prefix + "common_auc"] <= 1.0
  assert [len(tags) for tags in fitted] == [1, 2] and fitted[0] < fitted[1]  # Nested splits.

  # Common tags held out at a smaller fraction than a run's would include tags the run fits.
  runs[-1].tags.common_heldout_fraction = 0.25
  with pytest.raises(ValueError, match="common_heldout_fraction must be 0 .none. or in .tags.vocabulary_fraction"):
    trainers.Trainer(runs[-1], tmp_path / "refused")


def test_sentence_pooling_names_its_valid_values_and_the_bos_run_pools_by_the_mean():
  config = docent.get_config("dual")
  bos = {run.name: run for run in experiment.model_configs(config)}["bos"]
  assert (bos.objective, bos.model.sentence_pooling, bos.train.num_steps) == ("docent_dual", "mean", 0)
  config.model.sentence_pooling = "max"
  with pytest.raises(config_schema.ConfigError, match=r"config.model.sentence_pooling = 'max': valid: \['cls', 'mean'\]"):
    config_schema.check_config(config, parallel.create_mesh(config.mesh))
