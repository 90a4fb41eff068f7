"""What the trainer needs from a method: parameters, a loss and training batches, and the model protocol.

An objective is built from its config, its mesh and its inputs: the dataset its class loads (`load_data`, a step of
its own), or that dataset's counts alone (`Shapes`), which build the params, the loss and the batch shapes without
reading any data (`compile_for_tpu`). Pretrained weights are read when the params are first made.

What a run reports comes from the evaluators its config lists (`config.evals`, see `evaluation.registry`):
each takes the objective's model over the params being evaluated (`model(params)`, an
`inference.protocol.Model`) and its evaluation data (`evaluation_data()`).
"""
import abc
from collections.abc import Mapping
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections

from docent_jax import methods
from docent_jax.inference.protocol import Model
from docent_jax.modules import bert
from docent_jax.modules import pretrained


class SkipRun(Exception):
  """The run does not apply to its data (e.g. tag prediction on a corpus without tags); the reason is logged."""


@dataclasses.dataclass(frozen=True)
class Shapes:
  """A dataset's counts without its data (num_entities, num_relations): the inputs of an objective that is only
  compiled."""
  counts: Mapping[str, int]


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
  # A method defined outside docent_jax (`config.objective = "package.module:Class"`, see `methods`) names here its
  # model (an `inference.protocol.Model` class) and the paper it implements; the package's own are in `methods`.
  model_class: type[Model] | None = None
  paper: str = ""
  # The counts of the data (`Shapes`: num_entities, num_relations) that size its params or its search when it is
  # built from shapes alone.
  shapes_needed: tuple[str, ...] = ()

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    """`inputs`: the dataset (`load_data(config)`, loaded here when None), or its `Shapes`."""
    self.config = config
    self.mesh = mesh
    self.parent: Model | None = None
    self._model: Model | None = None  # Built once (`model()`); `model(params)` gives it params.
    if inputs is None:
      inputs = self.load_data(config)
    if isinstance(inputs, Shapes):
      missing = [key for key in self.shapes_needed if key not in inputs.counts]
      if missing:
        raise ValueError(f"config.objective={config.objective!r} built from shapes needs {missing[0]} (set "
                         f"config.shapes.{missing[0]}).")
      self.shapes, self._data = dict(inputs.counts), None
    else:
      self.shapes, self._data = None, inputs

  @classmethod
  @abc.abstractmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> Any:
    """The dataset the config names (a knowledge graph, a corpus, ...), read or built."""

  @classmethod
  def dataset_shapes(cls, config: ml_collections.ConfigDict) -> dict[str, int]:
    """The counts of the config's dataset where it is a benchmark whose counts are known without reading it (its
    registry's `known_shapes`); empty by default."""
    del config
    return {}

  @property
  def data(self) -> Any:
    """The dataset the objective was built from; an objective of shapes alone has none."""
    if self._data is None:
      raise ValueError(f"{type(self).__name__} was built from shapes alone ({self.shapes}): it has no data to read.")
    return self._data

  def record_from_shapes(self) -> dict[str, Any]:
    """What stands in for `inference_record()` in an objective of shapes alone: the model's counts."""
    return dict(self.shapes)

  @functools.cached_property
  def pretrained_bert(self) -> dict[str, Any] | None:
    """The params of the config's pretrained BERT (`model.pretrained`, its vocabulary grown to `bert_config`'s), or
    None for a fresh encoder; read when the params are first made, never by an objective that is only compiled."""
    return pretrained.load_model_bert(self.config.model, self.bert_config.vocab_size)[1]

  @abc.abstractmethod
  def init_variables(self, rng: jax.Array) -> Any:
    """Freshly initialised params, boxed with logical axis names (`nn.with_logical_partitioning`)."""

  @abc.abstractmethod
  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays as shapes (at full width), for compiling the step from shapes alone."""

  def vector_width(self) -> int | None:
    """The width of the vectors its model searches (entities, texts); None where it searches none."""
    return None

  @classmethod
  def config_rules(cls) -> tuple[tuple[str, Any, str], ...]:
    """Rules of this objective's own, checked with `config_schema.RANGES`: (key pattern, valid, message)."""
    return ()

  def pretrained_params(self) -> dict[str, Any]:
    """A partial params tree that overwrites the fresh initialisation; empty by default."""
    return {}

  def start_from(self, parent: Model) -> None:
    """Called before training when the config names `model_init`: the model of the run this one starts from.
    The trainer starts from the parent's encoder (at `parent.encoder_path`) and from every other param it has
    in the same place and shape (`params_from_parent`)."""
    self.parent = parent

  def params_from_parent(self) -> Any:
    """The parent's params as this objective may take them (by default all of them)."""
    return self.parent.params

  def model(self, params: Any = None) -> Model:
    """The method's model (its `methods` entry's class), built once: the loss applies its modules, and over
    `params` it is what the evaluators score and what `docent_jax.load` gives, so that the two cannot drift."""
    if self._model is None:
      self._model = self.create_model()
    return self._model if params is None else self._model.with_params(params)

  def create_model(self) -> Model:
    """This objective's model over no params, sharing the objective's tokenizer and mesh."""
    record = self.record_from_shapes() if self._data is None else self.inference_record()
    return methods.model_class(self.config.objective)(self.config, record, mesh=self.mesh, tokenizer=self.tokenizer)

  @abc.abstractmethod
  def evaluation_data(self) -> Any:
    """What this objective's evaluators read besides the model (a knowledge graph, a corpus, ...)."""

  @abc.abstractmethod
  def data_fingerprint(self) -> dict[str, int | str]:
    """Counts and digests of the data the objective trains and evaluates on (`data.fingerprint`)."""

  @abc.abstractmethod
  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Scalar training loss and scalar metrics to log, for one global batch."""

  @abc.abstractmethod
  def train_batches(self, seed: int) -> Any:
    """A grain loader whose iterator yields this process's part of each batch, with saveable state."""

  @abc.abstractmethod
  def inference_record(self) -> dict[str, Any]:
    """What a trained run needs besides its config and params to be loaded without its data (entity ids and
    texts, relation names), as JSON (`model.json`)."""


class MeanPooledBertObjective(Objective):
  """An objective whose params hold one BERT (`{"bert": ...}`) read by mean pooling (SupCon, FAQ retrieval, universal).
  Subclasses set `tokenizer` and `bert_config`."""

  tokenizer: Any
  bert_config: bert.BertConfig

  @property
  def encoder(self) -> bert.BertModel:
    """The BERT the loss applies: its model's (`model()`), the one evaluation and `load()` use."""
    return self.model().encoder

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return {"bert": self.encoder.init(rng, tokens, tokens)["params"]}

  def pretrained_params(self) -> dict[str, Any]:
    return {} if self.pretrained_bert is None else {"bert": self.pretrained_bert}

  def vector_width(self) -> int:
    """The width of a text's vector."""
    return self.bert_config.hidden_size

  def encode(self, params: Any, tokens: jax.Array, *, deterministic: bool = True,
             rng: jax.Array | None = None) -> jax.Array:
    """Text vectors [N, d]: BERT's outputs for token ids [N, L], averaged over the non-padding tokens."""
    return bert.mean_pooled(self.encoder, params["bert"], tokens, pad_token_id=self.tokenizer.pad_token_id,
                            deterministic=deterministic, rng=rng)
