"""Movie search: query sets, metrics, the bag-of-sentences baseline and BM25."""
import collections
import json
import math

import ml_collections
import numpy as np
import pytest

from docent_jax import parallel
from docent_jax.data.reviews import search_queries
from docent_jax.evaluation import bm25
from docent_jax.evaluation import movie_search

ENTITY_IDS = ["10", "20", "30", "40"]


def _write(tmp_path, lines, name="queries.jsonl"):
  path = tmp_path / name
  path.write_text("\n".join(lines) + "\n")
  return path


def test_load_query_set(tmp_path):
  path = _write(tmp_path, [
      json.dumps({"query": "heist", "relevant": ["30", 10, "99", "30"]}),
      "",
      json.dumps({"query": "space opera", "relevant": ["77"]}),  # nothing known: dropped
      json.dumps({"query": "noir", "relevant": [40], "extra": 1}),
  ])
  query_set = search_queries.load_query_set(path, ENTITY_IDS)
  assert query_set.queries == ["heist", "noir"]
  assert [r.tolist() for r in query_set.relevant] == [[0, 2], [3]]
  assert (query_set.num_unknown_relevant, query_set.num_dropped_queries) == (2, 1)
  np.testing.assert_array_equal(query_set.label_matrix(4), [[1, 0, 1, 0], [0, 0, 0, 1]])


@pytest.mark.parametrize("lines, message", [
    (['{"query": "a", "relevant": ["10"]}', '{"query": "b", "relevant": ["10"]'], r":2: not valid JSON"),
    (['{"query": "a"}'], r":1: expected an object with keys 'query' and 'relevant'"),
    (['["a", ["10"]]'], r":1: expected an object"),
    (['{"query": "", "relevant": ["10"]}'], r":1: 'query' must be a non-empty string"),
    (['{"query": "a", "relevant": "10"}'], r":1: 'relevant' must be a list"),
    (['{"query": "a", "relevant": [true]}'], r":1: 'relevant' must be a list"),
    (['{"query": "a", "relevant": ["5"]}'], r"no query has a relevant entity"),
    ([" "], r"file is empty"),
])
def test_load_query_set_errors_name_file_and_line(tmp_path, lines, message):
  path = _write(tmp_path, lines)
  with pytest.raises(search_queries.QueryFormatError, match=message) as error:
    search_queries.load_query_set(path, ENTITY_IDS)
  assert str(path) in str(error.value)


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
def test_byte_order_mark_and_line_ends(tmp_path, line_end):
  lines = [json.dumps({"query": "heist", "relevant": ["30", 10]}), "", json.dumps({"query": "noir", "relevant": [40]})]
  path = tmp_path / "queries.jsonl"
  path.write_bytes(("\ufeff" + line_end.join(lines) + line_end).encode("utf-8"))
  query_set = search_queries.load_query_set(path, ENTITY_IDS)
  assert query_set.queries == ["heist", "noir"]
  assert [r.tolist() for r in query_set.relevant] == [[0, 2], [3]]


def test_tag_query_set():
  votes = np.array([[2, 0, 1], [1, 1, 0], [3, 0, 0]])
  query_set = search_queries.tag_query_set(["funny", "dark", "slow"], votes, [0, 2], min_votes=1)
  assert query_set.queries == ["funny", "slow"]
  assert [r.tolist() for r in query_set.relevant] == [[0, 1, 2], [0]]
  query_set = search_queries.tag_query_set(["funny", "dark", "slow"], votes, [0, 1, 2], min_votes=2, min_relevant=2)
  assert query_set.queries == ["funny"] and query_set.num_dropped_queries == 2
  assert query_set.relevant[0].tolist() == [0, 2]
  with pytest.raises(ValueError, match="None of 1 tags"):
    search_queries.tag_query_set(["funny", "dark", "slow"], votes, [1], min_votes=2)


def test_evaluate_search():
  query_set = search_queries.QuerySet(["q0", "q1"], [np.array([1, 3]), np.array([2])])
  scores = np.array([[0.5, 0.9, 0.1, 0.3, 0.7], [0.1, 0.2, 0.3, 0.4, 0.5]])
  # q0: relevant at ranks 1 and 4; q1: relevant at rank 3.
  result = movie_search.evaluate_search(scores, query_set, ks=(1, 3, 4))
  assert result == pytest.approx({"search_mrr": (1 + 1 / 3) / 2, "search_recall@1": 1 / 4,
                                  "search_recall@3": (1 / 2 + 1) / 2, "search_recall@4": 1.0,
                                  "search_num_queries": 2})
  with pytest.raises(ValueError, match=r"scores \[2, E\]"):
    movie_search.evaluate_search(scores[:1], query_set)


