"""A trained run as a model: `load(run_dir)` restores the params the run reported and needs none of its data.

A run directory (`WORKDIR/<model>`, local or gs://) holds the config (`config.json`), what the model needs
besides params (`model.json`: entity ids and texts, relation names) and the Orbax checkpoints; `load` reads
them onto this machine's devices, whatever topology wrote them. Every model encodes texts; a model with an
entity set lists and searches it; task heads are the method's (BLP: link prediction; pair classifiers: match
probabilities; FAQ retrieval: answers; universal representations: pair-task labels).
"""

from typing import Any

from absl import logging
from etils import epath
from jax.sharding import Mesh
import ml_collections

from docent_jax import checkpoints
from docent_jax import outputs
from docent_jax.inference import link_prediction
from docent_jax.inference import movies
from docent_jax.inference import pair_matching
from docent_jax.inference import protocol
from docent_jax.inference import text_encoder

# The model class of each objective whose runs load. A tag-prediction run is evaluated in its trainer only: its
# frozen item vectors are its parent's, not part of its params.
MODELS: dict[str, type[protocol.Model]] = {
    "blp": link_prediction.LinkPredictionModel,
    "cross_encoder": pair_matching.PairMatchingModel,
    "docent_dual": movies.DualMovieModel,
    "docent_full": movies.FullMovieModel,
    "docent_hybrid": movies.DualMovieModel,
    "faq_retrieval": text_encoder.FaqModel,
    "pair_matching": pair_matching.PairMatchingModel,
    "supcon": text_encoder.TextEncoderModel,
    "universal": text_encoder.UniversalModel,
}


def read_run(path: str | epath.PathLike) -> tuple[ml_collections.ConfigDict, dict[str, Any]]:
  """(config, record) of a trained run directory, read without its params: what is cheap to check (the objective,
  relation names, entity count) before the checkpoint is restored. A directory that is no loadable run is an
  error naming it."""
  run_dir = outputs.as_path(path)
  if not run_dir.is_dir():
    raise FileNotFoundError(f"{run_dir}: no such run directory.")
  config = checkpoints.recorded_config(run_dir)
  if config.objective not in MODELS:
    raise ValueError(f"{run_dir}: runs of objective {config.objective!r} are not loadable; loadable: "
                     f"{sorted(MODELS)}.")
  record_path = run_dir / checkpoints.MODEL_FILE
  if not record_path.exists():
    raise FileNotFoundError(f"{record_path} does not exist: the run was trained before runs recorded what loading "
                            "needs; run it once more with --mode=evaluate to record it.")
  return config, outputs.read_json(record_path)


def load(path: str | epath.PathLike, mesh: Mesh | None = None) -> protocol.Model:
  """The model of a trained run directory (`WORKDIR/<model>`, local or gs://) with the params it reported; it
  computes on `mesh` (default: every device of this machine on the data axis). An unfinished run loads with a
  warning naming its step."""
  run_dir = outputs.as_path(path)
  config, record = read_run(run_dir)
  params, step = checkpoints.restore_reported_params(run_dir)
  num_steps = config.train.num_steps
  latest = checkpoints.latest_saved_step(run_dir)
  if latest is not None and latest < num_steps:
    logging.warning("%s is an unfinished run: step %d of %d. Its model is not the one its config trains.", run_dir,
                    latest, num_steps)
  logging.info("Loaded %s (%s, step %d of %d).", run_dir, config.objective, step, num_steps)
  return MODELS[config.objective](config, record, params, mesh=mesh, run_dir=run_dir, step=step)
