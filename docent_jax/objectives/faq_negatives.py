"""The negatives of FAQ retrieval fine-tuning (`objectives.faq_retrieval`): random, or mined from a retriever's
ranking with positive-aware rules.

Li & Zhao contrast each training query with the FAQ questions a retriever ranks highest besides the query's own.
In a FAQ whose items overlap (two items share an answer, or ask nearly the same question), those include items
that answer the query too: false negatives, which the loss pushes away from it. `mine` drops a candidate by the
rules of positive-aware mining (NV-Retriever's TopK-PercPos; sentence-transformers' `mine_hard_negatives`):

  same answer      its answer is the positive's, after `faq.normalize_answer`;
  rank window      it ranks among the first `range_min` candidates, or at `range_max` or later (0: no end),
                   counting every item but the positive from 0;
  relative margin  its score is above (1 - `relative_margin`) x the positive's score (0: off).

A query takes its `k` best-ranked candidates that pass every rule; where fewer pass, the rest are drawn at random
among the items that share no answer with the positive. With every rule off, the negatives are the plain top k.
"""
import collections
import dataclasses
from typing import Sequence

import numpy as np

from docent_jax.data.universal import faq

RULES = ("same_answer", "rank_window", "relative_margin")


@dataclasses.dataclass(frozen=True)
class MiningRules:
  """The rules of `mine` (a config's `loss.mining`)."""
  range_min: int = 0
  range_max: int = 0
  relative_margin: float = 0.0
  exclude_same_answer: bool = False

  def __post_init__(self):
    if self.range_min < 0 or self.range_max < 0 or (self.range_max and self.range_max <= self.range_min):
      raise ValueError(f"loss.mining: range_min {self.range_min} and range_max {self.range_max} must be 0 or more, "
                       "with range_max 0 (no end) or above range_min.")
    if not 0 <= self.relative_margin < 1:
      raise ValueError(f"loss.mining.relative_margin must be in [0, 1); got {self.relative_margin}.")


def _check_relevant(relevant: np.ndarray, num_items: int, k: int) -> np.ndarray:
  relevant = np.asarray(relevant, np.int64).reshape(-1)
  if len(relevant) and (relevant.min() < 0 or relevant.max() >= num_items):
    raise ValueError(f"Relevant indices must be in [0, {num_items}).")
  if not 1 <= k <= num_items - 1:
    raise ValueError(f"Need 1 <= k <= {num_items - 1} (the other items); got k={k}.")
  return relevant


def _check(scores: np.ndarray, relevant: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  scores = np.asarray(scores, np.float64)
  if scores.ndim != 2 or np.shape(relevant) != (scores.shape[0],):
    raise ValueError(f"Expected scores [Q, N] and relevant [Q]; got {scores.shape} and {np.shape(relevant)}.")
  if not np.isfinite(scores).all():
    raise ValueError("Scores must be finite.")
  return scores, _check_relevant(relevant, scores.shape[1], k)


def mine(scores: np.ndarray, relevant: np.ndarray, answers: Sequence[str], k: int, rules: MiningRules,
         rng: np.random.Generator) -> tuple[np.ndarray, dict[str, int]]:
  """int64 [Q, k] negatives of each query, from `scores` [Q, N] (the retriever's; equal scores rank by item
  index), and what the rules did: per rule, the candidates it dropped among those a query looked at before it had
  k (all of its candidates where it never had k); 'filled_at_random' negatives, over 'queries_filled' queries."""
  scores, relevant = _check(scores, relevant, k)
  groups = faq.answer_groups(answers)
  if len(groups) != scores.shape[1]:
    raise ValueError(f"{len(groups)} answers for {scores.shape[1]} items.")
  order = np.argsort(-scores, axis=1, kind="stable")
  negatives = np.empty((len(relevant), k), np.int64)
  counts = collections.Counter({name: 0 for name in (*RULES, "filled_at_random", "queries_filled")})
  for query, positive in enumerate(relevant):
    ranked = order[query][order[query] != positive]
    same_answer = groups[ranked] == groups[positive]
    rank = np.arange(len(ranked))
    outside = (rank < rules.range_min) | ((rank >= rules.range_max) if rules.range_max else False)
    above = (scores[query, ranked] > (1 - rules.relative_margin) * scores[query, positive]
             if rules.relative_margin else np.zeros(len(ranked), bool))
    # Each dropped candidate counts for the first rule that drops it, in RULES' order.
    dropped_by = np.select([same_answer & rules.exclude_same_answer, outside, above], [0, 1, 2], default=-1)
    taken = np.flatnonzero(dropped_by < 0)[:k]
    looked_at = dropped_by[:taken[-1] + 1] if len(taken) == k else dropped_by
    for index, rule in enumerate(RULES):
      counts[rule] += int(np.count_nonzero(looked_at == index))
    chosen = ranked[taken]
    if len(chosen) < k:
      pool = np.setdiff1d(np.flatnonzero(groups != groups[positive]) if rules.exclude_same_answer
                          else np.delete(np.arange(scores.shape[1]), positive), chosen)
      if len(pool) < k - len(chosen):
        raise ValueError(f"Query {query}: {len(chosen)} negatives pass the rules and only {len(pool)} other items "
                         f"share no answer with its item; {k} are needed (lower loss.num_negatives).")
      chosen = np.concatenate([chosen, rng.choice(pool, k - len(chosen), replace=False)])
      counts["filled_at_random"] += k - len(taken)
      counts["queries_filled"] += 1
    negatives[query] = chosen
  return negatives, dict(counts)


def random_negatives(num_items: int, relevant: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
  """int64 [Q, k]: per query k distinct items other than its relevant one, a uniform draw in random order."""
  relevant = _check_relevant(relevant, num_items, k)
  # The first k of a random permutation of the num_items - 1 other items, numbered 0.. with the relevant
  # item skipped.
  draws = np.argsort(rng.random((len(relevant), num_items - 1)), axis=1)[:, :k]
  return draws + (draws >= relevant[:, None])


def with_random(negatives: np.ndarray, relevant: np.ndarray, num_items: int, k: int,
                rng: np.random.Generator) -> np.ndarray:
  """int64 [Q, k]: each query's `negatives` (e.g. its top mined ones), then distinct items drawn at random among the
  rest (not its relevant item, not one already taken) up to k."""
  relevant = _check_relevant(relevant, num_items, k)
  filled = np.empty((len(relevant), k), np.int64)
  for query, taken in enumerate(np.asarray(negatives, np.int64)):
    pool = np.setdiff1d(np.arange(num_items), [relevant[query], *taken])
    filled[query] = np.concatenate([taken, rng.choice(pool, k - len(taken), replace=False)])
  return filled
