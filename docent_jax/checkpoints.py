"""Orbax checkpoints: the train state with the input pipeline's state, the best params, and a reported item
read back as host arrays. `run_dir.RunDir` says where each lives; every path goes through `etils.epath`, so a
`gs://` run directory works like a local one.
"""
from collections.abc import Iterator
import contextlib
import logging as python_logging
import os
import re
from typing import Any

from absl import logging
from etils import epath
import jax
import orbax.checkpoint as ocp

from docent_jax import outputs

class CheckpointError(RuntimeError):
  """A checkpoint cannot be restored."""


class CheckpointWriteError(RuntimeError):
  """A checkpoint could not be written (e.g. a full disk); names the step, the directory and the OS cause."""


def _os_cause(error: BaseException) -> str | None:
  """The OS error behind `error` (e.g. 'OSError: No space left on device'), or None."""
  seen = error
  while seen is not None:
    if isinstance(seen, OSError) and seen.strerror:
      return f"{type(seen).__name__}: {seen.strerror}"
    # TensorStore reports the OS error as a code inside its message.
    code = re.search(r"os_error_code='?(\d+)", str(seen))
    if code:
      return f"OS error {code.group(1)}: {os.strerror(int(code.group(1)))}"
    seen = seen.__cause__ or seen.__context__
  return None


def _cause(error: BaseException) -> str:
  """The OS error behind `error`, else its own message, on one line."""
  return _os_cause(error) or f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


class _UnretrievedWriteErrors(python_logging.Filter):
  """Holds back asyncio's "Task exception was never retrieved" for a failed write: Orbax awaits one task of a failed
  save (that failure is the `CheckpointWriteError`) and may leave a sibling's OS error to asyncio, which logs it
  with a traceback, from another thread, whenever the task is collected. What is held is raised at `close()` if
  no write error was."""

  def __init__(self):
    super().__init__()
    self.held: list[BaseException] = []

  def filter(self, record: python_logging.LogRecord) -> bool:
    error = record.exc_info[1] if record.exc_info else None
    if (error is not None and record.getMessage().startswith("Task exception was never retrieved")
        and _os_cause(error)):
      self.held.append(error)
      return False
    return True


def _grain() -> Any:
  # Imported on first use: training needs it, loading a run for inference does not (a third of its start-up).
  import grain  # pylint: disable=g-import-not-at-top
  return grain


class StateCheckpoints:
  """The train state's Orbax checkpoints (with the input pipeline's state) in `directory`.

  Saves are asynchronous; a save that fails (at once or while it is written) is one `CheckpointWriteError`
  naming the step, the directory and the OS cause, instead of errors of Orbax's and TensorStore's threads.
  """

  def __init__(self, directory: str | epath.PathLike, *, every_steps: int = 1, keep: int | None = None):
    self.directory = outputs.as_path(directory)
    self.manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(save_interval_steps=every_steps, max_to_keep=keep, create=True),
        item_names=("state", "data"))
    self._saving: int | None = None  # The step whose write may still be in flight.
    self._failed = False  # A `CheckpointWriteError` was raised.
    self._unretrieved = _UnretrievedWriteErrors()
    python_logging.getLogger("asyncio").addFilter(self._unretrieved)

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
    self._raise_unretrieved()

  def _write_error(self, step: int | None, error: BaseException) -> CheckpointWriteError:
    self._failed = True
    step = self._saving if self._saving is not None else step
    which = "a checkpoint" if step is None else f"checkpoint {step}"
    return CheckpointWriteError(f"Writing {which} to {self.directory} failed ({_cause(error)}); the "
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
    """Waits for the last save and closes; after a failed write, closes without raising it again. A write that
    failed only in a task no one awaited is raised here, as a `CheckpointWriteError`."""
    try:
      self.manager.wait_until_finished()
    except Exception:  # Already raised as a CheckpointWriteError.
      pass
    self.manager.close()
    python_logging.getLogger("asyncio").removeFilter(self._unretrieved)
    self._raise_unretrieved()

  def _raise_unretrieved(self) -> None:
    if self._unretrieved.held and not self._failed:
      error = self._unretrieved.held[0]
      raise self._write_error(self._saving, error) from error


class BestParams:
  """The params of the best evaluation so far by one metric, kept by Orbax (`best_fn`, one checkpoint).

  Evaluations are offered with their metrics; Orbax keeps the checkpoint whose `metric` is best
  (`mode` 'max' or 'min') and deletes the others. A restarted run sees the earlier best.
  """

  def __init__(self, directory: str | epath.PathLike, metric: str, mode: str):
    if mode not in ("max", "min"):
      raise ValueError(f"config.train.best_mode must be 'max' or 'min'; got {mode!r}.")
    self.metric = metric
    self.manager = ocp.CheckpointManager(
        outputs.as_path(directory),
        options=ocp.CheckpointManagerOptions(max_to_keep=1, best_fn=lambda metrics: metrics[metric],
                                             best_mode=mode, create=True),
        item_names=("params",))

  def offer(self, step: int, params: Any, metrics: dict[str, float]) -> None:
    """Saves `params` as step `step` with its metrics; Orbax keeps it only if it is the best."""
    if self.metric not in metrics:
      raise ValueError(f"config.train.best_metric {self.metric!r} is not among the periodic evaluations' metrics: "
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


def saved_steps(directory: epath.Path) -> list[int]:
  """The steps an Orbax manager saved in `directory`, oldest first."""
  return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else []


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


def restore_on_host(item: epath.Path, step: int) -> Any:
  """The Orbax item `item` (the params or state of step `step`) as host arrays, whatever topology wrote it. One that
  cannot be read is one `CheckpointError` naming it and the cause."""
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
  return restored
