"""SupCon product matching end to end on a tiny two-source DeepMatcher directory the test writes."""
import io
import json
import pathlib
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import supcon as supcon_config
import docent_jax
from docent_jax import experiment
from docent_jax import predict
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.data.offers import labels as offer_labels
from docent_jax.data.offers import sampling as offer_sampling
from docent_jax.evaluation import pair_matching
from docent_jax.modules import pair_probe
from docent_jax.objectives import supcon
import test_offer_files
import tiny_training

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
  config = tiny_training.shrink(supcon_config.get_config(str(data_dir)), tfds_dir, max_len=16, global_batch_size=4,
                                log_every_steps=3)
  fine_tuning = dict(train=dict(num_steps=5, global_batch_size=8, log_every_steps=1, checkpoint_every_steps=2),
                     evals=dict(validation=dict(every_steps=2)))
  config.finetune.trained.update(fine_tuning)
  config.finetune.head.update(fine_tuning)
  config.baselines.cross_encoder.update(fine_tuning)
  config.baselines.cross_encoder.update(dict(train=dict(num_steps=6 + 5), data=dict(max_len=24)))
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
  # Offers 10 and 11 of table A are only in test pairs: never pre-trained on.
  test_only = [ids[(a, "10")], ids[(a, "11")]]
  np.testing.assert_array_equal(np.flatnonzero(labels == offer_labels.UNLABELLED), sorted(test_only))
  assert len(np.unique(labels)) == 10 + 2 + 1
  expected_self = np.arange(corpus.num_offers)
  expected_self[test_only] = offer_labels.UNLABELLED
  np.testing.assert_array_equal(supcon.offer_labels_of(corpus, "self", fraction=1.0, seed=0), expected_self)
  with pytest.raises(ValueError, match="loss.labels"):
    supcon.offer_labels_of(corpus, "weak", fraction=1.0, seed=0)


def test_test_offers_of_wdc_json_data_carry_no_label_and_are_never_drawn(tmp_path):
  # Offers 1 and 2 match in training (product 100); 4 and 5 match only in the gold standard (product 300).
  offer = lambda side, number, cluster: {f"id_{side}": number, f"cluster_id_{side}": cluster,
                                         f"title_{side}": f"offer {number}"}
  pair = lambda left, right, label, pair_id: {**offer("left", *left), **offer("right", *right), "label": label,
                                              "pair_id": pair_id}
  train = [pair((1, 100), (2, 100), 1, "1#2"), pair((1, 100), (3, 200), 0, "1#3"), pair((3, 200), (2, 100), 0, "3#2")]
  test = [pair((4, 300), (5, 300), 1, "4#5"), pair((4, 300), (1, 100), 0, "4#1")]
  test_offer_files.write_wdc_json(tmp_path, train=train, validation_ids=("1#3",), test=test)
  corpus = offer_corpus.load_offer_corpus("wdc_computers/small", data_dir=tmp_path / "tfds", manual_dir=tmp_path)
  assert corpus.ids == ["1", "2", "3", "4", "5"] and corpus.product_ids[3:] == ["300", "300"]
  labels = supcon.offer_labels_of(corpus, "supervised", fraction=1.0, seed=0)
  assert labels[0] == labels[1] != labels[2]
  np.testing.assert_array_equal(labels[3:], [offer_labels.UNLABELLED] * 2)
  datasets = offer_sampling.sampled_datasets(labels, np.asarray(corpus.source))
  assert [d.tolist() for d in datasets] == [[0, 1, 2]]
  sampler = offer_sampling.ContrastiveSampler(labels, np.asarray(corpus.source), batch_size=2, seed=0)
  drawn = np.concatenate([sampler(i) for i in range(20)])
  assert set(drawn.tolist()) <= {0, 1, 2}


@pytest.fixture(scope="module")
def supcon_run(products_dir, tmp_path_factory):
  """Every model of the tiny config trained once: (config, workdir, results)."""
  config = tiny_config(products_dir, tmp_path_factory.mktemp("tfds"))
  workdir = tmp_path_factory.mktemp("supcon_run") / "run"
  return config, workdir, experiment.train_and_evaluate(config, workdir)


