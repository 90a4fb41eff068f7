"""Runs left alone: model_init, --mode=evaluate on what a run reported, whole files on a full disk, clear errors."""
import errno
import json
import logging
import re
import pathlib
import shutil
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from configs import common
from docent_jax import checkpoints
from docent_jax import config_schema
from docent_jax import experiment
from docent_jax import outputs
from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
from docent_jax.inference import search
import kg_fixtures
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _config(kg_dir, tfds_dir):
  """The tiny BLP config, validated every 2 of its 6 steps; the best validation MRR's params are reported."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.optim.learning_rate = 3e-3
  config.evals.validation.every_steps = 2
  return config


@pytest.fixture(scope="module")
def parent(kg_dir, tfds_dir, tmp_path_factory) -> tuple[pathlib.Path, dict]:
  """(workdir, results) of `_config` trained once; tests that write to it take a copy."""
  workdir = tmp_path_factory.mktemp("parent") / "run"
  return workdir, experiment.train_and_evaluate(_config(kg_dir, tfds_dir), workdir)


def _copy(workdir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(shutil.copytree(workdir, tmp_path / "run"))


def _first_batch_loss(trainer: trainers.Trainer, params) -> float:
  batch = parallel.global_batch(next(iter(trainer.objective.train_batches(0))), trainer.mesh)
  return float(trainer.objective.loss(params, batch, jax.random.key(0))[0])


def test_a_blp_run_with_model_init_starts_from_the_parents_params(kg_dir, tfds_dir, parent):
  parent_dir, _ = parent
  parent_trainer = trainers.Trainer(_config(kg_dir, tfds_dir), parent_dir / "blp_transe")
  parent_params, forced_step = parent_trainer.restore_params()
  assert forced_step is None

  child_config = _config(kg_dir, tfds_dir)
  child_config.model_init = str(parent_dir / "blp_transe")
  child_config.seed = 7  # Another fresh initialisation: whatever matches it came from the parent.
  child = trainers.Trainer(child_config, "unused")
  child.objective.start_from(experiment._load_run(child_config.model_init, {}, child.mesh))
  start = child.initial_state().params
  for (path, got), want in zip(jax.tree_util.tree_flatten_with_path(start)[0], jax.tree.leaves(parent_params)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=jax.tree_util.keystr(path))

  # The initial loss is the parent's, not a fresh model's.
  fresh_config = _config(kg_dir, tfds_dir)
  fresh_config.seed = 7
  fresh = trainers.Trainer(fresh_config, "unused")
  initial_loss = _first_batch_loss(child, start)
  assert initial_loss == pytest.approx(_first_batch_loss(child, parent_params), abs=1e-6)
  assert abs(initial_loss - _first_batch_loss(fresh, fresh.initial_state().params)) > 1e-3


def test_evaluate_mode_evaluates_a_run_started_from_another_not_that_other_run(kg_dir, tfds_dir, parent, tmp_path):
  parent_dir, parent_results = parent
  child_config = _config(kg_dir, tfds_dir)
  child_config.model_init = str(parent_dir / "blp_transe")  # Where it starts; what --mode=evaluate scores is the child.
  child_config.train.num_steps = 2
  trained = experiment.train_and_evaluate(child_config, tmp_path / "child")
  evaluated = experiment.evaluate(child_config, tmp_path / "child")
  assert evaluated == pytest.approx(trained, abs=1e-6) and set(evaluated) == set(trained)
  assert evaluated["blp_transe/test/mrr"] != pytest.approx(parent_results["blp_transe/test/mrr"], abs=1e-6)


def test_model_init_takes_the_encoder_wherever_the_parent_keeps_it_and_same_shaped_heads(kg_dir, tfds_dir, caplog):
  trainer = trainers.Trainer(_config(kg_dir, tfds_dir), "unused")
  own = trainer.initial_state().params  # BLP: encoder/bert/..., encoder/projection, relations.
  bert = own["encoder"]["bert"]
  shifted = jax.tree.map(lambda x: np.asarray(x) + 1.0, bert)
  # A parent that keeps its BERT at 'bert' (FAQ, SupCon, universal) with a head this model lacks.
  parent = {"bert": shifted, "heads": {"nli": np.ones((3, 3), np.float32)}}
  with caplog.at_level("INFO"):
    params = trainers.inherit_params(own, parent, ("encoder", "bert"), ("bert",), "faq_run")
  for got, want in zip(jax.tree.leaves(params["encoder"]["bert"]), jax.tree.leaves(shifted)):
    np.testing.assert_array_equal(np.asarray(got), want)
  np.testing.assert_array_equal(np.asarray(params["relations"]["embedding"]), np.asarray(own["relations"]["embedding"]))
  assert "model_init faq_run: took" in caplog.text and "relations/embedding" in caplog.text
  # And the other way: a FAQ-shaped model from a BLP parent (which crashed with KeyError: 'bert').
  params = trainers.inherit_params({"bert": bert}, own, ("bert",), ("encoder", "bert"), "blp_run")
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(bert)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_parent_with_nothing_usable_is_an_error_naming_model_init(kg_dir, tfds_dir):
  own = trainers.Trainer(_config(kg_dir, tfds_dir), "unused").initial_state().params
  be_bow_parent = {"encoder": {"word_embeddings": {"embedding": np.zeros((5, 3), np.float32)}}}
  with pytest.raises(ValueError, match=r"config.model_init = 'bow_run': that run has no params this model can "):
    trainers.inherit_params({"bert": own["encoder"]["bert"]}, be_bow_parent, ("bert",), ("encoder",), "bow_run")


def test_evaluate_reports_the_best_params_and_refuses_without_them(kg_dir, tfds_dir, parent, tmp_path):
  parent_dir, results = parent
  workdir = _copy(parent_dir, tmp_path)
  config = _config(kg_dir, tfds_dir)
  assert experiment.evaluate(config, workdir) == pytest.approx(results, abs=1e-6)
  shutil.rmtree(workdir / "blp_transe" / "best")
  before = (workdir / "results.json").read_text()
  with pytest.raises(trainers.IncompleteRunError, match=r"best params by validation/mrr are missing.*--force"):
    experiment.evaluate(config, workdir)
  assert (workdir / "results.json").read_text() == before
  forced = experiment.evaluate(config, workdir, force=True)
  assert forced["blp_transe/forced/step"] == 6  # The latest params, marked.
  assert json.loads((workdir / "results.json").read_text())["blp_transe/forced/step"] == 6


def test_evaluate_refuses_a_run_that_never_finished(kg_dir, tfds_dir, parent, tmp_path):
  parent_dir, _ = parent
  workdir = _copy(parent_dir, tmp_path)
  shutil.rmtree(workdir / "blp_transe" / "checkpoints" / "6")  # As if it stopped after step 4.
  with pytest.raises(trainers.IncompleteRunError, match=r"it stopped at step 4 of 6.*--force"):
    experiment.evaluate(_config(kg_dir, tfds_dir), workdir)
  forced = experiment.evaluate(_config(kg_dir, tfds_dir), workdir, force=True)
  (best_step,) = [int(p.name) for p in (workdir / "blp_transe" / "best").iterdir() if p.name.isdigit()]
  assert forced["blp_transe/forced/step"] == best_step  # The best params it kept, marked.
  # A complete evaluation later drops the mark.
  shutil.copytree(parent_dir / "blp_transe" / "checkpoints" / "6", workdir / "blp_transe" / "checkpoints" / "6")
  experiment.evaluate(_config(kg_dir, tfds_dir), workdir)
  assert "blp_transe/forced/step" not in json.loads((workdir / "results.json").read_text())


def test_a_damaged_results_file_is_named_and_never_overwritten(kg_dir, tfds_dir, tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "results.json").write_text('{"blp_transe/test/mrr": 0.16')  # Cut short.
  with pytest.raises(outputs.DamagedFileError, match=r"results.json is damaged"):
    experiment.train_and_evaluate(_config(kg_dir, tfds_dir), workdir)
  assert (workdir / "results.json").read_text() == '{"blp_transe/test/mrr": 0.16'
  assert not (workdir / "blp_transe").exists()  # Refused before anything was trained.


def _run_with_file_size_limit(code: str, limit_bytes: int, args: tuple[str, ...] = (),
                              **kwargs) -> subprocess.CompletedProcess:
  """Runs `code` in a Python process that can write no file beyond `limit_bytes`, as on a full disk (EFBIG)."""
  preamble = ("import resource, signal\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # Fail the write instead of killing the process.
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, {limit_bytes}))\n")
  return subprocess.run([sys.executable, "-c", preamble + code, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                        env=tiny_training.subprocess_env(2), **kwargs)


def test_results_cut_short_by_a_full_disk_leave_the_earlier_file_whole(tmp_path):
  earlier = {f"model_{i}/test/mrr": 0.5 for i in range(20)}
  (tmp_path / "results.json").write_text(json.dumps(earlier))
  code = ("from docent_jax import run_dir as run_dirs\n"
          f"run_dirs.Workdir({str(tmp_path)!r}).write_results({{f'new_{{i}}/test/mrr': 0.25 for i in range(500)}})\n")
  run = _run_with_file_size_limit(code, 4096)
  assert run.returncode != 0 and "File too large" in run.stderr
  assert json.loads((tmp_path / "results.json").read_text()) == earlier
  assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def _main_command(kg_dir, tfds_dir, workdir) -> list[str]:
  """`python -m docent_jax.main` on the tiny config, given as overrides of configs/blp.py, without evaluators."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  values = {"data.tfds_data_dir": tfds_dir, "data.max_len": config.data.max_len, "model.pretrained": "",
            **{f"model.bert.{k}": v for k, v in config.model.bert.items()}, "model.dim": config.model.dim,
            "train.global_batch_size": 8, "train.num_steps": 4, "train.checkpoint_every_steps": 2,
            "evals.validation.every_steps": 0, "train.best_metric": "", "model.inference_batch_size": 16}
  return [sys.executable, "-m", "docent_jax.main", f"--config=configs/blp.py:{kg_dir}", f"--workdir={workdir}",
          *[f"--config.{k}={v}" for k, v in values.items()]]


