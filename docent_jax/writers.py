"""Where a run's metrics go: `config.writers`, comma-separated names from `NAMES`, made into one CLU metric writer.

"tensorboard" is CLU's default writer (console lines and TensorBoard event files in the run directory); "wandb" and
"mlflow" send the same scalars and hyperparameters to an experiment tracker, from process 0 only. Without
"tensorboard" every process still logs its scalars to the console. The training writer and the report's writer of a
run directory (and those of a resumed run) log into one tracker run, found again from the run directory's path.

W&B runs offline unless `WANDB_API_KEY` or `WANDB_MODE` is set (`wandb sync <run_dir>/wandb` uploads an offline
run later); MLflow writes to `MLFLOW_TRACKING_URI`, else to a SQLite store `<workdir>/mlflow.db`. Both libraries are
the `trackers` extra, and are imported only by a config that names them.
"""
import functools
import hashlib
import logging
import os
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from etils import epath
import jax
import numpy as np

if TYPE_CHECKING:  # Imported where a writer is made: CLU's writers import TensorFlow (seconds).
  from clu import metric_writers

NAMES = ("tensorboard", "wandb", "mlflow")
DEFAULT = "tensorboard"
WANDB_PROJECT = "docent_jax"  # Unless `WANDB_PROJECT` names another.
RUN_DIR_KEY = "docent_jax.run_dir"  # The tag (MLflow) or config key (W&B) naming the run directory of a tracker run.
_MLFLOW_PARAM_LENGTH = 6000  # MLflow refuses longer param values (`mlflow.utils.validation.MAX_PARAM_VAL_LENGTH`).
# What one `log_batch` may carry (`mlflow.utils.validation.MAX_PARAMS_TAGS_PER_BATCH`, `MAX_METRICS_PER_BATCH`).
_MLFLOW_PARAMS_PER_BATCH = 100
_MLFLOW_METRICS_PER_BATCH = 1000


def check(names: str) -> list[str]:
  """The writer names of `config.writers`, in order; raises ValueError on an unknown or empty one.

  Imports nothing: the config check calls it, so that a misspelt name is refused before a run starts.
  """
  chosen = [name.strip() for name in names.split(",")]
  for name in chosen:
    if name not in NAMES:
      raise ValueError(f"config.writers {names!r}: unknown writer {name!r}; the valid names are "
                       f"{', '.join(NAMES)} (comma-separated).")
  return list(dict.fromkeys(chosen))


def create(names: str, run_dir: epath.PathLike, *, workdir: epath.PathLike,
           run_name: str) -> "metric_writers.MetricWriter":
  """The writer of `config.writers` `names` for the run at `run_dir` (see the module's docstring).

  `workdir` holds the default MLflow store and names the MLflow experiment; `run_name` names the tracker run.
  Call `close()` when done: it finishes the tracker runs.
  """
  from clu import metric_writers  # pylint: disable=g-import-not-at-top
  chosen = check(names)
  run_dir, workdir = epath.Path(run_dir), epath.Path(workdir)
  writers = []
  if "tensorboard" in chosen:
    writers.append(metric_writers.create_default_writer(run_dir, just_logging=jax.process_index() > 0,
                                                        asynchronous=False))
  else:
    writers.append(metric_writers.LoggingWriter())
  if jax.process_index() == 0:
    if "wandb" in chosen:
      writers.append(_metric_writer(_WandbWriter)(run_dir, run_name))
    if "mlflow" in chosen:
      writers.append(_metric_writer(_MlflowWriter)(run_dir, workdir, run_name))
  return writers[0] if len(writers) == 1 else metric_writers.MultiWriter(writers)


@functools.cache
def _metric_writer(backend: type) -> type:
  """`backend` as a `metric_writers.MetricWriter` subclass, made when first needed so that importing this module
  (as the config check does) does not import CLU's writers and TensorFlow."""
  from clu import metric_writers  # pylint: disable=g-import-not-at-top
  return type(backend.__name__.lstrip("_"), (backend, metric_writers.MetricWriter), {"__module__": __name__})


def _local_path(path: epath.Path) -> str | None:
  """`path` as an absolute local path; None for a remote one (gs://)."""
  text = os.fspath(path)
  return None if "://" in text else os.path.abspath(text)


def _run_key(run_dir: epath.Path) -> str:
  return _local_path(run_dir) or os.fspath(run_dir)


def _scalar(value: Any) -> int | float:
  return np.asarray(value).item()


