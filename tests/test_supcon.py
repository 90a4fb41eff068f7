"""SupCon product matching end to end on a tiny two-source DeepMatcher directory the test writes."""
import json
import pathlib

import numpy as np
import pytest

from configs import supcon as supcon_config
from docent_jax import train
from docent_jax.data import offer_corpus
from docent_jax.objectives import supcon

NUM_PRODUCTS = 12
_BRANDS = ("acme", "globex", "initech", "umbrella", "hooli", "vandelay")


def write_products(directory: pathlib.Path) -> pathlib.Path:
  """12 products, one offer in each table; matches share a brand and a model number."""
  directory.mkdir(parents=True, exist_ok=True)
  table_a = ["id,name,price"] + [f"{i},{_BRANDS[i % 6]} camera model x{100 + i},{10 * i}"
                                 for i in range(NUM_PRODUCTS)]
  table_b = ["id,name,price"] + [f"{i},x{100 + i} {_BRANDS[i % 6]} digital camera," for i in range(NUM_PRODUCTS)]
  (directory / "tableA.csv").write_text("\n".join(table_a) + "\n")
  (directory / "tableB.csv").write_text("\n".join(table_b) + "\n")

  def pairs(products):
    rows = ["ltable_id,rtable_id,label"]
    for i in products:
      rows += [f"{i},{i},1", f"{i},{(i + 1) % NUM_PRODUCTS},0", f"{i},{(i + 5) % NUM_PRODUCTS},0"]
    return "\n".join(rows) + "\n"

  (directory / "train.csv").write_text(pairs(range(8)))
  (directory / "valid.csv").write_text(pairs(range(8, 10)))
  (directory / "test.csv").write_text(pairs(range(10, 12)))
  return directory


def tiny_config(data_dir: pathlib.Path, tfds_dir: pathlib.Path):
  config = supcon_config.get_config(str(data_dir))
  config.data.tfds_data_dir = str(tfds_dir)
  config.data.max_len = 16
  config.model.pretrained = ""
  config.model.bert.update(dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64))
  config.optim.learning_rate = 1e-3
  config.optim.warmup_steps = 2
  config.train.global_batch_size = 4
  config.train.num_steps = 6
  config.train.log_every_steps = 3
  config.train.checkpoint_every_steps = 3
  config.classifier.batch_size = 8
  config.classifier.max_epochs = 4
  config.classifier.patience = 4  # = max_epochs: the step budgets below are reached.
  config.classifier.trained_max_steps = 5
  config.classifier.cross_encoder_max_len = 24
  config.eval.batch_size = 8
  return config


@pytest.fixture(scope="module")
def products_dir(tmp_path_factory) -> pathlib.Path:
  return write_products(tmp_path_factory.mktemp("products"))


def test_pretraining_labels_come_from_the_training_matches(products_dir, tmp_path):
  corpus = offer_corpus.load_offer_corpus(str(products_dir), data_dir=tmp_path)
  labels = supcon.offer_labels_of(corpus, "supervised", fraction=1.0, seed=0)
  ids = {(source, offer_id): index for index, (source, offer_id) in enumerate(zip(corpus.source, corpus.ids))}
  a, b = (corpus.source_names.index(name) for name in ("tableA", "tableB"))
  for product in range(NUM_PRODUCTS):
    same = labels[ids[(a, str(product))]] == labels[ids[(b, str(product))]]
    assert same == (product < 10), product  # Test matches never join a label.
  assert len(np.unique(labels)) == 10 + 2 * 2
  np.testing.assert_array_equal(supcon.offer_labels_of(corpus, "self", fraction=1.0, seed=0),
                                np.arange(corpus.num_offers))
  with pytest.raises(ValueError, match="loss.labels"):
    supcon.offer_labels_of(corpus, "weak", fraction=1.0, seed=0)


@pytest.mark.parametrize("from_frozen_head", [True, False])
def test_trained_encoder_starts_from_the_frozen_fit_when_configured(products_dir, tmp_path, from_frozen_head):
  config = tiny_config(products_dir, tmp_path / "tfds")
  config.classifier.trained_learning_rate = 0.0  # Fine-tuning changes nothing: it scores its starting point.
  config.classifier.trained_max_steps = 1
  config.classifier.trained_from_frozen_head = from_frozen_head
  trainer = train.Trainer(config, tmp_path / "run")
  results = trainer.objective.evaluate(trainer.initial_state().params)
  same = results["trained"]["test/loss"] == pytest.approx(results["frozen"]["test/loss"], rel=1e-5)
  assert same == from_frozen_head


def test_every_model_of_the_config_trains_and_reports(products_dir, tmp_path):
  config = tiny_config(products_dir, tmp_path / "tfds")
  results = train.train_and_evaluate(config, tmp_path / "run")
  assert json.loads((tmp_path / "run" / train.RESULTS_FILE).read_text()) == pytest.approx(results)
  for model in ("supcon_frozen", "supcon_trained", "self_supervised", "supcon_mixed", "cross_encoder"):
    for metric in ("precision", "recall", "f1"):
      assert 0.0 <= results[f"{model}/test/{metric}"] <= 1.0, (model, metric)
    assert results[f"{model}/fit/steps_run"] >= 1
  # The cross-encoder gets the pre-training's 6 steps plus the trained encoder's 5; the frozen one is not bounded.
  assert results["supcon_trained/fit/steps_run"] == 5
  assert results["cross_encoder/fit/steps_run"] == 6 + 5
  assert results["supcon_frozen/fit/steps_run"] > 5