def test_a_checkpoint_write_that_fails_is_one_error_naming_step_directory_and_cause(kg_dir, tfds_dir, parent,
                                                                                    tmp_path):
  del parent  # Its run built the TFDS data, which this process only reads.
  # The tiny BERT's word embeddings alone (30,522 x 32 floats) are beyond 1 MiB; the logs and records are not.
  run = _run_with_file_size_limit("import runpy, sys\n"
                                  "sys.argv = sys.argv[1:]\n"
                                  "runpy.run_module('docent_jax.main', run_name='__main__')\n",
                                  1 << 20, args=_main_command(kg_dir, tfds_dir, tmp_path / "run")[2:], timeout=600)
  errors = [line for line in run.stderr.splitlines() if "Writing checkpoint" in line]
  assert run.returncode == 1, run.stderr[-3000:]
  assert len(errors) == 1, run.stderr[-3000:]
  # Orbax saves the first step it is given, then every 2 steps.
  assert f"Writing checkpoint 1 to {tmp_path / 'run' / 'blp_transe' / 'checkpoints'} failed" in errors[0]
  assert "(OS error 27: File too large)" in errors[0]
  # The only error logged, and no interpreter shutdown failing around Orbax's threads (~1,000 lines before).
  assert [line for line in run.stderr.splitlines() if re.match(r"[EF]\d{4} ", line)] == errors, run.stderr[-3000:]
  assert "meta_path" not in run.stderr
  assert "Event loop is closed" not in run.stderr  # TensorStore's callbacks into Orbax's closed loop, once each.


