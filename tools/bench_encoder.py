"""Training-step speed of the Flax BERT against PyTorch transformers' BertModel, on CPU.

Both take the same pretrained weights (MiniLM-L6 by default), the same padded batch, dropout on,
the same loss (mean square of the [CLS] output) and AdamW, in one process, so under the same heap settings
(`docent_jax.host_memory`; DOCENT_JAX_MALLOC=default gives both glibc's defaults). Steps alternate between
the two so that load from other processes hits both alike; the medians are reported with the achieved GFLOP/s
against a large float32 matmul measured in the same run, the XLA flags the step ran with (from
`docent_jax.cpu_flags`, the one place that chooses them) and the largest difference between the two
frameworks' final hidden states (dropout off), against the parity tests' tolerance. Prints one JSON object.

  python tools/bench_encoder.py [--batch 32 --length 64 --steps 10] [--dtype bfloat16]
  # Flag sets side by side, each in its own process (XLA reads its flags once per process), `--rounds` times:
  python tools/bench_encoder.py --compare none= --compare ynn=--xla_cpu_experimental_ynn_fusion_type=dot
"""
import argparse
import dataclasses
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

# A CPU comparison, also on a machine with an accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Runnable from a checkout without installing the package. Importing it sets the XLA flags (`cpu_flags`).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from docent_jax import cpu_flags  # pylint: disable=g-import-not-at-top
from docent_jax import host_memory  # pylint: disable=g-import-not-at-top

import jax  # pylint: disable=g-import-not-at-top,g-bad-import-order
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top
import optax  # pylint: disable=g-import-not-at-top

from docent_jax.modules import bert  # pylint: disable=g-import-not-at-top
from docent_jax.modules import pretrained  # pylint: disable=g-import-not-at-top

LEARNING_RATE = 1e-5
WEIGHT_DECAY = 0.01
# tests/test_bert.py's tolerance on hidden states against PyTorch's: a flag set beyond it is not used. With bf16
# matmul operands the hidden states move within bf16's rounding (`bert.BF16_MATMUL_ATOL`).
PARITY_ATOL = 1e-4


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


def flax_config(config: bert.BertConfig, dtype: str) -> tuple[bert.BertConfig, str]:
  """The model config and compute dtype of a `--dtype` choice: 'bfloat16_matmuls' is float32 throughout but for
  the matmuls' operands (`bert.matmul`)."""
  if dtype == "bfloat16_matmuls":
    return dataclasses.replace(config, matmul_dtype="bfloat16"), "float32"
  return config, dtype


def flax_step_fn(config: bert.BertConfig, params: dict, batch: dict[str, np.ndarray], dtype: str = "float32"):
  """A jitted, buffer-donating train step and its initial (params, opt_state); `dtype` is the compute dtype."""
  config, dtype = flax_config(config, dtype)
  model = bert.BertModel(config, dtype=jnp.dtype(dtype), add_pooler=False)
  optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)

  def loss_fn(params, rng):
    out = model.apply({"params": params}, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                      deterministic=False, rngs={"dropout": rng})
    return jnp.mean(jnp.square(out.last_hidden_state[:, 0].astype(jnp.float32)))

  def step(params, opt_state, rng):
    loss, grads = jax.value_and_grad(loss_fn)(params, rng)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  step = jax.jit(step, donate_argnums=(0, 1))
  params = jax.tree.map(jnp.asarray, params)
  return step, (params, optimizer.init(params))


def flax_hidden_states(config: bert.BertConfig, params: dict, batch: dict[str, np.ndarray]) -> np.ndarray:
  """Float32 final hidden states with dropout off, compiled under the same flags as the step."""
  model = bert.BertModel(config, add_pooler=False)
  apply = jax.jit(lambda p: model.apply({"params": p}, batch["input_ids"], batch["attention_mask"],
                                        batch["token_type_ids"]).last_hidden_state)
  return np.asarray(apply(params))


