"""Where the time of `tools/bench_encoder.py`'s Flax training step goes on CPU: a JAX profiler trace of the step,
its ops' times summed by kind from the trace and the compiled HLO, and the rate of XLA:CPU's products per form.

  python tools/profile_encoder_step.py --dtype float32 --dtype bfloat16 --dtype bfloat16_matmuls \
      --output tools/results/profile_encoder_step_amd_epyc.json

Per `--dtype` (as in bench_encoder.py): the median step, and the ops' time per step (their events on XLA's CPU
threads, summed over both threads, so parallel ops both count), by kind:
  products, by pass (forward / backward), operand dtype and which axis of the left operand they contract
  ('last', XLA:CPU's fast form, or 'leading', a weight's gradient); the bias gradients' reduce-window sums;
  converts; other fusions.
`products`: GFLOP/s of one [2048, 384] x [384, 1536]-sized product in each form the step uses, for float32,
bf16 operands with a float32 result, and a bf16 result. Prints the JSON; `--trace_dir` keeps the traces.
"""
import argparse
import collections
import glob
import json
import math
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_encoder  # pylint: disable=g-import-not-at-top

import jax  # pylint: disable=g-import-not-at-top,g-bad-import-order
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

from docent_jax.modules import bert, pretrained  # pylint: disable=g-import-not-at-top

# One product in each form a training step uses: [tokens, in] x [in, out] forward, its input's gradient (the
# right operand's last axis contracted) and its weight's gradient (the tokens, the left operand's first axis),
# also as the bf16 policy computes it on CPU: on a transposed copy of x (`bert.transposed_copy`, its time included).
PRODUCT_FORMS = {
    "forward: x [2048, 384] . w [384, 1536]": ((2048, 384), (384, 1536), (((1,), (0,)), ((), ())), None),
    "input's gradient: g [2048, 1536] . w [384, 1536], last axes": ((2048, 1536), (384, 1536),
                                                                    (((1,), (1,)), ((), ())), None),
    "weight's gradient: x [2048, 384] . g [2048, 1536], leading axes": ((2048, 384), (2048, 1536),
                                                                         (((0,), (0,)), ((), ())), None),
    "weight's gradient on a transposed copy: x^T [384, 2048] . g [2048, 1536]": (
        (2048, 384), (2048, 1536), (((1,), (0,)), ((), ())), [1, 0]),
}


def _median_seconds(fn, *args, repeats: int = 15) -> float:
  fn(*args).block_until_ready()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn(*args).block_until_ready()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def product_rates() -> dict[str, dict[str, float | str]]:
  """GFLOP/s of each product form in float32, bf16 -> float32 and bf16 -> bf16 (or why XLA:CPU cannot)."""
  rates = {}
  for name, (lhs_shape, rhs_shape, dimension_numbers, copied_axes) in PRODUCT_FORMS.items():
    lhs, rhs = jax.random.normal(jax.random.key(0), lhs_shape), jax.random.normal(jax.random.key(1), rhs_shape)
    arrange = (lambda x: x) if copied_axes is None else (lambda x: bert.transposed_copy(x, copied_axes))
    copied_shape = lhs_shape if copied_axes is None else tuple(lhs_shape[axis] for axis in copied_axes)
    contracted = math.prod(copied_shape[axis] for axis in dimension_numbers[0][0])
    kept = [size for axis, size in enumerate(copied_shape) if axis not in dimension_numbers[0][0]]
    kept += [size for axis, size in enumerate(rhs_shape) if axis not in dimension_numbers[0][1]]
    flops = 2 * contracted * math.prod(kept)
    row = {}
    for label, dtype, result in (("float32", jnp.float32, None), ("bf16_to_float32", jnp.bfloat16, jnp.float32),
                                 ("bf16_to_bf16", jnp.bfloat16, None)):
      product = jax.jit(lambda a, b, result=result: jax.lax.dot_general(arrange(a), b, dimension_numbers,
                                                                         preferred_element_type=result))
      try:
        row[label] = round(flops / _median_seconds(product, lhs.astype(dtype), rhs.astype(dtype)) / 1e9, 1)
      except jax.errors.JaxRuntimeError as error:  # XLA:CPU has no kernel for some forms.
        row[label] = str(error).splitlines()[0]
    rates[name] = row
  return rates


def _computations(hlo: str) -> dict[str, str]:
  """The compiled module's computations by name."""
  return {match.group(1): block for block in re.split(r"\n(?=\S)", hlo)
          if (match := re.match(r"(?:ENTRY )?%?([\w.-]+)", block))}


