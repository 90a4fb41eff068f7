"""Orbax checkpoints of the train state and the input pipeline, and the workdir's config guard."""
import json
import pathlib
from typing import Any

from absl import logging
import grain
import jax
import ml_collections
import orbax.checkpoint as ocp

CONFIG_FILE = "config.json"

# Keys that may change between a run and its restart without changing what is computed:
# where it runs (mesh), how often it reports or saves, how it evaluates (`classifier`: the fine-tuned
# pair classifier that evaluates a SupCon encoder), and which baselines run beside it.
RESTART_SAFE_KEYS = ("mesh", "train.log_every_steps", "train.checkpoint_every_steps", "train.keep_checkpoints",
                     "eval", "classifier", "baselines")


class ConfigMismatchError(RuntimeError):
  """The workdir was written by a run with a different config."""


def _without_restart_safe_keys(config: dict) -> dict:
  config = json.loads(json.dumps(config))
  for dotted in RESTART_SAFE_KEYS:
    *parents, leaf = dotted.split(".")
    node = config
    for key in parents:
      node = node.get(key, {})
    node.pop(leaf, None)
  return config


def guard_workdir_config(workdir: str | pathlib.Path, config: ml_collections.ConfigDict) -> None:
  """Records the config in a new workdir; refuses a workdir whose recorded config differs.

  Nothing in the workdir is touched when the configs differ, so the earlier run's checkpoints stay.
  """
  path = pathlib.Path(workdir) / CONFIG_FILE
  current = json.loads(config.to_json_best_effort(sort_keys=True))
  if path.exists():
    recorded = json.loads(path.read_text())
    old, new = _without_restart_safe_keys(recorded), _without_restart_safe_keys(current)
    if old != new:
      differences = sorted(_differing_keys(old, new))
      raise ConfigMismatchError(
          f"{path.parent} holds a run of a different config (differing keys: {', '.join(differences)}). "
          "Use a new --workdir, or restart with the recorded config.")
    return
  if jax.process_index() == 0:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2, sort_keys=True))


def _differing_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
  if isinstance(old, dict) and isinstance(new, dict):
    keys = set(old) | set(new)
    return [d for k in keys for d in _differing_keys(old.get(k), new.get(k), f"{prefix}{k}.")]
  return [] if old == new else [prefix.rstrip(".")]


def create_manager(directory: str | pathlib.Path, *, every_steps: int, keep: int) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(
      pathlib.Path(directory).absolute(),
      options=ocp.CheckpointManagerOptions(save_interval_steps=every_steps, max_to_keep=keep, create=True),
      item_names=("state", "data"),
  )


def save(manager: ocp.CheckpointManager, step: int, state: Any, data_iterator: Any, *, force: bool = False) -> None:
  manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                             data=grain.checkpoint.CheckpointSave(data_iterator)), force=force)


def restore(manager: ocp.CheckpointManager, step: int, abstract_state: Any, data_iterator: Any | None) -> Any:
  """Restores the state onto the shardings of `abstract_state` (any mesh) and, if given, the iterator."""
  args = {"state": ocp.args.StandardRestore(abstract_state)}
  if data_iterator is not None:
    args["data"] = grain.checkpoint.CheckpointRestore(data_iterator)
  restored = manager.restore(step, args=ocp.args.Composite(**args))
  logging.info("Restored step %d from %s.", step, manager.directory)
  return restored["state"]
