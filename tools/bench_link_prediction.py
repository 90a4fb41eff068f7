"""Filtered link-prediction throughput at WN18RR size against the bare matmuls producing its scores; --scale: to 4.6M.

Prints one JSON object. 40,943 entities of dim 128 with random embeddings; the 12,037 inductive
test triples give 2 x 12,037 queries (tail and head prediction) ranked among all entities. The
filter is WN18RR's ind-train + ind-dev + ind-test triples when the data is present
($DOCENT_JAX_DATA, or ../shared/data beside the repository), else random triples of that count.

Times are the best of a few runs after a compiling warm-up; the evaluation's time is end to end
(host-side filter structures included). Two bounds, with the same batches, jitted and waited for:
  bound: the plain [batch, all candidates] DistMult score matmuls (scores left on the device);
  blocked_bound: the products the evaluation does (candidate blocks plus the batch's targets),
    only summed. The evaluation works in cache-sized blocks, so it can beat the plain bound.
TransE is timed on the first --transe_triples test triples.

--scale: DistMult ranking among all N entities for each N of --scale_sizes (WN18RR's 40,943 to
Wikidata5M's 4.6M), on 8 forced host CPU devices, mesh (data=2, model=4), with the entity table split
by rows over all of them as a trainer's table is ('entity' -> ('data', 'model')); its rows are rounded
up to a multiple of 8 and the extra rows are not candidates. Embeddings and filter triples are random:
the filter is 93,003 random triples (WN18RR's count) at every size, so that the host-side work stays
put and the growth measured is the ranking's. The eval triples are the whole batches nearest to
--scale_work candidate scores (2 x triples x N; WN18RR's test set is 0.99e9), so each size takes about
as long. Per size: queries/s, candidate scores/s (queries/s x N; also per CPU second, which other
load on the cores hardly changes), per-device bytes (table shard, candidate blocks, one score block,
and `memory_analysis()` of the library's compiled per-batch ranking) and whether a device could hold
[Q, N] scores or the whole table. Then the ratio of candidate scores/s at the largest size to the
smallest (target: at least 0.5), and a projection (an estimate) for Wikidata5M's inductive test set on
a Cloud TPU v4-32, scaled from a float32 matmul peak measured in the same run. About 2 minutes on 2 cores.

Usage: python tools/bench_link_prediction.py [--batch_size 256] [--candidate_block 4096]
       python tools/bench_link_prediction.py --scale [--scale_sizes 40943,409430,1000000,4600000]
"""
import argparse
import functools
import json
import os
import pathlib
import resource
import sys
import time

_START = time.perf_counter()
_ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_ARGS.add_argument("--batch_size", type=int, default=256)
_ARGS.add_argument("--candidate_block", type=int, default=4096)
_ARGS.add_argument("--transe_triples", type=int, default=1024, help="test triples for the (slower) TransE measurement")
_ARGS.add_argument("--scale", action="store_true", help="ranking from 40,943 to 4.6M entities on 8 devices")
_ARGS.add_argument("--scale_sizes", default="40943,409430,1000000,4600000")
_ARGS.add_argument("--scale_work", type=float, default=1e9, help="candidate scores per evaluation and size")
_ARGS.add_argument("--scale_repeats", type=int, default=2, help="timed evaluations per size, after the warm-up")
_FLAGS = _ARGS.parse_args()
if _FLAGS.scale:
  # Must precede the first jax import: 8 host devices stand in for an accelerator mesh.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
  os.environ.setdefault("JAX_PLATFORMS", "cpu")

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
import docent_jax  # pylint: disable=g-import-not-at-top,unused-import  # Before JAX: keeps it on the CPU where no accelerator is attached.
import jax  # pylint: disable=g-import-not-at-top,g-bad-import-order
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
import ml_collections  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from docent_jax import losses  # pylint: disable=g-import-not-at-top
from docent_jax import parallel  # pylint: disable=g-import-not-at-top
from docent_jax.data import io  # pylint: disable=g-import-not-at-top
from docent_jax.evaluation import link_prediction  # pylint: disable=g-import-not-at-top
from docent_jax.modules import relations  # pylint: disable=g-import-not-at-top

