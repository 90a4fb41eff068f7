"""The model protocol: what evaluators, `predict` and a user see of a trained model.

A `Model` is a method's forward functions over one set of params: it encodes texts, lists and searches its
entity set where it has one, and exposes the method's task heads (link prediction, pair matching, FAQ answers,
tag scores). The trainer evaluates the model of its current params through the same object that
`docent_jax.load(run_dir)` gives a user, so what a user gets is exactly what was evaluated.

Models are built from a config and a record (`model.json`: entity ids and texts, relation names) alone: no
training data and no pretrained weights are read. `with_params` gives the same model over other params,
sharing compilations; each one encodes a text set that evaluators share once (`encode_set`), so the evaluators of
one evaluation round share the entity vectors.
"""
import abc
from collections.abc import Callable, Hashable, Sequence
import copy
import hashlib
from typing import Any

from absl import logging
from etils import epath
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import parallel
from docent_jax.inference import search as vector_search

Ranking = list[list[tuple[str, float]]]  # Per query, the (id, score) of its top k, best first.


def data_parallel_mesh() -> Mesh:
  """Every device of this machine on the data axis: a loaded model's mesh, whatever mesh the run trained on."""
  return parallel.create_mesh(ml_collections.ConfigDict({"shape": (-1, 1), "rules": ()}))


def _fingerprint(texts: Sequence[str]) -> str:
  digest = hashlib.blake2b(digest_size=16)
  for text in texts:
    digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
  return digest.hexdigest()


class Model(abc.ABC):
  """A trained (or untrained) model of one method over one set of params."""

  # Where its text encoder's params sit in `params`: a run that starts from this model (`model_init`) takes them.
  encoder_path: tuple[str, ...] = ("bert",)
  # How `search` scores an entity for a query: cosine similarity, else the inner product (the method's logit).
  cosine_search: bool = True

  def __init__(self, config: ml_collections.ConfigDict, record: dict[str, Any], params: Any = None, *,
               mesh: Mesh | None = None, run_dir: epath.Path | None = None, step: int | None = None):
    self.config, self.record, self.params = config, record, params
    self.mesh = mesh if mesh is not None else data_parallel_mesh()
    self.run_dir, self.step = run_dir, step
    self._kept: dict[Hashable, Any] = {}
    self._index: vector_search.AnnIndex | None = None

  def with_params(self, params: Any, step: int | None = None) -> "Model":
    """This model over `params` (sharing its modules and compilations), with nothing encoded yet."""
    model = copy.copy(self)
    model.params, model.step, model._kept, model._index = params, step, {}, None
    return model

  @property
  def name(self) -> str:
    """How results and logs name this model: its run directory, else its config's name."""
    return str(self.run_dir) if self.run_dir is not None else self.config.get("name", type(self).__name__)

  def encode(self, texts: Sequence[str]) -> np.ndarray:
    """[n, d] vectors of `texts` (entity descriptions, offers or sentences: the method's encoder)."""
    return self._encode(list(texts))

  def encode_set(self, texts: Sequence[str]) -> np.ndarray:
    """`encode` of a text set that several evaluators read (an entity set, a corpus's queries), computed once per
    params and kept while this model lives."""
    texts = list(texts)
    return self.computed(("encode", _fingerprint(texts)), lambda: self._encode(texts))

  def computed(self, key: Hashable, compute: Callable[[], Any]) -> Any:
    """`compute()`, once per params and `key`: what several evaluators of one round need (vectors, a probe)."""
    if key not in self._kept:
      self._kept[key] = compute()
    return self._kept[key]

  @abc.abstractmethod
  def _encode(self, texts: list[str]) -> np.ndarray:
    """[n, d] vectors of `texts`, computed."""

  def entities(self) -> tuple[list[str], np.ndarray]:
    """The model's entity ids and their [N, d] vectors (computed once per params)."""
    if "entity_ids" not in self.record:
      raise TypeError(f"{self.name}: a {self.config.objective} model has no entity set.")
    return list(self.record["entity_ids"]), self.encode_set(self.record["entity_texts"])

  def search(self, queries: Sequence[str], k: int = 10, approximate: bool = False) -> Ranking:
    """The `k` entities nearest to each query text (by cosine similarity, or the inner product where that is the
    method's score: `cosine_search`): exactly over the devices, or (`approximate`) by the CPU index saved next to
    the run (built on first use)."""
    ids, vectors = self.entities()
    index = self._approximate_index() if approximate else vector_search.ExactSearch(
        vectors, self.mesh, normalize=self.cosine_search)
    scores, rows = index.search(self.encode(queries), min(k, len(ids)))
    return [[(ids[j], float(s)) for j, s in zip(row, score) if j >= 0] for row, score in zip(rows, scores)]

  def _approximate_index(self) -> vector_search.AnnIndex:
    """The run's saved index (`INDEX_DIRNAME`), else one built from the entity vectors (and saved with the run)."""
    if self._index is not None:
      return self._index
    path = None if self.run_dir is None else self.run_dir / vector_search.INDEX_DIRNAME
    if path is not None and (path / "index.json").exists():
      self._index = vector_search.AnnIndex.load(path)
      return self._index
    self._index = vector_search.AnnIndex.build(self.entities()[1], normalize=self.cosine_search)
    if path is not None:
      try:
        self._index.save(path)
      except OSError as error:  # A read-only run directory still answers; the index is rebuilt next time.
        logging.warning("The search index was not saved in %s (%s).", path, error)
    return self._index
