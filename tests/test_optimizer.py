import jax.numpy as jnp
import ml_collections
import numpy as np

from docent_jax import optim


def _optim_config(**overrides):
  config = ml_collections.ConfigDict(dict(learning_rate=0.1, warmup_steps=2, weight_decay=0.0, grad_clip_norm=1e9,
                                          b1=0.9, b2=0.999, eps=1e-8, lr_multipliers=()))
  config.update(overrides)
  return config


def test_schedule_warms_up_linearly_then_decays_to_zero():
  params = {"w": jnp.ones((2, 2))}
  optimizer = optim.create_optimizer(_optim_config(), num_steps=6)
  state = optimizer.init(params)
  sizes = []
  for _ in range(6):
    updates, state = optimizer.update({"w": jnp.ones((2, 2))}, state, params)
    sizes.append(float(jnp.abs(updates["w"]).mean()))
  # Adam's first steps move by ~lr; lr goes 0, 0.05, 0.1, then down by 0.025 per step.
  np.testing.assert_allclose(sizes, [0.0, 0.05, 0.1, 0.075, 0.05, 0.025], atol=2e-3)


def test_lr_multipliers_scale_matching_params_only():
  params = {"entities": {"embedding": jnp.ones((3, 2))}, "bert": {"kernel": jnp.ones((3, 2))}}
  grads = {"entities": {"embedding": jnp.ones((3, 2))}, "bert": {"kernel": jnp.ones((3, 2))}}
  optimizer = optim.create_optimizer(_optim_config(warmup_steps=0, lr_multipliers=(("^entities/", 10.0),)),
                                     num_steps=10)
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  ratio = updates["entities"]["embedding"] / updates["bert"]["kernel"]
  np.testing.assert_allclose(ratio, 10.0, rtol=1e-6)