NUM_ENTITIES, NUM_RELATIONS, DIM = 40_943, 11, 128
NUM_TEST_TRIPLES, NUM_FILTER_TRIPLES = 12_037, 93_003
SCALE_MESH = (2, 4)
# Cloud TPU v4 (cloud.google.com/tpu/docs/v4): 275 TFLOP/s bf16 per chip (float32 dots run as bf16 passes at
# JAX's default precision); a v4-32 slice has 16 chips. BLP's inductive Wikidata5M test set: 5,133 triples.
V4_PEAK_FLOPS, V4_32_CHIPS = 275e12, 16
WIKIDATA5M_TEST_QUERIES = 2 * 5_133


def _read_lines(path: pathlib.Path) -> list[str]:
  return [line for line in io.read_lines(path) if line]


def _wn18rr_triples(directory: pathlib.Path) -> tuple[np.ndarray, np.ndarray]:
  """(ind-test triples, all ind-* triples) as global (head, relation, tail) indices."""
  entity_index = {e: i for i, e in enumerate(_read_lines(directory / "entities.txt"))}
  relation_index = {r: i for i, r in enumerate(_read_lines(directory / "relations.txt"))}
  splits = {}
  for split in ("ind-train", "ind-dev", "ind-test"):
    path = directory / f"{split}.tsv"
    rows = []
    for line_number, line in enumerate(_read_lines(path), start=1):
      fields = line.split("\t")
      try:
        rows.append((entity_index[fields[0]], relation_index[fields[1]], entity_index[fields[2]]))
      except (KeyError, IndexError) as error:
        raise ValueError(f"{path}:{line_number}: not a triple of known entities and relations: {line!r}") from error
    splits[split] = np.array(rows, np.int64)
  return splits["ind-test"], np.concatenate(list(splits.values()))


def _random_triples(rng: np.random.Generator, count: int, num_entities: int = NUM_ENTITIES) -> np.ndarray:
  return np.stack([rng.integers(0, num_entities, count), rng.integers(0, NUM_RELATIONS, count),
                   rng.integers(0, num_entities, count)], axis=1)


def _timed(fn, repeats: int = 3) -> tuple[float, object]:
  """Best wall time of `repeats` runs after one warm-up (which compiles)."""
  result = fn()
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    best = min(best, time.perf_counter() - start)
  return best, result


def _bare_matmuls(scoring_fn: relations.BilinearScoringFunction, entities: jax.Array, relations_table: jax.Array,
                  triples: np.ndarray, batch_size: int):
  """Runs only the jitted [B, C] score matmuls of both directions, with the same batches."""

  @jax.jit
  def tail_scores(head, relation, tail):
    del tail
    return scoring_fn.score_tails(entities[head], relations_table[relation], entities)

  @jax.jit
  def head_scores(head, relation, tail):
    del head
    return scoring_fn.score_heads(relations_table[relation], entities[tail], entities)

  return _run_batches((tail_scores, head_scores), triples, batch_size)


def _blocked_matmuls(scoring_fn: relations.BilinearScoringFunction, entities: jax.Array,
                     relations_table: jax.Array, triples: np.ndarray, batch_size: int, candidate_block: int):
  """The evaluation's products (candidate blocks plus the batch's targets), only summed per query.

  A sum is the cheapest use of the scores that keeps the compiler from dropping them.
  """
  padding = -len(entities) % candidate_block
  blocks = jnp.pad(entities, ((0, padding), (0, 0))).reshape(-1, candidate_block, entities.shape[1])

  def summed_scores(queries, targets):
    def add_block(total, block):
      return total + jnp.sum(queries @ jnp.concatenate([block, targets]).T, axis=1), None
    return jax.lax.scan(add_block, jnp.zeros(len(queries)), blocks)[0]

  @jax.jit
  def tail_scores(head, relation, tail):
    return summed_scores(scoring_fn.tail_query(entities[head], relations_table[relation]), entities[tail])

  @jax.jit
  def head_scores(head, relation, tail):
    return summed_scores(scoring_fn.head_query(relations_table[relation], entities[tail]), entities[head])

  return _run_batches((tail_scores, head_scores), triples, batch_size)


