"""Zero-shot natural-language movie search (DOCENT): rank every movie for a text query.

A query set is JSON Lines, one object per line: {"query": "a heist gone wrong", "relevant":
["1234", "5678"]} with entity ids as strings or integers. Relevant ids that are not among the
evaluated entities are skipped; a query left without any relevant entity is dropped. Both are
counted and logged. The built-in query set takes MovieLens tags as queries (`tag_query_set`); the
search evaluators also search a query-set file given as their `queries` option (`search_tasks`).

Metrics: MRR of the first relevant movie and Recall@k (the fraction of a query's relevant movies
in the top k), averaged over queries. Ties are resolved in expectation (see `metrics`).

Baseline: bag of sentences, a movie scores the highest cosine between the query embedding and the
embeddings of its review sentences.
"""
from collections.abc import Sequence
import dataclasses
import functools
import json
from typing import Any

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec
import numpy as np

from docent_jax import parallel
from docent_jax.data import io
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.evaluation import bm25
from docent_jax.evaluation import metrics
from docent_jax.evaluation import registry
from docent_jax.evaluation import tag_prediction
from docent_jax.inference import movies
from docent_jax.models import tag_scorers


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


def _query_counts(queries: jax.Array, candidate_blocks: jax.Array, relevant: jax.Array, num_candidates: int,
                  axes: tuple[str, ...]) -> tuple[jax.Array, jax.Array, jax.Array]:
  """This device's part of `search_by_vectors`: (relevant scores, # candidates above, # tied) [Q, R].

  candidate_blocks: this device's [num_blocks, B, d]; relevant: [Q, R] candidate positions, -1 = padding.
  """
  num_blocks, block_size, _ = candidate_blocks.shape
  first = jax.lax.axis_index(axes) * num_blocks * block_size if axes else 0
  offsets = first + jnp.arange(num_blocks) * block_size
  # Scan carries start out the same on every device but become this device's own.
  varying = (lambda x: jax.lax.pcast(x, axes, to="varying")) if axes else (lambda x: x)

  def block_scores(block, offset):
    scores = jnp.einsum("qd,bd->qb", queries, block, preferred_element_type=jnp.float32)
    return jnp.where(offset + jnp.arange(block_size) < num_candidates, scores, -jnp.inf)

  # Two passes over the same block products: the relevant candidates' scores must be the very numbers
  # they are compared with, or a tie could count as a candidate above.
  def gather(found, block_and_offset):
    scores = block_scores(*block_and_offset)
    local = relevant - block_and_offset[1]
    inside = (relevant >= 0) & (local >= 0) & (local < block_size)
    picked = jnp.take_along_axis(scores, jnp.clip(local, 0, block_size - 1), axis=1)
    return jnp.where(inside, picked, found), None

  relevant_scores, _ = jax.lax.scan(gather, varying(jnp.full(relevant.shape, -jnp.inf)), (candidate_blocks, offsets))
  if axes:
    relevant_scores = jax.lax.pmax(relevant_scores, axes)

  def count(totals, block_and_offset):
    # Sorted block scores answer "how many above / tied" for every relevant score by binary search.
    ordered = jnp.sort(block_scores(*block_and_offset), axis=1)
    below_or_tied = jax.vmap(lambda s, r: jnp.searchsorted(s, r, side="right"))(ordered, relevant_scores)
    below = jax.vmap(lambda s, r: jnp.searchsorted(s, r, side="left"))(ordered, relevant_scores)
    above, tied = totals
    return (above + block_size - below_or_tied, tied + below_or_tied - below), None

  zeros = varying(jnp.zeros(relevant.shape, jnp.int32))
  (above, tied), _ = jax.lax.scan(count, (zeros, zeros), (candidate_blocks, offsets))
  if axes:
    above, tied = jax.lax.psum(above, axes), jax.lax.psum(tied, axes)
  return relevant_scores, above, tied


@functools.partial(jax.jit, static_argnames=("num_candidates", "mesh"))
def _sharded_query_counts(queries: jax.Array, candidate_blocks: jax.Array, relevant: jax.Array, num_candidates: int,
                          mesh: Mesh | None) -> tuple[jax.Array, jax.Array, jax.Array]:
  if mesh is None:
    return _query_counts(queries, candidate_blocks, relevant, num_candidates, ())
  axes = tuple(mesh.axis_names)
  local = functools.partial(_query_counts, num_candidates=num_candidates, axes=axes)
  return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(axes), PartitionSpec()),
                       out_specs=(PartitionSpec(),) * 3)(queries, candidate_blocks, relevant)


