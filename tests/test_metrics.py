"""Ranking and classification metrics against hand-computed values."""
import numpy as np
import pytest

from docent_jax.evaluation import metrics


def test_ranks_with_ties_and_filtering():
  scores = np.array([
      [3.0, 1.0, 3.0, 2.0, 3.0],  # target 0 ties with columns 2 and 4
      [0.5, 0.9, 0.1, 0.7, 0.2],  # target 2: columns 0, 1, 3 and 4 score higher
  ], np.float32)
  target = np.array([0, 2])
  np.testing.assert_allclose(metrics.ranks_from_scores(scores, target), [1 + 2 / 2, 1 + 4])

  filter_mask = np.zeros(scores.shape, bool)
  filter_mask[0, 2] = True  # one tie left out: 1 + 1/2
  filter_mask[0, 0] = True  # the target itself is never left out
  filter_mask[1, [1, 2, 3]] = True  # two higher ones left out, and the target again: 1 + 2
  np.testing.assert_allclose(metrics.ranks_from_scores(scores, target, filter_mask), [1.5, 3.0])


def test_constant_scores_rank_in_the_middle():
  ranks = metrics.ranks_from_scores(np.zeros((1, 9)), np.array([4]))
  np.testing.assert_allclose(ranks, [5.0])


def test_non_finite_target_score_gives_nan_rank_and_is_rejected():
  ranks = metrics.ranks_from_scores(np.array([[np.nan, 1.0], [1.0, 2.0]]), np.array([0, 0]))
  assert np.isnan(ranks[0]) and ranks[1] == 2.0
  with pytest.raises(ValueError, match="1 of 2 ranks are NaN"):
    metrics.ranking_metrics(ranks)


def test_ranking_metrics():
  result = metrics.ranking_metrics(np.array([1.0, 2.0, 4.0, 20.0, 1.5]))
  assert result == pytest.approx({
      "mrr": (1 + 1 / 2 + 1 / 4 + 1 / 20 + 1 / 1.5) / 5,
      "hits@1": 1 / 5,  # a tie-averaged 1.5 is not a hit at 1
      "hits@3": 3 / 5,
      "hits@10": 4 / 5,
  })
  with pytest.raises(ValueError, match="1-based"):
    metrics.ranking_metrics(np.array([0.0, 1.0]))
  with pytest.raises(ValueError, match="non-empty"):
    metrics.ranking_metrics(np.array([]))


def test_shape_errors():
  with pytest.raises(ValueError, match=r"scores \[Q, C\]"):
    metrics.ranks_from_scores(np.zeros(3), np.zeros(3, int))
  with pytest.raises(ValueError, match="filter_mask shape"):
    metrics.ranks_from_scores(np.zeros((2, 3)), np.zeros(2, int), np.zeros((2, 2), bool))


def test_accuracy_and_balanced_accuracy():
  y_true = np.array(["a", "a", "a", "b"])
  y_pred = np.array(["a", "a", "b", "b"])
  assert metrics.accuracy(y_true, y_pred) == pytest.approx(3 / 4)
  # Recall of 'a' is 2/3, of 'b' 1; a class only predicted (none here) would not count.
  assert metrics.balanced_accuracy(y_true, y_pred) == pytest.approx((2 / 3 + 1) / 2)
  assert metrics.balanced_accuracy([0, 0, 1, 2], [0, 1, 1, 1]) == pytest.approx((1 / 2 + 1 + 0) / 3)
  with pytest.raises(ValueError, match="one length"):
    metrics.accuracy([0, 1], [0])