def _run_batches(directions, triples: np.ndarray, batch_size: int):
  """A function running each direction's jitted fn(head, relation, tail) over all batches."""

  def run():
    for begin in range(0, len(triples), batch_size):
      rows = np.minimum(np.arange(begin, begin + batch_size), len(triples) - 1)
      batch = triples[rows].astype(np.int32)
      for fn in directions:
        out = fn(batch[:, 0], batch[:, 1], batch[:, 2])
    # The device runs the calls in order, so waiting for the last waits for all.
    return out.block_until_ready()

  return run


def _ranking_bytes(entities: jax.Array, num_candidates: int, batch_size: int, candidate_block: int,
                   mesh: Mesh) -> dict:
  """Per-device bytes of the library's per-batch ranking, compiled at the evaluation's shapes for all entities.

  Lowered from abstract arrays with the shardings `evaluate_link_prediction` gives them; nothing runs.
  """
  # pylint: disable=protected-access
  ids, _, _ = link_prediction._candidate_layout(np.arange(num_candidates), candidate_block, mesh.size)
  everywhere, replicated = NamedSharding(mesh, PartitionSpec(mesh.axis_names)), parallel.replicated(mesh)
  blocks = jax.ShapeDtypeStruct(ids.shape + (DIM,), jnp.float32, sharding=everywhere)
  per_block = jax.ShapeDtypeStruct(ids.shape[:1], jnp.int32, sharding=everywhere)
  relations_table = jax.ShapeDtypeStruct((NUM_RELATIONS, DIM), jnp.float32, sharding=replicated)
  query = jax.ShapeDtypeStruct((batch_size,), jnp.int32, sharding=replicated)
  known = jax.ShapeDtypeStruct((batch_size, 1), jnp.int32, sharding=replicated)
  memory = link_prediction._filtered_ranks.lower(
      relations.get_scoring_function("distmult"), True, num_candidates, entities, relations_table, blocks, per_block,
      per_block, query, query, query, query, known, mesh=mesh).compile().memory_analysis()
  block_size = ids.shape[1]
  return {
      "block_size": block_size,
      "table_bytes_per_device": entities.addressable_shards[0].data.nbytes,
      "candidate_blocks_bytes_per_device": blocks.size // mesh.size * 4,
      "scores_block_bytes_per_device": batch_size * (block_size + batch_size) * 4,
      "ranking_temp_bytes_per_device": memory.temp_size_in_bytes,
      "ranking_argument_bytes_per_device": memory.argument_size_in_bytes,
      # [Q, N] scores would take batch x N x 4 bytes of temporaries; the whole table, all its bytes.
      "no_device_holds_q_by_n_scores": memory.temp_size_in_bytes < batch_size * num_candidates * 4,
      "no_device_holds_whole_table": memory.argument_size_in_bytes + memory.temp_size_in_bytes < entities.nbytes,
  }