def _kind(op: str, entry: str, computations: dict[str, str]) -> str:
  """The kind of an executed op of the entry computation (see the module docstring)."""
  line = next((line for line in entry.splitlines() if line.strip().startswith(f"%{op} ")), "")
  called = re.search(r"calls=%([\w.-]+)", line)
  body = computations.get(called.group(1), "") if called else line
  product = re.search(r"= \w+\[[\d,]*\]\{[\d,]*\} dot\(%([\w.-]+), %([\w.-]+)\).*?lhs_contracting_dims=\{([\d,]*)\}"
                      r".*?op_name=\"([^\"]*)\"", body)
  if product:
    lhs, _, contracting, name = product.groups()
    lhs_type = re.search(rf"%{re.escape(lhs)} = (\w+)\[([\d,]*)\]", body) or re.search(
        rf"%{re.escape(lhs)} = (\w+)\[([\d,]*)\]", entry)
    dtype, dims = (lhs_type.group(1), lhs_type.group(2).split(",")) if lhs_type else ("?", [])
    last = str(len(dims) - 1) in contracting.split(",")
    backward = "transpose(jvp" in name
    return (f"product, {'backward' if backward else 'forward'}, {dtype} operands, "
            f"{'last' if last else 'leading'} axis contracted")
  if "reduce-window" in op:
    return "reduce-window (bias gradients)"
  if "convert" in op:
    return "fusion with converts"
  return "other ops"


def profile(dtype: str, steps: int, trace_dir: str) -> dict:
  """The step's median time and its ops' time per step by kind (see the module docstring)."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  config, params = pretrained.load_bert("minilm-l6")
  params.pop("pooler", None)
  params.pop(pretrained.MLM_HEAD_KEY, None)
  batch = bench_encoder.make_batch(config, 32, 64)
  step, (params, opt_state) = bench_encoder.flax_step_fn(config, params, batch, dtype)
  rng = jax.random.key(0)
  hlo = step.lower(params, opt_state, rng).compile().as_text()
  times = []
  for _ in range(3 + steps):
    start = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, rng)
    loss.block_until_ready()
    times.append(time.perf_counter() - start)
  with jax.profiler.trace(trace_dir):
    for _ in range(steps):
      params, opt_state, loss = step(params, opt_state, rng)
      loss.block_until_ready()
  space = xplane_pb2.XSpace()
  space.ParseFromString(pathlib.Path(glob.glob(f"{trace_dir}/plugins/profile/*/*.xplane.pb")[0]).read_bytes())
  per_op = collections.Counter()
  for plane in space.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_XLAEigen"):  # XLA's CPU threads; their ops are the step's.
        continue
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        if not name.startswith(("ThunkExecutor", "SlinkyThreadPool")):
          per_op[name] += event.duration_ps / 1e9 / steps
  computations = _computations(hlo)
  entry = next(block for block in computations.values() if block.startswith("ENTRY"))
  by_kind = collections.Counter()
  for op, milliseconds in per_op.items():
    by_kind[_kind(op, entry, computations)] += milliseconds
  return {"median_step_s": round(statistics.median(times[3:]), 4),
          "ops_ms_per_step": round(sum(per_op.values()), 1),
          "ms_per_step_by_kind": {kind: round(ms, 1) for kind, ms in by_kind.most_common()}}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dtype", action="append", choices=["float32", "bfloat16", "bfloat16_matmuls"])
  parser.add_argument("--steps", type=int, default=3, help="Steps traced (after 3 warm-up steps and as many timed).")
  parser.add_argument("--trace_dir", default="", help="Keep the traces here (one directory per dtype).")
  parser.add_argument("--output", default="", help="Also write the JSON here.")
  args = parser.parse_args()
  result = {**bench_encoder.cpu_description(), "batch": 32, "length": 64, "steps_traced": args.steps,
            "command": " ".join(["python", *sys.argv]), "products_gflops": product_rates(), "steps": {}}
  for dtype in args.dtype or ["float32"]:
    trace_dir = os.path.join(args.trace_dir, dtype) if args.trace_dir else tempfile.mkdtemp()
    result["steps"][dtype] = profile(dtype, args.steps, trace_dir)
  text = json.dumps(result, indent=1)
  if args.output:
    pathlib.Path(args.output).write_text(text + "\n")
  print(text)


if __name__ == "__main__":
  main()
