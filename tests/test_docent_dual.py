"""DOCENT-DUAL end to end on a tiny review corpus: training, search evaluation, sharded full softmax."""
import json
import pathlib

import jax
import numpy as np
import pytest

from configs import docent
from docent_jax import parallel
from docent_jax import train

_THEMES = {
    "space": "a space crew of astronauts explores distant planets and alien worlds",
    "horror": "a horror house full of ghosts and screaming victims at midnight",
    "romance": "a romance where two lovers meet in paris and fall in love over dinner",
    "western": "a western where a lonely cowboy rides his horse to a dusty saloon",
}
NUM_ENTITIES = 16


def write_tiny_reviews(directory: pathlib.Path) -> pathlib.Path:
  """16 movies in 4 themes, 6 reviews each; each movie's theme is also its tag."""
  directory.mkdir(parents=True, exist_ok=True)
  themes = list(_THEMES)
  reviews, tags = [], []
  for movie in range(NUM_ENTITIES):
    theme = themes[movie % len(themes)]
    for review in range(6):
      reviews.append(f"m{movie}\tReview {review} of film {movie}: {_THEMES[theme]}. I liked it, movie {movie}.")
    tags.append(f"m{movie}\t{theme}\t{1 + movie % 3}")
  (directory / "reviews.tsv").write_text("\n".join(reviews) + "\n")
  (directory / "tags.tsv").write_text("\n".join(tags) + "\n")
  return directory


@pytest.fixture(scope="module")
def reviews_dir(tmp_path_factory) -> pathlib.Path:
  return write_tiny_reviews(tmp_path_factory.mktemp("reviews"))


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("tfds")


def tiny_config(reviews_dir, tfds_dir, negatives="in_batch", variant="dual"):
  config = docent.get_config(f"{variant},{reviews_dir}")
  config.data.tfds_data_dir = str(tfds_dir)
  config.data.max_len = 24
  config.model.pretrained = ""
  config.model.bert.update(dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64))
  config.loss.negatives = negatives
  config.optim.learning_rate = 1e-3
  config.optim.warmup_steps = 2
  config.train.global_batch_size = 8
  config.train.num_steps = 6
  config.train.log_every_steps = 2
  config.train.checkpoint_every_steps = 3
  config.eval.batch_size = 8
  config.eval.tag_finetune_steps = 8
  config.eval.tag_learning_rate = 1e-3
  config.eval.tag_items_per_step = 4
  config.eval.tag_tags_per_step = 2  # Below the 4 tags: candidates are sampled.
  config.eval.bos_sentences_per_movie = 2
  return config


def test_dual_trains_and_writes_search_and_tag_metrics_beside_baselines(reviews_dir, tfds_dir, tmp_path):
  results = train.train_and_evaluate(tiny_config(reviews_dir, tfds_dir), tmp_path)
  assert json.loads((tmp_path / "results.json").read_text()) == results
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
  assert not any("genres" in key for key in results)  # The tiny corpus has no genres.


def test_full_softmax_on_a_mesh_matches_one_device(reviews_dir, tfds_dir):
  def loss_and_grads(shape):
    config = tiny_config(reviews_dir, tfds_dir, negatives="full")
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


def test_unknown_negatives_and_variant_are_refused(reviews_dir, tfds_dir):
  config = tiny_config(reviews_dir, tfds_dir, negatives="sampled")
  with pytest.raises(ValueError, match="in_batch.*full"):
    train.Trainer(config, "unused")
  with pytest.raises(ValueError, match="valid: \\['dual', 'full', 'hybrid'\\]"):
    docent.get_config("dual_encoder")
