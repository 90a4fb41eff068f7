"""Ranking and classification metrics.

Ranks are tie-averaged: a target tied with k other candidates gets the mean of its optimistic and
pessimistic rank, 1 + (#higher) + k / 2, so constant scores cannot look good.
"""
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

HITS_AT = (1, 3, 10)


def tie_averaged_rank(num_higher: jax.Array, num_tied_others: jax.Array) -> jax.Array:
  """1 + num_higher + num_tied_others / 2, as float32."""
  return 1.0 + jnp.asarray(num_higher, jnp.float32) + 0.5 * jnp.asarray(num_tied_others, jnp.float32)


def ranks_from_scores(scores: jax.Array | np.ndarray, target_index: jax.Array | np.ndarray,
                      filter_mask: jax.Array | np.ndarray | None = None) -> jax.Array:
  """Tie-averaged rank of each row's target among that row's candidates.

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


def _labels(y_true: np.ndarray | Sequence, y_pred: np.ndarray | Sequence) -> tuple[np.ndarray, np.ndarray]:
  y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
  if y_true.ndim != 1 or y_true.shape != y_pred.shape or not y_true.size:
    raise ValueError(f"Expected two non-empty 1-D label arrays of one length; got {y_true.shape} and {y_pred.shape}.")
  return y_true, y_pred


def accuracy(y_true: np.ndarray | Sequence, y_pred: np.ndarray | Sequence) -> float:
  """Fraction of predictions equal to the true label."""
  y_true, y_pred = _labels(y_true, y_pred)
  return float(np.mean(y_true == y_pred))


def balanced_accuracy(y_true: np.ndarray | Sequence, y_pred: np.ndarray | Sequence) -> float:
  """Mean over the classes present in `y_true` of the recall of that class."""
  y_true, y_pred = _labels(y_true, y_pred)
  classes, class_index = np.unique(y_true, return_inverse=True)
  correct_per_class = np.bincount(class_index, weights=(y_true == y_pred), minlength=len(classes))
  return float(np.mean(correct_per_class / np.bincount(class_index, minlength=len(classes))))
