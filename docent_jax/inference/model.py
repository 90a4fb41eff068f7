"""A trained run as a model: `load(run_dir)` restores the params the run reported and needs none of its data.

A run directory (`WORKDIR/<model>`, local or gs://, `run_dir.RunDir`) holds the config, what the model needs
besides params (entity ids and texts, relation names) and the Orbax checkpoints; `load` reads them onto this
machine's devices, whatever topology wrote them. Every model encodes texts; a model with an
entity set lists and searches it; task heads are the method's (BLP: link prediction; pair classifiers: match
probabilities; FAQ retrieval: answers; universal representations: pair-task labels).
"""

from typing import Any

from absl import logging
from etils import epath
from jax.sharding import Mesh
import ml_collections

from docent_jax import methods
from docent_jax import run_dir as run_dirs
from docent_jax.inference import protocol

def read_run(path: str | epath.PathLike | run_dirs.RunDir) -> tuple[ml_collections.ConfigDict, dict[str, Any]]:
  """(config, record) of a trained run directory, read without its params: what is cheap to check (the objective,
  relation names, entity count) before the checkpoint is restored. A directory that is no loadable run is an
  error naming it."""
  run = run_dirs.RunDir(path)
  if not run.path.is_dir():
    raise FileNotFoundError(f"{run}: no such run directory.")
  config = run.recorded_config()
  if not methods.loadable(config.objective):
    raise ValueError(f"{run}: runs of objective {config.objective!r} are not loadable; loadable: "
                     f"{methods.loadable_objectives()}.")
  return config, run.model_record()


def load(path: str | epath.PathLike | run_dirs.RunDir, mesh: Mesh | None = None) -> protocol.Model:
  """The model of a trained run directory (`WORKDIR/<model>`, local or gs://) with the params it reported; it
  computes on `mesh` (default: every device of this machine on the data axis). An unfinished run loads with a
  warning naming its step."""
  run = run_dirs.RunDir(path)
  config, record = read_run(run)
  params, step = run.restore_reported_params()
  num_steps = config.train.num_steps
  latest = run.latest_step()
  if latest is not None and latest < run.final_step(num_steps):
    logging.warning("%s is an unfinished run: step %d of %d. Its model is not the one its config trains.", run,
                    latest, num_steps)
  logging.info("Loaded %s (%s, step %d of %d).", run, config.objective, step, num_steps)
  return methods.model_class(config.objective)(config, record, params, mesh=mesh, run_dir=run, step=step)
