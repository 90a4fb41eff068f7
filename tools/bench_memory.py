"""Per-device memory of a BERT-base training step, with and without remat and bf16, from the compiled program.

On 8 forced host CPU devices, mesh (data=8, model=1) as the trainer's default: params and AdamW state
sharded by the project's rules (`parallel.param_shardings`), the batch split over 'data'. The step is
the trainer's: gradient of a loss on the encoder's output, the AdamW update of `optim.create_optimizer`,
buffers donated. Nothing is executed: each (batch, remat, dtype) is lowered and compiled, and
`compiled.memory_analysis()` gives per-device bytes: temporaries, arguments, outputs and the
output bytes that alias (reuse) donated arguments; peak = arguments + outputs - aliased + temporaries.

XLA's CPU backend orders operations for concurrency by default, which keeps every layer's activations
alive whatever remat asks for; accelerators order them to bound memory. So this tool compiles with
the CPU's memory-minimizing scheduler (--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED), the
closer stand-in for a TPU or GPU; `--cpu_default_scheduler` measures with the default instead.
Prints one JSON object.

  python tools/bench_memory.py [--batches 32,64,128 --length 128]
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import sys
import time

_ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_ARGS.add_argument("--batches", default="32,64,128", help="Global batch sizes (rows over all devices).")
_ARGS.add_argument("--length", type=int, default=128, help="Tokens per row.")
_ARGS.add_argument("--cpu_default_scheduler", action="store_true",
                   help="Keep XLA's concurrency-optimized CPU scheduler (see the module docstring).")

# Flags must precede the first jax import. Buffer assignment, hence memory, does not depend on how well the
# CPU code is optimised, so the quickest compile settings are used.
_FLAGS = _ARGS.parse_args()
os.environ["XLA_FLAGS"] = " ".join([
    os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8",
    "--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false",
    *([] if _FLAGS.cpu_default_scheduler else ["--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"]),
]).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn  # pylint: disable=g-import-not-at-top,g-bad-import-order
import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import ml_collections  # pylint: disable=g-import-not-at-top
import optax  # pylint: disable=g-import-not-at-top

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from configs import common  # pylint: disable=g-import-not-at-top
from docent_jax import optim  # pylint: disable=g-import-not-at-top
from docent_jax import parallel  # pylint: disable=g-import-not-at-top
from docent_jax.modules import bert  # pylint: disable=g-import-not-at-top

MiB = 2**20


def step_memory(batch: int, length: int, remat: bool, dtype: str, mesh: jax.sharding.Mesh) -> dict[str, float]:
  """Per-device MiB of one compiled BERT-base training step on a global batch of `batch` rows."""
  config = bert.BertConfig(remat=remat)  # BERT-base's shape.
  model = bert.BertModel(config, dtype=jnp.dtype(dtype), add_pooler=False)
  tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32, sharding=parallel.batch_sharding(mesh))
  boxed = jax.eval_shape(model.init, jax.random.key(0), tokens, tokens)["params"]
  shardings = parallel.param_shardings(boxed, mesh, parallel.DEFAULT_RULES)
  params = jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                        nn.unbox(boxed), shardings)
  optimizer = optim.create_optimizer(common.optimizer(learning_rate=2e-5, warmup_steps=100), num_steps=1000)
  opt_state = jax.eval_shape(optimizer.init, params)

  def loss(params, tokens, rng):
    hidden = model.apply({"params": params}, tokens, bert.attention_mask(tokens, config), deterministic=False,
                         rngs={"dropout": rng}).last_hidden_state
    return jnp.mean(jnp.square(hidden[:, 0].astype(jnp.float32)))

  def train_step(params, opt_state, tokens, rng):
    grads = jax.grad(loss)(params, tokens, rng)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  started = time.time()
  compiled = jax.jit(train_step, donate_argnums=(0, 1)).lower(params, opt_state, tokens,
                                                              jax.random.key(1)).compile()
  analysis = compiled.memory_analysis()
  sizes = {"temp": analysis.temp_size_in_bytes, "arguments": analysis.argument_size_in_bytes,
           "outputs": analysis.output_size_in_bytes, "aliased": analysis.alias_size_in_bytes}
  sizes["peak"] = sizes["arguments"] + sizes["outputs"] - sizes["aliased"] + sizes["temp"]
  return {**{f"{k}_mib": round(v / MiB, 1) for k, v in sizes.items()}, "compile_s": round(time.time() - started, 1)}


def main() -> None:
  started = time.time()
  mesh = parallel.create_mesh(ml_collections.ConfigDict(dict(shape=(-1, 1))))
  settings = [dict(global_batch=int(batch), length=_FLAGS.length, dtype=dtype, remat=remat)
              for batch in _FLAGS.batches.split(",") for dtype in ("float32", "bfloat16") for remat in (False, True)]

  def measure(setting: dict) -> dict:
    row = {**setting, **step_memory(setting["global_batch"], setting["length"], setting["remat"], setting["dtype"],
                                    mesh)}
    print(json.dumps(row), file=sys.stderr)
    return row

  # XLA compiles outside the GIL: two at a time keep both cores of a small machine busy.
  with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    rows = list(pool.map(measure, settings))
  print(json.dumps({
      "model": "BERT-base (12 layers, 768 hidden, vocab 30522), AdamW", "devices": jax.device_count(),
      "mesh": dict(mesh.shape), "scheduler": "cpu default" if _FLAGS.cpu_default_scheduler else "memory-minimizing",
      "per_device": rows, "wall_s": round(time.time() - started, 1)}, indent=1))


if __name__ == "__main__":
  main()
