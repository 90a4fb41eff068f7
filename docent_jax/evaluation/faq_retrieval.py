"""FAQ retrieval (Li & Zhao): rank every FAQ item for a user query by query-question similarity.

Metrics (`retrieval_metrics`), means over the queries:
  top1         the fraction of queries whose correct item ranks first (Top-1 accuracy);
  mrr          the mean reciprocal rank of the correct item;
  answer_top1  only where some items share an answer (`faq.answer_groups`): the fraction of queries whose
               first-ranked item gives the correct item's answer, which a user reads as a right result.
Ties follow `metrics`: they are resolved in expectation over random tie-breaking. A correct item tied
with n others at the top counts 1 / (n + 1) towards top1, and its rank is 1 + (#higher) + n / 2, so
constant scores cannot look good (the MRR is the mean of 1 / that rank, as in movie search).

Scorers give [Q, N] scores of Q queries against N items: cosine of encoder vectors, and the lexical
baselines TF-IDF (cosine of scikit-learn TF-IDF vectors) and BM25 (`bm25`), both over the words of
`bm25.word_tokenize`, with statistics from the documents (the FAQ questions) only. The negatives of fine-tuning
are the objective's (`objectives.faq_negatives`).
"""
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.feature_extraction import text as sklearn_text

from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.data.universal import faq as faq_files
from docent_jax.evaluation import bm25
from docent_jax.evaluation import metrics
from docent_jax.evaluation import registry
from docent_jax.inference import search

# How an evaluation scores a query against a FAQ question: the model's encoder, or a lexical baseline.
SCORERS = ("encoder", "tfidf", "bm25")


def _check_scores(scores: np.ndarray | Sequence) -> np.ndarray:
  """`scores` as a non-empty, finite float64 [Q, N] array."""
  scores = np.asarray(scores, np.float64)
  if scores.ndim != 2 or not scores.size:
    raise ValueError(f"Expected non-empty scores [Q, N]; got shape {scores.shape}.")
  if not np.isfinite(scores).all():
    raise ValueError(f"{int((~np.isfinite(scores)).sum())} of {scores.size} scores are NaN or infinite.")
  return scores


def _check_relevant(relevant: np.ndarray | Sequence[int], num_items: int,
                    num_queries: int | None = None) -> np.ndarray:
  """`relevant` as int64 [Q] (Q = `num_queries` where given), each an item index in [0, num_items)."""
  relevant = np.asarray(relevant)
  if relevant.ndim != 1 or not np.issubdtype(relevant.dtype, np.integer):
    raise ValueError(f"Expected relevant item indices as a 1-D int array; got {relevant.dtype} {relevant.shape}.")
  if num_queries is not None and len(relevant) != num_queries:
    raise ValueError(f"Got {len(relevant)} relevant item indices for {num_queries} rows of scores.")
  if relevant.size and (relevant.min() < 0 or relevant.max() >= num_items):
    raise ValueError(f"Relevant item indices must lie in [0, {num_items}); got {relevant.min()} to "
                     f"{relevant.max()}.")
  return relevant.astype(np.int64)


def retrieval_metrics(scores: np.ndarray, relevant: np.ndarray,
                      answer_groups: np.ndarray | None = None) -> dict[str, float]:
  """{'top1', 'mrr'} of [Q, N] scores, each query's correct item being `relevant` [Q] (ties in expectation), and
  'answer_top1' where `answer_groups` [N] (items with the same answer share a number) has a shared answer."""
  scores = _check_scores(scores)
  relevant = _check_relevant(relevant, scores.shape[1], scores.shape[0])
  labels = np.zeros(scores.shape, bool)
  labels[np.arange(len(relevant)), relevant] = True
  found = {"top1": float(np.mean(metrics.recall_at_k(scores, labels, (1,)))),
           "mrr": float(np.mean(metrics.reciprocal_rank(scores, labels)))}
  if answer_groups is not None and len(np.unique(answer_groups)) < len(answer_groups):
    # Ties in expectation: the share of the top-scored items that give the right answer.
    top = scores == scores.max(axis=1, keepdims=True)
    right = answer_groups[None, :] == answer_groups[relevant][:, None]
    found["answer_top1"] = float(np.mean((top & right).sum(axis=1) / top.sum(axis=1)))
  return found


def tfidf_scores(queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
  """[Q, N] float64 cosine of TF-IDF vectors of queries and documents, IDF fitted on the documents.

  Query words absent from every document add nothing; a query without a known word scores 0 everywhere.
  """
  vectorizer = sklearn_text.TfidfVectorizer(tokenizer=bm25.word_tokenize, lowercase=False, token_pattern=None)
  # Rows are L2-normalised, so the dot product is the cosine.
  document_vectors = vectorizer.fit_transform(documents)
  return np.asarray((vectorizer.transform(queries) @ document_vectors.T).todense(), np.float64)


def bm25_scores(queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
  """[Q, N] float32 Okapi BM25 score of each document for each query (`bm25.BM25Index`, default k1 and b)."""
  return bm25.BM25Index(documents).scores(queries)


@registry.register("faq_retrieval")
def rank_faq(model: Any, faq: universal_corpus.FaqSet, split: str = "test", scorer: str = "encoder") -> dict[str, float]:
  """`<split>/top1` and `<split>/mrr` of ranking every FAQ question for each query of `split`: by the cosine of
  the model's text vectors, or (`scorer` 'tfidf', 'bm25', untrained baselines) lexically, the model unused."""
  if scorer not in SCORERS:
    raise ValueError(f"Unknown FAQ scorer {scorer!r}; valid: {list(SCORERS)}.")
  queries, questions = faq.queries[split], faq.questions
  if scorer == "tfidf":
    scores = tfidf_scores(queries, questions)
  elif scorer == "bm25":
    scores = bm25_scores(queries, questions)
  else:
    scores = search.cosine_scores(model.encode(queries), model.encode(questions))
  found = retrieval_metrics(scores, faq.relevant[split], faq_files.answer_groups(faq.answers))
  return {f"{split}/{key}": value for key, value in found.items()}
