"""Zero-shot natural-language movie search (DOCENT): rank every movie for a text query.

The queries are the data's (`data.reviews.search_queries`): MovieLens tags as queries, and those of a query-set
file (`data.search_queries`), each with its relevant movies.

Metrics: MRR of the first relevant movie and Recall@k (the fraction of a query's relevant movies
in the top k), averaged over queries. Ties are resolved in expectation (see `metrics`).

Baseline: bag of sentences, a movie scores the highest cosine between the query embedding and the
embeddings of its review sentences.
"""
from collections.abc import Sequence
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec
import numpy as np

from docent_jax import parallel
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import search_queries
from docent_jax.evaluation import bm25
from docent_jax.evaluation import metrics
from docent_jax.evaluation import registry
from docent_jax.evaluation import tag_prediction
from docent_jax.modules import tag_scorers


def evaluate_search(scores: np.ndarray, query_set: search_queries.QuerySet,
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


def search_by_vectors(query_vectors: np.ndarray | jax.Array, candidate_vectors: np.ndarray, query_set: search_queries.QuerySet, *,
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


@registry.register("movie_search")
def search_movies(model: Any, data: review_corpus.ReviewEvaluation) -> dict[str, float]:
  """Zero-shot movie search (the data's `search_tasks`: tag queries, and those of its query-set file if it has one)
  by a DOCENT model's scores of its movies (P(e | query)): `test/`, `all/` and `queries/`."""
  tasks = data.search_tasks  # A malformed query file fails before encoding.
  _, table = model.entities()
  results = {}
  for split, (movie_rows, query_set) in tasks.items():
    found = search_by_vectors(model.encode(query_set.queries), table[movie_rows], query_set, mesh=model.mesh)
    results.update({f"{split}/{k}": v for k, v in found.items()})
  return results


@registry.register("bm25_search")
def search_movies_by_bm25(model: Any, data: review_corpus.ReviewEvaluation) -> dict[str, float]:
  """The BM25 baseline of movie search (`search_movies`' tasks): each movie a document of its reviews (the model is
  not used)."""
  del model
  tasks = data.search_tasks
  documents = data.corpus.documents()
  results = {}
  for split, (movie_rows, query_set) in tasks.items():
    index = bm25.BM25Index([documents[m] for m in movie_rows])
    found = evaluate_search(index.scores(query_set.queries), query_set)
    results.update({f"{split}/{k}": v for k, v in found.items()})
  return results


@registry.register("bos_search")
def search_movies_by_sentences(model: Any, data: review_corpus.ReviewEvaluation,
                               sentences_per_movie: int = 8) -> dict[str, float]:
  """Bag-of-sentences movie search (`search_movies`' tasks): a movie scores the highest cosine of the query with
  one of `sentences_per_movie` of its review sentences (sampled with the data's seed), all encoded by the model
  (the baseline: the pretrained encoder, a DUAL run of 0 steps)."""
  corpus = data.corpus
  tasks = data.search_tasks
  sampled = tag_scorers.subsample_per_entity(corpus.sentence_entity, np.arange(corpus.num_entities),
                                             sentences_per_movie, data.seed)
  sentence_vectors = model.encode([corpus.sentences[i] for i in sampled])
  sentence_entity = corpus.sentence_entity[sampled]
  results = {}
  for split, (movie_rows, query_set) in tasks.items():
    kept = np.isin(sentence_entity, movie_rows)
    scores = bag_of_sentences_search_scores(model.encode(query_set.queries), sentence_vectors[kept],
                                            np.searchsorted(movie_rows, sentence_entity[kept]), len(movie_rows))
    results.update({f"{split}/{k}": v for k, v in evaluate_search(scores, query_set).items()})
  return results