@pytest.mark.parametrize("head_init", ["probe", "fresh"])
def test_trained_encoder_starts_from_the_frozen_encoders_probe_when_configured(products_dir, tmp_path, head_init):
  config = tiny_config(products_dir, tmp_path / "tfds")
  config.model.head_init = head_init
  runs = {c.name: c for c in experiment.model_configs(config)}
  pretraining = trainers.Trainer(runs["supcon"], tmp_path / "supcon")
  params = pretraining.initial_state().params
  parent = pretraining.objective.model(params)
  probe = pair_probe.linear_probe(parent, pretraining.objective.evaluation_data())
  stage = trainers.Trainer(runs["supcon_trained"], tmp_path / "supcon_trained")
  stage.objective.start_from(parent)
  head = stage.initial_state().params["head"]["output"]
  starts_at_probe = np.allclose(np.asarray(head["kernel"])[:, 0], probe.weights, atol=1e-6)
  assert starts_at_probe == (head_init == "probe")
  if head_init == "fresh":  # At the training pairs' match log-odds, add-one smoothed: 8 matches in 24 pairs.
    np.testing.assert_allclose(head["bias"], [np.log(9 / 17)], rtol=1e-6)
  if head_init == "probe":  # The classifier then scores as the probe does.
    found = pair_matching.classify_pairs(stage.objective.model(stage.initial_state().params),
                                         stage.objective.evaluation_data(), "test")
    test_pairs = stage.objective.evaluation_data().pairs["test"]
    assert found["test/loss"] == pytest.approx(pair_matching.match_metrics(probe.logits["test"], test_pairs[:, 2])["loss"],
                                               rel=1e-4)


def test_every_model_of_the_config_trains_and_reports(supcon_run):
  _, workdir, results = supcon_run
  assert json.loads((workdir / run_dirs.RESULTS_FILE).read_text()) == pytest.approx(results)
  for model in ("supcon_frozen", "supcon_head", "supcon_trained", "self_supervised", "supcon_mixed", "cross_encoder"):
    for split in ("validation", "test"):
      for metric in ("precision", "recall", "f1"):
        assert 0.0 <= results[f"{model}/{split}/{metric}"] <= 1.0, (model, split, metric)
  # Every run that trains has its checkpoints and TensorBoard scalars; fine-tuning runs keep their best params.
  # The cross-encoder gets the pre-training's 6 steps plus the fine-tuning's 5.
  steps = {"supcon": 6, "self_supervised": 6, "supcon_mixed": 6, "supcon_head": 5, "supcon_trained": 5,
           "cross_encoder": 11}
  for run, num_steps in steps.items():
    assert (workdir / run / "checkpoints" / str(num_steps)).is_dir(), run
    assert list((workdir / run).glob("events.out.tfevents.*")), run
  for run in ("supcon_trained", "cross_encoder"):
    assert len(list((workdir / run / "best").iterdir())) == 1, run


