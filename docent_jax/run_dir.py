"""One run's directory (`WORKDIR/<model>`, local or gs://) as one object, and the workdir's results beside the runs.

`RunDir` owns the layout: the config and data records that guard a restart, what loading needs (`model.json`),
the training lock, the Orbax checkpoints of the train state and of the best params, the log of periodic
evaluations, which params the run reports (the best where kept, else the latest), and the files a loaded run keeps
next to itself (entity vectors, a search index). The trainer, `docent_jax.load`, predict, rerank and the tools
open a `RunDir`; no other module spells a name of the layout. Every path goes through `etils.epath`.
"""
from collections.abc import Callable, Iterator
import contextlib
import io
import json
import os
import socket
from typing import Any
import zipfile

from absl import logging
from etils import epath
import jax
import ml_collections
import numpy as np

from docent_jax import checkpoints
from docent_jax import outputs
from docent_jax.data import fingerprint

RESULTS_FILE = "results.json"  # In the workdir, beside its runs: `<model>/<split>/<metric>` -> number.
COMMANDS_FILE = "commands.json"  # In the workdir: the command lines that trained or evaluated in it, oldest first.
CONFIG_FILE = "config.json"
DATA_FILE = "data.json"  # The fingerprint of the data the run trained on.
MODEL_FILE = "model.json"  # What loading the run needs besides config and params (entity ids and texts, ...).
LOCK_FILE = "training.lock"  # Held by the process 0 of the job training in the run: {"host", "pid"}.
CHECKPOINTS_DIR = "checkpoints"  # The train state's Orbax steps.
BEST_DIR = "best"  # The best params by `train.best_metric` (one Orbax step).
EVALUATIONS_FILE = "evaluations.jsonl"  # One line per periodic evaluation done: {"step", "evaluator", "metrics"}.
PROFILE_DIR = "profile"  # `train.profile`'s traces, one directory per process.
EARLY_STOP_FILE = "early_stopped.json"  # Where `train.early_stopping` ended the run: {"step", "reason"}.
ENTITY_VECTORS_FILE = "entity_vectors.npz"  # A loaded run's entity vectors, with what they were computed from.
SEARCH_INDEX_DIR = "search_index"  # A loaded run's approximate search index.
EXPORTED_VECTORS_FILE = "embeddings.npy"  # `tools/export_embeddings.py`: the entity vectors, and their ids in order.
EXPORTED_IDS_FILE = "entity_ids.txt"

# Keys that may change between a run and its restart without changing what is trained: where it
# runs (mesh), how it reads batches ahead (data.num_workers, data.prefetch), whether it recomputes activations
# to save memory (model.remat), multiplies in bfloat16 (model.matmul_dtype: the numbers move within bf16's rounding)
# or cuts short rows to save time (model.short_half_width), how often it reports or
# saves, how it evaluates (`evals`, `model.inference_batch_size`, `data.search_queries`), which other runs share its
# workdir (`baselines`, `finetune`), which steps it traces (`train.profile`), where it reports (`writers`) and
# the grid a sweep of it runs (`sweep`).
RESTART_SAFE_KEYS = ("mesh", "data.num_workers", "data.prefetch", "model.remat", "model.matmul_dtype",
                     "model.short_half_width",
                     "model.inference_batch_size", "train.log_every_steps", "train.checkpoint_every_steps",
                     "train.keep_checkpoints", "evals", "baselines", "finetune", "num_seeds",
                     "data.search_queries", "train.profile", "writers", "sweep")
# Keys added to the configs after runs were recorded, each with the value that trains as the runs before it
# did: a recorded config without the key reads as having that value, so that those runs still resume.
ADDED_KEYS = {"optim.schedule": "linear", "data.drop_stopwords": False, "data.setting": "inductive",
              "model.entity_rows_multiple": 1, "data.train_entity_fraction": 1.0, "data.validation_query_fraction": 0.0,
              "data.search_queries": "", "model.pooling": "mean",
              "model.sentence_pooling": "cls", "model.matmul_dtype": "float32",
              "loss.mining": {"exclude_same_answer": False, "range_min": 0, "range_max": 0, "relative_margin": 0.0},
              "train.early_stopping": {"metric": "", "mode": "", "patience": 0, "min_delta": 0.0},
              "loss.num_retrieved": 0}
