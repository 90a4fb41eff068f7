import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from docent_jax import optim


def _optim_config(**overrides):
  config = ml_collections.ConfigDict(dict(learning_rate=0.1, warmup_steps=2, weight_decay=0.0, grad_clip_norm=1e9,
                                          b1=0.9, b2=0.999, eps=1e-8, lr_multipliers=()))
  config.update(overrides)
  return config


def _update_sizes(num_steps: int, **overrides) -> list[float]:
  """The mean |update| of each of `num_steps` steps on a constant gradient of ones."""
  params = {"w": jnp.ones((2, 2))}
  optimizer = optim.create_optimizer(_optim_config(**overrides), num_steps=num_steps)
  state = optimizer.init(params)
  sizes = []
  for _ in range(num_steps):
    updates, state = optimizer.update({"w": jnp.ones((2, 2))}, state, params)
    sizes.append(float(jnp.abs(updates["w"]).mean()))
  return sizes


def test_schedule_warms_up_linearly_then_decays_to_zero():
  # Adam's first steps move by ~lr; lr goes 0, 0.05, 0.1, then down by 0.025 per step.
  np.testing.assert_allclose(_update_sizes(6), [0.0, 0.05, 0.1, 0.075, 0.05, 0.025], atol=2e-3)


def test_constant_schedule_warms_up_then_holds_the_rate():
  np.testing.assert_allclose(_update_sizes(6, schedule="constant"), [0.0, 0.05, 0.1, 0.1, 0.1, 0.1], atol=2e-3)


def test_grad_clip_norm_zero_means_no_clipping():
  params = {"w": jnp.ones((2, 2))}
  # Clipping to norm 0 would scale every gradient to zero, and Adam would never move.
  optimizer = optim.create_optimizer(_optim_config(warmup_steps=0, grad_clip_norm=0.0), num_steps=10)
  updates, _ = optimizer.update({"w": jnp.full((2, 2), 1e-3)}, optimizer.init(params), params)
  np.testing.assert_allclose(jnp.abs(updates["w"]), 0.1, rtol=1e-3)


@pytest.mark.parametrize("key, value, message", [("schedule", "cosine", "valid: .*linear.*constant"),
                                                 ("grad_clip_norm", -1.0, "0 \\(no clipping\\) or more")])
def test_bad_optimizer_values_name_the_config_key(key, value, message):
  with pytest.raises(ValueError, match=f"config.optim.{key}.*{message}"):
    optim.create_optimizer(_optim_config(**{key: value}), num_steps=10)


def test_lr_multipliers_scale_matching_params_only():
  params = {"entities": {"embedding": jnp.ones((3, 2))}, "bert": {"kernel": jnp.ones((3, 2))}}
  grads = {"entities": {"embedding": jnp.ones((3, 2))}, "bert": {"kernel": jnp.ones((3, 2))}}
  optimizer = optim.create_optimizer(_optim_config(warmup_steps=0, lr_multipliers=(("^entities/", 10.0),)),
                                     num_steps=10)
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  ratio = updates["entities"]["embedding"] / updates["bert"]["kernel"]
  np.testing.assert_allclose(ratio, 10.0, rtol=1e-6)