def test_loaded_runs_score_pairs_as_their_evaluation_did_and_predict_matches(supcon_run, tmp_path):
  config, workdir, results = supcon_run
  corpus = trainers.Trainer(config, tmp_path / "unused").objective.evaluation_data()
  for run in ("supcon", "supcon_trained"):
    tiny_training.assert_loads_as_evaluated(workdir / run, tiny_training.entity_and_text_vectors(corpus.texts[:3]))
  tiny_training.assert_loads_as_evaluated(workdir / "cross_encoder",
                                          lambda model: model.match_logits(corpus.texts[:3], corpus.texts[3:6]))
  for run in ("supcon_trained", "cross_encoder"):
    model = docent_jax.load(workdir / run)
    assert pair_matching.classify_pairs(model, corpus, "test") == pytest.approx(
        {key.removeprefix(f"{run}/"): value for key, value in results.items() if key.startswith(f"{run}/test/")},
        abs=1e-5)
  # The pre-trained encoder loads with its offer markers; its probe is the frozen model's numbers.
  encoder = docent_jax.load(workdir / "supcon")
  assert pair_matching.probe_frozen_encoder(encoder, corpus)["test/f1"] == pytest.approx(
      results["supcon_frozen/test/f1"], abs=1e-6)
  pairs = corpus.pairs["test"][:3]
  requests = [{"left": corpus.texts[a], "right": corpus.texts[b]} for a, b, _ in pairs]
  lines = io.StringIO("".join(json.dumps(r) + "\n" for r in requests))
  output = io.StringIO()
  model = docent_jax.load(workdir / "cross_encoder")
  assert predict.predict(model, "match", predict.read_requests(lines, "match", "<test>"), output) == 3
  answers = [json.loads(line) for line in output.getvalue().splitlines()]
  np.testing.assert_allclose([a["probability"] for a in answers],
                             model.match([r["left"] for r in requests], [r["right"] for r in requests]), rtol=1e-6)
  with pytest.raises(ValueError, match="--task=link needs a LinkPredictionModel"):
    predict.predict(model, "link", [], io.StringIO())
  # A trained classifier evaluated on a config's pairs (here its own) by that config's cross-encoder evaluators.
  evaluated = experiment.evaluate(config, tmp_path / "transfer", trained_run=str(workdir / "cross_encoder"))
  name = f"{workdir.name}.cross_encoder"
  assert evaluated == pytest.approx({key.replace("cross_encoder/", f"{name}/"): value for key, value in results.items()
                                     if key.startswith("cross_encoder/")}, abs=1e-5)


def test_evaluate_mode_restores_every_run_and_trains_nothing(supcon_run, tmp_path, monkeypatch):
  config, trained, results = supcon_run
  workdir = tmp_path / "run"
  shutil.copytree(trained, workdir)
  snapshot = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if "checkpoints" in p.parts)

  def no_training(*args, **kwargs):
    raise AssertionError("--mode=evaluate took an optimizer step")

  monkeypatch.setattr(trainers.Trainer, "compile_train_step", no_training)
  (workdir / run_dirs.RESULTS_FILE).unlink()
  assert experiment.evaluate(config, workdir) == pytest.approx(results, rel=1e-5)
  assert sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if "checkpoints" in p.parts) == snapshot


class _Interrupted(Exception):
  pass


def _stage_params(workdir: pathlib.Path, run: str, step: int):
  return ocp.StandardCheckpointer().restore(workdir / run / "checkpoints" / str(step) / "state")["params"]


def test_a_run_interrupted_during_fine_tuning_resumes_that_stage_exactly(supcon_run, tmp_path, monkeypatch):
  config, uninterrupted_dir, uninterrupted = supcon_run
  baselines = set(config.baselines)
  config = config.copy_and_resolve_references()
  config.baselines = {}  # Pre-training and its fine-tuning stage are what this test interrupts and resumes.
  uninterrupted = {key: value for key, value in uninterrupted.items() if key.split("/")[0] not in baselines}

  compile_train_step = trainers.Trainer.compile_train_step

  def stopping_at_step_3(self, state, *args):
    step_fn = compile_train_step(self, state, *args)
    if self.config.name != "supcon_trained":
      return step_fn

    def step(state, batch):
      if int(state.step) == 3:  # Steps 1-3 ran; step 2 was checkpointed.
        raise _Interrupted()
      return step_fn(state, batch)

    return step

  monkeypatch.setattr(trainers.Trainer, "compile_train_step", stopping_at_step_3)
  with pytest.raises(_Interrupted):
    experiment.train_and_evaluate(config, tmp_path / "resumed")
  assert (tmp_path / "resumed" / "supcon_trained" / "checkpoints" / "2").is_dir()
  assert not (tmp_path / "resumed" / "supcon_trained" / "checkpoints" / "5").exists()
  monkeypatch.setattr(trainers.Trainer, "compile_train_step", compile_train_step)
  resumed = experiment.train_and_evaluate(config, tmp_path / "resumed")
  for a, b in zip(jax.tree.leaves(_stage_params(tmp_path / "resumed", "supcon_trained", 5)),
                  jax.tree.leaves(_stage_params(uninterrupted_dir, "supcon_trained", 5)), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-6)
  assert resumed == pytest.approx(uninterrupted, abs=1e-6)
