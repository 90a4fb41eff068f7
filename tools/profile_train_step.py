"""Where one training step's time goes, for any config and overrides: batch, gradient, optimizer update.

  python tools/profile_train_step.py --config=configs/blp.py:wn18rr,transe \
      --config.data.manual_dir=../shared/data/wn18rr --config.model.encoder=bow

Times, as medians over --steps calls after a compiling one, on the config's first training batch: reading
a batch (`train_batches` in the training process), the loss alone, the loss and its gradient, the
optimizer's update of the params, and the trainer's whole jitted step. Also counts the params the optimizer
updates and the tokens (padding included) each batch encodes. Prints one JSON object.
"""
import functools
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

# The package before JAX: it keeps JAX on the CPU where no accelerator is attached (libtpu would look for a TPU).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import docent_jax  # pylint: disable=g-import-not-at-top,unused-import
from absl import app
from absl import flags
import jax
import numpy as np
import optax
from ml_collections import config_flags

import bench_input_pipeline  # pylint: disable=g-import-not-at-top  # A tool beside this one.
from docent_jax import parallel  # pylint: disable=g-import-not-at-top
from docent_jax import trainer as trainers  # pylint: disable=g-import-not-at-top
from docent_jax.data import pipeline  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  config_flags.DEFINE_config_file("config", None, "The training config.", lock_config=True)
  flags.DEFINE_integer("steps", 10, "Timed calls of each part (after the compiling one).")
  flags.mark_flags_as_required(["config"])


def median_seconds(fn: Callable[[], Any], calls: int) -> float:
  """Median wall time of `fn()` over `calls` calls, after one call that compiles."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(calls):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def profile(trainer: trainers.Trainer, calls: int) -> dict[str, Any]:
  objective, config = trainer.objective, trainer.config
  batches = pipeline.batch_iterator(objective.train_batches(config.seed))
  local_batch = next(batches)
  batch_seconds = median_seconds(lambda: next(batches), calls)
  batches.close()
  batch = parallel.global_batch(local_batch, trainer.mesh, objective.shared_batch_keys)
  state = trainer.initial_state()
  rng = jax.random.key(0)
  loss = jax.jit(lambda params, batch: objective.loss(params, batch, rng)[0])
  grad = jax.jit(lambda params, batch: jax.grad(objective.loss, has_aux=True)(params, batch, rng)[0])
  grads = grad(state.params, batch)

  parts = {"loss": median_seconds(lambda: loss(state.params, batch), calls),
           "loss_and_gradient": median_seconds(lambda: grad(state.params, batch), calls)}

  # Donated as in the trainer's step, so that the update writes in place instead of copying every param.
  @functools.partial(jax.jit, donate_argnums=(1, 2))
  def update(grads: Any, opt_state: Any, params: Any) -> tuple[Any, Any]:
    updates, opt_state = trainer.optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  updated = {"state": (state.params, state.opt_state)}

  def apply_update() -> Any:
    params, opt_state = updated["state"]
    updated["state"] = update(grads, opt_state, params)
    return updated["state"]

  parts["optimizer_update"] = median_seconds(apply_update, calls)
  step = trainer.config.train.global_batch_size / bench_input_pipeline.consumed_rate(trainer, calls)[0]
  # A BLP batch split by length (`pipeline.shorter_half_first`) is encoded from its short and long rows.
  encoded = ("short_tokens", "long_tokens") if "short_tokens" in local_batch else tuple(local_batch)
  token_arrays = [np.asarray(local_batch[key]) for key in encoded if "token" in key]
  params = jax.tree.leaves(grads)
  return {
      "seconds": {"read_batch": round(batch_seconds, 5), **{k: round(v, 5) for k, v in parts.items()},
                  "train_step": round(step, 5)},
      "share_of_step": {k: round(v / step, 3) for k, v in parts.items()},
      "steps_per_second": round(1 / step, 2),
      "params": int(sum(p.size for p in params)),
      "tokens_per_batch": int(sum(a.size for a in token_arrays)),
  }


def main(argv: list[str]) -> None:
  del argv
  config = FLAGS.config
  with tempfile.TemporaryDirectory() as workdir:
    trainer = trainers.Trainer(config, workdir)
  result = {"cpu": bench_input_pipeline.cpu_model(), "cpu_count": os.cpu_count(),
            "device": str(jax.devices()[0].device_kind), "config": config.name,
            "global_batch_size": config.train.global_batch_size, "max_len": config.data.max_len,
            "encoder": config.model.get("encoder", "bert"), **profile(trainer, FLAGS.steps)}
  print(json.dumps(result, indent=2))


if __name__ == "__main__":
  define_flags()
  app.run(main)
