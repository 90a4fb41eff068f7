"""Training-step cost of the entity softmax: full softmax over a sharded table vs in-batch negatives.

On 8 forced host CPU devices, mesh (data=2, model=4) by default: the entity table is split by rows
over all 8 devices ('entity' -> ('data', 'model')), the batch over 'data'. The model is only what
the loss needs: random `--dim` "sentence" vectors -> a dim x dim dense query projection, RELIC's
scaled cosine against an `EntityTable` (normalize=True). One step = forward + backward + a plain SGD
update of the projection and the whole table, in place (the parameters are donated; SGD keeps no
state, Adam's two moments would triple the table's memory). Each (size, mode) is compiled once, then
timed over a few steps (median).

The default sizes run from WN18RR's 40,943 entities to Wikidata5M's 4.6M, at Wikidata5M's 128
dimensions (--dim 384 for DOCENT's sentence vectors). A table's rows are rounded up to a multiple of
the device count (40,943 -> 40,944) so that it splits over every device, as a trainer's table must
(`parallel.param_shardings` replicates one that does not divide); the extra rows are extra negatives.

Per-device bytes come from the arrays' shard shapes (table) and from the loss's logits blocks
(full: [B, N / 8] per device, the shard_map's block; in-batch: [B / data, B], the shape XLA gives
the [B, B] logits), plus `compiled.memory_analysis()` of the step (temporaries, arguments, outputs
and the outputs that reuse donated arguments). Each row checks the compiled per-device program: no
array has a dimension of all N table rows (no [B, N] logits, no gathered table). The JSON ends with
growth ratios from the smallest to the largest size and a Cloud TPU v4-32 projection (an estimate).
Prints one JSON object; about 2 minutes on 2 cores.

  python tools/bench_entity_softmax.py [--sizes 40943,409430,1000000,4600000 --dim 128 --batch 64 --steps 3]
"""
import argparse
import json
import math
import os
import pathlib
import re
import resource
import statistics
import sys
import time

_START = time.perf_counter()
# Must precede the first jax import: 8 host devices stand in for an accelerator mesh.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn  # pylint: disable=g-import-not-at-top,g-bad-import-order
import jax  # pylint: disable=g-import-not-at-top
from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
import ml_collections  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from docent_jax import losses  # pylint: disable=g-import-not-at-top
from docent_jax import parallel  # pylint: disable=g-import-not-at-top
from docent_jax.modules import entity_table  # pylint: disable=g-import-not-at-top

SCALE = 20.0
LEARNING_RATE = 0.1
# Cloud TPU v4 (cloud.google.com/tpu/docs/v4): 32 GiB of HBM per chip; a v4-32 slice has 16 chips on 4 hosts,
# one JAX device per chip (megacore), or 32 with each TensorCore a device.
V4_HBM_BYTES = 32 * 2**30
V4_32_DEVICES = (16, 32)


class DualEncoderHead(nn.Module):
  """Query projection of precomputed sentence vectors, and the entity table."""
  num_entities: int
  dim: int

  def setup(self):
    self.projection = nn.Dense(
        self.dim, kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), ("embed", "features")),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("features",)))
    self.entities = entity_table.EntityTable(self.num_entities, self.dim, normalize=True)

  def __call__(self, sentences: jax.Array, entity_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    return self.queries(sentences), self.entities(entity_ids)

  def queries(self, sentences: jax.Array) -> jax.Array:
    return entity_table.l2_normalize(self.projection(sentences))

  def table(self) -> jax.Array:
    return self.entities.table()


def make_step(model: DualEncoderHead, mode: str, mesh: jax.sharding.Mesh):
  """One SGD step on (params, sentences, entity_ids) -> (params, loss)."""

  def loss_fn(params, sentences, entity_ids):
    if mode == "full":
      queries = model.apply(params, sentences, method="queries")
      table = model.apply(params, method="table")
      return losses.full_softmax_loss(queries, table, entity_ids, SCALE, mesh=mesh)[0]
    queries, positives = model.apply(params, sentences, entity_ids)
    return losses.in_batch_softmax_loss(queries, positives, entity_ids, SCALE)[0]

  def step(params, sentences, entity_ids):
    loss, grads = jax.value_and_grad(loss_fn)(params, sentences, entity_ids)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), loss

  return step


