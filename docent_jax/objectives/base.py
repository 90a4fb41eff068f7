"""What the trainer needs from a method: parameters, a loss and training batches.

What a run reports comes from the evaluators its config lists (`config.evals`, see `evaluators`),
which read the objective's data and forward functions.
"""
import abc
from typing import Any

import jax
from jax.sharding import Mesh
import ml_collections
import numpy as np


class SkipRun(Exception):
  """The run does not apply to its data (e.g. tag prediction on a corpus without tags); the reason is logged."""


class Objective(abc.ABC):
  """One training objective over one dataset. The trainer owns devices, optimisation and checkpoints."""

  # Batch entries that are whole values of the step (every process passes them in full, replicated),
  # not rows split over the data axis.
  shared_batch_keys: tuple[str, ...] = ()
  # Rows of a global batch per unit of `train.global_batch_size` (SupCon: an anchor and its partner);
  # the rows are what is split over the mesh's data shards.
  rows_per_example: int = 1
  # Where the text encoder's params sit in the params tree, so that a run can start from the encoder of
  # another objective's run (`model_init`), wherever that one keeps it.
  encoder_path: tuple[str, ...] = ("bert",)

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh):
    self.config = config
    self.mesh = mesh
    self.parent: tuple["Objective", Any] | None = None
    self.evaluate_only = False  # The parent's params are evaluated as they are (transfer evaluation).

  @abc.abstractmethod
  def init_variables(self, rng: jax.Array) -> Any:
    """Freshly initialised params, boxed with logical axis names (`nn.with_logical_partitioning`)."""

  @classmethod
  def config_rules(cls) -> tuple[tuple[str, Any, str], ...]:
    """Rules of this objective's own, checked with `config_schema.RANGES`: (key pattern, valid, message)."""
    return ()

  def pretrained_params(self) -> dict[str, Any]:
    """A partial params tree that overwrites the fresh initialisation; empty by default."""
    return {}

  def start_from(self, parent: Any, parent_params: Any, evaluate_only: bool = False) -> None:
    """Called before training or evaluation when the config names `model_init`: the objective (or loaded
    model) and params of the run this one starts from. The trainer starts from the parent's encoder (at
    `parent.encoder_path`) and from every other param it has in the same place and shape
    (`params_from_parent`). `evaluate_only`: the params are evaluated on this run's data, not trained."""
    self.parent = (parent, parent_params)
    self.evaluate_only = evaluate_only

  def params_from_parent(self) -> Any:
    """The parent's params as this objective may take them (by default all of them)."""
    return self.parent[1]

  @abc.abstractmethod
  def data_fingerprint(self) -> dict[str, int | str]:
    """Counts and digests of the data the objective trains and evaluates on (`data.fingerprint`)."""

  @abc.abstractmethod
  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Scalar training loss and scalar metrics to log, for one global batch."""

  @abc.abstractmethod
  def train_batches(self, seed: int) -> Any:
    """A grain loader whose iterator yields this process's part of each batch, with saveable state."""

  def inference_record(self) -> dict[str, Any] | None:
    """What a trained run needs besides its config and params to be loaded without its data (entity ids and
    texts, relation names), as JSON; None where the objective has no loadable model yet."""
    return None

  def baselines(self) -> dict[str, float]:
    """Metrics of untrained baselines on the same evaluation, keyed `<baseline>/<split>/<metric>`."""
    return {}

  def export_embeddings(self, params: Any) -> tuple[list[str], np.ndarray]:
    """Entity ids and their vectors, in the same order."""
    raise NotImplementedError(f"{type(self).__name__} has no entity vectors to export.")
