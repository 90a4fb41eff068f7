import jax
import jax.numpy as jnp
import numpy as np

from docent_jax.models import masking


def test_masking_rates_and_only_maskable_positions():
  tokens = jnp.tile(jnp.arange(10, 74, dtype=jnp.int32), (512, 1))
  maskable = jnp.ones_like(tokens, bool).at[:, 0].set(False)
  corrupted, labels, chosen = masking.mask_tokens(jax.random.key(0), tokens, maskable, rate=0.15, mask_id=3,
                                                  vocab_size=100)
  chosen, corrupted = np.asarray(chosen), np.asarray(corrupted)
  np.testing.assert_array_equal(labels, tokens)
  assert not chosen[:, 0].any()
  assert abs(chosen.mean() - 0.15 * 63 / 64) < 0.01
  assert (corrupted[~chosen] == np.asarray(tokens)[~chosen]).all()
  picked = corrupted[chosen]
  assert abs((picked == 3).mean() - 0.8) < 0.02
  kept = (picked == np.asarray(tokens)[chosen]).mean()
  assert 0.08 < kept < 0.13  # 10% kept, plus random draws that hit the original id.


def test_every_row_with_a_maskable_position_gets_one():
  tokens = jnp.arange(40, dtype=jnp.int32).reshape(4, 10)
  maskable = jnp.zeros_like(tokens, bool).at[:3, 5].set(True)
  _, _, chosen = masking.mask_tokens(jax.random.key(1), tokens, maskable, rate=0.0, mask_id=3, vocab_size=50)
  np.testing.assert_array_equal(np.asarray(chosen).sum(axis=1), [1, 1, 1, 0])
  assert np.asarray(chosen)[:3, 5].all()
