"""A trained run as a model: `load(run_dir)` restores the params the run reported and needs none of its data.

A run directory (`WORKDIR/<model>`, local or gs://) holds the config (`config.json`), what the model needs
besides params (`model.json`: entity ids and texts, relation names) and the Orbax checkpoints; `load` reads
them onto this machine's devices, whatever topology wrote them. Every model encodes texts; a model with an
entity set lists and searches it; task heads are the method's (BLP: link prediction).
"""
import abc
from collections.abc import Sequence
import functools
from typing import Any

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from docent_jax import checkpoints
from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.inference import search as vector_search
from docent_jax.models import blp_model
from docent_jax.models import pretrained

Ranking = list[list[tuple[str, float]]]  # Per query, the (id, score) of its top k, best first.


class Model(abc.ABC):
  """The model protocol: what a user, `predict` and evaluators see of a trained run."""

  def __init__(self, run_dir: epath.Path, config: ml_collections.ConfigDict, params: Any, record: dict[str, Any],
               step: int):
    self.run_dir, self.config, self.params, self.record, self.step = run_dir, config, params, record, step
    # Data-parallel over this machine's devices, whatever mesh the run trained on.
    self.mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": (-1, 1), "rules": ()}))
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)

  @abc.abstractmethod
  def encode(self, texts: Sequence[str]) -> np.ndarray:
    """[n, d] vectors of `texts` (entity descriptions, offers or sentences: the method's encoder)."""

  def entities(self) -> tuple[list[str], np.ndarray]:
    """The run's entity ids and their [N, d] vectors (computed once)."""
    raise TypeError(f"A {self.config.objective} run has no entity set.")

  def search(self, queries: Sequence[str], k: int = 10, approximate: bool = False) -> Ranking:
    """The `k` entities nearest to each query text by cosine similarity: exactly over the devices, or
    (`approximate`) by the CPU index saved next to the run (built on first use)."""
    ids, _ = self.entities()
    index = self._approximate_index() if approximate else self._exact_index()
    scores, rows = index.search(self.encode(queries), min(k, len(ids)))
    return [[(ids[j], float(s)) for j, s in zip(row, score) if j >= 0] for row, score in zip(rows, scores)]

  @functools.cache
  def _exact_index(self) -> vector_search.ExactSearch:
    return vector_search.ExactSearch(self.entities()[1], self.mesh, normalize=True)

  @functools.cache
  def _approximate_index(self) -> vector_search.AnnIndex:
    path = self.run_dir / vector_search.INDEX_DIRNAME
    if (path / "index.json").exists():
      return vector_search.AnnIndex.load(path)
    index = vector_search.AnnIndex.build(self.entities()[1], normalize=True)
    try:
      index.save(path)
    except OSError as error:  # A read-only run directory still answers; the index is rebuilt next time.
      logging.warning("The search index was not saved in %s (%s).", path, error)
    return index


class LinkPredictionModel(Model):
  """A BLP run: an entity encoder over descriptions, relation embeddings and the scoring function."""

  def __init__(self, *args: Any):
    super().__init__(*args)
    self.relation_ids: list[str] = list(self.record["relation_ids"])
    self.encoder_path = blp_model.encoder_path(self.config)
    self.module, self.scoring, _ = blp_model.create(self.config, self.tokenizer.vocab_size, len(self.relation_ids))

  def encode(self, texts: Sequence[str]) -> np.ndarray:
    texts = list(texts)
    if self.config.data.get("drop_stopwords", False):
      texts = tokenization.without_stopwords(texts)
    tokens = tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len)
    return parallel.map_token_batches(self._encode, self.params, tokens, pad_id=self.tokenizer.pad_token_id,
                                      batch_size=self.config.eval.batch_size, mesh=self.mesh, what="texts")

  def _encode(self, params: Any, tokens: jax.Array) -> jax.Array:
    return self.module.apply({"params": params}, tokens, method=blp_model.BlpModel.encode)

  @functools.cache
  def entities(self) -> tuple[list[str], np.ndarray]:
    return list(self.record["entity_ids"]), self.encode(self.record["entity_texts"])

  def relation_vectors(self, names: Sequence[str]) -> np.ndarray:
    """[n, dr] embeddings of relations by name; an unknown name is an error naming it."""
    rows = {name: row for row, name in enumerate(self.relation_ids)}
    missing = sorted({name for name in names if name not in rows})
    if missing:
      raise KeyError(f"{self.run_dir} has no relation {', '.join(map(repr, missing[:5]))} "
                     f"({len(self.relation_ids)} relations, e.g. {self.relation_ids[:3]}).")
    table = np.asarray(self.params["relations"]["embedding"])
    return table[[rows[name] for name in names]]

  def score(self, heads: Sequence[str], relations: Sequence[str], tails: Sequence[str]) -> np.ndarray:
    """[n] scores of triples given as (head text, relation name, tail text); higher is more plausible."""
    return np.asarray(self.scoring.score(jnp.asarray(self.encode(heads)), jnp.asarray(self.relation_vectors(relations)),
                                         jnp.asarray(self.encode(tails))))

  def predict(self, texts: Sequence[str], relations: Sequence[str], k: int = 10, tails: bool = True) -> Ranking:
    """For each (entity description, relation name), the `k` entities of the run's set that best complete the
    triple: its tails (`tails`), else its heads."""
    ids, vectors = self.entities()
    queries, relation = jnp.asarray(self.encode(texts)), jnp.asarray(self.relation_vectors(relations))
    candidates = jnp.asarray(vectors)
    scores = (self.scoring.score_tails(queries, relation, candidates) if tails else
              self.scoring.score_heads(relation, queries, candidates))
    top_scores, top_rows = jax.lax.top_k(scores, min(k, len(ids)))
    return [[(ids[j], float(s)) for j, s in zip(row, score)]
            for row, score in zip(np.asarray(top_rows), np.asarray(top_scores))]


MODELS: dict[str, type[Model]] = {"blp": LinkPredictionModel}


def load(path: str | epath.PathLike) -> Model:
  """The model of a trained run directory (`WORKDIR/<model>`, local or gs://) with the params it reported."""
  run_dir = checkpoints.as_path(path)
  config = checkpoints.recorded_config(run_dir)
  if config.objective not in MODELS:
    raise ValueError(f"{run_dir}: runs of objective {config.objective!r} cannot be loaded yet; loadable: "
                     f"{sorted(MODELS)}.")
  record_path = run_dir / checkpoints.MODEL_FILE
  if not record_path.exists():
    raise FileNotFoundError(f"{record_path} does not exist: the run was trained before runs recorded what loading "
                            "needs; run it once more with --mode=evaluate to record it.")
  params, step = checkpoints.restore_reported_params(run_dir)
  logging.info("Loaded %s (%s, step %d).", run_dir, config.objective, step)
  return MODELS[config.objective](run_dir, config, params, checkpoints.read_json(record_path), step)
