"""Ranking metrics that scikit-learn and the IR libraries lack: accuracy, F1, pooled ROC-AUC come from
scikit-learn, TREC-style NDCG of retrieval runs from ir-measures; these are vectorised over many rankings at once
(an [N, C] score matrix, with candidate masks and NaN for undefined rows), where those compute one at a time.

Ranks are tie-averaged: a target tied with k other candidates gets the mean of its optimistic and
pessimistic rank, 1 + (#higher) + k / 2, so constant scores cannot look good.

Row metrics (average precision, ROC-AUC, Precision/Recall/NDCG@k, reciprocal rank) score each row
of an [N, C] score matrix against that row's labels; tag prediction and movie search build on them.
"""
from collections.abc import Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

HITS_AT = (1, 3, 10)


def tie_averaged_rank(num_higher: jax.Array, num_tied_others: jax.Array) -> jax.Array:
  """1 + num_higher + num_tied_others / 2, as float32."""
  return 1.0 + jnp.asarray(num_higher, jnp.float32) + 0.5 * jnp.asarray(num_tied_others, jnp.float32)


def ranks_from_scores(scores: jax.Array | np.ndarray, target_index: jax.Array | np.ndarray,
                      filter_mask: jax.Array | np.ndarray | None = None) -> jax.Array:
  """Tie-averaged rank of each row's target among that row's candidates (in JAX: link prediction ranks inside
  its jitted, sharded scoring, where no library runs).

  Args:
    scores: [Q, C] scores, higher is better.
    target_index: [Q] column of each row's target.
    filter_mask: optional [Q, C] bool, True for candidates to leave out of the ranking (other known
      true answers). The target itself is never left out, even where the mask marks it.

  Returns:
    [Q] float32 ranks in [1, C]; NaN where the target's score is not finite, so that a broken
    model cannot pass for a good one (`ranking_metrics` rejects NaN ranks).
  """
  scores = jnp.asarray(scores)
  target_index = jnp.asarray(target_index)
  if scores.ndim != 2 or target_index.shape != scores.shape[:1]:
    raise ValueError(f"Expected scores [Q, C] and target_index [Q]; got {scores.shape} and {target_index.shape}.")
  target_scores = jnp.take_along_axis(scores, target_index[:, None], axis=1)
  counted = jnp.ones(scores.shape, bool)
  if filter_mask is not None:
    filter_mask = jnp.asarray(filter_mask, bool)
    if filter_mask.shape != scores.shape:
      raise ValueError(f"filter_mask shape {filter_mask.shape} differs from scores shape {scores.shape}.")
    is_target = jnp.arange(scores.shape[1])[None, :] == target_index[:, None]
    counted = ~filter_mask | is_target
  num_higher = jnp.sum(counted & (scores > target_scores), axis=1)
  # The target ties with itself; it is not one of the "others".
  num_tied_others = jnp.sum(counted & (scores == target_scores), axis=1) - 1
  ranks = tie_averaged_rank(num_higher, num_tied_others)
  return jnp.where(jnp.isfinite(target_scores[:, 0]), ranks, jnp.nan)


def ranking_metrics(ranks: jax.Array | np.ndarray, hits_at: Sequence[int] = HITS_AT) -> dict[str, float]:
  """Mean reciprocal rank and Hits@k of 1-based ranks: {'mrr', 'hits@1', 'hits@3', 'hits@10'}."""
  ranks = np.asarray(ranks, np.float64)
  if ranks.ndim != 1 or not ranks.size:
    raise ValueError(f"Expected a non-empty 1-D array of ranks, got shape {ranks.shape}.")
  num_nan = int(np.isnan(ranks).sum())
  if num_nan:
    raise ValueError(f"{num_nan} of {ranks.size} ranks are NaN: the target scores were not finite.")
  if ranks.min() < 1:
    raise ValueError(f"Ranks are 1-based; got a rank of {ranks.min()}.")
  metrics = {"mrr": float(np.mean(1.0 / ranks))}
  for k in hits_at:
    metrics[f"hits@{k}"] = float(np.mean(ranks <= k))
  return metrics


