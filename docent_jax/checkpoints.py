"""Orbax checkpoints of the train state and the input pipeline, the best params, the log of periodic
evaluations, and the workdir's config and data guards.

Every path goes through `etils.epath`, so a `gs://` workdir works like a local one.
"""
from collections.abc import Callable, Iterator
import contextlib
import json
import logging as python_logging
import os
import re
import socket
from typing import Any

from absl import logging
from etils import epath
import jax
import ml_collections
import orbax.checkpoint as ocp

from docent_jax import outputs
from docent_jax.data import fingerprint

CHECKPOINTS_DIR = "checkpoints"  # In a run's workdir: the train state's Orbax steps.
CONFIG_FILE = "config.json"
LOCK_FILE = "training.lock"  # Held by the process 0 of the job training in the workdir: {"host", "pid"}.
DATA_FILE = "data.json"  # The fingerprint of the data the run trained on.
MODEL_FILE = "model.json"  # What loading the run needs besides config and params (entity ids and texts, ...).
BEST_DIR = "best"  # In a run's workdir: the best params by `eval.best_metric` (one Orbax step).
EVALUATIONS_FILE = "evaluations.jsonl"  # One line per periodic evaluation done: {"step", "evaluator", "metrics"}.

# Keys that may change between a run and its restart without changing what is trained: where it
# runs (mesh), how it reads batches ahead (data.num_workers, data.prefetch), whether it recomputes activations
# to save memory (model.remat) or cuts short rows to save time (model.short_half_width), how often it reports or
# saves, how it evaluates (`eval`, `evals`), and which other runs share its workdir (`baselines`, `finetune`).
RESTART_SAFE_KEYS = ("mesh", "data.num_workers", "data.prefetch", "model.remat", "model.short_half_width",
                     "train.log_every_steps", "train.checkpoint_every_steps", "train.keep_checkpoints", "eval", "evals",
                     "baselines", "finetune", "num_seeds")
# Keys added to the configs after runs were recorded, each with the value that trains as the runs before it
# did: a recorded config without the key reads as having that value, so that those runs still resume.
ADDED_KEYS = {"optim.schedule": "linear", "data.drop_stopwords": False, "data.setting": "inductive",
              "model.entity_rows_multiple": 1, "data.train_entity_fraction": 1.0}


class ConfigMismatchError(RuntimeError):
  """The workdir was written by a run with a different config."""


class WorkdirLockedError(RuntimeError):
  """Another job is training in the workdir."""


class CheckpointError(RuntimeError):
  """A checkpoint cannot be restored."""


class DataMismatchError(RuntimeError):
  """The workdir was written by a run on different data."""


class CheckpointWriteError(RuntimeError):
  """A checkpoint could not be written (e.g. a full disk); names the step, the directory and the OS cause."""


def _parent_block(config: dict, dotted: str) -> tuple[dict | None, str]:
  """The block of `config` holding the key `dotted` ('optim.schedule': config['optim']), or None, and the key."""
  *parents, leaf = dotted.split(".")
  for key in parents:
    config = config.get(key) if isinstance(config, dict) else None
  return (config if isinstance(config, dict) else None), leaf


def _with_added_keys(recorded: dict, current: dict) -> dict:
  """`recorded` with each of `ADDED_KEYS` that `current` has and it lacks set to the earlier behaviour."""
  recorded = json.loads(json.dumps(recorded))
  for dotted, value in ADDED_KEYS.items():
    (old, leaf), (new, _) = _parent_block(recorded, dotted), _parent_block(current, dotted)
    if old is not None and new is not None and leaf in new:
      old.setdefault(leaf, value)
  return recorded


def _without_restart_safe_keys(config: dict) -> dict:
  config = json.loads(json.dumps(config))
  for dotted in RESTART_SAFE_KEYS:
    block, leaf = _parent_block(config, dotted)
    if block is not None:
      block.pop(leaf, None)
  return config


def recorded_config(workdir: str | epath.PathLike) -> ml_collections.ConfigDict:
  """The config a workdir's run recorded (e.g. to rebuild the model a fine-tuning run starts from)."""
  path = outputs.as_path(workdir) / CONFIG_FILE
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist: {path.parent} holds no run.")
  return ml_collections.ConfigDict(outputs.read_json(path))


