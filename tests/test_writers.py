"""`config.writers`: TensorBoard, W&B (offline) and MLflow (SQLite) writers, read back through each library's reader."""
import json
import pathlib
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax import experiment
from docent_jax import run_dir as run_dirs
from docent_jax import writers
import kg_fixtures

HPARAMS = {"name": "tiny", "train.learning_rate": 0.001, "train.num_steps": 10}


@pytest.fixture(name="wandb_env")
def fixture_wandb_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
  """No W&B account or mode, and W&B's own settings and caches in the test's directory."""
  for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SILENT", "WANDB_PROJECT", "WANDB_DIR", "WANDB_RUN_ID"):
    monkeypatch.delenv(name, raising=False)
  for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
    monkeypatch.setenv(name, str(tmp_path / "wandb_home" / name.lower()))


def _write_training(writer, hparams: dict | None = None) -> None:
  writer.write_hparams(hparams or HPARAMS)
  writer.write_scalars(1, {"train/loss": np.float32(2.0), "valid/hits@10": 0.25})
  writer.write_scalars(5, {"train/loss": jnp.asarray(1.0), "valid/hits@10": 0.5})
  writer.flush()


def _wandb_records(run_dir: pathlib.Path) -> list[list[dict]]:
  """The records of each offline run's .wandb file, through W&B's own reader (`wandb leet inspect`), in the order
  the files were written (by their first step)."""
  files = []
  for path in run_dir.glob("wandb/offline-run-*/run-*.wandb"):
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    files.append([json.loads(line) for line in out.splitlines()])
  return sorted(files, key=lambda records: min(_history(records)))


def _history(records: list[dict]) -> dict[int, dict]:
  """Step -> the values logged at it (less W&B's own, `_runtime` and the like)."""
  return {record["history"]["step"]["num"]: {key: value for key, value in record["history"]["item"].items()
                                             if not key.startswith("_")}
          for record in records if record["type"] == "history"}


def test_wandb_offline_run(wandb_env: None, tmp_path: pathlib.Path, capfd: pytest.CaptureFixture,
                           caplog: pytest.LogCaptureFixture) -> None:
  workdir = tmp_path / "sweep"
  run_dir = workdir / "tiny"
  run_dir.mkdir(parents=True)
  caplog.set_level("INFO")
  training = writers.create("wandb", run_dir, workdir=workdir, run_name="tiny")
  _write_training(training)
  training.write_texts(5, {"note": "halfway"})
  # The report's writer, made while the training writer is still open (as `Trainer.report` does).
  report = writers.create("wandb", run_dir, workdir=workdir, run_name="tiny")
  report.write_scalars(10, {"final/test/mrr": 0.75})
  report.close()
  training.close()
  # A later process on the same run directory (a resumed run): the same W&B run id, in its own offline file.
  resumed = writers.create("wandb", run_dir, workdir=workdir, run_name="tiny")
  resumed.write_scalars(12, {"final/test/mrr": 0.8})
  resumed.close()
  out, err = capfd.readouterr()
  assert not out and not err, (out, err)
  # Without "tensorboard": the console still gets the scalars, and no TensorBoard file is written.
  assert any("train/loss" in record.getMessage() for record in caplog.records)
  assert not list(run_dir.glob("**/events.out.tfevents.*"))

  files = _wandb_records(run_dir)
  assert len(files) == 2
  first, second = files
  runs = [record["run"] for file in (first, second) for record in file if record["type"] == "run"]
  assert len({run["run_id"] for run in runs}) == 1
  assert {(run["project"], run["display_name"]) for run in runs} == {("docent_jax", "tiny")}
  # The config `wandb.init` was given (in the run record), then what `write_hparams` added.
  updates = [(record["run"] if record["type"] == "run" else record)["config"]["update"]
             for record in first if record["type"] in ("run", "config")]
  config = {key: value for update in updates for key, value in update.items()}
  assert {key: config[key] for key in HPARAMS} == HPARAMS
  assert config[writers.RUN_DIR_KEY] == str(run_dir)
  assert _history(first) == {1: {"train/loss": 2.0, "valid/hits@10": 0.25},
                            5: {"train/loss": 1.0, "valid/hits@10": 0.5, "note": "halfway"},
                            10: {"final/test/mrr": 0.75}}
  assert _history(second) == {12: {"final/test/mrr": 0.8}}
  exits = [record["exit"]["exit_code"] for file in (first, second) for record in file if record["type"] == "exit"]
  assert exits == [0, 0]  # Each W&B run was finished by `close()`.