# Metrics over rows of scores: each row (an entity, or a query) ranks its candidates (tags, or entities) by
# descending score. Every function takes an optional [N, C] `candidate_mask` (True = ranked) and returns one
# value per row, NaN where the metric is undefined for that row; `mean_over_rows` averages the defined rows
# and counts the others. Ties are resolved in expectation over random tie-breaking, except in average
# precision, which follows the usual convention (scikit-learn, TREC) of one threshold per distinct score.

NDCG_GAINS = ("linear", "exponential")


def _check_rows(scores: np.ndarray | Sequence, labels: np.ndarray | Sequence,
                candidate_mask: np.ndarray | Sequence | None,
                binary: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Scores with left-out candidates at -inf, float labels that are 0 there, and the mask."""
  scores, labels = np.asarray(scores, np.float64), np.asarray(labels)
  if scores.ndim != 2 or labels.shape != scores.shape or not scores.size:
    raise ValueError(f"Expected non-empty scores [N, C] and labels of the same shape; got {scores.shape} and "
                     f"{labels.shape}.")
  if labels.dtype == bool:
    labels = labels.astype(np.float64)
  if not np.issubdtype(labels.dtype, np.number):
    raise ValueError(f"Labels must be numbers; got dtype {labels.dtype}.")
  mask = np.ones(scores.shape, bool) if candidate_mask is None else np.asarray(candidate_mask, bool)
  if mask.shape != scores.shape:
    raise ValueError(f"candidate_mask shape {mask.shape} differs from scores shape {scores.shape}.")
  # A NaN score would sort arbitrarily and could make a broken model look good.
  bad = ~np.isfinite(scores) & mask
  if bad.any():
    row, column = np.argwhere(bad)[0]
    raise ValueError(f"{int(bad.sum())} scores are NaN or infinite (first at row {row}, column {column}).")
  labels = np.where(mask, labels.astype(np.float64), 0.0)
  if binary and not np.isin(labels, (0.0, 1.0)).all():
    raise ValueError("Expected binary labels (0/1 or bool); use relevance grades only for NDCG.")
  if (labels < 0).any() or not np.isfinite(labels).all():
    raise ValueError("Relevance grades must be finite and non-negative.")
  return np.where(mask, scores, -np.inf), labels, mask


def _check_ks(ks: Sequence[int]) -> np.ndarray:
  ks = np.asarray(list(ks))
  if ks.ndim != 1 or not ks.size or not np.issubdtype(ks.dtype, np.integer) or ks.min() < 1:
    raise ValueError(f"ks must be a non-empty sequence of positive integers; got {ks.tolist()}.")
  return ks


def _sort_rows(scores: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, ...]:
  """Scores and values of each row, in order of descending score."""
  order = np.argsort(-scores, axis=1, kind="stable")
  return tuple(np.take_along_axis(x, order, axis=1) for x in (scores, *values))


def _tie_group_means(sorted_scores: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
  """Each value replaced by the mean over its run of equal scores.

  That mean is the expected value at each position of the run when ties are broken at random.
  """
  starts = np.ones(sorted_scores.shape, bool)
  starts[:, 1:] = sorted_scores[:, 1:] != sorted_scores[:, :-1]
  # Every row opens a group, so groups numbered across the flattened array never span two rows.
  group = np.cumsum(starts.ravel()) - 1
  means = np.bincount(group, weights=sorted_values.ravel()) / np.bincount(group)
  return means[group].reshape(sorted_scores.shape)


def _expected_hits_at(scores: np.ndarray, labels: np.ndarray, ks: np.ndarray) -> np.ndarray:
  """[N, len(ks)] expected number of relevant candidates among the top k."""
  sorted_scores, sorted_labels = _sort_rows(scores, labels)
  cumulative = np.cumsum(_tie_group_means(sorted_scores, sorted_labels), axis=1)
  return cumulative[:, np.minimum(ks, scores.shape[1]) - 1]


def average_precision(scores: np.ndarray | Sequence, labels: np.ndarray | Sequence,
                      candidate_mask: np.ndarray | Sequence | None = None) -> np.ndarray:
  """[N] average precision of each row's binary labels; NaN for rows without a positive (scikit-learn's takes one
  ranking at a time and no candidate mask).

  AP = sum over positives of the precision at the last position of that positive's run of tied
  scores, divided by the number of positives (equal to scikit-learn's `average_precision_score`).
  """
  scores, labels, _ = _check_rows(scores, labels, candidate_mask, binary=True)
  sorted_scores, sorted_labels = _sort_rows(scores, labels)
  num_columns = scores.shape[1]
  is_end = np.ones(scores.shape, bool)
  is_end[:, :-1] = sorted_scores[:, :-1] != sorted_scores[:, 1:]
  # For each position, the index of the last position of its tie run: a running minimum from the right.
  end = np.where(is_end, np.arange(num_columns), num_columns)
  end = np.minimum.accumulate(end[:, ::-1], axis=1)[:, ::-1]
  precision_at_end = np.take_along_axis(np.cumsum(sorted_labels, axis=1), end, axis=1) / (end + 1)
  num_positive = sorted_labels.sum(axis=1)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(num_positive > 0, (sorted_labels * precision_at_end).sum(axis=1) / num_positive, np.nan)


def _mann_whitney_auc(ranks: np.ndarray, labels: np.ndarray, num_below: np.ndarray | float,
                      num_negative: np.ndarray | float, axis: int | None) -> np.ndarray:
  """AUC from tie-averaged ascending ranks; `num_below` left-out candidates rank below every other."""
  num_positive = labels.sum(axis=axis)
  u = (ranks * labels).sum(axis=axis) - num_positive * (num_positive + 1) / 2 - num_positive * num_below
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where((num_positive > 0) & (num_negative > 0), u / (num_positive * num_negative), np.nan)


def roc_auc(scores: np.ndarray | Sequence, labels: np.ndarray | Sequence,
            candidate_mask: np.ndarray | Sequence | None = None) -> np.ndarray:
  """[N] ROC-AUC of each row; NaN for rows without a positive or without a negative (scikit-learn's takes one
  ranking at a time and no candidate mask).

  The probability that a random positive outscores a random negative, ties counting half. DOCENT
  reports this per entity, averaged over entities (`mean_over_rows`); `micro_roc_auc` pools pairs.
  """
  scores, labels, mask = _check_rows(scores, labels, candidate_mask, binary=True)
  ranks = scipy.stats.rankdata(scores, method="average", axis=1)
  num_negative = mask.sum(axis=1) - labels.sum(axis=1)
  return _mann_whitney_auc(ranks, labels, (~mask).sum(axis=1), num_negative, axis=1)


def precision_at_k(scores: np.ndarray | Sequence, labels: np.ndarray | Sequence, ks: Sequence[int],
                   candidate_mask: np.ndarray | Sequence | None = None) -> np.ndarray:
  """[N, len(ks)] fraction of the top k that is relevant (binary labels); always k in the denominator. Expected over
  random tie-breaking, which scikit-learn and trec_eval do not compute."""
  scores, labels, _ = _check_rows(scores, labels, candidate_mask, binary=True)
  ks = _check_ks(ks)
  return _expected_hits_at(scores, labels, ks) / ks


def recall_at_k(scores: np.ndarray | Sequence, labels: np.ndarray | Sequence, ks: Sequence[int],
                candidate_mask: np.ndarray | Sequence | None = None) -> np.ndarray:
  """[N, len(ks)] fraction of a row's relevant candidates in its top k; NaN for rows without one. Expected over
  random tie-breaking, as `precision_at_k`."""
  scores, labels, _ = _check_rows(scores, labels, candidate_mask, binary=True)
  hits = _expected_hits_at(scores, labels, _check_ks(ks))
  num_relevant = labels.sum(axis=1, keepdims=True)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(num_relevant > 0, hits / num_relevant, np.nan)


def ndcg_at_k(scores: np.ndarray | Sequence, relevance: np.ndarray | Sequence, ks: Sequence[int],
              gain: str = "linear", candidate_mask: np.ndarray | Sequence | None = None) -> np.ndarray:
  """[N, len(ks)] normalised discounted cumulative gain of graded relevance; NaN for rows without any (scikit-learn's
  `ndcg_score` returns one mean, counting rows without relevance as 0, and has no linear gain).

  DCG@k = sum_{i=1..k} gain(rel_i) / log2(i + 1), divided by the DCG@k of the ideal order. gain is
  'linear' (rel, the default: with vote counts as grades, 2^rel would let one heavily voted
  candidate outweigh all others) or 'exponential' (2^rel - 1).
  """
  if gain not in NDCG_GAINS:
    raise ValueError(f"Unknown NDCG gain {gain!r}; valid: {NDCG_GAINS}.")
  scores, relevance, _ = _check_rows(scores, relevance, candidate_mask, binary=False)
  ks = np.minimum(_check_ks(ks), scores.shape[1])
  gains = relevance if gain == "linear" else np.exp2(relevance) - 1.0
  discounts = 1.0 / np.log2(np.arange(2, scores.shape[1] + 2))
  sorted_scores, sorted_gains = _sort_rows(scores, gains)
  dcg = np.cumsum(_tie_group_means(sorted_scores, sorted_gains) * discounts, axis=1)[:, ks - 1]
  ideal = np.cumsum(-np.sort(-gains, axis=1) * discounts, axis=1)[:, ks - 1]
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(ideal > 0, dcg / ideal, np.nan)


def reciprocal_rank(scores: np.ndarray | Sequence, labels: np.ndarray | Sequence,
                    candidate_mask: np.ndarray | Sequence | None = None) -> np.ndarray:
  """[N] 1 / rank of each row's best-ranked relevant candidate; NaN for rows without one (expected over random
  tie-breaking, which scikit-learn and trec_eval do not compute).

  With r relevant and n other candidates tied at the best relevant score, the rank is
  1 + (#higher) + n / (r + 1), the expected rank of the first relevant one under random
  tie-breaking (n / 2 for a single relevant candidate, as in `tie_averaged_rank`).
  """
  scores, labels, mask = _check_rows(scores, labels, candidate_mask, binary=True)
  relevant = labels > 0
  best = np.max(np.where(relevant, scores, -np.inf), axis=1, keepdims=True)
  num_higher = np.sum(mask & (scores > best), axis=1)
  tied = mask & (scores == best)
  num_tied_relevant = np.sum(tied & relevant, axis=1)
  ranks = 1.0 + num_higher + np.sum(tied & ~relevant, axis=1) / (num_tied_relevant + 1)
  return np.where(relevant.any(axis=1), 1.0 / ranks, np.nan)


def mean_over_rows(values: np.ndarray, what: str) -> tuple[float | np.ndarray, int]:
  """Mean over the rows where `values` ([N] or [N, K]) is defined, and how many rows were skipped.

  Skipped rows (NaN: the metric is undefined there) are logged. Raises when no row is defined.
  """
  values = np.asarray(values, np.float64)
  defined = ~np.isnan(values.reshape(len(values), -1)).any(axis=1)
  if not defined.any():
    raise ValueError(f"{what}: undefined for all {len(values)} rows (no relevant candidate, or no other).")
  num_skipped = int((~defined).sum())
  if num_skipped:
    logging.info("%s: skipped %d of %d rows where it is undefined.", what, num_skipped, len(values))
  mean = values[defined].mean(axis=0)
  return (float(mean) if mean.ndim == 0 else mean), num_skipped