def _replicated(array: np.ndarray, mesh: Mesh | None) -> jax.Array:
  return jnp.asarray(array) if mesh is None else jax.device_put(array, parallel.replicated(mesh))


def _metrics_from_counts(relevant_scores: np.ndarray, above: np.ndarray, tied: np.ndarray, valid: np.ndarray,
                         ks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """Per query, the reciprocal rank and Recall@k of `metrics.reciprocal_rank` / `metrics.recall_at_k`.

  Each relevant candidate with a candidates above and t tied (itself included) sits at rank a + 1 .. a + t,
  each equally likely: it is in the top k with probability clip(k - a, 0, t) / t.
  """
  best = np.max(np.where(valid, relevant_scores, -np.inf), axis=1)
  at_best = valid & (relevant_scores == best[:, None])
  first = np.argmax(at_best, axis=1)
  rows = np.arange(len(best))
  num_tied_relevant = at_best.sum(axis=1)
  ranks = 1.0 + above[rows, first] + (tied[rows, first] - num_tied_relevant) / (num_tied_relevant + 1)
  ks = np.asarray(ks)
  tied = np.maximum(tied, 1)  # Padding entries count nothing.
  in_top = np.clip(ks[None, None, :] - above[:, :, None], 0, tied[:, :, None]) / tied[:, :, None]
  hits = np.where(valid[:, :, None], in_top, 0.0).sum(axis=1)
  return 1.0 / ranks, hits / valid.sum(axis=1, keepdims=True)


def search_by_vectors(query_vectors: np.ndarray | jax.Array, candidate_vectors: np.ndarray, query_set: QuerySet, *,
                      ks: Sequence[int] = (10, 50, 100), mesh: Mesh | None = None, query_batch: int = 64,
                      candidate_block: int = 4096) -> dict[str, float | int]:
  """`evaluate_search` of the scores query_vectors @ candidate_vectors^T, without forming them.

  The candidates are split by rows over every device of `mesh` (all processes); each device scores every
  query against its rows, `candidate_block` rows at a time, and counts the rows above and tied with each
  relevant candidate; the counts are summed over devices. No [Q, E] matrix exists anywhere, and the
  metrics, ties included, are those of `evaluate_search` on the full score matrix. Every process passes
  the same arrays and gets the same metrics.
  """
  query_vectors, candidate_vectors = np.asarray(query_vectors, np.float32), np.asarray(candidate_vectors, np.float32)
  if (query_vectors.ndim != 2 or candidate_vectors.ndim != 2 or len(query_vectors) != len(query_set)
      or query_vectors.shape[1] != candidate_vectors.shape[1]):
    raise ValueError(f"Expected query_vectors [{len(query_set)}, d] and candidate_vectors [E, d]; got "
                     f"{query_vectors.shape} and {candidate_vectors.shape}.")
  num_candidates = len(candidate_vectors)
  if any(r.size and (r.min() < 0 or r.max() >= num_candidates) for r in query_set.relevant):
    raise ValueError(f"A query's relevant entity lies outside the {num_candidates} candidates.")
  num_shards = mesh.size if mesh is not None else 1
  block_size = min(candidate_block, -(-num_candidates // num_shards))
  padding = -num_candidates % (block_size * num_shards)
  blocks = np.pad(candidate_vectors, ((0, padding), (0, 0))).reshape(-1, block_size, candidate_vectors.shape[1])
  # Whole blocks per device: the padding above makes them divide evenly.
  blocks = jnp.asarray(blocks) if mesh is None else parallel.shard_rows(blocks, mesh)
  reciprocal_ranks, recalls = [], []
  for begin in range(0, len(query_set), query_batch):
    relevant = query_set.relevant[begin:begin + query_batch]
    # Power-of-two widths and a fixed batch keep the compiled shapes few.
    width = 1 << (max(len(r) for r in relevant) - 1).bit_length()
    padded = np.full((query_batch, width), -1, np.int32)
    for row, r in enumerate(relevant):
      padded[row, :len(r)] = r
    queries = np.zeros((query_batch, query_vectors.shape[1]), np.float32)
    queries[:len(relevant)] = query_vectors[begin:begin + len(relevant)]
    counts = _sharded_query_counts(_replicated(queries, mesh), blocks,
                                   _replicated(padded, mesh), num_candidates, mesh)
    scores, above, tied = (np.asarray(x)[:len(relevant)] for x in counts)
    reciprocal_rank, recall = _metrics_from_counts(scores, above, tied, padded[:len(relevant)] >= 0, ks)
    reciprocal_ranks.append(reciprocal_rank)
    recalls.append(recall)
  result = {"search_mrr": float(np.concatenate(reciprocal_ranks).mean())}
  result.update({f"search_recall@{k}": float(r) for k, r in zip(ks, np.concatenate(recalls).mean(axis=0))})
  result["search_num_queries"] = len(query_set)
  return result


def search_tasks(corpus: review_corpus.ReviewCorpus, min_votes: int,
                 queries: epath.PathLike = "") -> dict[str, tuple[np.ndarray, QuerySet]]:
  """Zero-shot search tasks: the ranked movies (entity indices) and the queries of each split.

  'test' (held-out movies) and 'all' (every movie) take tag queries: each tag with a movie of the split
  having at least `min_votes` votes for it; relevant = those movies. A split without such a tag (e.g. a
  corpus without tags.tsv) has no search task; the reason is logged. 'queries', when `queries` names a
  query-set file (`load_query_set`; a malformed line raises QueryFormatError naming file and line), takes
  its queries over every movie.
  """
  tasks = {}
  for split, movie_rows in (("test", corpus.entity_split["test"]), ("all", np.arange(corpus.num_entities))):
    votes = corpus.tag_votes[movie_rows].toarray()
    tags = np.flatnonzero((votes >= min_votes).any(axis=0))
    if not len(tags):
      logging.log_first_n(logging.WARNING, "%s: no tag has a %s movie with %d votes (%d tags in all); search on "
                          "%s movies is skipped.", 4, corpus.name, split, min_votes, len(corpus.tags), split)
      continue
    tasks[split] = (movie_rows, tag_query_set(corpus.tags, votes, tags, min_votes=min_votes))
  if queries:
    tasks["queries"] = (np.arange(corpus.num_entities), load_query_set(queries, corpus.entity_ids))
  return tasks


@registry.register("movie_search")
def search_movies(model: Any, data: review_corpus.ReviewEvaluation, queries: str = "") -> dict[str, float]:
  """Zero-shot movie search (`search_tasks`: tag queries, and the query-set file `queries` if given) by a DOCENT
  model's scores of its movies (P(e | query)): `test/`, `all/` and `queries/`."""
  tasks = search_tasks(data.corpus, data.search_min_votes, queries)  # A malformed query file fails before encoding.
  _, table = model.entities()
  results = {}
  for split, (movie_rows, query_set) in tasks.items():
    found = search_by_vectors(model.encode(query_set.queries), table[movie_rows], query_set, mesh=model.mesh)
    results.update({f"{split}/{k}": v for k, v in found.items()})
  return results


@registry.register("bm25_search")
def search_movies_by_bm25(model: Any, data: review_corpus.ReviewEvaluation, queries: str = "") -> dict[str, float]:
  """The BM25 baseline of movie search (`search_movies`' tasks): each movie a document of its reviews (the model is
  not used)."""
  del model
  tasks = search_tasks(data.corpus, data.search_min_votes, queries)
  documents = data.corpus.documents()
  results = {}
  for split, (movie_rows, query_set) in tasks.items():
    index = bm25.BM25Index([documents[m] for m in movie_rows])
    found = evaluate_search(index.scores(query_set.queries), query_set)
    results.update({f"{split}/{k}": v for k, v in found.items()})
  return results


@registry.register("bos_search")
def search_movies_by_sentences(model: Any, data: review_corpus.ReviewEvaluation, queries: str = "",
                               sentences_per_movie: int = 8, pooling: str = "mean") -> dict[str, float]:
  """The bag-of-sentences baseline of movie search (`search_movies`' tasks): a movie scores the highest cosine of
  the query with one of `sentences_per_movie` of its review sentences (sampled with the data's seed), all encoded
  by the model's untrained (pretrained) encoder, pooled by `pooling` ('mean' or 'cls')."""
  corpus = data.corpus
  tasks = search_tasks(corpus, data.search_min_votes, queries)
  encoder = movies.pretrained_sentence_encoder(model.config, pooling, model.mesh)
  sampled = tag_scorers.subsample_per_entity(corpus.sentence_entity, np.arange(corpus.num_entities),
                                             sentences_per_movie, data.seed)
  sentence_vectors = encoder.encode([corpus.sentences[i] for i in sampled])
  sentence_entity = corpus.sentence_entity[sampled]
  results = {}
  for split, (movie_rows, query_set) in tasks.items():
    kept = np.isin(sentence_entity, movie_rows)
    scores = bag_of_sentences_search_scores(encoder.encode(query_set.queries), sentence_vectors[kept],
                                            np.searchsorted(movie_rows, sentence_entity[kept]), len(movie_rows))
    results.update({f"{split}/{k}": v for k, v in evaluate_search(scores, query_set).items()})
  return results
