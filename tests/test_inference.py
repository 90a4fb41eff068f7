"""A trained run as a model: `docent_jax.load` in a fresh process, without the run's data, on any device count."""
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from docent_jax import experiment
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
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
  experiment.train_and_evaluate(config, workdir)
  trainer = trainers.Trainer(config, workdir / "blp_transe")
  vectors = trainer.objective.model(trainer.restore_params()[0]).entities()[1]
  run_dir = pathlib.Path(shutil.copytree(workdir / "blp_transe", tmp_path_factory.mktemp("copied") / "blp_transe"))
  tiny_training.assert_loads_as_evaluated(workdir / "blp_transe",
                                          tiny_training.entity_and_text_vectors(["entity number five"]))
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
  texts = dict(zip(*(json.loads((run_dir / "model.json").read_text())[key] for key in ("entity_ids", "entity_texts"))))
  assert all(len(a["results"]) == 2 and set(a["results"][0]) == {"id", "text", "score"} for a in answers)
  assert all(result["text"] == texts[result["id"]] for a in answers for result in a["results"])
  search = subprocess.run([sys.executable, "-m", "docent_jax.predict", f"--run={run_dir}", "--task=search"],
                          input='{"query": "entity number five"}\n{"query": 5}\n', cwd=REPO_ROOT,
                          env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert search.returncode == 1
  assert "<stdin>:2: --task=search needs a JSON object with string query." in search.stderr



def test_an_evaluation_round_encodes_each_entity_set_once(tmp_path, monkeypatch):
  config = kg_fixtures.tiny_config(kg_fixtures.write_tiny_kg(tmp_path / "kg"), tmp_path / "tfds")
  trainer = trainers.Trainer(config, tmp_path / "run")
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


def _predict(run_dir, *flags: str, stdin: str | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "docent_jax.predict", f"--run={run_dir}", *flags], input=stdin,
                        cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True, text=True)


def _error_lines(run: subprocess.CompletedProcess) -> list[str]:
  """What a command said to its user on stderr: every line but INFO logs and progress bars."""
  return [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("I")
          and "encoding" not in line and "line/s" not in line]


def test_predict_checks_everything_cheap_before_loading_and_never_touches_its_output(trained_run, tmp_path):
  run_dir, _ = trained_run
  relation = json.loads((run_dir / "model.json").read_text())["relation_ids"][0]
  earlier = tmp_path / "answers.jsonl"
  earlier.write_text('{"earlier": "answers"}\n')
  bad = tmp_path / "bad.jsonl"
  bad.write_text(json.dumps({"query": "a thing"}) + "\n" + "{not json\n")
  cases = {  # flags -> (exit code, the one line it says)
      (f"--input={bad}", f"--output={earlier}", "--task=search"): (1, f"{bad}:2: not JSON"),
      (f"--input={earlier}", f"--output={earlier}", "--task=search"): (2, "is the --input file"),
      (f"--input={bad}", "--output=/proc/x", "--task=search"): (1, "--output=/proc/x: cannot write in /proc"),
      (f"--input={bad}", f"--output={earlier}", "--task=search", "--k=0"): (2, "--k=0: must be at least 1"),
      (f"--output={earlier}", "--task=match"): (2, "--task=match: "),
  }
  for flags, (code, message) in cases.items():
    run = _predict(run_dir, *flags, stdin="")
    assert run.returncode == code, (flags, run.stderr[-2000:])
    assert len(_error_lines(run)) == 1 and message in _error_lines(run)[0], (flags, run.stderr[-2000:])
    assert "Loaded" not in run.stderr and "Restored" not in run.stderr  # Refused before the model loads.
  link = tmp_path / "link.jsonl"
  link.write_text("".join(json.dumps({"text": "a thing", "relation": r}) + "\n" for r in (relation, "no_such")))
  run = _predict(run_dir, f"--input={link}", f"--output={earlier}", "--task=link")
  assert run.returncode == 1 and f"{link}:2: " in _error_lines(run)[0] and "'no_such'" in _error_lines(run)[0]
  assert "Loaded" not in run.stderr
  assert earlier.read_text() == '{"earlier": "answers"}\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "bad.jsonl", "link.jsonl"]


