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
import dataclasses
import hashlib
from typing import Any

from absl import logging
import jax
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax.inference import search as vector_search

Ranking = list[list[tuple[str, float]]]  # Per query, the (id, score) of its top k, best first.


class NotExportableError(ValueError):
  """The model's text vectors are not what a BERT, a pooling and a linear map compute; the message says why."""


@dataclasses.dataclass(frozen=True)
class TextEncoderLayout:
  """How a model computes a text's vector from its params, in the terms other libraries use: a BERT (or RoBERTa)
  over `[CLS] text [SEP]` truncated to `max_len` tokens, a pooling of its outputs, an optional linear map and an
  optional L2 normalisation. What `docent_jax.export` writes as sentence-transformers modules and ONNX."""
  bert_config: Any  # `modules.bert.BertConfig`.
  bert_path: tuple[str, ...]  # Where the BERT's params are in the model's params.
  pooling: str  # "cls" (the first token's output) or "mean" (over the non-padding tokens).
  max_len: int
  projection_path: tuple[str, ...] | None = None  # A Dense's params (kernel [in, out], bias) applied after pooling.
  normalize: bool = False  # Whether the vectors are L2-normalised (the model's own `encode` returns unit vectors).
  # A pair classifier's logit head (Dense params, one output): over the pair features [u, v, |u - v|, u * v] of the
  # two texts' vectors ("pair_features"), or over the pooled vector of both texts read together ("cross_encoder").
  head: str | None = None
  head_path: tuple[str, ...] | None = None


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
  # Whether `encode` (and so `search`) draws a progress bar on stderr by default; None: only while a loaded run
  # encodes its entity set (seconds to minutes, once).
  show_progress_bar: bool | None = None

  def __init__(self, config: ml_collections.ConfigDict, record: dict[str, Any], params: Any = None, *,
               mesh: Mesh | None = None, run_dir: run_dirs.RunDir | None = None, step: int | None = None):
    self.config, self.record, self.params = config, record, params
    self.mesh = mesh if mesh is not None else data_parallel_mesh()
    self.run_dir, self.step = run_dir, step
    self._kept: dict[Hashable, Any] = {}
    self._index: vector_search.AnnIndex | None = None
    self._source: dict[str, Any] | None = None

  def with_params(self, params: Any, step: int | None = None) -> "Model":
    """This model over `params` (sharing its modules and compilations), with nothing encoded yet."""
    model = copy.copy(self)
    model.params, model.step, model._kept, model._index, model._source = params, step, {}, None, None
    return model

  @property
  def name(self) -> str:
    """How results and logs name this model: its run directory, else its config's name."""
    return str(self.run_dir) if self.run_dir is not None else self.config.get("name", type(self).__name__)

  def encode(self, texts: str | Sequence[str], show_progress_bar: bool | None = None) -> np.ndarray:
    """[n, d] vectors of `texts` (entity descriptions, offers or sentences: the method's encoder); one text (a
    `str`) gives its [d] vector, no texts a [0, d] array. `show_progress_bar` (default: the model's
    `show_progress_bar`) draws a bar on stderr while texts are encoded."""
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    if not texts:  # The width is the model's own: one empty text is encoded to find it.
      return self._encode([""])[:0]
    show = bool(self.show_progress_bar) if show_progress_bar is None else show_progress_bar
    with parallel.progress_bars(show):
      vectors = self._encode(texts)
    return vectors[0] if single else vectors

  def encode_set(self, texts: Sequence[str]) -> np.ndarray:
    """`encode` of a text set that several evaluators read (an entity set, a corpus's queries), computed once per
    params and kept while this model lives."""
    texts = list(texts)
    return self.computed(("encode", _fingerprint(texts)), lambda: self.encode(texts))

  def computed(self, key: Hashable, compute: Callable[[], Any]) -> Any:
    """`compute()`, once per params and `key`: what several evaluators of one round need (vectors, a probe)."""
    if key not in self._kept:
      self._kept[key] = compute()
    return self._kept[key]

  @abc.abstractmethod
  def _encode(self, texts: list[str]) -> np.ndarray:
    """[n, d] vectors of `texts`, computed."""

  def text_encoder_layout(self) -> TextEncoderLayout:
    """How this model's vectors of one text are computed (`TextEncoderLayout`); a model whose vectors are not a
    pooled BERT's raises `NotExportableError` saying why."""
    raise NotExportableError(f"{self.name}: a {type(self).__name__} computes no pooled BERT vector of a text.")

  def save_pretrained(self, directory: str, format: str = "sentence-transformers",  # pylint: disable=redefined-builtin
                      overwrite: bool = False) -> Any:
    """Writes this model where other libraries load it: `format` "sentence-transformers" (default), "huggingface",
    "onnx" or "projector" (`export.writer.save_pretrained`; docs/export.md). Returns the directory."""
    from docent_jax.export import writer  # pylint: disable=g-import-not-at-top
    return writer.save_pretrained(self, directory, format=format, overwrite=overwrite)

  def encode_tokens(self, params: Any, tokens: jax.Array) -> jax.Array:
    """[b, d] vectors of a batch of token ids [b, L] over `params`, jittable: what `encode` maps over batches of
    texts, and what is compiled for a TPU. A model whose vectors are not one text's (a cross-encoder, a tag
    scorer) has none."""
    raise TypeError(f"{self.name}: a {type(self).__name__} has no vector of one text's tokens.")

  def entities(self) -> tuple[list[str], np.ndarray]:
    """The model's entity ids and their [N, d] vectors (computed once per params; a loaded run keeps them next to
    itself, `RunDir.entity_vectors_file`, for the next process that loads it)."""
    if "entity_ids" not in self.record:
      raise TypeError(f"{self.name}: a {self.config.objective} model has no entity set.")
    texts = self.record["entity_texts"]
    return list(self.record["entity_ids"]), self.computed(("encode", _fingerprint(texts)),
                                                          lambda: self._saved_entity_vectors(texts))

  def entity_texts(self) -> list[str] | None:
    """Each entity's text or name, in the order of `entities()`, where the run recorded them; else None."""
    return self.record.get("entity_texts") or self.record.get("titles")

  def source(self) -> dict[str, Any]:
    """What this model's derived files (cached vectors, a search index) are computed from: the run's step and a
    fingerprint of its params. A file whose record differs is stale and computed anew."""
    if self._source is None:
      self._source = {"step": self.step, "params": params_fingerprint(self.params)}
    return self._source

  def _saved_entity_vectors(self, texts: Sequence[str]) -> np.ndarray:
    """The entity vectors kept next to the run when they are of these params and texts, else encoded (with a
    progress bar where the model shows them) and kept there."""
    if self.run_dir is None:
      return self.encode(texts)
    source = {**self.source(), "texts": _fingerprint(texts)}
    vectors = self.run_dir.kept_entity_vectors(source, len(texts))
    if vectors is None:
      logging.info("Encoding the %d entities of %s (once: the vectors are kept in %s).", len(texts), self.name,
                   self.run_dir.entity_vectors_file)
      vectors = self.encode(texts, show_progress_bar=self.show_progress_bar is not False)
      self.run_dir.keep_entity_vectors(vectors, source)
    return vectors

  def search(self, queries: str | Sequence[str], k: int = 10, approximate: bool = False) -> Ranking:
    """The `k` entities nearest to each query text (by cosine similarity, or the inner product where that is the
    method's score: `cosine_search`): exactly over the devices, or (`approximate`) by the CPU index saved next to
    the run (built on first use, and again when the run's params change). One query (a `str`) gives its one
    ranking; no queries, no rankings."""
    if isinstance(queries, str):
      return self.search([queries], k, approximate)[0]
    queries = list(queries)
    if k < 1:
      raise ValueError(f"k must be at least 1; got {k}.")
    if not queries:
      return []
    ids, vectors = self.entities()
    index = self._approximate_index() if approximate else vector_search.ExactSearch(
        vectors, self.mesh, normalize=self.cosine_search)
    scores, rows = index.search(self.encode(queries), min(k, len(ids)))
    return [[(ids[j], float(s)) for j, s in zip(row, score) if j >= 0] for row, score in zip(rows, scores)]

  def _approximate_index(self) -> vector_search.AnnIndex:
    """The run's saved index (`RunDir.search_index_dir`) when it was built from these params, else one built from the entity
    vectors (and saved with the run)."""
    if self._index is not None:
      return self._index
    path = None if self.run_dir is None else self.run_dir.search_index_dir
    if path is not None:
      saved = vector_search.AnnIndex.saved_source(path)
      if saved == self.source():
        self._index = vector_search.AnnIndex.load(path)
        return self._index
      if saved is not None:
        logging.info("The search index in %s was built from step %s's params; building it for step %s's.", path,
                     saved.get("step"), self.step)
    self._index = vector_search.AnnIndex.build(self.entities()[1], normalize=self.cosine_search)
    if path is not None:
      try:
        self._index.save(path, source=self.source())
      except OSError as error:  # A read-only run directory still answers; the index is rebuilt next time.
        logging.warning("The search index was not saved in %s (%s).", path, error)
    return self._index


def params_fingerprint(params: Any) -> str:
  """A digest of every leaf of `params` (its path, dtype, shape and bytes): equal exactly when the params are."""
  digest = hashlib.blake2b(digest_size=16)
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    leaf = np.ascontiguousarray(parallel.fetch(leaf))
    digest.update(f"{jax.tree_util.keystr(path)}:{leaf.dtype}:{leaf.shape}".encode())
    digest.update(leaf.tobytes())
  return digest.hexdigest()
