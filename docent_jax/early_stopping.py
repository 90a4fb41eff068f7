"""Early stopping on the periodic evaluations (`train.early_stopping`).

A run stops when `patience` evaluations in a row have not improved `metric` by more than `min_delta` over the best
value so far. The count is replayed from the run's evaluation log, so a resumed run goes on with the count it had.
"""
import dataclasses
from typing import Iterable

import ml_collections


@dataclasses.dataclass
class EarlyStopping:
  metric: str  # '<split>/<metric>' of an evaluator with every_steps, e.g. 'validation/loss'.
  mode: str  # 'max' or 'min'.
  patience: int  # Evaluations without improvement before the run stops.
  min_delta: float = 0.0  # An improvement must exceed it.
  best: float | None = None
  best_step: int | None = None
  evaluations_without_improvement: int = 0

  def update(self, step: int, metrics: dict[str, float]) -> str | None:
    """Takes one evaluation's flat metrics; returns why the run stops at `step`, or None to go on."""
    if self.metric not in metrics:
      return None
    value = float(metrics[self.metric])
    improved = self.best is None or (value > self.best + self.min_delta if self.mode == "max"
                                     else value < self.best - self.min_delta)
    if improved:
      self.best, self.best_step, self.evaluations_without_improvement = value, step, 0
      return None
    self.evaluations_without_improvement += 1
    if self.evaluations_without_improvement < self.patience:
      return None
    return (f"{self.metric} has not improved by more than {self.min_delta:g} for {self.patience} evaluations "
            f"(best {self.best:.6g} at step {self.best_step}; {value:.6g} at step {step})")

  def replay(self, evaluations: Iterable[tuple[int, dict[str, float]]]) -> str | None:
    """Updates with a run's earlier evaluations, in order; returns the reason if they already stop it."""
    reason = None
    for step, metrics in evaluations:
      reason = self.update(step, metrics) or reason
    return reason


def from_config(train: ml_collections.ConfigDict) -> EarlyStopping | None:
  """The rule of `train.early_stopping` (checked by `config_schema`), or None when it is off (patience 0). Its
  metric and mode default to `train.best_metric` and `train.best_mode`."""
  rule = train.get("early_stopping")
  if rule is None or not rule.patience:
    return None
  return EarlyStopping(metric=rule.metric or train.best_metric, mode=rule.mode or train.best_mode,
                       patience=int(rule.patience), min_delta=float(rule.min_delta))