def _tied_search_problem(seed: int, num_queries: int = 37, num_candidates: int = 203, dim: int = 4):
  """Small-integer vectors, so every score is exact and many tie; relevant sets of 1 to 40 candidates."""
  rng = np.random.default_rng(seed)
  queries = rng.integers(-2, 3, (num_queries, dim)).astype(np.float32)
  candidates = rng.integers(-1, 2, (num_candidates, dim)).astype(np.float32)
  relevant = [np.sort(rng.choice(num_candidates, rng.integers(1, 41), replace=False)) for _ in range(num_queries)]
  return queries, candidates, search_queries.QuerySet([f"q{i}" for i in range(num_queries)], relevant)


@pytest.mark.parametrize("mesh_shape", [None, (2, 4), (8, 1)])
def test_search_by_vectors_equals_search_on_the_full_scores(mesh_shape):
  queries, candidates, query_set = _tied_search_problem(seed=len(str(mesh_shape)))
  expected = movie_search.evaluate_search(queries @ candidates.T, query_set, ks=(1, 10, 50, 500))
  mesh = parallel.create_mesh(ml_collections.ConfigDict(dict(shape=mesh_shape))) if mesh_shape else None
  # Blocks of 16 candidates: several per device, the last one padded; queries in batches with a padded last one.
  result = movie_search.search_by_vectors(queries, candidates, query_set, ks=(1, 10, 50, 500), mesh=mesh,
                                          query_batch=16, candidate_block=16)
  assert result == pytest.approx(expected, abs=1e-12)
  assert expected["search_mrr"] < 0.9  # Not a trivial problem: relevant candidates lose and tie.


def test_search_by_vectors_rejects_mismatched_inputs():
  queries, candidates, query_set = _tied_search_problem(seed=0)
  with pytest.raises(ValueError, match="Expected query_vectors"):
    movie_search.search_by_vectors(queries[:-1], candidates, query_set)
  with pytest.raises(ValueError, match="outside the 20 candidates"):
    movie_search.search_by_vectors(queries, candidates[:20], query_set)


def test_bag_of_sentences_search_scores():
  rng = np.random.default_rng(0)
  queries, sentences = rng.normal(size=(3, 8)), rng.normal(size=(11, 8))
  sentences[4] = 0.0  # no direction: cosine 0
  sentence_entity = np.array([2, 0, 1, 2, 2, 0, 3, 1, 0, 3, 2])
  cosines = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (
      sentences / np.maximum(np.linalg.norm(sentences, axis=1, keepdims=True), 1e-12)).T
  expected = np.stack([cosines[:, sentence_entity == e].max(axis=1) for e in range(4)], axis=1)
  # A block size that does not divide the sentences exercises the padding.
  scores = movie_search.bag_of_sentences_search_scores(queries, sentences, sentence_entity, 4, block_size=4)
  np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="1 of 5 entities have no sentence"):
    movie_search.bag_of_sentences_search_scores(queries, sentences, sentence_entity, 5)


def _direct_bm25(documents, query, k1=1.2, b=0.75):
  """Per-document BM25, written out term by term."""
  docs = [bm25.word_tokenize(d) for d in documents]
  avgdl = sum(map(len, docs)) / len(docs)
  scores = []
  for doc in docs:
    tf = collections.Counter(doc)
    score = 0.0
    for word in bm25.word_tokenize(query):
      if not tf[word]:  # a missing word adds nothing (and 0 / 0 for an empty document with b = 1)
        continue
      n = sum(word in d for d in docs)
      idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
      score += idf * tf[word] * (k1 + 1) / (tf[word] + k1 * (1 - b + b * len(doc) / avgdl))
    scores.append(score)
  return scores


def test_bm25_matches_direct_formula():
  documents = ["A heist goes wrong, the heist crew scatters.", "Space pirates and a heist in space!",
               "A quiet family drama.", ""]
  queries = ["heist", "space heist heist", "family crew", "unknown words", ""]
  for k1, b in ((1.2, 0.75), (2.0, 0.0), (0.5, 1.0)):
    index = bm25.BM25Index(documents, k1=k1, b=b)
    expected = [_direct_bm25(documents, q, k1, b) for q in queries]
    np.testing.assert_allclose(index.scores(queries), expected, rtol=1e-6)
  assert index.num_documents == 4
  heist = index.scores(["heist"])[0]
  assert heist[0] > heist[1] > 0 == heist[2]  # two occurrences beat one in a text of about the same length


def test_bm25_rejects_bad_input():
  with pytest.raises(ValueError, match="at least one document"):
    bm25.BM25Index([])
  with pytest.raises(ValueError, match="None of the 2 documents holds a word"):
    bm25.BM25Index(["", "!!"])
  with pytest.raises(ValueError, match="0 <= b <= 1"):
    bm25.BM25Index(["a"], b=1.5)