# Keys of the former `eval` block, by their names now; a recorded config reads with them renamed, so that its run
# still loads and resumes. The block's other keys were evaluator settings, now `evals` options.
RENAMED_KEYS = {"eval.batch_size": "model.inference_batch_size", "eval.best_metric": "train.best_metric",
                "eval.best_mode": "train.best_mode", "eval.search_min_votes": "data.search_min_votes",
                "eval.tag_vote_threshold": "data.tag_vote_threshold", "eval.tag_finetune_steps": "tags.finetune_steps",
                "eval.tag_learning_rate": "tags.learning_rate", "eval.tag_weight_decay": "tags.weight_decay",
                "eval.tag_items_per_step": "tags.items_per_step", "eval.tag_tags_per_step": "tags.tags_per_step",
                "eval.tag_vote_weighting": "tags.vote_weighting",
                "eval.bos_sentences_per_movie": "tags.sentences_per_movie", "eval.bos_pooling": "tags.sentence_pooling"}


class ConfigMismatchError(RuntimeError):
  """The run directory was written by a run with a different config."""


class DataMismatchError(RuntimeError):
  """The run directory was written by a run on different data."""


class WorkdirLockedError(RuntimeError):
  """Another job is training in the run directory."""


class _Directory:
  """A directory, local or gs://, named by its path (or given as another such object)."""

  def __init__(self, path: "str | epath.PathLike | _Directory"):
    self.path = path.path if isinstance(path, _Directory) else outputs.as_path(path)

  def __str__(self) -> str:
    return str(self.path)

  @property
  def name(self) -> str:
    return self.path.name


class Workdir(_Directory):
  """A workdir: its runs' directories (`WORKDIR/<model>`) and the results.json beside them."""

  def run(self, name: str) -> "RunDir":
    return RunDir(self.path / name)

  def read_results(self) -> dict[str, float]:
    """Its results.json ({} if there is none); a damaged one is an error naming it."""
    return outputs.read_results(self.path / RESULTS_FILE)

  def write_results(self, results: dict[str, float], replaces: Callable[[str], bool] = lambda key: False) -> None:
    """Writes `results` into its results.json (whole, then renamed over it), keeping the results other configs
    wrote there except those `replaces` names."""
    if jax.process_index() != 0:
      return
    path = self.path / RESULTS_FILE
    kept = outputs.merge_results(path, results, replaces=replaces)
    if kept:
      logging.info("%s keeps %d earlier results that this run has not rewritten.", path, len(kept))
    logging.info("Wrote %s (%d results).", path, len(results))

  def record_command(self, command: str) -> None:
    """Adds `command` (a command line that trains or evaluates here) to the workdir's list, once."""
    if jax.process_index() != 0:
      return
    commands = self.commands()
    if command not in commands:
      self.path.mkdir(parents=True, exist_ok=True)
      outputs.write_atomically(self.path / COMMANDS_FILE, json.dumps(commands + [command], indent=1))

  def commands(self) -> list[str]:
    """The command lines recorded here, oldest first ([] for a workdir written before they were recorded)."""
    path = self.path / COMMANDS_FILE
    return list(outputs.read_json(path)) if path.exists() else []


