"""BERT's masked-language-model corruption, inside jit: choose positions, then [MASK] / random / keep."""
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
