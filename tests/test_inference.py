"""A trained run as a model: `docent_jax.load` in a fresh process, without the run's data, on any device count."""
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from docent_jax import train
from docent_jax.inference import link_prediction
import kg_fixtures
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

# Run in a fresh process: load the run, write its entity vectors, a search and a link prediction.
LOAD_SCRIPT = """
import json, sys
import numpy as np
import docent_jax
model = docent_jax.load(sys.argv[1])
ids, vectors = model.entities()
np.save(sys.argv[2] + "/vectors.npy", vectors)
queries = ["entity number five", "a thing related to twelve"]
json.dump({"ids": ids, "search": model.search(queries, k=5), "queries": model.encode(queries).tolist(),
           "approximate": model.search(queries, k=5, approximate=True),
           "tails": model.predict(queries, [model.relation_ids[0]] * 2, k=3)}, open(sys.argv[2] + "/out.json", "w"))
"""


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> tuple[pathlib.Path, np.ndarray]:
  """(a copy of a tiny BLP run's directory whose data is gone, the entity vectors its evaluation used)."""
  data = tmp_path_factory.mktemp("data")
  kg_dir = kg_fixtures.write_tiny_kg(data / "kg")
  config = kg_fixtures.tiny_config(kg_dir, data / "tfds")
  config.train.num_steps = 4
  config.evals.validation.every_steps = 2
  workdir = tmp_path_factory.mktemp("run")
  train.train_and_evaluate(config, workdir)
  trainer = train.Trainer(config, workdir / "blp_transe")
  vectors = trainer.objective.model(trainer.restore_params()[0]).entities()[1]
  run_dir = pathlib.Path(shutil.copytree(workdir / "blp_transe", tmp_path_factory.mktemp("copied") / "blp_transe"))
  shutil.rmtree(data)  # Neither the graph nor its TFDS build is left.
  return run_dir, vectors


@pytest.mark.parametrize("num_devices", [1, 4])
def test_a_loaded_run_gives_the_evaluations_vectors_and_exact_search(trained_run, tmp_path, num_devices):
  run_dir, evaluated = trained_run
  subprocess.run([sys.executable, "-c", LOAD_SCRIPT, str(run_dir), str(tmp_path)], cwd=REPO_ROOT, check=True,
                 env=tiny_training.subprocess_env(num_devices), capture_output=True)
  vectors = np.load(tmp_path / "vectors.npy")
  np.testing.assert_allclose(vectors, evaluated, atol=1e-5, rtol=1e-4)
  out = json.loads((tmp_path / "out.json").read_text())
  # Search answers are brute-force cosine similarity over the entity vectors.
  unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
  queries = np.asarray(out["queries"])
  cosine = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ unit.T
  row_of = {entity: j for j, entity in enumerate(out["ids"])}
  for row, answer in zip(cosine, out["search"]):
    # The tiny model's vectors nearly coincide: compare scores, each answer's own and the top 5 in order.
    scores = [score for _, score in answer]
    np.testing.assert_allclose(scores, row[[row_of[entity] for entity, _ in answer]], atol=1e-5)
    np.testing.assert_allclose(scores, np.sort(row)[::-1][:5], atol=1e-5)
  assert all(len(answer) == 3 for answer in out["tails"])
  # The CPU index (saved next to the run) searches every list of so few vectors: the exact answer's scores.
  for approximate, exact in zip(out["approximate"], out["search"]):
    np.testing.assert_allclose([s for _, s in approximate], [s for _, s in exact], atol=1e-5)
  assert (run_dir / "search_index" / "index.json").exists()


def test_an_unknown_relation_is_an_error_naming_it(trained_run):
  import docent_jax  # pylint: disable=g-import-not-at-top
  model = docent_jax.load(trained_run[0])
  with pytest.raises(KeyError, match="has no relation 'no_such_relation'"):
    model.predict(["a text"], ["no_such_relation"])


def test_predict_answers_json_lines_in_order_and_names_a_malformed_line(trained_run, tmp_path):
  run_dir, _ = trained_run
  first, second = json.loads((run_dir / "model.json").read_text())["relation_ids"][:2]
  requests = tmp_path / "link.jsonl"
  requests.write_text(json.dumps({"text": "entity number five", "relation": first}) + "\n\n" +
                      json.dumps({"text": "entity number six", "relation": second, "heads": True, "id": 7}) + "\n")
  command = [sys.executable, "-m", "docent_jax.predict", f"--run={run_dir}", "--task=link", "--k=2",
             f"--input={requests}"]
  run = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert run.returncode == 0, run.stderr[-3000:]
  answers = [json.loads(line) for line in run.stdout.splitlines()]
  assert [(a["text"], a.get("id")) for a in answers] == [("entity number five", None), ("entity number six", 7)]
  assert all(len(a["results"]) == 2 and set(a["results"][0]) == {"id", "score"} for a in answers)
  search = subprocess.run([sys.executable, "-m", "docent_jax.predict", f"--run={run_dir}", "--task=search"],
                          input='{"query": "entity number five"}\n{"query": 5}\n', cwd=REPO_ROOT,
                          env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert search.returncode == 1
  assert "<stdin>:2: --task=search needs a JSON object with string query." in search.stderr



def test_an_evaluation_round_encodes_each_entity_set_once(tmp_path, monkeypatch):
  config = kg_fixtures.tiny_config(kg_fixtures.write_tiny_kg(tmp_path / "kg"), tmp_path / "tfds")
  trainer = train.Trainer(config, tmp_path / "run")
  assert {spec.type for spec in trainer.evals} == {"link_prediction", "entity_classification"}
  assert len(trainer.evals) == 3  # Validation and test ranking, and classification: each reads every entity.
  encoded = []
  encode = link_prediction.LinkPredictionModel._encode
  monkeypatch.setattr(link_prediction.LinkPredictionModel, "_encode",
                      lambda model, texts: encoded.append(len(texts)) or encode(model, texts))
  params = trainer.initial_state().params
  entities = len(trainer.objective.evaluation_data().entity_texts)
  trainer.evaluate(trainer.objective.model(params), trainer.evals)
  assert encoded == [entities]
  trainer.evaluate(trainer.objective.model(params), trainer.evals)  # Another round, other params: encoded anew.
  assert encoded == [entities, entities]
