"""Okapi BM25 over documents (one per movie: all its reviews), the lexical movie-search baseline.

score(q, d) = sum over query words w (each occurrence counts) of
  idf(w) * tf(w, d) * (k1 + 1) / (tf(w, d) + k1 * (1 - b + b * |d| / avgdl)),
with Lucene's idf(w) = log(1 + (N - n_w + 0.5) / (n_w + 0.5)), always positive. Query words absent
from every document add nothing.

The per-(document, word) weights are one sparse [E, V] matrix built once, so scoring a batch of
queries is one sparse product, with no loop over documents.
"""
from collections.abc import Callable, Sequence
import re

import numpy as np
import scipy.sparse

_WORD = re.compile(r"\w+")


def word_tokenize(text: str) -> list[str]:
  """Lower-cased runs of word characters."""
  return _WORD.findall(text.lower())


class BM25Index:
  """BM25 scores of queries against a fixed document collection."""

  def __init__(self, documents: Sequence[str], tokenizer: Callable[[str], list[str]] = word_tokenize,
               k1: float = 1.2, b: float = 0.75):
    """Indexes `documents` (document e is entity e).

    Args:
      documents: one text per entity.
      tokenizer: text -> words; used for documents and queries alike.
      k1: term-frequency saturation (>= 0).
      b: document-length normalisation, in [0, 1].
    """
    if not len(documents):
      raise ValueError("BM25 needs at least one document.")
    if k1 < 0 or not 0 <= b <= 1:
      raise ValueError(f"Need k1 >= 0 and 0 <= b <= 1; got k1={k1}, b={b}.")
    self._tokenizer = tokenizer
    self.vocabulary: dict[str, int] = {}
    counts = self._count(documents, grow=True)  # [E, V] term frequencies
    lengths = np.asarray(counts.sum(axis=1), np.float64)[:, 0]
    if not lengths.sum():
      raise ValueError(f"None of the {len(documents)} documents holds a word.")
    num_docs = len(documents)
    doc_freq = np.bincount(counts.indices, minlength=len(self.vocabulary))
    self.idf = np.log1p((num_docs - doc_freq + 0.5) / (doc_freq + 0.5))
    norm = k1 * (1.0 - b + b * lengths / lengths.mean())  # [E]
    tf = counts.data
    rows = np.repeat(np.arange(num_docs), np.diff(counts.indptr))
    weights = self.idf[counts.indices] * tf * (k1 + 1.0) / (tf + norm[rows])
    # Stored transposed, [V, E], so that query counts [Q, V] @ weights gives [Q, E].
    self._weights = scipy.sparse.csr_matrix((weights, counts.indices, counts.indptr),
                                            shape=counts.shape).T.tocsr()

  @property
  def num_documents(self) -> int:
    return self._weights.shape[1]

  def _count(self, texts: Sequence[str], grow: bool) -> scipy.sparse.csr_matrix:
    """[len(texts), V] word counts; `grow` adds new words to the vocabulary, else they are dropped."""
    indptr, indices = [0], []
    for text in texts:
      for word in self._tokenizer(text):
        index = self.vocabulary.setdefault(word, len(self.vocabulary)) if grow else self.vocabulary.get(word)
        if index is not None:
          indices.append(index)
      indptr.append(len(indices))
    data = np.ones(len(indices), np.float64)
    counts = scipy.sparse.csr_matrix((data, np.asarray(indices, np.int64), np.asarray(indptr, np.int64)),
                                     shape=(len(texts), len(self.vocabulary)))
    counts.sum_duplicates()  # repeated words become one entry holding their count
    return counts

  def scores(self, queries: Sequence[str]) -> np.ndarray:
    """[Q, E] float32 BM25 score of every document for every query."""
    return np.asarray((self._count(queries, grow=False) @ self._weights).todense(), np.float32)