def test_a_write_error_left_to_asyncio_is_held_back_then_raised_at_close(tmp_path, caplog):
  # What asyncio logs when it collects a task of a failed save that Orbax did not await.
  def collect_failed_task(error):
    try:
      raise error
    except Exception:
      logging.getLogger("asyncio").error("Task exception was never retrieved\nfuture: <Task finished>",
                                         exc_info=True)
  with caplog.at_level(logging.ERROR):
    checkpointer = run_dirs.RunDir(tmp_path / "run").state_checkpoints()
    collect_failed_task(OSError(errno.ENOSPC, "No space left on device"))
    collect_failed_task(ValueError("an asyncio task's bug, not a write"))
    assert [r.getMessage().splitlines()[0] for r in caplog.records] == ["Task exception was never retrieved"]
    assert "an asyncio task's bug" in caplog.text and "No space left" not in caplog.text
    with pytest.raises(checkpoints.CheckpointWriteError, match=r"^Writing a checkpoint to .*/run/checkpoints "
                       r"failed \(OSError: No space left on device\); the checkpoints saved before it are kept\.$"):
      checkpointer.close()
  collect_failed_task(OSError(errno.ENOSPC, "No space left on device"))  # Closed: asyncio's logging as it was.
  assert "No space left" in caplog.text


