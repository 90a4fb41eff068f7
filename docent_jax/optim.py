"""The one optimizer builder: AdamW, warm-up then linear decay or a constant rate, clipping, regex lr multipliers.

Every training run (pre-training and fine-tuning alike) gets its optimizer from `create_optimizer`
with the config's `optim` block, so that a fine-tuning stage differs from pre-training only in values.
"""
import re
from typing import Any

import jax
import ml_collections
import optax


SCHEDULES = ("linear", "constant")


def create_optimizer(config: ml_collections.ConfigDict, num_steps: int) -> optax.GradientTransformation:
  """AdamW with linear warm-up, then linear decay to zero (`schedule` "linear") or a constant rate ("constant").

  Updates follow global-norm gradient clipping at `grad_clip_norm` (0: no clipping). Biases and LayerNorm
  parameters (all 1-D) are not decayed. `config.lr_multipliers` scales the updates of params whose path
  matches a regex; a multiplier of 0 freezes them.
  """
  schedule_name = config.get("schedule", "linear")
  if schedule_name not in SCHEDULES:
    raise ValueError(f"config.optim.schedule = {schedule_name!r}: valid: {list(SCHEDULES)}.")
  if config.grad_clip_norm < 0:
    raise ValueError(f"config.optim.grad_clip_norm = {config.grad_clip_norm!r}: must be 0 (no clipping) or more.")
  warmup = min(config.warmup_steps, num_steps)
  after_warmup = (optax.constant_schedule(config.learning_rate) if schedule_name == "constant" else
                  optax.linear_schedule(config.learning_rate, 0.0, max(num_steps - warmup, 1)))
  schedule = optax.join_schedules([optax.linear_schedule(0.0, config.learning_rate, max(warmup, 1)), after_warmup],
                                  [warmup])
  decay_mask = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)
  clipping = [optax.clip_by_global_norm(config.grad_clip_norm)] if config.grad_clip_norm else []
  return optax.chain(
      *clipping,
      optax.adamw(schedule, b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay,
                   mask=decay_mask),
      scale_by_path(config.lr_multipliers))


def param_path(path: tuple[Any, ...]) -> str:
  """'entities/embedding' for the tree path of params['entities']['embedding']."""
  return "/".join(str(getattr(key, "key", getattr(key, "name", key))) for key in path)


def scale_by_path(multipliers: Any) -> optax.GradientTransformation:
  """Multiplies the updates of params whose path matches a regex: ((regex, multiplier), ...).

  The first matching regex wins. A table whose rows are updated only when their entity is in the
  batch (e.g. an entity table) typically needs a larger learning rate than the encoder; a fresh
  head on a pre-trained encoder too.
  """
  patterns = [(re.compile(pattern), float(multiplier)) for pattern, multiplier in multipliers]

  def factor(path: tuple[Any, ...]) -> float:
    name = param_path(path)
    return next((multiplier for pattern, multiplier in patterns if pattern.search(name)), 1.0)

  def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
    del params
    return jax.tree_util.tree_map_with_path(lambda path, u: u * factor(path), updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
