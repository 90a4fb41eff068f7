"""Training-step cost of the entity softmax: full softmax over a sharded table vs in-batch negatives.

On 8 forced host CPU devices, mesh (data=2, model=4) by default: the entity table is split by rows
over all 8 devices ('entity' -> ('data', 'model')), the batch over 'data'. The model is only what
the loss needs: random 384-d "sentence" vectors -> a 384x384 dense query projection, RELIC's scaled
cosine against an `EntityTable` (normalize=True). One step = forward + backward + a plain SGD update
of the projection and the whole table (SGD keeps no state; Adam's two moments would triple the
table's memory). Each (size, mode) is compiled once, then timed over a few steps (median).

Per-device bytes come from the arrays' shard shapes (table) and from the loss's logits blocks
(full: [B, N / 8] per device, the shard_map's block; in-batch: [B / data, B], the shape XLA gives
the [B, B] logits), plus `compiled.memory_analysis()` of the step (temporaries and arguments).
Prints one JSON object.

  python tools/bench_entity_softmax.py [--sizes 1000,10000,100000,1000000 --batch 64 --steps 3]
"""
import argparse
import json
import math
import os
import pathlib
import statistics
import sys
import time

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
from docent_jax.models import entity_table  # pylint: disable=g-import-not-at-top

SCALE = 20.0
LEARNING_RATE = 0.1


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


def bench(num_entities: int, mode: str, mesh: jax.sharding.Mesh, batch: int, dim: int, steps: int) -> dict:
  model = DualEncoderHead(num_entities, dim)
  rng = np.random.default_rng(num_entities)
  batch_sharding = NamedSharding(mesh, PartitionSpec(parallel.DATA_AXIS))
  sentences = jax.device_put(rng.normal(size=(batch, dim)).astype(np.float32), batch_sharding)
  entity_ids = jax.device_put(rng.integers(0, num_entities, batch).astype(np.int32), batch_sharding)
  abstract = jax.eval_shape(model.init, jax.random.key(0), sentences, entity_ids)
  shardings = nn.unbox(parallel.param_shardings(abstract, mesh, parallel.DEFAULT_RULES))
  # Each device draws its own rows: the table is never whole on one device, not even at init.
  params = jax.jit(lambda key: nn.unbox(model.init(key, sentences, entity_ids)), out_shardings=shardings)(
      jax.random.key(0))

  step = jax.jit(make_step(model, mode, mesh), in_shardings=(shardings, batch_sharding, batch_sharding),
                 out_shardings=(shardings, parallel.replicated(mesh)), donate_argnums=(0,))
  start = time.perf_counter()
  compiled = step.lower(params, sentences, entity_ids).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  params, first_loss = compiled(params, sentences, entity_ids)
  jax.block_until_ready(params)
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    params, loss = compiled(params, sentences, entity_ids)
    jax.block_until_ready(params)
    times.append(time.perf_counter() - start)

  table = params["params"]["entities"]["embedding"]
  table_shard = table.addressable_shards[0].data
  data_size = mesh.shape[parallel.DATA_AXIS]
  if mode == "full":
    shards = math.prod(mesh.shape[a] for a in losses.ENTITY_AXES)
    logits_shape = (batch, -(-num_entities // shards))
  else:
    logits_shape = (batch // data_size, batch)
  row = {
      "num_entities": num_entities,
      "mode": mode,
      "step_s": statistics.median(times),
      "table_bytes_per_device": table_shard.nbytes,
      "table_shard_shape": list(table_shard.shape),
      "logits_bytes_per_device": int(np.prod(logits_shape)) * 4,
      "logits_shape_per_device": list(logits_shape),
      # The same batch every step, so the loss must fall: a check that the update reaches the table.
      "loss_first_step": float(first_loss),
      "loss_last_step": float(loss),
      "compile_s": compile_s,
  }
  if memory is not None:
    row["temp_bytes_per_device"] = memory.temp_size_in_bytes
    row["argument_bytes_per_device"] = memory.argument_size_in_bytes
  del params
  return row


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="1000,10000,100000,1000000")
  parser.add_argument("--mesh", default="2,4", help="data,model")
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--dim", type=int, default=384)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": tuple(int(s) for s in args.mesh.split(","))}))
  start = time.perf_counter()
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
      "total_s": time.perf_counter() - start,
  }, indent=1))


if __name__ == "__main__":
  main()