def test_an_override_of_the_wrong_type_is_one_line_naming_flag_and_value():
  run = subprocess.run([sys.executable, "-m", "docent_jax.main", "--config=configs/default.py", "--workdir=unused",
                        "--config.data.num_workers=1.5"], cwd=REPO_ROOT, capture_output=True, text=True,
                       env=tiny_training.subprocess_env(1))
  assert run.returncode == 1
  assert run.stderr.strip().splitlines() == [
      "flag --config.data.num_workers=1.5: invalid literal for int() with base 10: '1.5'"]


def test_an_unknown_override_key_names_the_nearest_valid_keys():
  run = subprocess.run([sys.executable, "-m", "docent_jax.main", "--config=configs/default.py", "--workdir=unused",
                        "--config.train.num_stpes=3"], cwd=REPO_ROOT, capture_output=True, text=True,
                       env=tiny_training.subprocess_env(1))
  assert run.returncode == 1
  assert run.stderr.splitlines()[-1].startswith(
      "--config.train.num_stpes: no such key in the config; nearest valid keys: train.num_steps, ")


def test_two_first_runs_on_the_same_data_build_it_once(kg_dir, tmp_path):
  tfds_dir, barrier = tmp_path / "tfds", tmp_path / "go"
  # Both processes import everything, then start building at the same moment.
  code = ("import os, sys, time\n"
          "from docent_jax.data.kg import graph\n"
          f"while not os.path.exists({str(barrier)!r}): time.sleep(0.01)\n"
          f"kg = graph.load_knowledge_graph({str(kg_dir)!r}, data_dir={str(tfds_dir)!r})\n"
          "print(kg.num_entities)\n")
  processes = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=tiny_training.subprocess_env(1),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
  time.sleep(15)  # Past both processes' imports.
  barrier.touch()
  outputs = [p.communicate(timeout=300) for p in processes]
  for process, (out, err) in zip(processes, outputs):
    assert process.returncode == 0, err[-3000:]
    assert out.split()[-1] == "48"


def test_a_download_that_cannot_connect_says_to_set_manual_dir(tmp_path, monkeypatch):
  from docent_jax.data.offers import builders as offer_builders  # pylint: disable=g-import-not-at-top
  from docent_jax.data.offers import corpus as offer_corpus  # pylint: disable=g-import-not-at-top
  from tensorflow_datasets.core.download import downloader  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(offer_builders.AbtBuy, "URL", "http://127.0.0.1:9/")  # Nothing listens on the discard port.
  monkeypatch.setattr(downloader, "MAX_RETRIES", 0)  # TFDS's backoff over 10 retries takes minutes.
  with pytest.raises(ConnectionError, match=r"abt_buy: downloading its source files failed.*config.data.manual_dir"):
    offer_corpus.load_offer_corpus("abt_buy", data_dir=tmp_path)


def test_evaluate_with_trained_run_evaluates_that_run_on_this_configs_data(kg_dir, tfds_dir, parent, tmp_path):
  parent_dir, parent_results = parent
  config = _config(kg_dir, tfds_dir)
  results = experiment.evaluate(config, tmp_path / "transfer", trained_run=str(parent_dir / "blp_transe"))
  name = f"{parent_dir.name}.blp_transe"
  # The same data: the trained run's own numbers, under the trained run's name; nothing was trained.
  assert results == pytest.approx({key.replace("blp_transe/", f"{name}/"): value
                                   for key, value in parent_results.items() if key.startswith("blp_transe/")}, abs=1e-6)
  assert not (tmp_path / "transfer" / name / "checkpoints").exists()


def test_a_transfer_evaluation_reports_the_models_evaluators_under_its_name_and_leaves_out_baselines(
    kg_dir, tfds_dir, parent):
  parent_dir, _ = parent
  config = _config(kg_dir, tfds_dir)
  config.evals.lexical = common.baseline("link_prediction", "some_baseline")
  config.evals.test.report_as = config.name
  transfer = experiment._transfer_config(config, str(parent_dir / "blp_transe"))
  assert transfer.name == f"{parent_dir.name}.blp_transe"
  assert "lexical" not in transfer.evals and set(transfer.evals) == set(config.evals) - {"lexical"}
  assert not any(entry.get("report_as") for entry in transfer.evals.values())