def test_predict_on_a_full_disk_leaves_the_earlier_answers_whole(trained_run, tmp_path):
  run_dir, _ = trained_run
  requests = tmp_path / "queries.jsonl"
  requests.write_text("".join(json.dumps({"query": f"entity number {i}"}) + "\n" for i in range(40)))
  earlier = tmp_path / "answers.jsonl"
  earlier.write_text('{"earlier": "answers"}\n')
  preamble = ("import resource, runpy, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # A failed write, not a killed process.
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
              "sys.argv = sys.argv[1:]\n"
              "runpy.run_module('docent_jax.predict', run_name='__main__')\n")
  run = subprocess.run([sys.executable, "-c", preamble, "predict", f"--run={run_dir}", "--task=search",
                        f"--input={requests}", f"--output={earlier}"], cwd=REPO_ROOT,
                       env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert run.returncode == 1, run.stderr[-3000:]
  errors = [line for line in run.stderr.splitlines() if line.startswith("E")]
  assert len(errors) == 1 and f"{earlier}: not written (File too large)" in errors[0], run.stderr[-3000:]
  assert earlier.read_text() == '{"earlier": "answers"}\n'
  assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "queries.jsonl"]


def test_the_second_predict_reads_the_entity_vectors_the_first_kept(trained_run, tmp_path):
  run_dir = pathlib.Path(shutil.copytree(trained_run[0], tmp_path / "run"))
  (run_dirs.RunDir(run_dir).entity_vectors_file).unlink(missing_ok=True)  # Kept there by the tests before.
  query = json.dumps({"query": "un café près de la rivière"}, ensure_ascii=False) + "\n"
  first = _predict(run_dir, "--task=search", "--k=3", stdin=query)
  assert first.returncode == 0, first.stderr[-3000:]
  assert "Encoding the 48 entities" in first.stderr and "encoding 48 texts" in first.stderr  # Its progress bar.
  assert "café près" in first.stdout  # UTF-8, not escaped.
  assert not [line for line in first.stderr.splitlines() if "orbax" in line.lower()]  # Orbax's log is quiet.
  second = _predict(run_dir, "--task=search", "--k=3", stdin=query)
  assert "Read the 48 entity vectors of step" in second.stderr and "Encoding the" not in second.stderr
  assert second.stdout == first.stdout


def test_a_damaged_checkpoint_is_one_line_naming_it(trained_run, tmp_path):
  run_dir = pathlib.Path(shutil.copytree(trained_run[0], tmp_path / "run"))
  (best,) = [p for p in (run_dir / "best").iterdir() if p.name.isdigit()]
  for path in (best / "params").rglob("*"):
    if path.is_file() and path.stat().st_size > 1000:  # Array data, cut short as by an interrupted copy.
      path.write_bytes(path.read_bytes()[:100])
  run = _predict(run_dir, "--task=search", stdin=json.dumps({"query": "a thing"}) + "\n")
  assert run.returncode == 1
  assert len(_error_lines(run)) == 1, run.stderr[-3000:]
  assert f"{best / 'params'} cannot be read (" in _error_lines(run)[0]
  assert len(run.stderr.splitlines()) < 10


def test_the_model_api_takes_one_text_as_one_query_and_empty_in_gives_empty_out(trained_run):
  import docent_jax  # pylint: disable=g-import-not-at-top
  model = docent_jax.load(trained_run[0])
  relation = model.relation_ids[0]
  assert model.search("entity number five", k=3) == model.search(["entity number five"], k=3)[0]
  assert len(model.search("entity number five", k=3)) == 3  # Not one ranking per character.
  np.testing.assert_allclose(model.encode("entity number five"), model.encode(["entity number five"])[0], atol=1e-6)
  assert model.encode([]).shape == (0, model.encode("x").shape[0])
  assert model.search([]) == [] and model.predict([], []) == []
  assert model.predict("entity number five", relation, k=2) == model.predict(["entity number five"], [relation], 2)[0]


def test_an_unfinished_run_loads_with_one_warning_naming_its_step(trained_run, tmp_path, caplog):
  import docent_jax  # pylint: disable=g-import-not-at-top
  run_dir = pathlib.Path(shutil.copytree(trained_run[0], tmp_path / "run"))
  shutil.rmtree(run_dir / "checkpoints" / "4")  # As if stopped after step 2.
  shutil.rmtree(run_dir / "best")
  with caplog.at_level("INFO"):
    model = docent_jax.load(run_dir)
  assert model.step == 2
  warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert len(warnings) == 1 and "is an unfinished run: step 2 of 4" in warnings[0]
  assert any("(blp, step 2 of 4)" in r.getMessage() for r in caplog.records)