class RunDir(_Directory):
  """The directory of one run (`WORKDIR/<model>`)."""

  @property
  def workdir(self) -> Workdir:
    """The workdir the run belongs to, where results.json is."""
    return Workdir(self.path.parent)

  # Records: the config and data it trained on, and what loading it needs.

  def recorded_config(self) -> ml_collections.ConfigDict:
    """The config the run recorded (e.g. to rebuild the model a fine-tuning run starts from)."""
    path = self.path / CONFIG_FILE
    if not path.exists():
      raise FileNotFoundError(f"{path} does not exist: {self.path} holds no run.")
    return ml_collections.ConfigDict(_with_renamed_keys(outputs.read_json(path)))

  def record_config(self, config: ml_collections.ConfigDict) -> None:
    """Records the config in a new run directory; refuses (`ConfigMismatchError`) one whose recorded config differs
    in a key that changes what is trained, touching nothing, so that the earlier run's checkpoints stay."""
    current = json.loads(config.to_json_best_effort(sort_keys=True))
    changes = lambda recorded: sorted(_differing_keys(
        _without_restart_safe_keys(_with_added_keys(_with_renamed_keys(recorded), current)),
        _without_restart_safe_keys(current)))
    self._record_or_check(CONFIG_FILE, current, changes, lambda keys: ConfigMismatchError(
        f"{self.path} holds a run of a different config (differing keys: {', '.join(keys)}). "
        "Use a new --workdir, or restart with the recorded config."))

  def record_data(self, data: dict[str, int | str]) -> None:
    """Records the data's fingerprint in a new run directory; refuses (`DataMismatchError`) one trained on other
    data. The same path can hold other data later (a renamed entity, an edited file): checkpoints trained on the
    old data are never evaluated or resumed with the new."""
    self._record_or_check(DATA_FILE, data, lambda recorded: fingerprint.differences(recorded, data),
                          lambda changed: DataMismatchError(
                              f"{self.path} was trained on different data than the config reads now "
                              f"({'; '.join(changed)}). Use a new --workdir, or restore the data it was trained on."))

  def record_model(self, record: dict[str, Any]) -> None:
    """Records what loading the run needs besides config and params, once."""
    path = self.path / MODEL_FILE
    if jax.process_index() == 0 and not path.exists():
      outputs.write_atomically(path, json.dumps(record))

  def _record_or_check(self, name: str, current: dict[str, Any], changes_from: Callable[[dict[str, Any]], list[str]],
                       error: Callable[[list[str]], Exception]) -> None:
    """Writes `current` to `name`, unless a record is there: then raises `error` when it differs and a step was
    trained under it; a record under which nothing was trained is replaced, with a warning."""
    path = self.path / name
    if path.exists():
      changes = changes_from(outputs.read_json(path))
      if not changes:
        return
      if self.has_trained_steps():
        raise error(changes)
      logging.warning("%s: nothing was trained under its %s; recording the new one (%s).", self.path, name,
                      "; ".join(changes))
    if jax.process_index() == 0:
      path.parent.mkdir(parents=True, exist_ok=True)
      outputs.write_atomically(path, json.dumps(current, indent=2, sort_keys=True))

  def has_model_record(self) -> bool:
    return (self.path / MODEL_FILE).exists()

  def model_record(self) -> dict[str, Any]:
    """What loading the run needs besides its config and params; a run without it is an error saying how to add it."""
    path = self.path / MODEL_FILE
    if not path.exists():
      raise FileNotFoundError(f"{path} does not exist: the run was trained before runs recorded what loading "
                              "needs; run it once more with --mode=evaluate to record it.")
    return outputs.read_json(path)

  # The training lock.

  @contextlib.contextmanager
  def training_lock(self, take_over_other_hosts: bool = False) -> Iterator[None]:
    """Holds the run's training lock (process 0 of the job takes it), so that two jobs never train one run.

    A lock left by a process of this host that no longer runs (e.g. killed) is taken over with a warning;
    one from another host is refused, since its process cannot be checked from here, unless
    `take_over_other_hosts` says that those hosts are gone (a preempted TPU VM, recreated under other host
    names). On a local disk the lock is created atomically; on a remote filesystem two starts in the same
    second may both pass.
    """
    if jax.process_index() != 0:
      yield
      return
    path = self.path / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = {"host": socket.gethostname(), "pid": os.getpid()}
    while not _create_exclusive(path, json.dumps(owner)):
      holder = json.loads(path.read_text() or "{}")
      same_host = holder.get("host") == owner["host"]
      if (same_host and _process_alive(holder.get("pid", -1))) or not (same_host or take_over_other_hosts):
        raise WorkdirLockedError(
            f"{self.path}: another job (pid {holder.get('pid')} on {holder.get('host')}) is training this run. "
            f"Wait for it; if that host is gone (e.g. a preempted VM), restart with --resume_preempted.")
      logging.warning("%s: taking over the lock of pid %s on %s, which no longer runs.", path, holder.get("pid"),
                      holder.get("host"))
      path.unlink()
    try:
      yield
    finally:
      path.unlink()

  # Checkpoints, and which params the run reports.

  def state_checkpoints(self, *, every_steps: int = 1, keep: int | None = None) -> checkpoints.StateCheckpoints:
    return checkpoints.StateCheckpoints(self.path / CHECKPOINTS_DIR, every_steps=every_steps, keep=keep)

  def best_params(self, metric: str, mode: str) -> checkpoints.BestParams:
    return checkpoints.BestParams(self.path / BEST_DIR, metric, mode)

  def best_dir(self) -> epath.Path:
    return self.path / BEST_DIR

  def saved_steps(self) -> list[int]:
    """The steps of the train state's checkpoints, oldest first."""
    return checkpoints.saved_steps(self.path / CHECKPOINTS_DIR)

  def latest_step(self) -> int | None:
    """The last step the run saved a checkpoint of; None when it saved none."""
    steps = self.saved_steps()
    return steps[-1] if steps else None

  def has_trained_steps(self) -> bool:
    """Whether the run saved a checkpoint of a trained step (or of step 0 of a 0-step run)."""
    return bool(self.saved_steps())

  def reported_step(self) -> tuple[int, bool] | None:
    """The step of the params the run reports and whether they are its best params (kept by `train.best_metric`)
    rather than its latest step's; None when it saved none."""
    best = checkpoints.saved_steps(self.path / BEST_DIR)
    if best:
      return best[-1], True
    latest = self.latest_step()
    return None if latest is None else (latest, False)

  def restore_reported_params(self) -> tuple[Any, int]:
    """The params the run reports and their step, without the model's code, as host arrays, whatever topology
    wrote them. A checkpoint that cannot be read is one `CheckpointError` naming it and the cause."""
    reported = self.reported_step()
    if reported is None:
      raise FileNotFoundError(f"{self.path} holds no checkpoint: it is not a trained run's directory.")
    step, best = reported
    item = self.path / BEST_DIR / str(step) / "params" if best else self.path / CHECKPOINTS_DIR / str(step) / "state"
    restored = checkpoints.restore_on_host(item, step)
    return (restored if best else restored["params"]), step

  def evaluation_log(self) -> "EvaluationLog":
    return EvaluationLog(self.path / EVALUATIONS_FILE)

  def profile_dir(self) -> epath.Path:
    return self.path / PROFILE_DIR

  def record_early_stop(self, step: int, reason: str) -> None:
    if jax.process_index() == 0:
      outputs.write_atomically(self.path / EARLY_STOP_FILE, json.dumps({"step": step, "reason": reason}))

  def early_stop(self) -> dict[str, Any] | None:
    """{"step", "reason"} where `train.early_stopping` ended the run, else None."""
    path = self.path / EARLY_STOP_FILE
    return json.loads(path.read_text()) if path.exists() else None

  def final_step(self, num_steps: int) -> int:
    """The step the run ends at: where early stopping ended it, else `num_steps`."""
    stopped = self.early_stop()
    return num_steps if stopped is None else int(stopped["step"])

  # Files a loaded run keeps next to itself.

  @property
  def entity_vectors_file(self) -> epath.Path:
    return self.path / ENTITY_VECTORS_FILE

  def kept_entity_vectors(self, source: dict[str, Any], count: int) -> np.ndarray | None:
    """The [count, d] entity vectors kept next to the run (`keep_entity_vectors`) when they were computed from
    `source` (a step, a params fingerprint, the texts'); None when there are none, or of another source, or
    damaged (logged)."""
    path = self.entity_vectors_file
    if not path.exists():
      return None
    try:
      with np.load(io.BytesIO(path.read_bytes())) as kept:
        if json.loads(str(kept["source"])) == source and kept["vectors"].shape[0] == count:
          logging.info("Read the %d entity vectors of step %s from %s.", count, source.get("step"), path)
          return kept["vectors"]
      logging.info("%s is of other params or texts than step %s's; encoding the entities anew.", path,
                   source.get("step"))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
      logging.warning("%s is damaged (%s); encoding the entities anew.", path, outputs.cause(error))
    return None

  def keep_entity_vectors(self, vectors: np.ndarray, source: dict[str, Any]) -> None:
    """Keeps the entity vectors of `source` next to the run, for the next process that loads it; a read-only run
    directory keeps none (logged): they are computed again next time."""
    buffer = io.BytesIO()
    np.savez(buffer, vectors=vectors, source=json.dumps(source, sort_keys=True))
    try:
      outputs.write_atomically(self.entity_vectors_file, buffer.getvalue())
    except OSError as error:
      logging.warning("The entity vectors were not kept (%s).", error)

  @property
  def search_index_dir(self) -> epath.Path:
    return self.path / SEARCH_INDEX_DIR

  @property
  def exported_vectors_file(self) -> epath.Path:
    return self.path / EXPORTED_VECTORS_FILE

  @property
  def exported_ids_file(self) -> epath.Path:
    return self.path / EXPORTED_IDS_FILE


