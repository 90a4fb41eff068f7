"""What every end-to-end test config shares: a small, freshly initialised BERT and a short, fast schedule."""
import os
import pathlib
import socket
from typing import Any

import ml_collections

# The tests' models are tiny, so compiling dominates their time. XLA's backend optimisation level 0 and its
# older loop emitters for fusions compile a train step on 8 devices in 2.5 s instead of 12.5 s (the code they
# make runs slower, which tiny models do not notice).
FAST_COMPILE_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def shrink(config: ml_collections.ConfigDict, tfds_dir: pathlib.Path, *, max_len: int, global_batch_size: int = 8,
           num_steps: int = 6, log_every_steps: int = 2, checkpoint_every_steps: int = 3,
           eval_batch_size: int = 8) -> ml_collections.ConfigDict:
  """`config` with a 1-layer BERT of width 32 (the MiniLM tokenizer's vocabulary), learning rate 1e-3 after 2
  warm-up steps, the given lengths, batch sizes and steps, its TFDS data under `tfds_dir`, on 2 devices.

  Two devices split batches and entity tables as a pod does; eight (the sharding tests' meshes) make each
  end-to-end run about a fifth slower for no more coverage.
  """
  config.data.tfds_data_dir = str(tfds_dir)
  config.mesh.shape = (2, 1)
  config.data.max_len = max_len
  config.model.pretrained = ""
  config.model.bert = ml_collections.ConfigDict(dict(
      hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64))
  config.optim.learning_rate = 1e-3
  config.optim.warmup_steps = 2
  config.train.global_batch_size = global_batch_size
  config.train.num_steps = num_steps
  config.train.log_every_steps = log_every_steps
  config.train.checkpoint_every_steps = checkpoint_every_steps
  config.model.inference_batch_size = eval_batch_size
  return config


def subprocess_env(num_devices: int) -> dict[str, str]:
  """The environment of a child Python process on `num_devices` CPU devices, compiling quickly."""
  from docent_jax import cpu_flags  # pylint: disable=g-import-not-at-top  # conftest sets XLA_FLAGS first.
  # The child sizes XLA's thread pool for its own device count.
  env = {name: value for name, value in os.environ.items() if name not in cpu_flags.THREAD_POOL_VARIABLES}
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={num_devices} {FAST_COMPILE_XLA_FLAGS}"
  env["JAX_PLATFORMS"] = "cpu"
  return env


def free_port() -> int:
  """A TCP port nothing listens on now, for a `jax.distributed` coordinator."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def assert_loads_as_evaluated(run_path: pathlib.Path, outputs: Any) -> None:
  """`docent_jax.load` of a finished run gives the model its trainer evaluated: the same class, and over the same
  params on the same mesh the same `outputs(model)` (an array: vectors, logits), bit for bit. The trainer's model
  is the objective's over the reported params as training keeps them (sharded), where `load` reads them to the
  host: that layout alone may move the last bit of float32, so the trainer's params are compared both as they
  are (to float rounding) and read to the host as `load` reads them (exactly)."""
  # Imported here: this module sets up the environment before JAX starts.
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from docent_jax import run_dir as run_dirs  # pylint: disable=g-import-not-at-top
  from docent_jax import trainer as trainers  # pylint: disable=g-import-not-at-top
  from docent_jax.inference import model as inference_model  # pylint: disable=g-import-not-at-top
  run = run_dirs.RunDir(run_path)
  trainer = trainers.Trainer(run.recorded_config(), run)
  params = trainer.restore_params()[0]
  loaded = inference_model.load(run, mesh=trainer.mesh)
  assert type(loaded) is type(trainer.objective.model(params))
  np.testing.assert_allclose(outputs(loaded), outputs(trainer.objective.model(params)), rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(outputs(loaded), outputs(trainer.objective.model(jax.device_get(params))))


def entity_and_text_vectors(texts: list[str]) -> Any:
  """`outputs` for `assert_loads_as_evaluated`: a model's entity vectors where it has an entity set, and the vectors
  of `texts`."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return lambda model: np.concatenate(([model.entities()[1]] if "entity_ids" in model.record else [])
                                      + [model.encode(texts)])
