"""Phrase similarity: Spearman's correlation of cosines with human scores, against a value computed by hand."""
import numpy as np
import pytest
import scipy.stats

from docent_jax.evaluation import phrase_similarity


def _at_angle(degrees):
  return np.array([np.cos(np.radians(degrees)), np.sin(np.radians(degrees))])


def test_spearman_of_cosines():
  # Cosines 1, 1/2, 0 (a zero vector), -1 and -1/2, whatever the lengths of the first vectors, rank 5 4 3 1 2;
  # the scores rank 5 3 4 1 2. Rank differences 0 1 -1 0 0: rho = 1 - 6 * 2 / (5 * (25 - 1)) = 0.9.
  first = np.array([1.0, 2.0, 3.0, 0.5, 10.0])[:, None] * _at_angle(0)
  second = np.stack([_at_angle(0), _at_angle(60), np.zeros(2), _at_angle(180), 3 * _at_angle(120)])
  scores = [5.0, 3.0, 4.0, 1.0, 2.0]
  assert phrase_similarity.phrase_similarity(first, second, scores) == pytest.approx({"spearman": 0.9})
  # Shuffled pairs, and tied scores, which share a mean rank: 5 3.5 3.5 1 2. Pearson's correlation of the ranks,
  # centred 2 1 0 -2 -1 and 2 .5 .5 -2 -1: 9.5 / sqrt(10 * 9.5).
  order = [3, 0, 4, 2, 1]
  tied_scores = np.array([5.0, 3.0, 3.0, 1.0, 2.0])
  assert phrase_similarity.phrase_similarity(first[order], second[order], tied_scores[order]) == pytest.approx(
      {"spearman": np.sqrt(0.95)})


def test_constant_cosines_have_no_correlation():
  vectors = np.ones((3, 2))
  with pytest.warns(scipy.stats.ConstantInputWarning):
    assert np.isnan(phrase_similarity.phrase_similarity(vectors, vectors, [1.0, 2.0, 3.0])["spearman"])


def test_shapes_are_checked():
  vectors = np.ones((3, 2))
  for first, second, scores in ((vectors, vectors[:2], [1.0, 2.0, 3.0]), (vectors, vectors, [1.0, 2.0]),
                                (vectors[:1], vectors[:1], [1.0])):
    with pytest.raises(ValueError, match=r"Expected vectors \[N, d\] of both phrases and \[N\] human scores"):
      phrase_similarity.phrase_similarity(first, second, scores)
  with pytest.raises(ValueError, match=r"Human scores hold NaN"):
    phrase_similarity.phrase_similarity(vectors, vectors, [1.0, np.nan, 3.0])