def _scale_row(args: argparse.Namespace, num_entities: int, mesh: Mesh, rng: np.random.Generator) -> dict:
  """Filtered DistMult ranking among all `num_entities`, with the table split by rows over the mesh."""
  table_rows = -(-num_entities // mesh.size) * mesh.size
  # Each device draws its own rows, so the table is never whole on one device; an rbg key draws them
  # without threefry's temporaries (4 x the table).
  draw = jax.jit(functools.partial(jax.random.normal, shape=(table_rows, DIM)),
                 out_shardings=NamedSharding(mesh, PartitionSpec(losses.ENTITY_AXES)))
  entities = draw(jax.random.key(0, impl="rbg"))
  relations_table = rng.normal(size=(NUM_RELATIONS, DIM)).astype(np.float32)
  batches = max(1, round(args.scale_work / (2 * num_entities * args.batch_size)))
  eval_triples = _random_triples(rng, batches * args.batch_size, num_entities)
  filter_triples = _random_triples(rng, NUM_FILTER_TRIPLES, num_entities)
  cpu_seconds = []

  def evaluate():
    start = time.process_time()
    metrics = link_prediction.evaluate_link_prediction(
        "distmult", entities, relations_table, eval_triples, np.arange(num_entities), filter_triples,
        batch_size=args.batch_size, candidate_block=args.candidate_block, mesh=mesh)
    cpu_seconds.append(time.process_time() - start)
    return metrics

  seconds, result = _timed(evaluate, repeats=args.scale_repeats)
  num_queries = 2 * len(eval_triples)
  return {
      "num_entities": num_entities,
      "table_rows": table_rows,
      "num_queries": num_queries,
      "seconds": round(seconds, 3),
      "queries_per_s": round(num_queries / seconds, 1),
      "candidate_scores_per_s": round(num_queries * num_entities / seconds),
      # Per CPU second of this process (all its threads), the least over the timed runs: less sensitive
      # than wall time to other load on the cores.
      "candidate_scores_per_cpu_s": round(num_queries * num_entities / min(cpu_seconds[1:])),
      **_ranking_bytes(entities, num_entities, args.batch_size, args.candidate_block, mesh),
      # All 8 devices are this one process; the peak so far, over every size run before.
      "peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
      "random_embedding_mrr": round(result["mrr"], 7),
  }


def _v4_32_projection(row: dict, peak_gflops: float) -> dict:
  """Ranking time of Wikidata5M's inductive test queries among all entities on a v4-32, from `row`'s scores/s.

  Scales the measured candidate scores/s by the ratio of the slice's bf16 peak to the CPU matmul peak
  measured here: it assumes the TPUs reach the fraction of their peak that these cores reach of theirs.
  """
  # DistMult scores a candidate with one DIM-long dot product against the query's vector: 2 x DIM FLOPs.
  cpu_fraction = row["candidate_scores_per_s"] * 2 * DIM / (peak_gflops * 1e9)
  scores_per_s = row["candidate_scores_per_s"] * V4_32_CHIPS * V4_PEAK_FLOPS / (peak_gflops * 1e9)
  return {
      "what": "ESTIMATE, not a measurement: ranking Wikidata5M's inductive test queries on a v4-32",
      "queries": WIKIDATA5M_TEST_QUERIES,
      "candidates": row["num_entities"],
      "cpu_fraction_of_matmul_peak": round(cpu_fraction, 3),
      "peak_ratio_v4_32_over_cpu": round(V4_32_CHIPS * V4_PEAK_FLOPS / (peak_gflops * 1e9)),
      "candidate_scores_per_s": f"{scores_per_s:.3g}",
      "ranking_s": round(WIKIDATA5M_TEST_QUERIES * row["num_entities"] / scores_per_s, 4),
      "excludes": "host-side filter structures (all training triples) and encoding the entities",
  }


def scale(args: argparse.Namespace) -> None:
  """--scale: see the module docstring."""
  # Imported here: bench_encoder (beside this file) defaults JAX to the CPU, which only this mode wants.
  from bench_encoder import matmul_peak_gflops  # pylint: disable=g-import-not-at-top
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": SCALE_MESH}))
  rng = np.random.default_rng(0)
  rows = [_scale_row(args, int(n), mesh, rng) for n in args.scale_sizes.split(",")]
  peak_gflops = matmul_peak_gflops()
  ratio = rows[-1]["candidate_scores_per_s"] / rows[0]["candidate_scores_per_s"]
  cpu_ratio = rows[-1]["candidate_scores_per_cpu_s"] / rows[0]["candidate_scores_per_cpu_s"]
  print(json.dumps({
      "mesh": dict(mesh.shape),
      "devices": f"{jax.device_count()} x {jax.devices()[0].platform}",
      "scoring": "distmult",
      "dim": DIM,
      "batch_size": args.batch_size,
      "candidate_block": args.candidate_block,
      "data": "random normal embeddings; random eval triples; filter: 93,003 random triples at every size",
      "timing": f"end to end, best of {args.scale_repeats} after a compiling warm-up",
      "rows": rows,
      "candidate_scores_per_s_ratio_largest_over_smallest": round(ratio, 3),
      "candidate_scores_per_cpu_s_ratio_largest_over_smallest": round(cpu_ratio, 3),
      "target_ratio_at_least": 0.5,
      "target_met": ratio >= 0.5,
      "matmul_peak_gflops": round(peak_gflops, 1),
      "v4_32_projection": _v4_32_projection(rows[-1], peak_gflops),
      "total_s": round(time.perf_counter() - _START, 1),
  }, indent=1))


def main(args: argparse.Namespace) -> None:
  rng = np.random.default_rng(0)
  data_dir = pathlib.Path(os.environ.get("DOCENT_JAX_DATA", REPO_ROOT.parent / "shared" / "data")) / "wn18rr"
  if data_dir.is_dir():
    eval_triples, filter_triples = _wn18rr_triples(data_dir)
    filter_source = "wn18rr ind-train + ind-dev + ind-test"
  else:
    eval_triples = _random_triples(rng, NUM_TEST_TRIPLES)
    filter_triples = np.concatenate([eval_triples, _random_triples(rng, NUM_FILTER_TRIPLES - NUM_TEST_TRIPLES)])
    filter_source = "random"
  entities = jnp.asarray(rng.normal(size=(NUM_ENTITIES, DIM)).astype(np.float32))
  relations_table = jnp.asarray(rng.normal(size=(NUM_RELATIONS, DIM)).astype(np.float32))
  candidates = np.arange(NUM_ENTITIES)

  def evaluate(name, triples):
    return link_prediction.evaluate_link_prediction(name, entities, relations_table, triples, candidates,
                                                    filter_triples, batch_size=args.batch_size,
                                                    candidate_block=args.candidate_block)

  distmult = relations.get_scoring_function("distmult")
  seconds, result = _timed(lambda: evaluate("distmult", eval_triples))
  bound_seconds, _ = _timed(_bare_matmuls(distmult, entities, relations_table, eval_triples, args.batch_size))
  blocked_seconds, _ = _timed(_blocked_matmuls(distmult, entities, relations_table, eval_triples, args.batch_size,
                                               args.candidate_block))
  transe_triples = eval_triples[:args.transe_triples]
  transe_seconds, _ = _timed(lambda: evaluate("transe", transe_triples), repeats=1)

  num_queries = 2 * len(eval_triples)
  print(json.dumps({
      "queries_per_s": round(num_queries / seconds, 1),
      "bound_queries_per_s": round(num_queries / bound_seconds, 1),
      "fraction_of_bound": round(bound_seconds / seconds, 3),
      "transe_queries_per_s": round(2 * len(transe_triples) / transe_seconds, 1),
      "blocked_bound_queries_per_s": round(num_queries / blocked_seconds, 1),
      "fraction_of_blocked_bound": round(blocked_seconds / seconds, 3),
      "num_queries": num_queries,
      "transe_num_queries": 2 * len(transe_triples),
      "num_entities": NUM_ENTITIES,
      "dim": DIM,
      "batch_size": args.batch_size,
      "candidate_block": args.candidate_block,
      "filter_source": filter_source,
      "num_filter_triples": len(filter_triples),
      "distmult_seconds": round(seconds, 3),
      "bound_seconds": round(bound_seconds, 3),
      "transe_seconds": round(transe_seconds, 3),
      "random_embedding_mrr": round(result["mrr"], 5),
      "device": str(jax.devices()[0].device_kind),
  }))


if __name__ == "__main__":
  if _FLAGS.scale:
    scale(_FLAGS)
  else:
    main(_FLAGS)
