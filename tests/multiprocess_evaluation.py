"""Link prediction and movie search on a mesh that may span processes; prints their metrics as one JSON line.

Every process builds the same random problem (small-integer vectors, so scores are exact and many tie) and
lays the entity table out row-sharded over the (2, 4) mesh, as a trainer does. Run by
`test_distributed_evaluation` in one process of 8 devices and in two of 4.

  python tests/multiprocess_evaluation.py [--coordinator_address=HOST:PORT --num_processes=2 --process_id=I]
"""
import argparse
import json

import jax
import ml_collections
import numpy as np

from docent_jax import parallel
from docent_jax.data.reviews import search_queries
from docent_jax.evaluation import link_prediction
from docent_jax.evaluation import movie_search

NUM_ENTITIES, NUM_RELATIONS, DIM = 200, 5, 8


def problem() -> dict[str, np.ndarray | search_queries.QuerySet]:
  rng = np.random.default_rng(0)
  triples = np.stack([rng.integers(0, NUM_ENTITIES, 600), rng.integers(0, NUM_RELATIONS, 600),
                      rng.integers(0, NUM_ENTITIES, 600)], axis=1)
  relevant = [np.sort(rng.choice(NUM_ENTITIES, rng.integers(1, 30), replace=False)) for _ in range(37)]
  return {"entities": rng.integers(-1, 2, (NUM_ENTITIES, DIM)).astype(np.float32),
          "relations": rng.integers(-1, 2, (NUM_RELATIONS, DIM)).astype(np.float32),
          "filter_triples": triples[:500], "eval_triples": triples[500:],
          "queries": rng.integers(-2, 3, (len(relevant), DIM)).astype(np.float32),
          "query_set": search_queries.QuerySet([f"q{i}" for i in range(len(relevant))], relevant)}


def evaluate(data: dict, mesh: jax.sharding.Mesh) -> dict[str, float]:
  table = parallel.shard_rows(data["entities"], mesh)
  assert not table.is_fully_addressable or jax.process_count() == 1
  np.testing.assert_array_equal(parallel.fetch(table), data["entities"])  # Gathered whole on every process.
  results = {}
  for scoring in ("transe", "distmult"):
    metrics = link_prediction.evaluate_link_prediction(
        scoring, table, data["relations"], data["eval_triples"], np.arange(NUM_ENTITIES), data["filter_triples"],
        batch_size=16, candidate_block=16, mesh=mesh)
    results.update({f"{scoring}/{k}": v for k, v in metrics.items()})
  search = movie_search.search_by_vectors(data["queries"], data["entities"], data["query_set"], mesh=mesh,
                                          query_batch=16, candidate_block=16)
  results.update({f"search/{k}": v for k, v in search.items()})
  return results


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--coordinator_address")
  parser.add_argument("--num_processes", type=int)
  parser.add_argument("--process_id", type=int)
  args = parser.parse_args()
  if args.coordinator_address:
    parallel.initialize_distributed(args.coordinator_address, args.num_processes, args.process_id)
  mesh = parallel.create_mesh(ml_collections.ConfigDict(dict(shape=(2, 4))))
  print(json.dumps(evaluate(problem(), mesh)))


if __name__ == "__main__":
  main()