def cpu_seconds() -> np.ndarray:
  """[user, kernel] CPU seconds of this process so far."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return np.array([usage.ru_utime, usage.ru_stime])


def entity_arrays(hlo: str, num_rows: int) -> list[str]:
  """The array shapes in compiled HLO text with a dimension of `num_rows`."""
  return sorted({shape for shape, dims in re.findall(r"(\w+\[([\d,]+)\])", hlo) if str(num_rows) in dims.split(",")})


def bench(num_entities: int, mode: str, mesh: jax.sharding.Mesh, batch: int, dim: int, steps: int) -> dict:
  table_rows = -(-num_entities // mesh.size) * mesh.size
  model = DualEncoderHead(table_rows, dim)
  rng = np.random.default_rng(num_entities)
  batch_sharding = NamedSharding(mesh, PartitionSpec(parallel.DATA_AXIS))
  sentences = jax.device_put(rng.normal(size=(batch, dim)).astype(np.float32), batch_sharding)
  entity_ids = jax.device_put(rng.integers(0, num_entities, batch).astype(np.int32), batch_sharding)
  abstract = jax.eval_shape(model.init, jax.random.key(0), sentences, entity_ids)
  shardings = nn.unbox(parallel.param_shardings(abstract, mesh, parallel.DEFAULT_RULES))
  # Each device draws its own rows: the table is never whole on one device, not even at init. An rbg key
  # draws them without threefry's temporaries (4 x the table).
  params = jax.jit(lambda key: nn.unbox(model.init(key, sentences, entity_ids)), out_shardings=shardings)(
      jax.random.key(0, impl="rbg"))

  step = jax.jit(make_step(model, mode, mesh), in_shardings=(shardings, batch_sharding, batch_sharding),
                 out_shardings=(shardings, parallel.replicated(mesh)), donate_argnums=(0,))
  start = time.perf_counter()
  compiled = step.lower(params, sentences, entity_ids).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  params, first_loss = compiled(params, sentences, entity_ids)
  jax.block_until_ready(params)
  times, cpu_times = [], []
  for _ in range(steps):
    start, cpu_start = time.perf_counter(), cpu_seconds()
    params, loss = compiled(params, sentences, entity_ids)
    jax.block_until_ready(params)
    times.append(time.perf_counter() - start)
    cpu_times.append(cpu_seconds() - cpu_start)

  table = params["params"]["entities"]["embedding"]
  table_shard = table.addressable_shards[0].data
  data_size = mesh.shape[parallel.DATA_AXIS]
  if mode == "full":
    shards = math.prod(mesh.shape[a] for a in losses.ENTITY_AXES)
    logits_shape = (batch, -(-table_rows // shards))
  else:
    logits_shape = (batch // data_size, batch)
  # Compiled per device: an array with a dimension of all N rows would be [B, N] logits or a gathered table.
  whole = entity_arrays(compiled.as_text(), table_rows)
  row = {
      "num_entities": num_entities,
      "table_rows": table_rows,
      "mode": mode,
      "step_s": statistics.median(times),
      # CPU seconds of this process (all its threads), which other load on the cores hardly changes: in user
      # mode the computation; in the kernel mostly first touches of each step's fresh buffers.
      "step_user_s": round(statistics.median(t[0] for t in cpu_times), 4),
      "step_kernel_s": round(statistics.median(t[1] for t in cpu_times), 4),
      "table_bytes_per_device": table_shard.nbytes,
      "table_shard_shape": list(table_shard.shape),
      "logits_bytes_per_device": int(np.prod(logits_shape)) * 4,
      "logits_shape_per_device": list(logits_shape),
      # The same batch every step, so the loss must fall: a check that the update reaches the table.
      "loss_first_step": float(first_loss),
      "loss_last_step": float(loss),
      "compile_s": compile_s,
      "arrays_spanning_all_rows": whole,
      "full_logits_bytes": batch * table_rows * 4,
  }
  if memory is not None:
    row.update({
        "temp_bytes_per_device": memory.temp_size_in_bytes,
        "argument_bytes_per_device": memory.argument_size_in_bytes,
        "output_bytes_per_device": memory.output_size_in_bytes,
        "aliased_bytes_per_device": memory.alias_size_in_bytes,
    })
  del params
  return row


def growth(rows: list[dict], mode: str) -> dict:
  """Ratios of the largest size's numbers to the smallest's."""
  mode_rows = [r for r in rows if r["mode"] == mode]
  first, last = mode_rows[0], mode_rows[-1]
  keys = ("table_rows", "step_s", "step_user_s", "step_kernel_s", "table_bytes_per_device", "logits_bytes_per_device",
          "temp_bytes_per_device")
  return {k: round(last[k] / first[k], 2) for k in keys if k in last}


def v4_32_projection(row: dict, mesh_size: int, dim: int) -> dict:
  """Per-chip memory of the table, Adam's two float32 moments and the step's temporaries on a v4-32.

  An estimate from the largest full-softmax row: the table and moments are split evenly, and the
  measured temporaries per device (logits blocks, normalised rows, gradient) shrink with the shard.
  """
  table_bytes = row["table_rows"] * dim * 4
  projection = {"what": f"ESTIMATE, not a measurement: a {row['table_rows']:,} x {dim} float32 table and Adam's two "
                        "moments split over a v4-32", "table_bytes": table_bytes, "hbm_bytes_per_chip": V4_HBM_BYTES}
  for devices in V4_32_DEVICES:
    state = 3 * table_bytes // devices
    temp = row["temp_bytes_per_device"] * mesh_size // devices
    projection[f"{devices}_devices"] = {"table_and_moments_bytes": state, "step_temp_bytes": temp,
                                         "fraction_of_hbm": round((state + temp) / V4_HBM_BYTES, 4)}
  return projection


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="40943,409430,1000000,4600000")
  parser.add_argument("--mesh", default="2,4", help="data,model")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--dim", type=int, default=128)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": tuple(int(s) for s in args.mesh.split(","))}))
  rows = [bench(int(n), mode, mesh, args.batch, args.dim, args.steps)
          for n in args.sizes.split(",") for mode in ("full", "in_batch")]
  print(json.dumps({
      "mesh": dict(mesh.shape),
      "devices": f"{jax.device_count()} x {jax.devices()[0].platform}",
      "batch": args.batch,
      "dim": args.dim,
      "optimizer": f"sgd (lr {LEARNING_RATE}), no optimizer state",
      "step": "timed median over --steps after one untimed step",
      "rows": rows,
      "no_device_holds_all_rows": not any(r["arrays_spanning_all_rows"] for r in rows),
      "growth_smallest_to_largest": {mode: growth(rows, mode) for mode in ("full", "in_batch")},
      "v4_32_projection": v4_32_projection([r for r in rows if r["mode"] == "full"][-1], mesh.size, args.dim),
      "total_s": round(time.perf_counter() - _START, 1),
  }, indent=1))


if __name__ == "__main__":
  main()
