import jax
import jax.numpy as jnp
import numpy as np

from docent_jax.modules import masking


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


def test_max_predictions_leaves_headroom_and_respects_the_maskable_count():
  assert masking.max_predictions(64, 0.15, max_maskable=62) == 20
  assert masking.max_predictions(8, 0.9, max_maskable=6) == 6
  assert masking.max_predictions(4, 0.0, max_maskable=2) == 1


def test_cap_predictions_keeps_at_most_k_chosen_positions_and_corrupts_only_those():
  rng = jax.random.key(0)
  tokens = jnp.arange(1, 41, dtype=jnp.int32).reshape(2, 20)
  corrupted = -tokens
  chosen = jax.random.bernoulli(jax.random.key(1), 0.6, tokens.shape)
  capped, positions, predicted = map(np.asarray, masking.cap_predictions(rng, tokens, corrupted, chosen, 5))
  chosen = np.asarray(chosen)
  assert positions.shape == predicted.shape == (2, 5)
  for row in range(2):
    assert len(set(positions[row])) == 5
    # Chosen positions outrank the others, so a row with >= k chosen ones predicts k of them.
    assert predicted[row].sum() == min(5, chosen[row].sum())
    assert chosen[row, positions[row][predicted[row]]].all()
    corrupted_at = np.flatnonzero(capped[row] < 0)
    np.testing.assert_array_equal(np.sort(corrupted_at), np.sort(positions[row][predicted[row]]))