@contextlib.contextmanager
def workdir_lock(workdir: str | epath.PathLike, take_over_other_hosts: bool = False) -> Iterator[None]:
  """Holds the workdir's training lock (process 0 of the job takes it), so that two jobs never train one run.

  A lock left by a process of this host that no longer runs (e.g. killed) is taken over with a warning;
  one from another host is refused, since its process cannot be checked from here, unless
  `take_over_other_hosts` says that those hosts are gone (a preempted TPU VM, recreated under other host
  names). On a local disk the lock is created atomically; on a remote filesystem two starts in the same
  second may both pass.
  """
  if jax.process_index() != 0:
    yield
    return
  path = outputs.as_path(workdir) / LOCK_FILE
  path.parent.mkdir(parents=True, exist_ok=True)
  owner = {"host": socket.gethostname(), "pid": os.getpid()}
  while not _create_exclusive(path, json.dumps(owner)):
    holder = json.loads(path.read_text() or "{}")
    same_host = holder.get("host") == owner["host"]
    if (same_host and _process_alive(holder.get("pid", -1))) or not (same_host or take_over_other_hosts):
      raise WorkdirLockedError(
          f"{path.parent}: another job (pid {holder.get('pid')} on {holder.get('host')}) is training this run. "
          f"Wait for it; if that host is gone (e.g. a preempted VM), restart with --resume_preempted.")
    logging.warning("%s: taking over the lock of pid %s on %s, which no longer runs.", path, holder.get("pid"),
                    holder.get("host"))
    path.unlink()
  try:
    yield
  finally:
    path.unlink()


def _create_exclusive(path: epath.Path, text: str) -> bool:
  """Creates `path` holding `text`; False when it exists."""
  if "://" not in str(path):
    try:
      descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
      return False
    with os.fdopen(descriptor, "w") as file:
      file.write(text)
    return True
  if path.exists():
    return False
  path.write_text(text)
  return True


def _process_alive(pid: int) -> bool:
  if pid <= 0:
    return False
  try:
    os.kill(pid, 0)  # Signal 0: only checks that the process exists.
  except ProcessLookupError:
    return False
  except PermissionError:  # Alive, under another user.
    return True
  return True


def has_trained_steps(workdir: str | epath.PathLike) -> bool:
  """Whether the run in `workdir` saved a checkpoint of a trained step (or of step 0 of a 0-step run)."""
  directory = outputs.as_path(workdir) / CHECKPOINTS_DIR
  return directory.exists() and any(p.name.isdigit() for p in directory.iterdir())


def guard_workdir_config(workdir: str | epath.PathLike, config: ml_collections.ConfigDict) -> None:
  """Records the config in a new workdir; refuses a workdir whose recorded config differs.

  Nothing in the workdir is touched when the configs differ, so the earlier run's checkpoints stay.
  """
  current = json.loads(config.to_json_best_effort(sort_keys=True))
  changes = lambda recorded: sorted(_differing_keys(_without_restart_safe_keys(_with_added_keys(recorded, current)),
                                                    _without_restart_safe_keys(current)))
  error = lambda directory, keys: ConfigMismatchError(
      f"{directory} holds a run of a different config (differing keys: {', '.join(keys)}). "
      "Use a new --workdir, or restart with the recorded config.")
  _record_or_check(workdir, CONFIG_FILE, current, changes, error)


def guard_workdir_data(workdir: str | epath.PathLike, current: dict[str, int | str]) -> None:
  """Records the data's fingerprint in a new workdir; refuses a workdir whose recorded data differs.

  The same path can hold other data later (a renamed entity, an edited file): checkpoints trained on
  the old data are never evaluated or resumed with the new.
  """
  changes = lambda recorded: fingerprint.differences(recorded, current)
  error = lambda directory, changed: DataMismatchError(
      f"{directory} was trained on different data than the config reads now ({'; '.join(changed)}). "
      "Use a new --workdir, or restore the data it was trained on.")
  _record_or_check(workdir, DATA_FILE, current, changes, error)


def _record_or_check(workdir: str | epath.PathLike, name: str, current: dict[str, Any],
                     changes_from: Callable[[dict[str, Any]], list[str]],
                     error: Callable[[epath.Path, list[str]], Exception]) -> None:
  """Writes `current` to `workdir/name`, unless a record is there: then raises `error` when it differs and a
  step was trained under it; a record under which nothing was trained is replaced, with a warning."""
  path = outputs.as_path(workdir) / name
  if path.exists():
    changes = changes_from(outputs.read_json(path))
    if not changes:
      return
    if has_trained_steps(workdir):
      raise error(path.parent, changes)
    logging.warning("%s: nothing was trained under its %s; recording the new one (%s).", path.parent, name,
                    "; ".join(changes))
  if jax.process_index() == 0:
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs.write_atomically(path, json.dumps(current, indent=2, sort_keys=True))


def _differing_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
  if isinstance(old, dict) and isinstance(new, dict):
    keys = set(old) | set(new)
    return [d for k in keys for d in _differing_keys(old.get(k), new.get(k), f"{prefix}{k}.")]
  return [] if old == new else [prefix.rstrip(".")]


