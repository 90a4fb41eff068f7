"""Losses shared by the objectives. Each takes scores and returns a scalar mean."""
from collections.abc import Callable

import jax
import jax.numpy as jnp


def margin_loss(positive: jax.Array, negative: jax.Array, margin: float = 1.0) -> jax.Array:
  """Hinge on each (positive, negative) pair: mean of max(0, margin - s+ + s-).

  positive: [B]; negative: [B, K].
  """
  return jnp.mean(jax.nn.relu(margin - positive[:, None] + negative))


def negative_log_likelihood(positive: jax.Array, negative: jax.Array, margin: float = 1.0) -> jax.Array:
  """Binary cross-entropy of sigmoid scores: true triples labelled 1, corrupted ones 0.

  Positives and negatives are averaged separately and then together, so the number of negatives
  per triple does not change the balance. `margin` is unused; it keeps one signature for all losses.
  """
  del margin
  return 0.5 * (jnp.mean(jax.nn.softplus(-positive)) + jnp.mean(jax.nn.softplus(negative)))


LINK_PREDICTION_LOSSES: dict[str, Callable[..., jax.Array]] = {
    "margin": margin_loss,
    "nll": negative_log_likelihood,
}


def get_link_prediction_loss(name: str) -> Callable[..., jax.Array]:
  if name not in LINK_PREDICTION_LOSSES:
    raise ValueError(f"Unknown loss {name!r}; valid: {sorted(LINK_PREDICTION_LOSSES)}.")
  return LINK_PREDICTION_LOSSES[name]