def loadable_runs(workdir: Workdir) -> list[RunDir]:
  """The loadable runs of a workdir (those that recorded what loading needs), by name."""
  return [RunDir(path) for path in sorted(workdir.path.iterdir()) if (path / MODEL_FILE).exists()]


class EvaluationLog:
  """The periodic evaluations a run has finished, one JSON line each (`EVALUATIONS_FILE`).

  A checkpoint is saved before the evaluations of its step run; a run stopped during them resumes from that
  checkpoint and finds here which of them it still owes, so that no point of a learning curve is lost.
  """

  def __init__(self, path: epath.Path):
    self.path = path
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

  def by_step(self, last_step: int) -> list[tuple[int, dict[str, float]]]:
    """Each evaluated step up to `last_step`, in order, with its evaluators' metrics in one dict."""
    steps: dict[int, dict[str, float]] = {}
    for line in self._lines:
      entry = json.loads(line)
      if entry["step"] <= last_step:
        steps.setdefault(int(entry["step"]), {}).update(entry["metrics"])
    return sorted(steps.items())

  def add(self, step: int, metrics: dict[str, dict[str, float]]) -> None:
    """Records the evaluations of `step` (evaluator name -> its metrics), replacing the file whole."""
    for evaluator, values in metrics.items():
      self._lines.append(json.dumps({"step": step, "evaluator": evaluator, "metrics": values}, sort_keys=True))
      self._done.add((step, evaluator))
    if jax.process_index() == 0:  # Replaced whole: GCS cannot append.
      outputs.write_atomically(self.path, "\n".join(self._lines) + "\n")


def _parent_block(config: dict, dotted: str) -> tuple[dict | None, str]:
  """The block of `config` holding the key `dotted` ('optim.schedule': config['optim']), or None, and the key."""
  *parents, leaf = dotted.split(".")
  for key in parents:
    config = config.get(key) if isinstance(config, dict) else None
  return (config if isinstance(config, dict) else None), leaf


def _with_renamed_keys(recorded: dict) -> dict:
  """`recorded` with the keys of `RENAMED_KEYS` under their names now, and without the former `eval` block."""
  recorded = json.loads(json.dumps(recorded))
  old_block = recorded.pop("eval", {})
  for old, new in RENAMED_KEYS.items():
    leaf = old.split(".", 1)[1]
    if leaf in old_block:
      *parents, new_leaf = new.split(".")
      block = recorded
      for key in parents:
        block = block.setdefault(key, {})
      block.setdefault(new_leaf, old_block[leaf])
  return recorded


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


def _differing_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
  if isinstance(old, dict) and isinstance(new, dict):
    keys = set(old) | set(new)
    return [d for k in keys for d in _differing_keys(old.get(k), new.get(k), f"{prefix}{k}.")]
  return [] if old == new else [prefix.rstrip(".")]


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
