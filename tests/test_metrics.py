"""Ranking and classification metrics against hand-computed values."""
import numpy as np
import pytest

from docent_jax.evaluation import metrics
from docent_jax.evaluation import pair_matching


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


# Row metrics: each row ranks its candidates by descending score.
ORDERED = np.array([[0.9, 0.8, 0.7, 0.6]])
HITS = np.array([[1, 0, 1, 0]])


def test_average_precision():
  # Positives at ranks 1 and 3: (1/1 + 2/3) / 2.
  np.testing.assert_allclose(metrics.average_precision(ORDERED, HITS), [5 / 6])
  # A tie counts at the end of its run: the positive shares rank 1-2 with a negative, precision 1/2.
  np.testing.assert_allclose(metrics.average_precision([[1.0, 1.0, 0.0]], [[0, 1, 0]]), [0.5])
  # Leaving out the negative at rank 2 lifts the second positive to rank 2.
  np.testing.assert_allclose(metrics.average_precision(ORDERED, HITS, [[1, 0, 1, 1]]), [1.0])
  assert np.isnan(metrics.average_precision([[1.0, 2.0]], [[0, 0]])[0])


def test_average_precision_and_auc_match_scikit_learn():
  sk_metrics = pytest.importorskip("sklearn.metrics")
  rng = np.random.default_rng(0)
  scores = rng.integers(0, 4, (40, 9)).astype(float)  # many ties
  labels = rng.random((40, 9)) < 0.3
  mask = rng.random((40, 9)) < 0.8
  ap, auc = metrics.average_precision(scores, labels, mask), metrics.roc_auc(scores, labels, mask)
  for row in range(40):
    y, s = labels[row][mask[row]], scores[row][mask[row]]
    if y.any():
      assert ap[row] == pytest.approx(sk_metrics.average_precision_score(y, s))
    if y.any() and not y.all():
      assert auc[row] == pytest.approx(sk_metrics.roc_auc_score(y, s))
    else:
      assert np.isnan(auc[row])


def test_roc_auc():
  # Positive pairs (0, 1), (0, 3), (2, 3) are ordered right, (2, 1) wrong.
  np.testing.assert_allclose(metrics.roc_auc(ORDERED, HITS), [3 / 4])
  # Left-out candidates do not count as negatives: only (0, 1) and (2, 1) remain.
  np.testing.assert_allclose(metrics.roc_auc(ORDERED, HITS, [[1, 1, 1, 0]]), [1 / 2])
  # A tie counts half; an all-positive row has no pair.
  result = metrics.roc_auc([[1.0, 1.0, 0.0], [1.0, 2.0, 3.0]], [[1, 0, 0], [1, 1, 1]])
  np.testing.assert_allclose(result, [(0.5 + 1) / 2, np.nan])


def test_precision_and_recall_at_k():
  scores, labels = np.array([[4.0, 3.0, 2.0, 1.0]]), np.array([[0, 1, 1, 0]])
  np.testing.assert_allclose(metrics.precision_at_k(scores, labels, [1, 2, 3, 5]), [[0, 1 / 2, 2 / 3, 2 / 5]])
  np.testing.assert_allclose(metrics.recall_at_k(scores, labels, [1, 2, 3]), [[0, 1 / 2, 1]])
  # Constant scores: every candidate is equally likely in the top 1.
  np.testing.assert_allclose(metrics.precision_at_k(np.zeros((1, 4)), [[1, 0, 0, 0]], [1, 2]), [[1 / 4, 1 / 4]])
  assert np.isnan(metrics.recall_at_k(scores, [[0, 0, 0, 0]], [1])).all()
  with pytest.raises(ValueError, match="binary labels"):
    metrics.precision_at_k(scores, [[0, 2, 0, 0]], [1])
  with pytest.raises(ValueError, match="positive integers"):
    metrics.precision_at_k(scores, labels, [0])


def test_ndcg_at_k():
  scores, relevance = np.array([[4.0, 3.0, 2.0, 1.0]]), np.array([[0, 2, 1, 0]])
  log3 = np.log2(3)
  np.testing.assert_allclose(metrics.ndcg_at_k(scores, relevance, [1, 2, 4]),
                             [[0, (2 / log3) / (2 + 1 / log3), (2 / log3 + 1 / 2) / (2 + 1 / log3)]])
  # Exponential gain: 2^2 - 1 = 3 and 2^1 - 1 = 1.
  np.testing.assert_allclose(metrics.ndcg_at_k(scores, relevance, [2], gain="exponential"),
                             [[(3 / log3) / (3 + 1 / log3)]])
  # Tied at the top: each position holds the mean gain (0 + 2) / 2 in expectation.
  np.testing.assert_allclose(metrics.ndcg_at_k([[1.0, 1.0, 0.0]], [[0, 2, 0]], [1]), [[1 / 2]])
  assert np.isnan(metrics.ndcg_at_k(scores, np.zeros((1, 4)), [3])).all()
  with pytest.raises(ValueError, match="Unknown NDCG gain"):
    metrics.ndcg_at_k(scores, relevance, [1], gain="log")


def test_reciprocal_rank():
  scores = np.array([[4.0, 3.0, 2.0, 1.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
  labels = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
  # Row 1: two relevant tied with one other, the first relevant is at 1 (p = 2/3) or 2: 4/3.
  np.testing.assert_allclose(metrics.reciprocal_rank(scores, labels), [1 / 2, 3 / 4, np.nan])


def test_mean_over_rows_and_score_checks():
  assert metrics.mean_over_rows(np.array([0.5, np.nan, 1.0]), "AP") == (0.75, 1)
  mean, skipped = metrics.mean_over_rows(np.array([[0.5, 1.0], [np.nan, np.nan], [1.0, 0.0]]), "P@k")
  np.testing.assert_allclose(mean, [0.75, 0.5])
  assert skipped == 1
  with pytest.raises(ValueError, match="AP: undefined for all 1 rows"):
    metrics.mean_over_rows(np.array([np.nan]), "AP")
  with pytest.raises(ValueError, match=r"1 scores are NaN or infinite \(first at row 0, column 1\)"):
    metrics.roc_auc([[0.0, np.nan]], [[1, 0]])
  # A left-out candidate may have any score.
  np.testing.assert_allclose(metrics.roc_auc([[1.0, 0.0, np.nan]], [[1, 0, 0]], [[1, 1, 0]]), [1.0])


def test_match_metrics_are_the_positive_class_with_zero_for_a_zero_denominator():
  # Logits > 0 predict a match. 2 true positives, 1 false positive, 2 false negatives: P = 2/3, R = 2/4, F1 = 4/7.
  labels, logits = np.array([1, 1, 1, 1, 0, 0, 0]), np.array([2.0, 1.0, -1.0, -2.0, 0.5, -0.5, -3.0])
  result = pair_matching.match_metrics(logits, labels)
  assert {k: result[k] for k in ("precision", "recall", "f1")} == pytest.approx(
      {"precision": 2 / 3, "recall": 1 / 2, "f1": 4 / 7})
  assert result["loss"] == pytest.approx(np.mean(np.logaddexp(0.0, logits) - labels * logits))
  # Nothing predicted positive: precision, recall and F1 are 0 (zero_division=0).
  nothing = pair_matching.match_metrics(np.array([-1.0, -1.0]), np.array([1, 0]))
  assert (nothing["precision"], nothing["recall"], nothing["f1"]) == (0.0, 0.0, 0.0)
  with pytest.raises(FloatingPointError, match="1 of 2 pair logits are not finite"):
    pair_matching.match_metrics(np.array([np.nan, 1.0]), np.array([1, 0]))