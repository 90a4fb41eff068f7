"""Training-step speed of the Flax BERT against PyTorch transformers' BertModel, on CPU.

Both take the same pretrained weights (MiniLM-L6 by default), the same padded batch, dropout on,
the same loss (mean square of the [CLS] output) and AdamW. Steps alternate between the two so that
load from other processes hits both alike; the medians are reported with the achieved GFLOP/s
against a large float32 matmul measured in the same run. Prints one JSON object.

  python tools/bench_encoder.py [--batch 32 --length 64 --steps 10]
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

# A CPU comparison, also on a machine with an accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # pylint: disable=g-import-not-at-top,g-bad-import-order
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import optax  # pylint: disable=g-import-not-at-top

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from docent_jax.models import bert  # pylint: disable=g-import-not-at-top
from docent_jax.models import pretrained  # pylint: disable=g-import-not-at-top

LEARNING_RATE = 1e-5
WEIGHT_DECAY = 0.01


def make_batch(config: bert.BertConfig, batch: int, length: int, seed: int = 0) -> dict[str, np.ndarray]:
  """Random word pieces with [CLS] first and random lengths, padded with 0 to `length`."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(length // 4, length + 1, size=batch)
  lengths[0] = length  # At least one full row, so no step ever runs on a shorter effective length.
  ids = rng.integers(1000, config.vocab_size, size=(batch, length))
  ids[:, 0] = 101
  mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)
  return {"input_ids": (ids * mask).astype(np.int32), "attention_mask": mask,
          "token_type_ids": np.zeros((batch, length), np.int32)}


def training_flops(config: bert.BertConfig, batch: int, length: int) -> float:
  """Matmul FLOPs of one forward + backward pass (3x forward), attention included."""
  hidden, inner = config.hidden_size, config.intermediate_size
  per_token_layer = 2 * (4 * hidden * hidden + 2 * hidden * inner + 2 * length * hidden)
  return 3.0 * batch * length * config.num_hidden_layers * per_token_layer


def flax_step_fn(config: bert.BertConfig, params: dict, batch: dict[str, np.ndarray]):
  """A jitted, buffer-donating train step and its initial (params, opt_state)."""
  model = bert.BertModel(config, add_pooler=False)
  optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)

  def loss_fn(params, rng):
    out = model.apply({"params": params}, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                      deterministic=False, rngs={"dropout": rng})
    return jnp.mean(jnp.square(out.last_hidden_state[:, 0]))

  def step(params, opt_state, rng):
    loss, grads = jax.value_and_grad(loss_fn)(params, rng)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  step = jax.jit(step, donate_argnums=(0, 1))
  params = jax.tree.map(jnp.asarray, params)
  return step, (params, optimizer.init(params))


def torch_step_fn(model_dir: str, batch: dict[str, np.ndarray]):
  """The same step in PyTorch: train mode, AdamW, the same loss."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  transformers.logging.set_verbosity_error()  # Keep stdout to the one JSON line.
  model = transformers.BertModel.from_pretrained(model_dir, add_pooling_layer=False).train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
  inputs = {name: torch.from_numpy(value.astype(np.int64)) for name, value in batch.items()}

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = model(**inputs).last_hidden_state[:, 0].square().mean()
    loss.backward()
    optimizer.step()
    return loss.item()

  return step


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
  """Best float32 GFLOP/s of a jitted [size, size] @ [size, size] matmul."""
  a = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
  b = jax.random.normal(jax.random.key(2), (size, size), jnp.float32)
  matmul = jax.jit(jnp.matmul)
  matmul(a, b).block_until_ready()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a, b).block_until_ready()
    times.append(time.perf_counter() - start)
  return 2 * size**3 / min(times) / 1e9


def cpu_description() -> dict[str, str | list[str]]:
  """The CPU model, its AVX flags, and the instruction sets XLA and PyTorch were allowed (environment caps)."""
  info = pathlib.Path("/proc/cpuinfo").read_text() if pathlib.Path("/proc/cpuinfo").exists() else ""
  model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
  flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
  import torch  # pylint: disable=g-import-not-at-top
  xla_isa = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.startswith("--xla_cpu_max_isa")]
  return {"cpu": model or platform.processor(), "avx_flags": sorted(f for f in flags if f.startswith("avx")),
          "xla_max_isa": xla_isa[0].split("=", 1)[1] if xla_isa else "native",
          "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default="minilm-l6", help="Alias or Hugging Face-format directory.")
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--length", type=int, default=64)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--steps", type=int, default=10)
  # JAX's default; dropout's random bits cost about the same under the other two on CPU.
  parser.add_argument("--prng", default="threefry2x32", choices=["threefry2x32", "rbg", "unsafe_rbg"])
  args = parser.parse_args()
  jax.config.update("jax_default_prng_impl", args.prng)

  import torch  # pylint: disable=g-import-not-at-top
  num_cores = len(os.sched_getaffinity(0))
  torch.set_num_threads(num_cores)

  config, params = pretrained.load_bert(args.model)
  params.pop("pooler", None)
  params.pop(pretrained.MLM_HEAD_KEY, None)
  batch = make_batch(config, args.batch, args.length)
  flax_step, (flax_params, opt_state) = flax_step_fn(config, params, batch)
  torch_step = torch_step_fn(str(pretrained.resolve_model_dir(args.model)), batch)

  rng = jax.random.key(0)
  flax_times, torch_times, flax_losses, torch_losses = [], [], [], []
  for i in range(args.warmup + args.steps):
    rng, step_rng = jax.random.split(rng)
    start = time.perf_counter()
    flax_params, opt_state, loss = flax_step(flax_params, opt_state, step_rng)
    flax_losses.append(float(loss))
    flax_time = time.perf_counter() - start
    start = time.perf_counter()
    torch_losses.append(torch_step())
    torch_time = time.perf_counter() - start
    if i >= args.warmup:
      flax_times.append(flax_time)
      torch_times.append(torch_time)

  flax_s, torch_s = statistics.median(flax_times), statistics.median(torch_times)
  flops = training_flops(config, args.batch, args.length)
  print(json.dumps({
      "flax_step_s": round(flax_s, 4),
      "torch_step_s": round(torch_s, 4),
      "ratio_flax_over_torch": round(flax_s / torch_s, 3),
      "flax_gflops": round(flops / flax_s / 1e9, 1),
      "torch_gflops": round(flops / torch_s / 1e9, 1),
      "matmul_peak_gflops": round(matmul_peak_gflops(), 1),
      "training_gflop_per_step": round(flops / 1e9, 2),
      "flax_first_last_loss": [round(flax_losses[0], 5), round(flax_losses[-1], 5)],
      "torch_first_last_loss": [round(torch_losses[0], 5), round(torch_losses[-1], 5)],
      "batch": args.batch, "length": args.length, "steps": args.steps, "cores": num_cores,
      "jax_prng": jax.config.jax_default_prng_impl, **cpu_description(),
  }))


if __name__ == "__main__":
  main()