def test_mlflow_run(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
  import mlflow  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
  monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
  monkeypatch.chdir(tmp_path)  # Anything MLflow would write beside the working directory lands here.
  workdir = tmp_path / "sweep"
  run_dir = workdir / "tiny"
  run_dir.mkdir(parents=True)
  training = writers.create("mlflow", run_dir, workdir=workdir, run_name="tiny")
  _write_training(training, {**HPARAMS, "evals": "x" * 7000})  # Longer than MLflow takes.
  report = writers.create("mlflow", run_dir, workdir=workdir, run_name="tiny")
  report.write_scalars(10, {"final/test/mrr": 0.75})
  report.close()
  training.close()
  other = writers.create("mlflow", workdir / "other", workdir=workdir, run_name="other")
  other.write_scalars(1, {"train/loss": 3.0})
  other.close()
  assert mlflow.active_run() is None  # The writers never touch MLflow's global run.

  client = mlflow.tracking.MlflowClient(f"sqlite:///{workdir}/mlflow.db")
  experiment = client.get_experiment_by_name("sweep")
  runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
  assert sorted(runs) == ["other", "tiny"]  # The report reused the training writer's run; each run dir its own.
  run = runs["tiny"]
  assert run.data.tags[writers.RUN_DIR_KEY] == str(run_dir)
  assert run.info.status == "FINISHED"

  def history(key):
    return [(metric.step, metric.value) for metric in client.get_metric_history(run.info.run_id, key)]

  assert history("train/loss") == [(1, 2.0), (5, 1.0)]
  assert history("valid/hits_at_10") == [(1, 0.25), (5, 0.5)]
  assert history("final/test/mrr") == [(10, 0.75)]
  assert run.data.params == {"name": "tiny", "train.learning_rate": "0.001", "train.num_steps": "10",
                             "evals": "x" * 6000}
  assert not (tmp_path / "mlruns").exists() and not (tmp_path / "mlflow.db").exists()

  # A resumed run finds its MLflow run again, and a second `write_hparams` changes no recorded param.
  resumed = writers.create("mlflow", run_dir, workdir=workdir, run_name="tiny")
  resumed.write_hparams({**HPARAMS, "train.num_steps": 20})
  resumed.write_scalars(12, {"final/test/mrr": 0.8})
  resumed.close()
  assert len(client.search_runs([experiment.experiment_id])) == 2
  assert history("final/test/mrr") == [(10, 0.75), (12, 0.8)]
  assert client.get_run(run.info.run_id).data.params["train.num_steps"] == "10"


def test_mlflow_name() -> None:
  assert writers.mlflow_name("test/hits@10") == "test/hits_at_10"
  assert writers.mlflow_name("a(b)+c") == "a_b__c"


def test_check_refuses_an_unknown_name() -> None:
  assert writers.check("tensorboard, wandb,mlflow,wandb") == ["tensorboard", "wandb", "mlflow"]
  with pytest.raises(ValueError, match=r"config.writers 'tensorboard,wandbx': unknown writer 'wandbx'; the valid "
                                       r"names are tensorboard, wandb, mlflow"):
    writers.check("tensorboard,wandbx")
  with pytest.raises(ValueError, match="unknown writer ''"):
    writers.check("")


def test_tensorboard_is_the_default_writer(tmp_path: pathlib.Path) -> None:
  from clu import metric_writers  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  from tensorboard.util import tensor_util  # pylint: disable=g-import-not-at-top
  writer = writers.create(writers.DEFAULT, tmp_path, workdir=tmp_path.parent, run_name="tiny")
  assert isinstance(writer, metric_writers.MultiWriter)
  writer.write_scalars(3, {"train/loss": 0.5})
  writer.close()
  events = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
  events.Reload()
  [loss] = events.Tensors("train/loss")
  assert (loss.step, float(tensor_util.make_ndarray(loss.tensor_proto))) == (3, 0.5)


def test_import_stays_light() -> None:
  """The config check imports the module: no tracker library, and not CLU's writers (TensorFlow)."""
  code = ("import sys, docent_jax.writers; "
          "print(sorted(m for m in ('wandb', 'mlflow', 'clu', 'tensorflow') if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120).stdout
  assert out.strip() == "[]"


def test_a_tiny_runs_metrics_reach_wandb_and_mlflow(wandb_env: None, monkeypatch: pytest.MonkeyPatch, kg_dir,
                                                   tfds_dir, tmp_path: pathlib.Path) -> None:
  """A tiny run with `config.writers = "tensorboard,wandb,mlflow"`: its periodic evaluations, hyperparameters and
  final results, read back from W&B's offline files and through MLflow's client."""
  import mlflow  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
  monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.writers = "tensorboard,wandb,mlflow"
  config.train.num_steps = 4
  config.evals.validation.every_steps = 2
  workdir = tmp_path / "run"
  results = experiment.train_and_evaluate(config, workdir)
  run_dir = workdir / config.name
  evaluations = dict(run_dirs.RunDir(run_dir).evaluation_log().by_step(4))

  files = _wandb_records(run_dir)  # The training writer's, then the report's (the same W&B run).
  history = {}
  for file in files:
    for step, values in _history(file).items():
      history.setdefault(step, {}).update(values)
  records = [record for file in files for record in file]
  for step in (2, 4):
    assert history[step]["validation/mrr"] == pytest.approx(evaluations[step]["validation/mrr"])
  assert history[4]["final/test/mrr"] == pytest.approx(results[f"{config.name}/test/mrr"])
  config_updates = [(r["run"] if r["type"] == "run" else r)["config"]["update"] for r in records
                    if r["type"] in ("run", "config")]
  assert any(update.get("optim.learning_rate") == config.optim.learning_rate for update in config_updates)

  client = mlflow.tracking.MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
  [experiment_record] = [e for e in client.search_experiments() if e.name == workdir.name]
  [run] = client.search_runs([experiment_record.experiment_id])
  assert run.info.run_name == config.name and run.data.params["optim.learning_rate"] == str(config.optim.learning_rate)
  mrr = {metric.step: metric.value for metric in client.get_metric_history(run.info.run_id, "validation/mrr")}
  assert mrr == pytest.approx({step: evaluations[step]["validation/mrr"] for step in (2, 4)})
  [final] = client.get_metric_history(run.info.run_id, "final/test/mrr")
  assert (final.step, final.value) == (4, pytest.approx(results[f"{config.name}/test/mrr"]))


def test_mlflow_takes_more_params_than_one_batch_holds(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path):
  import mlflow  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
  monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
  workdir = tmp_path / "work"
  writer = writers.create("mlflow", workdir / "run", workdir=workdir, run_name="run")
  writer.write_hparams({f"key_{i}": i for i in range(250)})
  writer.write_scalars(1, {f"metric_{i}": float(i) for i in range(1200)})
  writer.close()
  client = mlflow.tracking.MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
  [run] = client.search_runs([client.get_experiment_by_name("work").experiment_id])
  assert len(run.data.params) == 250 and len(run.data.metrics) == 1200
