"""Zero-shot natural-language movie search (DOCENT): rank every movie for a text query.

A query set is JSON Lines, one object per line: {"query": "a heist gone wrong", "relevant":
["1234", "5678"]} with entity ids as strings or integers. Relevant ids that are not among the
evaluated entities are skipped; a query left without any relevant entity is dropped. Both are
counted and logged. The built-in query set takes held-out MovieLens tags as queries
(`tag_query_set`).

Metrics: MRR of the first relevant movie and Recall@k (the fraction of a query's relevant movies
in the top k), averaged over queries. Ties are resolved in expectation (see `metrics`).

Baseline: bag of sentences, a movie scores the highest cosine between the query embedding and the
embeddings of its review sentences.
"""
from collections.abc import Sequence
import dataclasses
import functools
import json

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np

from docent_jax.data import io
from docent_jax.evaluation import metrics
from docent_jax.evaluation import tag_prediction


class QueryFormatError(io.DataFormatError):
  """A query-set file is malformed; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class QuerySet:
  """Queries and, per query, the sorted indices of its relevant entities.

  Attributes:
    queries: query texts.
    relevant: per query, a non-empty sorted int64 array of entity indices.
    num_unknown_relevant: relevant ids skipped because they are not evaluated entities.
    num_dropped_queries: queries dropped for having no (or too few) relevant entities.
  """

  queries: list[str]
  relevant: list[np.ndarray]
  num_unknown_relevant: int = 0
  num_dropped_queries: int = 0

  def __len__(self) -> int:
    return len(self.queries)

  def label_matrix(self, num_entities: int) -> np.ndarray:
    """[Q, E] bool, True where the entity is relevant to the query."""
    labels = np.zeros((len(self.queries), num_entities), bool)
    for row, relevant in enumerate(self.relevant):
      labels[row, relevant] = True
    return labels


def _parse_line(path: epath.Path, number: int, line: str) -> tuple[str, list[str]]:
  try:
    record = json.loads(line)
  except json.JSONDecodeError as error:
    raise QueryFormatError(f"{path}:{number}: not valid JSON ({error.msg}): {line[:100]!r}") from None
  if not isinstance(record, dict) or "query" not in record or "relevant" not in record:
    raise QueryFormatError(f"{path}:{number}: expected an object with keys 'query' and 'relevant': {line[:100]!r}")
  query, relevant = record["query"], record["relevant"]
  if not isinstance(query, str) or not query.strip():
    raise QueryFormatError(f"{path}:{number}: 'query' must be a non-empty string; got {query!r}.")
  # bool is an int in Python, but never an entity id.
  if not isinstance(relevant, list) or any(isinstance(x, bool) or not isinstance(x, (str, int)) for x in relevant):
    raise QueryFormatError(f"{path}:{number}: 'relevant' must be a list of entity ids (strings or integers); "
                           f"got {relevant!r:.100}.")
  return query, [str(x) for x in relevant]


def load_query_set(path: epath.PathLike, entity_ids: Sequence[str]) -> QuerySet:
  """Reads a JSON Lines query set; relevant ids become indices into `entity_ids`.

  Blank lines are ignored. Raises QueryFormatError, naming file and line, for an empty file, a
  line that is not a JSON object with a non-empty 'query' string and a 'relevant' list of ids,
  and when no query keeps a relevant entity.
  """
  path = epath.Path(path)
  index = {str(entity): position for position, entity in enumerate(entity_ids)}
  queries, relevant = [], []
  num_unknown = num_dropped = 0
  try:
    lines = io.read_lines(path)
  except io.DataFormatError as error:
    raise QueryFormatError(str(error)) from None
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    query, ids = _parse_line(path, number, line)
    known = sorted({index[x] for x in ids if x in index})
    num_unknown += sum(x not in index for x in ids)
    if not known:
      num_dropped += 1
      continue
    queries.append(query)
    relevant.append(np.asarray(known, np.int64))
  if num_unknown:
    logging.warning("%s: skipped %d relevant ids that are not among the %d entities.", path, num_unknown,
                    len(index))
  if num_dropped:
    logging.warning("%s: dropped %d queries without a known relevant entity.", path, num_dropped)
  if not queries:
    raise QueryFormatError(f"{path}: no query has a relevant entity among the {len(index)} entities.")
  return QuerySet(queries, relevant, num_unknown, num_dropped)


def tag_query_set(tags: Sequence[str], tag_votes: np.ndarray, tag_indices: Sequence[int] | np.ndarray, *,
                  min_votes: int = 1, min_relevant: int = 1) -> QuerySet:
  """Tags as queries: query = the tag's text, relevant = movies with at least `min_votes` votes for it.

  Args:
    tags: tag texts, the columns of `tag_votes`.
    tag_votes: [E, T] int votes (`tag_prediction.tag_vote_matrix`); rows are the entities ranked.
    tag_indices: the tags to use, normally held-out tags no model was trained on.
    min_votes: votes that make a movie relevant.
    min_relevant: queries with fewer relevant movies are dropped, counted and logged.
  """
  tag_votes = np.asarray(tag_votes)
  if tag_votes.ndim != 2 or tag_votes.shape[1] != len(tags):
    raise ValueError(f"Expected tag_votes [E, {len(tags)}]; got {tag_votes.shape}.")
  tag_indices = np.asarray(tag_indices, np.int64)
  if tag_indices.size and (tag_indices.min() < 0 or tag_indices.max() >= len(tags)):
    raise ValueError(f"tag_indices must lie in [0, {len(tags)}).")
  queries, relevant = [], []
  for tag in tag_indices:
    movies = np.flatnonzero(tag_votes[:, tag] >= min_votes)
    if len(movies) >= max(min_relevant, 1):
      queries.append(tags[tag])
      relevant.append(movies.astype(np.int64))
  num_dropped = len(tag_indices) - len(queries)
  if num_dropped:
    logging.info("Tag queries: dropped %d of %d tags with fewer than %d movies having %d votes.", num_dropped,
                 len(tag_indices), min_relevant, min_votes)
  if not queries:
    raise ValueError(f"None of {len(tag_indices)} tags has {min_relevant} movies with {min_votes} votes.")
  return QuerySet(queries, relevant, num_dropped_queries=num_dropped)


def evaluate_search(scores: np.ndarray, query_set: QuerySet,
                    ks: Sequence[int] = (10, 50, 100)) -> dict[str, float | int]:
  """'search_mrr', 'search_recall@k' (means over queries) and 'search_num_queries' of [Q, E] scores."""
  scores = np.asarray(scores)
  if scores.ndim != 2 or len(scores) != len(query_set):
    raise ValueError(f"Expected scores [{len(query_set)}, E]; got {scores.shape}.")
  labels = query_set.label_matrix(scores.shape[1])
  result = {"search_mrr": metrics.mean_over_rows(metrics.reciprocal_rank(scores, labels), "search MRR")[0]}
  recall, _ = metrics.mean_over_rows(metrics.recall_at_k(scores, labels, ks), "search Recall@k")
  result.update({f"search_recall@{k}": float(r) for k, r in zip(ks, recall)})
  result["search_num_queries"] = len(query_set)
  return result


def _normalize(x: jax.Array) -> jax.Array:
  # A zero vector has no direction; it gets cosine 0 with everything rather than NaN.
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@functools.partial(jax.jit, static_argnames=("num_entities",))
def _max_cosine(queries: jax.Array, sentence_blocks: jax.Array, entity_blocks: jax.Array,
                num_entities: int) -> jax.Array:
  """[Q, E] max over each entity's sentences of the cosine with each query.

  sentence_blocks: [num_blocks, B, d]; entity_blocks: [num_blocks, B], padding rows set to
  `num_entities`, which segment_max drops.
  """
  queries = _normalize(queries)

  def block_max(running, block):
    sentences, entities = block
    cosines = _normalize(sentences) @ queries.T  # [B, Q]
    block = jax.ops.segment_max(cosines, entities, num_segments=num_entities)  # [E, Q]
    return jnp.maximum(running, block), None

  initial = jnp.full((num_entities, queries.shape[0]), -jnp.inf, queries.dtype)
  running, _ = jax.lax.scan(block_max, initial, (sentence_blocks, entity_blocks))
  return running.T


def bag_of_sentences_search_scores(query_emb: np.ndarray | jax.Array, sentence_emb: np.ndarray | jax.Array,
                                   sentence_entity: np.ndarray, num_entities: int,
                                   block_size: int = 4096) -> np.ndarray:
  """[Q, E] float32 bag-of-sentences search scores: the max cosine over each movie's sentences.

  Sentences are scored in blocks of `block_size` inside one jitted scan, so memory holds one
  [block_size, Q] block of cosines besides the [E, Q] running maximum.
  """
  query_emb, sentence_emb = jnp.asarray(query_emb, jnp.float32), jnp.asarray(sentence_emb, jnp.float32)
  if query_emb.ndim != 2 or sentence_emb.ndim != 2 or query_emb.shape[1] != sentence_emb.shape[1]:
    raise ValueError(f"Expected query_emb [Q, d] and sentence_emb [S, d]; got {query_emb.shape} and "
                     f"{sentence_emb.shape}.")
  sentence_entity = tag_prediction.check_sentence_entity(sentence_entity, sentence_emb.shape[0], num_entities)
  block_size = min(block_size, sentence_emb.shape[0])
  padding = -sentence_emb.shape[0] % block_size
  sentence_blocks = jnp.pad(sentence_emb, ((0, padding), (0, 0))).reshape(-1, block_size, sentence_emb.shape[1])
  entity_blocks = np.pad(sentence_entity.astype(np.int32), (0, padding), constant_values=num_entities)
  scores = _max_cosine(query_emb, sentence_blocks, jnp.asarray(entity_blocks.reshape(-1, block_size)), num_entities)
  return np.asarray(scores)