def _cause(error: BaseException) -> str:
  """The OS error behind `error` (e.g. 'No space left on device'), else its own message, on one line."""
  seen = error
  while seen is not None:
    if isinstance(seen, OSError) and seen.strerror:
      return f"{type(seen).__name__}: {seen.strerror}"
    # TensorStore reports the OS error as a code inside its message.
    code = re.search(r"os_error_code='?(\d+)", str(seen))
    if code:
      return f"OS error {code.group(1)}: {os.strerror(int(code.group(1)))}"
    seen = seen.__cause__ or seen.__context__
  return f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


def _grain() -> Any:
  # Imported on first use: training needs it, loading a run for inference does not (a third of its start-up).
  import grain  # pylint: disable=g-import-not-at-top
  return grain


class StateCheckpoints:
  """The train state's Orbax checkpoints (with the input pipeline's state) in `workdir/checkpoints`.

  Saves are asynchronous; a save that fails (at once or while it is written) is one `CheckpointWriteError`
  naming the step, the directory and the OS cause, instead of errors of Orbax's and TensorStore's threads.
  """

  def __init__(self, workdir: str | epath.PathLike, *, every_steps: int = 1, keep: int | None = None):
    self.directory = outputs.as_path(workdir) / CHECKPOINTS_DIR
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(save_interval_steps=every_steps, max_to_keep=keep, create=True),
        item_names=("state", "data"))
    self._saving: int | None = None  # The step whose write may still be in flight.

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def should_save(self, step: int) -> bool:
    return self.manager.should_save(step)

  def reached_preemption(self, step: int) -> bool:
    """Whether every process of a multi-process job reached the step at which JAX's preemption service
    (SIGTERM on any host) asks them all to save; False in a single process."""
    return jax.process_count() > 1 and self.manager.reached_preemption(step)

  def save(self, step: int, state: Any, data_iterator: Any, *, force: bool = False) -> None:
    try:
      saved = self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                              data=_grain().checkpoint.CheckpointSave(data_iterator)),
                                force=force)
    except Exception as error:  # Orbax raises the previous save's failure here, or this one's.
      raise self._write_error(step, error) from error
    if saved:
      self._saving = step

  def wait_until_finished(self) -> None:
    """Blocks until the last save is on disk."""
    try:
      self.manager.wait_until_finished()
    except Exception as error:
      raise self._write_error(self._saving, error) from error

  def _write_error(self, step: int | None, error: BaseException) -> CheckpointWriteError:
    step = self._saving if self._saving is not None else step
    return CheckpointWriteError(f"Writing checkpoint {step} to {self.directory} failed ({_cause(error)}); the "
                                "checkpoints saved before it are kept.")

  def restore(self, step: int, abstract_state: Any, data_iterator: Any | None) -> Any:
    """Restores the state onto the shardings of `abstract_state` (any mesh) and, if given, the iterator."""
    args = {"state": ocp.args.StandardRestore(abstract_state)}
    if data_iterator is not None:
      args["data"] = _grain().checkpoint.CheckpointRestore(data_iterator)
    try:
      restored = self.manager.restore(step, args=ocp.args.Composite(**args))
    except Exception as error:  # Orbax, TensorStore and grain each raise their own types for a damaged step.
      earlier = [s for s in self.manager.all_steps() if s < step]
      fallback = f"remove it to resume from step {max(earlier)}" if earlier else "remove it to start again"
      reason = " ".join(str(error).split())[:300]
      raise CheckpointError(f"Checkpoint {step} in {self.directory} cannot be restored ({type(error).__name__}: "
                            f"{reason}). If it is damaged (e.g. a copy cut short), {fallback}.") from error
    logging.info("Restored step %d from %s.", step, self.directory)
    return restored["state"]

  def close(self) -> None:
    """Waits for the last save and closes; after a failed write, closes without raising it again."""
    try:
      self.manager.wait_until_finished()
    except Exception:  # Already raised as a CheckpointWriteError.
      pass
    self.manager.close()