def torch_step_fn(model_dir: str, batch: dict[str, np.ndarray], dtype: str = "float32"):
  """The same step in PyTorch: train mode, AdamW, the same loss; bfloat16 under CPU autocast.

  Also returns the float32 final hidden states with dropout off, taken before any step.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  transformers.logging.set_verbosity_error()  # Keep stdout to the one JSON line.
  model = transformers.BertModel.from_pretrained(model_dir, add_pooling_layer=False)
  inputs = {name: torch.from_numpy(value.astype(np.int64)) for name, value in batch.items()}
  with torch.no_grad():
    hidden = model.eval()(**inputs).last_hidden_state.numpy()
  model.train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)

  def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype != "float32"):
      loss = model(**inputs).last_hidden_state[:, 0].float().square().mean()
    loss.backward()
    optimizer.step()
    return loss.item()

  return step, hidden


def matmul_peak_gflops(dtype: str = "float32", size: int = 2048, repeats: int = 5) -> float:
  """Best GFLOP/s of a jitted [size, size] @ [size, size] matmul in `dtype`, accumulating in float32."""
  a = jax.random.normal(jax.random.key(1), (size, size)).astype(dtype)
  b = jax.random.normal(jax.random.key(2), (size, size)).astype(dtype)
  matmul = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32))
  matmul(a, b).block_until_ready()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a, b).block_until_ready()
    times.append(time.perf_counter() - start)
  return 2 * size**3 / min(times) / 1e9


def cpu_description() -> dict[str, str | list[str]]:
  """The CPU model and family, its AVX/AMX flags, XLA's flags, the heap's settings (`host_memory`; PyTorch in
  this process shares them) and the instruction set PyTorch dispatches to."""
  import torch  # pylint: disable=g-import-not-at-top
  cpu = cpu_flags.read_cpu()
  return {"cpu": cpu.model or platform.processor(), "cpu_family": cpu.family,
          "isa_flags": sorted(f for f in cpu.features if f.startswith(("avx", "amx"))),
          "xla_flags": os.environ.get("XLA_FLAGS", ""),
          "host_memory": host_memory.description(),
          "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def compare(flag_sets: list[str], rounds: int, argv: list[str]) -> dict:
  """This benchmark once per `NAME=FLAGS` set and round, each in a child process with DOCENT_JAX_CPU_FLAGS=FLAGS
  (empty: none), the sets alternating within each round; the ratio's median per set."""
  runs = {}
  for _ in range(rounds):
    for flag_set in flag_sets:
      name, _, flags = flag_set.partition("=")
      env = {**os.environ, cpu_flags.OVERRIDE_VARIABLE: flags or "none"}
      # The child's XLA flags are the set's alone (plus the user's XLA_FLAGS), not the family's choice.
      output = subprocess.run([sys.executable, __file__, *argv], env=env, check=True, capture_output=True,
                              text=True).stdout
      runs.setdefault(name, []).append(json.loads(output.strip().splitlines()[-1]))
  return {name: {"flags": results[0]["xla_flags"],
                 "ratio_flax_over_torch": [r["ratio_flax_over_torch"] for r in results],
                 "median_ratio": round(statistics.median(r["ratio_flax_over_torch"] for r in results), 3),
                 "flax_gflops": [r["flax_gflops"] for r in results],
                 "matmul_peak_gflops": [r["matmul_peak_gflops"] for r in results],
                 "max_abs_difference_vs_torch": max(r["max_abs_difference_vs_torch"] for r in results),
                 "within_parity_tolerance": all(r["within_parity_tolerance"] for r in results)}
          for name, results in runs.items()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default="minilm-l6", help="Alias or Hugging Face-format directory.")
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--length", type=int, default=64)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "bfloat16_matmuls"],
                      help="Flax: the model's dtype, or float32 with bf16 matmul operands (`model.matmul_dtype`); "
                           "PyTorch: bf16 CPU autocast for both bf16 choices.")
  # JAX's default; dropout's random bits cost about the same under the other two on CPU.
  parser.add_argument("--prng", default="threefry2x32", choices=["threefry2x32", "rbg", "unsafe_rbg"])
  parser.add_argument("--compare", action="append", default=[], metavar="NAME=FLAGS",
                      help="Run once per flag set (repeatable), each in its own process; FLAGS empty: none.")
  parser.add_argument("--rounds", type=int, default=1, help="With --compare: rounds over the flag sets.")
  args = parser.parse_args()
  if args.compare:
    child_argv = [f"--{name}={value}" for name, value in vars(args).items() if name not in ("compare", "rounds")]
    print(json.dumps({**cpu_description(), "xla_flags": None, "rounds": args.rounds,
                      "flag_sets": compare(args.compare, args.rounds, child_argv)}))
    return
  jax.config.update("jax_default_prng_impl", args.prng)

  import torch  # pylint: disable=g-import-not-at-top
  num_cores = len(os.sched_getaffinity(0))
  torch.set_num_threads(num_cores)

  config, params = pretrained.load_bert(args.model)
  params.pop("pooler", None)
  params.pop(pretrained.MLM_HEAD_KEY, None)
  batch = make_batch(config, args.batch, args.length)
  # The policy's own hidden states against PyTorch's float32 ones; a bf16 model's float32 ones (its weights' parity).
  flax_hidden = flax_hidden_states(flax_config(config, args.dtype)[0], params, batch)
  tolerance = bert.BF16_MATMUL_ATOL if args.dtype == "bfloat16_matmuls" else PARITY_ATOL
  flax_step, (flax_params, opt_state) = flax_step_fn(config, params, batch, args.dtype)
  torch_step, torch_hidden = torch_step_fn(str(pretrained.resolve_model_dir(args.model)), batch, args.dtype)
  difference = float(np.abs(flax_hidden - torch_hidden).max())

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
      "matmul_peak_gflops": round(matmul_peak_gflops("float32" if args.dtype == "float32" else "bfloat16"), 1),
      "training_gflop_per_step": round(flops / 1e9, 2),
      "flax_first_last_loss": [round(flax_losses[0], 5), round(flax_losses[-1], 5)],
      "torch_first_last_loss": [round(torch_losses[0], 5), round(torch_losses[-1], 5)],
      "max_abs_difference_vs_torch": difference, "parity_atol": tolerance,
      "within_parity_tolerance": difference <= tolerance,
      "batch": args.batch, "length": args.length, "steps": args.steps, "dtype": args.dtype, "cores": num_cores,
      "jax_prng": jax.config.jax_default_prng_impl, **cpu_description(),
  }))


if __name__ == "__main__":
  main()
