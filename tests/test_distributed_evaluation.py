"""Evaluation across processes: link prediction and movie search on 2 processes give the 1-process metrics."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from docent_jax.evaluation import link_prediction
from docent_jax.evaluation import movie_search
import multiprocess_evaluation
import tiny_training

SCRIPT = pathlib.Path(__file__).resolve().parent / "multiprocess_evaluation.py"


def _metrics(output: str) -> dict[str, float]:
  return json.loads(output.strip().splitlines()[-1])


def test_two_processes_give_the_metrics_of_one_and_of_the_unsharded_evaluation():
  one = subprocess.run([sys.executable, str(SCRIPT)], env=tiny_training.subprocess_env(8), capture_output=True,
                       text=True, timeout=300)
  assert one.returncode == 0, one.stderr[-3000:]
  address = f"127.0.0.1:{tiny_training.free_port()}"
  processes = [subprocess.Popen([sys.executable, str(SCRIPT), f"--coordinator_address={address}", "--num_processes=2",
                                 f"--process_id={i}"], env=tiny_training.subprocess_env(4), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(2)]
  outputs = [p.communicate(timeout=300) for p in processes]
  for process, (_, stderr) in zip(processes, outputs):
    assert process.returncode == 0, stderr[-3000:]
  expected = _metrics(one.stdout)
  for stdout, _ in outputs:
    assert _metrics(stdout) == pytest.approx(expected, abs=1e-9)
  # The same numbers without any mesh: one block loop on one device over the whole table.
  data = multiprocess_evaluation.problem()
  for scoring in ("transe", "distmult"):
    unsharded = link_prediction.evaluate_link_prediction(
        scoring, data["entities"], data["relations"], data["eval_triples"],
        np.arange(multiprocess_evaluation.NUM_ENTITIES), data["filter_triples"])
    assert {k[len(scoring) + 1:]: v for k, v in expected.items() if k.startswith(scoring)} == pytest.approx(unsharded)
  full_scores = movie_search.evaluate_search(data["queries"] @ data["entities"].T, data["query_set"])
  assert {k[len("search/"):]: v for k, v in expected.items() if k.startswith("search/")} == pytest.approx(full_scores)
  assert 0.01 < expected["transe/mrr"] < 0.9 and 0.01 < expected["search/search_mrr"] < 0.9  # Not trivial.
