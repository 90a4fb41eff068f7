"""BERT's masked-language-model corruption, inside jit: choose positions, then [MASK] / random / keep."""
import math

import jax
import jax.numpy as jnp


def mask_tokens(rng: jax.Array, tokens: jax.Array, maskable: jax.Array, *, rate: float, mask_id: int,
                vocab_size: int, mask_fraction: float = 0.8,
                random_fraction: float = 0.1) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Corrupts each `maskable` position with probability `rate`.

  A chosen position becomes `mask_id` with probability `mask_fraction`, a random id in
  [0, vocab_size) with probability `random_fraction`, and stays as it was otherwise (BERT: 80/10/10).
  Every row gets at least one chosen position when it has a maskable one, so no example is wasted.

  Returns:
    (corrupted tokens, labels = the original tokens, chosen mask [same shape, bool]).
  """
  choose_rng, fallback_rng, kind_rng, random_rng = jax.random.split(rng, 4)
  chosen = maskable & jax.random.bernoulli(choose_rng, rate, tokens.shape)
  # Rows that drew nothing get one maskable position, picked uniformly.
  noise = jnp.where(maskable, jax.random.uniform(fallback_rng, tokens.shape), -1.0)
  fallback = (noise == noise.max(axis=-1, keepdims=True)) & maskable
  chosen = jnp.where(chosen.any(axis=-1, keepdims=True), chosen, fallback)
  kind = jax.random.uniform(kind_rng, tokens.shape)
  random_ids = jax.random.randint(random_rng, tokens.shape, 0, vocab_size, dtype=tokens.dtype)
  corrupted = jnp.where(kind < mask_fraction, jnp.asarray(mask_id, tokens.dtype),
                        jnp.where(kind < mask_fraction + random_fraction, random_ids, tokens))
  return jnp.where(chosen, corrupted, tokens), tokens, chosen


# Predictions per row at most: twice the expected number of chosen positions, so that capping (as
# BERT's max_predictions_per_seq) almost never drops one.
_PREDICTION_HEADROOM = 2.0


def max_predictions(length: int, rate: float, max_maskable: int) -> int:
  """Static number of predicted positions per row of `length` tokens, `max_maskable` of them maskable."""
  return max(1, min(max_maskable, math.ceil(_PREDICTION_HEADROOM * rate * length)))


def cap_predictions(rng: jax.Array, tokens: jax.Array, corrupted: jax.Array, chosen: jax.Array,
                    num_predictions: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Keeps at most `num_predictions` chosen positions per row (picked at random), so the output layer
  runs on [batch, num_predictions] states instead of every position.

  Returns (tokens with only the kept positions corrupted, positions [b, k], predicted [b, k]: which
  of the positions were chosen; the others are filler to score and ignore).
  """
  priority = chosen + 0.5 * jax.random.uniform(rng, chosen.shape)
  _, positions = jax.lax.top_k(priority, num_predictions)
  predicted = jnp.take_along_axis(chosen, positions, axis=1)
  kept = jnp.zeros_like(chosen).at[jnp.arange(chosen.shape[0])[:, None], positions].set(predicted)
  return jnp.where(kept, corrupted, tokens), positions, predicted