class BestParams:
  """The params of the best evaluation so far by one metric, kept by Orbax (`best_fn`, one checkpoint).

  Evaluations are offered with their metrics; Orbax keeps the checkpoint whose `metric` is best
  (`mode` 'max' or 'min') and deletes the others. A restarted run sees the earlier best.
  """

  def __init__(self, directory: str | epath.PathLike, metric: str, mode: str):
    if mode not in ("max", "min"):
      raise ValueError(f"config.eval.best_mode must be 'max' or 'min'; got {mode!r}.")
    self.metric = metric
    self.manager = ocp.CheckpointManager(
        outputs.as_path(directory),
        options=ocp.CheckpointManagerOptions(max_to_keep=1, best_fn=lambda metrics: metrics[metric],
                                             best_mode=mode, create=True),
        item_names=("params",))

  def offer(self, step: int, params: Any, metrics: dict[str, float]) -> None:
    """Saves `params` as step `step` with its metrics; Orbax keeps it only if it is the best."""
    if self.metric not in metrics:
      raise ValueError(f"config.eval.best_metric {self.metric!r} is not among the periodic evaluations' metrics: "
                       f"{sorted(metrics)}.")
    if step in self.manager.all_steps():  # Evaluated before a restart.
      return
    self.manager.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params)), metrics=metrics,
                      force=True)
    self.manager.wait_until_finished()

  def best_step(self) -> int | None:
    return self.manager.best_step()

  def restore(self, abstract_params: Any) -> Any:
    step = self.manager.best_step()
    params = self.manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract_params)))
    logging.info("Restored the best params (step %d, %s) from %s.", step, self.metric, self.manager.directory)
    return params["params"]

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()


def _saved_steps(directory: epath.Path) -> list[int]:
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else []


def latest_saved_step(workdir: str | epath.PathLike) -> int | None:
  """The last step the run in `workdir` saved a checkpoint of; None when it saved none."""
  steps = _saved_steps(outputs.as_path(workdir) / CHECKPOINTS_DIR)
  return steps[-1] if steps else None


class _OrbaxErrorsOnly(python_logging.Filter):
  def filter(self, record: python_logging.LogRecord) -> bool:
    return record.levelno >= python_logging.ERROR or "orbax" not in record.pathname


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
  """While open, Orbax logs only its errors, unless --verbosity asks for more: a load's some twenty lines of
  Orbax housekeeping (handlers created, bytes per second, a metadata file it does without) say nothing to a user."""
  if logging.get_verbosity() > 0:
    yield
    return
  logger, quiet = python_logging.getLogger("absl"), _OrbaxErrorsOnly()
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


def restore_reported_params(workdir: str | epath.PathLike) -> tuple[Any, int]:
  """The params a run reported and their step, without the model's code: the best params where the run kept
  them, else the latest step's; as host arrays, whatever topology wrote them. A checkpoint that cannot be read
  is one `CheckpointError` naming it and the cause."""
  workdir = outputs.as_path(workdir)
  best, steps = _saved_steps(workdir / BEST_DIR), _saved_steps(workdir / CHECKPOINTS_DIR)
  if best:
    step, item = best[-1], workdir / BEST_DIR / str(best[-1]) / "params"
  elif steps:
    step, item = steps[-1], workdir / CHECKPOINTS_DIR / str(steps[-1]) / "state"
  else:
    raise FileNotFoundError(f"{workdir} holds no checkpoint: it is not a trained run's directory.")
  with quiet_orbax():
    checkpointer = ocp.StandardCheckpointer()
    try:
      metadata = checkpointer.metadata(item).item_metadata
      device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
      target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
      restored = jax.device_get(checkpointer.restore(item, target))
    except Exception as error:  # Orbax, TensorStore and msgpack each raise their own types for a damaged file.
      raise CheckpointError(f"{item} cannot be read ({_cause(error)}): the checkpoint of step {step} is damaged or "
                            "incomplete (e.g. a copy cut short). Copy it again from where it was trained.") from error
    finally:
      checkpointer.close()
  logging.info("Restored the params of step %d from %s.", step, item)
  return (restored if best else restored["params"]), step


class EvaluationLog:
  """The periodic evaluations a run has finished, one JSON line each, in `workdir/evaluations.jsonl`.

  A checkpoint is saved before the evaluations of its step run; a run stopped during them resumes from that
  checkpoint and finds here which of them it still owes, so that no point of a learning curve is lost.
  """

  def __init__(self, workdir: str | epath.PathLike):
    self.path = outputs.as_path(workdir) / EVALUATIONS_FILE
    self._lines = self.path.read_text().splitlines() if self.path.exists() else []
    self._done = set()
    for number, line in enumerate(self._lines, 1):
      try:
        entry = json.loads(line)
        self._done.add((int(entry["step"]), str(entry["evaluator"])))
      except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{self.path}:{number}: not an evaluation record ({e}); fix or remove the line.") from e

  def done(self, step: int, evaluator: str) -> bool:
    return (step, evaluator) in self._done

  def add(self, step: int, metrics: dict[str, dict[str, float]]) -> None:
    """Records the evaluations of `step` (evaluator name -> its metrics), replacing the file whole."""
    for evaluator, values in metrics.items():
      self._lines.append(json.dumps({"step": step, "evaluator": evaluator, "metrics": values}, sort_keys=True))
      self._done.add((step, evaluator))
    if jax.process_index() == 0:  # Replaced whole: GCS cannot append.
      outputs.write_atomically(self.path, "\n".join(self._lines) + "\n")