def test_evaluating_a_run_on_a_graph_with_a_relation_it_lacks_names_the_relation(tfds_dir, parent, tmp_path):
  parent_dir, _ = parent
  other = kg_fixtures.write_tiny_kg(tmp_path / "other_kg")
  for path in other.glob("*.tsv"):
    path.write_text(path.read_text().replace("\tsame_colour\t", "\tnever_trained\t"))
  config = _config(other, tfds_dir)
  with pytest.raises(KeyError, match="blp_transe has no relation 'never_trained'"):
    experiment.evaluate(config, tmp_path / "transfer", trained_run=str(parent_dir / "blp_transe"))


def test_model_init_from_a_parent_of_another_architecture_is_refused_naming_the_keys(kg_dir, tfds_dir, parent,
                                                                                    tmp_path):
  parent_dir, _ = parent
  child = _config(kg_dir, tfds_dir)
  child.model_init = str(parent_dir / "blp_transe")
  child.model.bert.num_attention_heads = 2  # The parent's 4 heads split the same [32, 3, 32] kernel otherwise.
  with pytest.raises(config_schema.ConfigError, match=r"its encoder is not this run's; they differ in "
                     r"model.bert.num_attention_heads \(there 4, here 2\)"):
    experiment.train_and_evaluate(child, tmp_path / "child")
  assert not (tmp_path / "child" / "blp_transe" / "checkpoints").exists()


def test_search_after_a_run_resumes_answers_from_the_new_steps_vectors(kg_dir, tfds_dir, parent, tmp_path):
  import docent_jax  # pylint: disable=g-import-not-at-top
  parent_dir, _ = parent
  workdir = _copy(parent_dir, tmp_path)
  run_dir = workdir / "blp_transe"
  shutil.rmtree(run_dir / "checkpoints" / "6")  # As if stopped after step 4's checkpoint.
  shutil.rmtree(run_dir / "best")
  queries = ["entity number five", "a thing related to twelve"]
  stopped = docent_jax.load(run_dir)
  assert stopped.step == 4
  before = stopped.search(queries, k=5, approximate=True)  # Builds and saves the index, keeps the entity vectors.
  index_record = run_dir / "search_index" / "index.json"
  assert json.loads(index_record.read_text())["source"]["step"] == 4
  experiment.train_and_evaluate(_config(kg_dir, tfds_dir), workdir)  # Resumes: steps 5 and 6.
  resumed = docent_jax.load(run_dir)
  assert resumed.step == 6
  approximate = resumed.search(queries, k=5, approximate=True)
  assert json.loads(index_record.read_text())["source"]["step"] == 6
  exact = resumed.search(queries, k=5)
  for found, want in zip(approximate, exact):
    np.testing.assert_allclose([s for _, s in found], [s for _, s in want], atol=1e-5)
  # The tiny model's vectors nearly coincide (cosines above 0.99999), so scores barely tell the steps apart: the
  # vectors the saved index holds are the new step's, not the stopped one's.
  index = search.AnnIndex.load(run_dirs.RunDir(run_dir).search_index_dir).index
  index.make_direct_map()
  held = index.reconstruct_n(0, index.ntotal)
  unit = lambda vectors: vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
  np.testing.assert_allclose(held, unit(resumed.entities()[1]), atol=1e-6)
  assert np.abs(held - unit(stopped.entities()[1])).max() > 1e-4
  assert len(before) == len(approximate)
  with np.load(run_dirs.RunDir(run_dir).entity_vectors_file) as kept:
    assert json.loads(str(kept["source"]))["step"] == 6
    np.testing.assert_array_equal(kept["vectors"], resumed.entities()[1])


def test_a_config_value_out_of_range_is_one_line_naming_its_key(kg_dir, tfds_dir, tmp_path):
  command = _main_command(kg_dir, tfds_dir, tmp_path / "run") + ["--config.optim.learning_rate=-1"]
  run = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert run.returncode == 2
  assert [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("I")] == [
      "docent_jax.main: config.optim.learning_rate = -1.0: must be greater than 0. (--help lists the flags)"]