class _NoMedia:
  """The writes a tracker here does not take: images, videos, audio, histograms and raw tensor summaries."""

  def write_summaries(self, step: int, values: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> None:
    pass

  def write_images(self, step: int, images: Mapping[str, Any]) -> None:
    pass

  def write_videos(self, step: int, videos: Mapping[str, Any]) -> None:
    pass

  def write_audios(self, step: int, audios: Mapping[str, Any], *, sample_rate: int) -> None:
    pass

  def write_histograms(self, step: int, arrays: Mapping[str, Any],
                       num_buckets: Mapping[str, int] | None = None) -> None:
    pass


# The W&B runs open in this process by id, with how many writers hold each: the report's writer joins the training
# writer's run while that is still open, rather than W&B opening a second, concurrent copy of the same id.
_wandb_runs: dict[str, list[Any]] = {}


class _WandbWriter(_NoMedia):
  """Scalars (and texts) to a W&B run's history at their steps, hyperparameters to its config."""

  def __init__(self, run_dir: epath.Path, run_name: str):
    import wandb  # pylint: disable=g-import-not-at-top
    key = _run_key(run_dir)
    # Stable across the writers and restarts of a run directory (W&B ids may not hold '/').
    self._id = hashlib.sha256(key.encode()).hexdigest()[:16]
    if self._id in _wandb_runs:
      _wandb_runs[self._id][1] += 1
    else:
      offline = not os.environ.get("WANDB_API_KEY") and not os.environ.get("WANDB_MODE")
      run = wandb.init(
          project=os.environ.get("WANDB_PROJECT") or WANDB_PROJECT, name=run_name, id=self._id, resume="allow",
          dir=_local_path(run_dir),  # A remote run directory: W&B's default, ./wandb.
          mode="offline" if offline else None,
          # Not W&B's "return_previous": a run of another run directory in this process stays its own.
          reinit="create_new",
          # No banner or summary lines, and the console is not captured: the project counts its console lines.
          settings=wandb.Settings(silent=True, console="off"),
          config={RUN_DIR_KEY: key})
      _wandb_runs[self._id] = [run, 1]
    self._run = _wandb_runs[self._id][0]

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    # W&B drops a step below the run's last one: a run resumed from an earlier checkpoint than its last evaluation
    # logs again only from past that evaluation on.
    self._run.log({key: _scalar(value) for key, value in scalars.items()}, step=step)

  def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
    self._run.log(dict(texts), step=step)

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    # A restarted run may record a restart-safe key changed (`run_dir.RESTART_SAFE_KEYS`).
    self._run.config.update(dict(hparams), allow_val_change=True)

  def flush(self) -> None:
    pass  # `log` hands each step to W&B's service process, which writes it.

  def close(self) -> None:
    holders = _wandb_runs[self._id]
    holders[1] -= 1
    if holders[1] == 0:
      del _wandb_runs[self._id]
      self._run.finish()


def mlflow_name(name: str) -> str:
  """`name` as an MLflow metric or param name: '@' reads "_at_" ("test/hits@10" -> "test/hits_at_10"), and any
  other character MLflow refuses becomes '_'."""
  return re.sub(r"[^/\w.\- :]", "_", name.replace("@", "_at_"))


class _MlflowWriter(_NoMedia):
  """Scalars to an MLflow run's metrics at their steps, hyperparameters to its params; one run per run directory.

  Through an `MlflowClient` of its own, not MLflow's global active run, so that two writers in one process (the
  training and the report writer, or runs of two run directories) never write into each other's run.
  """

  def __init__(self, run_dir: epath.Path, workdir: epath.Path, run_name: str):
    from mlflow import exceptions  # pylint: disable=g-import-not-at-top
    from mlflow import tracking  # pylint: disable=g-import-not-at-top
    from mlflow.entities import Metric, Param  # pylint: disable=g-import-not-at-top
    self._metric, self._param = Metric, Param
    local_workdir = _local_path(workdir)
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
      if local_workdir is None:
        raise ValueError(f"config.writers mlflow: the workdir {workdir} is not local, so it cannot hold the default "
                         "SQLite store; set MLFLOW_TRACKING_URI.")
      uri = f"sqlite:///{local_workdir}/mlflow.db"
    # MLflow's notices of creating a new store's tables: two INFO lines on the console.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    self._client = tracking.MlflowClient(uri)
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or epath.Path(local_workdir or workdir).name
    experiment = self._client.get_experiment_by_name(name)
    if experiment is None:
      try:
        experiment_id = self._client.create_experiment(name)
      except exceptions.MlflowException:  # Created meanwhile by a run sharing the workdir.
        experiment_id = self._client.get_experiment_by_name(name).experiment_id
    else:
      experiment_id = experiment.experiment_id
    key = _run_key(run_dir)
    quote = '"' if "'" in key else "'"  # MLflow's filters have no escapes.
    found = self._client.search_runs([experiment_id], f"tags.`{RUN_DIR_KEY}` = {quote}{key}{quote}",
                                     max_results=1)
    if found:
      self.run_id = found[0].info.run_id
      self._client.update_run(self.run_id, status="RUNNING")
    else:
      self.run_id = self._client.create_run(experiment_id, run_name=run_name,
                                            tags={RUN_DIR_KEY: key}).info.run_id

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    now = int(time.time() * 1000)
    metrics = [self._metric(mlflow_name(key), float(_scalar(value)), now, step) for key, value in scalars.items()]
    for start in range(0, len(metrics), _MLFLOW_METRICS_PER_BATCH):
      self._client.log_batch(self.run_id, metrics=metrics[start:start + _MLFLOW_METRICS_PER_BATCH])

  def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
    pass  # MLflow keeps texts as artifacts, which this writer does not store.

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    # MLflow refuses to change a param: a run directory restarted from step 0 keeps the params it first recorded.
    recorded = self._client.get_run(self.run_id).data.params
    params = {mlflow_name(key): str(value)[:_MLFLOW_PARAM_LENGTH] for key, value in hparams.items()}
    new = [self._param(key, value) for key, value in params.items() if key not in recorded]
    for start in range(0, len(new), _MLFLOW_PARAMS_PER_BATCH):
      self._client.log_batch(self.run_id, params=new[start:start + _MLFLOW_PARAMS_PER_BATCH])

  def flush(self) -> None:
    pass  # Each write is stored before it returns.

  def close(self) -> None:
    self._client.set_terminated(self.run_id)
