"""Filtered link-prediction throughput at WN18RR size, against the bare matmuls producing its scores.

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

Usage: python tools/bench_link_prediction.py [--batch_size 256] [--candidate_block 4096]
"""
import argparse
import json
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from docent_jax.data import io  # pylint: disable=g-import-not-at-top
from docent_jax.evaluation import link_prediction  # pylint: disable=g-import-not-at-top
from docent_jax.models import relations  # pylint: disable=g-import-not-at-top

NUM_ENTITIES, NUM_RELATIONS, DIM = 40_943, 11, 128
NUM_TEST_TRIPLES, NUM_FILTER_TRIPLES = 12_037, 93_003


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


def _random_triples(rng: np.random.Generator, count: int) -> np.ndarray:
  return np.stack([rng.integers(0, NUM_ENTITIES, count), rng.integers(0, NUM_RELATIONS, count),
                   rng.integers(0, NUM_ENTITIES, count)], axis=1)


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


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--candidate_block", type=int, default=4096)
  parser.add_argument("--transe_triples", type=int, default=1024,
                      help="test triples for the (slower) TransE measurement")
  args = parser.parse_args()

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
  main()
