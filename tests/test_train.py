"""The trainer end to end on a tiny KG: results, sharding invariance, resume after a kill, multi-process."""
import functools
import importlib.util
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

from clu import metric_writers
from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import blp
from configs import docent
import docent_jax
from docent_jax import checkpoints
from docent_jax import experiment
from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
from docent_jax.evaluation import registry as evaluators
import kg_fixtures
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def _evaluated_config(kg_dir, tfds_dir) -> ml_collections.ConfigDict:
  """The tiny config with the BE-BOW baseline, validated every step for 8 steps."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.baselines = {"be_bow": {"model": {"encoder": "bow"}}}
  config.train.num_steps = 8
  config.evals.validation.every_steps = 1
  config.optim.learning_rate = 3e-3
  return config


@pytest.fixture(scope="module")
def trained(kg_dir, tfds_dir, tmp_path_factory) -> tuple[ml_collections.ConfigDict, pathlib.Path, dict]:
  """(config, workdir, results) of `_evaluated_config` trained once; tests that write to it take a copy."""
  config = _evaluated_config(kg_dir, tfds_dir)
  workdir = tmp_path_factory.mktemp("trained") / "run"
  return config, workdir, experiment.train_and_evaluate(config, workdir)


def _copy(workdir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(shutil.copytree(workdir, tmp_path / "run"))


def _final_params(workdir: pathlib.Path) -> dict:
  """The latest checkpoint's params, onto this process's first device whatever topology wrote them."""
  directory = workdir / "blp_transe" / "checkpoints"
  step = max(int(p.name) for p in directory.iterdir() if p.name.isdigit())
  checkpointer = ocp.StandardCheckpointer()
  metadata = checkpointer.metadata(directory / str(step) / "state").item_metadata
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), metadata)
  return checkpointer.restore(directory / str(step) / "state", target)["params"]


def _assert_trees_close(a, b, atol=1e-5):
  flat_a, flat_b = jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_flatten_with_path(b)[0]
  assert [p for p, _ in flat_a] == [p for p, _ in flat_b]
  for (path, x), (_, y) in zip(flat_a, flat_b):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=1e-4, err_msg=jax.tree_util.keystr(path))


def test_train_writes_results_and_evaluate_mode_recomputes_them(trained, tmp_path):
  config, trained_dir, results = trained
  workdir = _copy(trained_dir, tmp_path)
  written = json.loads((workdir / "results.json").read_text())
  assert written == results
  for model in ("blp_transe", "be_bow"):
    for key in ("test/mrr", "test/hits@1", "test/hits@10", "test/transfer_mrr", "validation/mrr",
                "test/classification_accuracy", "test/classification_balanced_accuracy"):
      assert 0.0 <= written[f"{model}/{key}"] <= 1.0, (model, key)
    assert (workdir / model / "checkpoints" / "8").is_dir()
    assert list((workdir / model).glob("events.out.tfevents.*")), "no TensorBoard summaries"
  (workdir / "results.json").unlink()
  assert experiment.evaluate(config, workdir) == pytest.approx(results, abs=1e-6)


def test_a_transductive_graph_reports_the_settings_that_apply(tfds_dir, tmp_path):
  kg_dir = kg_fixtures.write_transductive_kg(tmp_path / "transductive_kg")
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  assert json.loads((tmp_path / "run" / "results.json").read_text()) == results
  for split in ("validation", "test"):
    assert 0.0 < results[f"blp_transe/{split}/mrr"] <= 1.0
  assert not [key for key in results if "transfer_" in key or "classification" in key]
  (tmp_path / "run" / "results.json").unlink()
  assert experiment.evaluate(config, tmp_path / "run") == pytest.approx(results, abs=1e-6)


def test_an_evaluation_round_encodes_the_entity_set_once(trained):
  """Validation and test ranking and entity classification read one encoding of the entities per params."""
  config, workdir, _ = trained
  trainer = trainers.Trainer(config, workdir / "blp_transe")
  model = trainer.objective.model(trainer.restore_params()[0])
  encoded = []
  encode = model._encode
  model._encode = lambda texts: encoded.append(len(texts)) or encode(texts)  # Counts the real encodings.
  metrics = trainer.evaluate(model, evaluators.specs(config))
  assert set(metrics) == {"validation", "test", "classification"}
  assert encoded == [trainer.objective.graph.num_entities]
  trainer.evaluate(model.with_params(model.params), evaluators.specs(config)[:1])  # New params: encoded anew.
  assert encoded == [trainer.objective.graph.num_entities] * 2


def _filtered_mrr(scores: np.ndarray, triples: np.ndarray, known: set[tuple[int, int, int]],
                  candidates: np.ndarray) -> float:
  """Filtered MRR by brute force over `scores[h, r, t]`: both directions, ties counted half (BLP's protocol)."""
  reciprocal = []
  for h, r, t in triples:
    for target, row, truth in ((t, scores[h, r, :], lambda c: (h, r, c)), (h, scores[:, r, t], lambda c: (c, r, t))):
      others = [c for c in candidates if c != target and truth(c) not in known]
      higher = sum(row[c] > row[target] for c in others)
      ties = sum(row[c] == row[target] for c in others)
      reciprocal.append(1.0 / (1 + higher + ties / 2))
  return float(np.mean(reciprocal))


def test_the_transductive_setting_trains_and_ranks_the_transductive_triples(tfds_dir, tmp_path):
  kg_dir = kg_fixtures.write_transductive_kg(tmp_path / "kg", keep_inductive=True)
  # An entity of the inductive triples only: BLP ranks among the entities of the transductive triples.
  with (kg_dir / "entity2text.txt").open("a") as texts:
    texts.write("lonely\tan entity of no transductive triple\n")
  with (kg_dir / "ind-train.tsv").open("a") as triples:
    triples.write("lonely\trelated_to\te000\n")
  config = blp.get_config(f"{kg_dir},transe,transductive")
  assert "classification" not in config.evals  # Its classes follow the inductive entity split.
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.data.setting = "transductive"
  config.evals = {"validation": config.evals.validation, "test": config.evals.test}
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  graph = trainers.Trainer(config, tmp_path / "run").objective.graph
  assert graph.name.endswith("/transductive")
  ids = {e: i for i, e in enumerate(graph.entity_ids)}
  relations = {r: i for i, r in enumerate(graph.relation_ids)}
  for split, name in (("train", "train"), ("validation", "dev"), ("test", "test")):
    lines = (kg_dir / f"{name}.tsv").read_text().splitlines()
    assert graph.triples[split].tolist() == [[ids[h], relations[r], ids[t]] for h, r, t in map(str.split, lines)]
  model = docent_jax.load(tmp_path / "run" / "blp_transe")
  n, texts = graph.num_entities, graph.entity_texts
  scores = np.stack([model.score([texts[h]] * n * len(relations), [r for r in graph.relation_ids for _ in range(n)],
                                 texts * len(relations)).reshape(len(relations), n) for h in range(n)])
  known = set(map(tuple, graph.all_triples().tolist()))
  seen_by_validation = np.unique(np.concatenate([graph.triples[s][:, [0, 2]].ravel() for s in ("train", "validation")]))
  seen = np.unique(graph.all_triples()[:, [0, 2]])
  assert ids["lonely"] not in seen
  assert results["blp_transe/validation/mrr"] == pytest.approx(
      _filtered_mrr(scores, graph.triples["validation"], known, seen_by_validation), abs=1e-5)
  assert results["blp_transe/test/mrr"] == pytest.approx(
      _filtered_mrr(scores, graph.triples["test"], known, seen), abs=1e-5)


def test_results_of_another_config_in_the_workdir_are_kept(trained, kg_dir, tfds_dir, tmp_path):
  _, trained_dir, first = trained
  workdir = _copy(trained_dir, tmp_path)
  distmult = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  distmult.train.num_steps = 2
  distmult.model.scoring = "distmult"
  second = experiment.train_and_evaluate(distmult, workdir)
  assert {key.split("/")[0] for key in first} == {"blp_transe", "be_bow"}
  assert {key.split("/")[0] for key in second} == {"blp_distmult"}
  assert json.loads((workdir / "results.json").read_text()) == {**first, **second}


def test_changed_data_under_the_same_path_is_refused(tfds_dir, tmp_path):
  kg_dir = kg_fixtures.write_tiny_kg(tmp_path / "kg")
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 2
  experiment.train_and_evaluate(config, tmp_path / "run")
  # One entity renamed in every file: the same counts, other ids.
  for path in kg_dir.iterdir():
    path.write_text(path.read_text().replace("e005", "e005x"))
  for run in (experiment.evaluate, experiment.train_and_evaluate):
    with pytest.raises(run_dirs.DataMismatchError, match=r"trained on different data.*entity_ids_digest changed"):
      run(config, tmp_path / "run")


@pytest.mark.parametrize("key, value, message", [
    ("train.global_batch_size", 0, "must be at least 1"),
    ("train.global_batch_size", 7, "must split evenly over the mesh's 2 data shards"),
    ("model.inference_batch_size", 9, "must split evenly over the mesh's 2 data shards"),
    ("train.log_every_steps", 0, "must be at least 1"),
    ("train.checkpoint_every_steps", 0, "must be at least 1"),
    ("train.keep_checkpoints", 0, "must be at least 1"),
    ("train.num_steps", -3, "must be at least 0"),
    ("model.dtype", "float8", "valid: \\['float32', 'bfloat16', 'float16'\\]"),
    ("model.matmul_dtype", "float16", "valid: \\['auto', 'float32', 'bfloat16'\\]"),
    ("optim.learning_rate", -1e-3, "must be greater than 0"),  # Gradient ascent.
    ("loss.margin", -1.0, "must be greater than 0"),  # A hinge already met: loss 0, nothing learned.
    ("loss.num_negatives", 0, "must be at least 1"),
    ("loss.num_negatives", -2, "must be at least 1"),
    ("train.global_batch_size", 1, "must be at least 2: a triple's negatives are the entities of the batch's"),
    ("optim.b2", 1.0, "must be at least 0 and below 1"),
    ("evals.validation", {"every_steps": 0}, "config.train.best_metric = 'validation/mrr': no evaluator runs during "
                                             "training to report it"),
])
def test_bad_config_values_are_refused_before_anything_is_written(kg_dir, tfds_dir, tmp_path, key, value, message):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.mesh.shape = (2, 1)
  section, name = key.split(".")
  if isinstance(value, dict):
    config[section][name].update(value)
  else:
    config[section][name] = value
  message = message if isinstance(value, dict) else f"config.{key} = {value!r}: {message}"
  with pytest.raises(ValueError, match=message):
    experiment.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists() or not list((tmp_path / "run").rglob("*"))


def test_a_baselines_bad_value_is_refused_before_the_main_run_trains(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.baselines = {"be_bow": {"model": {"encoder": "bow"}, "optim": {"learning_rate": -1.0}}}
  with pytest.raises(ValueError, match="config.optim.learning_rate = -1.0: must be greater than 0"):
    experiment.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_a_workdir_where_nothing_was_trained_accepts_a_corrected_config(kg_dir, tfds_dir, tmp_path):
  first = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  run_dirs.RunDir(tmp_path).record_config(first)
  corrected = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  corrected.optim.learning_rate = 1e-4
  run_dirs.RunDir(tmp_path).record_config(corrected)
  assert run_dirs.RunDir(tmp_path).recorded_config().optim.learning_rate == 1e-4
  (tmp_path / "checkpoints" / "2").mkdir(parents=True)
  with pytest.raises(run_dirs.ConfigMismatchError, match="differing keys: optim.learning_rate"):
    run_dirs.RunDir(tmp_path).record_config(first)


def test_a_damaged_latest_checkpoint_names_itself_and_the_step_to_resume_from(trained, tmp_path):
  config, trained_dir, results = trained
  workdir = _copy(trained_dir, tmp_path)
  checkpoint_dir = workdir / "blp_transe" / "checkpoints"
  # Step 8 cut short (every file of its state truncated to half)...
  for path in (checkpoint_dir / "8" / "state").rglob("*"):
    if path.is_file() and path.stat().st_size > 0:
      path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
  with pytest.raises(checkpoints.CheckpointError, match=r"Checkpoint 8 in .* remove it to resume from step 6"):
    experiment.train_and_evaluate(config, workdir)
  shutil.rmtree(checkpoint_dir / "8")
  # ...then step 6 without its metadata.
  (checkpoint_dir / "6" / "state" / "_METADATA").unlink()
  with pytest.raises(checkpoints.CheckpointError, match=r"Checkpoint 6 in .* remove it to resume from step 4"):
    experiment.train_and_evaluate(config, workdir)
  shutil.rmtree(checkpoint_dir / "6")
  # Resumed from step 4, the run (best-step selection included) ends where the undamaged one did.
  assert experiment.train_and_evaluate(config, workdir) == pytest.approx(results, abs=1e-5)


def test_a_model_without_training_steps_keeps_its_initial_state(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 0
  trainer = trainers.Trainer(config, tmp_path)
  initial = jax.device_get(trainer.train()[0])
  assert (tmp_path / "checkpoints" / "0").is_dir()
  _assert_trees_close(trainers.Trainer(config, tmp_path).restore_params()[0], initial, atol=0)
  # A rerun (e.g. after a later model of the config failed) finds the step-0 checkpoint and keeps it.
  _assert_trees_close(jax.device_get(trainers.Trainer(config, tmp_path).train()[0]), initial, atol=0)


def _loss_and_grads(kg_dir, tfds_dir, shape=(1, 1), dtype="float32", remat=False, encoder="bert",
                    matmul_dtype="float32"):
  """Loss, gradients and param shardings of one step on the tiny KG's first batch, with the given mesh and model."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.model.encoder = encoder
  config.mesh.shape = shape
  config.model.bert.hidden_size = 64  # Divisible by 4: the model axis really splits the projections.
  config.model.bert.intermediate_size = 128
  config.model.update(dtype=dtype, remat=remat, matmul_dtype=matmul_dtype)
  trainer = trainers.Trainer(config, "unused")
  state = trainer.initial_state()
  assert {x.dtype for x in jax.tree.leaves((state.params, state.opt_state)) if x.ndim} == {np.dtype("float32")}
  batch = parallel.global_batch(next(iter(trainer.objective.train_batches(0))), trainer.mesh)
  grad_fn = jax.jit(jax.value_and_grad(trainer.objective.loss, has_aux=True))
  (loss, _), grads = grad_fn(state.params, batch, jax.random.key(3))
  specs = {str(x.sharding.spec) for x in jax.tree.leaves(state.params)}
  return float(loss), jax.device_get(grads), specs


def test_sharded_mesh_gives_single_device_loss_and_gradients(kg_dir, tfds_dir):
  loss_1, grads_1, _ = _loss_and_grads(kg_dir, tfds_dir, (1, 1))
  loss_8, grads_8, specs = _loss_and_grads(kg_dir, tfds_dir, (2, 4))
  assert any("model" in spec for spec in specs), specs
  assert loss_8 == pytest.approx(loss_1, rel=1e-5)
  _assert_trees_close(grads_8, grads_1, atol=1e-5)


@pytest.mark.parametrize("encoder", ["bert_mean", "bow", "cnn"])
def test_every_encoder_trains_on_a_sharded_mesh_as_on_one_device(kg_dir, tfds_dir, encoder):
  loss_1, grads_1, _ = _loss_and_grads(kg_dir, tfds_dir, (1, 1), encoder=encoder)
  loss_8, grads_8, _ = _loss_and_grads(kg_dir, tfds_dir, (2, 4), encoder=encoder)
  assert loss_8 == pytest.approx(loss_1, rel=1e-5)
  _assert_trees_close(grads_8, grads_1, atol=1e-5)


def test_remat_changes_nothing_and_bfloat16_stays_close_to_float32(kg_dir, tfds_dir):
  loss, grads, _ = _loss_and_grads(kg_dir, tfds_dir)
  remat_loss, remat_grads, _ = _loss_and_grads(kg_dir, tfds_dir, remat=True)
  assert remat_loss == pytest.approx(loss, rel=1e-6)  # Same dropout masks: the recomputation draws the same bits.
  _assert_trees_close(remat_grads, grads, atol=1e-6)
  # bf16 compute, float32 params and optimizer state (checked in `_loss_and_grads`) and gradients.
  bf16_loss, bf16_grads, _ = _loss_and_grads(kg_dir, tfds_dir, dtype="bfloat16")
  assert bf16_loss == pytest.approx(loss, rel=2e-2)
  assert {x.dtype for x in jax.tree.leaves(bf16_grads)} == {np.dtype("float32")}
  flat, bf16_flat = (np.concatenate([np.ravel(x) for x in jax.tree.leaves(g)]) for g in (grads, bf16_grads))
  cosine = flat @ bf16_flat / np.linalg.norm(flat) / np.linalg.norm(bf16_flat)
  assert cosine > 0.99, cosine


@pytest.mark.parametrize("shape", [(1, 1), (2, 4)])
def test_bfloat16_matmuls_stay_close_to_float32_on_one_device_and_sharded(kg_dir, tfds_dir, shape):
  """bf16 matmul operands (float32 everything else): the loss within 1%, gradients of cosine > 0.999, float32."""
  loss, grads, _ = _loss_and_grads(kg_dir, tfds_dir, shape)
  mixed_loss, mixed_grads, _ = _loss_and_grads(kg_dir, tfds_dir, shape, matmul_dtype="bfloat16")
  assert mixed_loss != loss and mixed_loss == pytest.approx(loss, rel=1e-2)
  assert {x.dtype for x in jax.tree.leaves(mixed_grads)} == {np.dtype("float32")}
  flat, mixed_flat = (np.concatenate([np.ravel(x) for x in jax.tree.leaves(g)]) for g in (grads, mixed_grads))
  cosine = flat @ mixed_flat / np.linalg.norm(flat) / np.linalg.norm(mixed_flat)
  assert cosine > 0.999, cosine


@pytest.fixture(scope="module")
def uninterrupted(kg_dir, tfds_dir, tmp_path_factory) -> pathlib.Path:
  """The workdir of `kg_fixtures.main_command` run to the end in one process on 2 devices; its console is console.txt beside."""
  workdir = tmp_path_factory.mktemp("uninterrupted") / "run"
  run = subprocess.run(kg_fixtures.main_command(kg_dir, tfds_dir, workdir), cwd=REPO_ROOT,
                       env=tiny_training.subprocess_env(2), check=True, capture_output=True, text=True)
  (workdir.parent / "console.txt").write_text(run.stderr)
  return workdir


def test_each_progress_report_is_one_console_line_with_the_loss_steps_per_second_and_eta(uninterrupted):
  console = (uninterrupted.parent / "console.txt").read_text()
  assert re.search(r"blp_transe step 6/6: loss [0-9.]+, [0-9.]+ steps/s, ETA 0s\n", console), console[-3000:]
  assert "work unit notes" not in console  # CLU's own line for the same report.


def _main_argv_of_launcher_resume(kg_dir, tfds_dir, workdir) -> list[str]:
  """The python argv that `launch/tpu.py resume` starts on a recreated VM, for one local process (no --multihost)."""
  spec = importlib.util.spec_from_file_location("tpu_launcher", REPO_ROOT / "launch" / "tpu.py")
  launcher = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(launcher)
  command = kg_fixtures.main_command(kg_dir, tfds_dir, workdir)
  config, overrides = command[3].split("=", 1)[1], command[5:]
  argv = launcher.main_argv(config, str(workdir), overrides, resume_preempted=True)
  return [sys.executable, *[a for a in argv if a != "--multihost"]]


def test_a_run_stopped_by_sigterm_then_killed_resumes_through_the_launcher_to_the_uninterrupted_result(
    kg_dir, tfds_dir, uninterrupted, tmp_path):
  # SIGTERM (a Spot VM's notice) during step 3, which is not on the every-2-steps checkpoint schedule.
  stopped = tmp_path / "stopped"
  command = kg_fixtures.main_command(kg_dir, tfds_dir, stopped)
  run = subprocess.run([sys.executable, "-c", kg_fixtures.signalling_main(3, signal.SIGTERM), *command[2:]],
                       cwd=REPO_ROOT, env=tiny_training.subprocess_env(2), capture_output=True, text=True)
  assert run.returncode == 143, run.stderr[-3000:]
  assert "blp_transe: stopped by SIGTERM at step 3 of 6; its checkpoint is saved in" in run.stderr
  assert "Run the same command again to resume." in run.stderr.splitlines()[-1]
  checkpoints_dir = stopped / "blp_transe" / "checkpoints"
  assert max(int(p.name) for p in checkpoints_dir.iterdir() if p.name.isdigit()) == 3
  # Resumed, then SIGKILL right after step 5 starts (the second batch after step 3): step 4's checkpoint may still
  # be in flight.
  run = subprocess.run([sys.executable, "-c", kg_fixtures.signalling_main(2, signal.SIGKILL), *command[2:]],
                       cwd=REPO_ROOT, env=tiny_training.subprocess_env(2), capture_output=True)
  assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
  assert not (stopped / "results.json").exists()
  # The VM went away before its processes released their locks; the recreated VM has other host names.
  lock = stopped / "blp_transe" / run_dirs.LOCK_FILE
  lock.write_text(json.dumps({"host": "t1v-n-gone-w-0", "pid": 4321}))
  refused = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(2), capture_output=True, text=True)
  assert refused.returncode == 1 and "restart with --resume_preempted" in refused.stderr.splitlines()[-1]
  resumed = subprocess.run(_main_argv_of_launcher_resume(kg_dir, tfds_dir, stopped), cwd=REPO_ROOT,
                           env=tiny_training.subprocess_env(2), capture_output=True, text=True)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "taking over the lock of pid 4321 on t1v-n-gone-w-0" in resumed.stderr
  _assert_trees_close(_final_params(stopped), _final_params(uninterrupted), atol=1e-6)
  assert json.loads((stopped / "results.json").read_text()) == pytest.approx(
      json.loads((uninterrupted / "results.json").read_text()), abs=1e-6)


def test_sigterm_during_the_final_evaluation_ends_with_one_line_and_keeps_every_file(kg_dir, tfds_dir,
                                                                                     uninterrupted, tmp_path):
  workdir = pathlib.Path(shutil.copytree(uninterrupted, tmp_path / "run"))
  results = (workdir / "results.json").read_text()
  script = ("import os, signal, sys\n"
            "from docent_jax import main, trainer as trainers\n"
            "report = trainers.Trainer.report\n"
            "def stopped(*args):\n"
            "  os.kill(os.getpid(), signal.SIGTERM)\n"
            "  return report(*args)\n"
            "trainers.Trainer.report = stopped\n"
            "sys.argv = sys.argv[1:]\n"
            "main.run()\n")
  command = kg_fixtures.main_command(kg_dir, tfds_dir, workdir, "--mode=evaluate")
  run = subprocess.run([sys.executable, "-c", script, *command[2:]], cwd=REPO_ROOT,
                       env=tiny_training.subprocess_env(2), capture_output=True, text=True)
  assert run.returncode == 143, run.stderr[-3000:]
  errors = [line for line in run.stderr.splitlines() if line.startswith("E")]
  assert len(errors) == 1 and "docent_jax.main stopped by SIGTERM." in errors[0], run.stderr[-3000:]
  assert "Traceback" not in run.stderr
  assert (workdir / "results.json").read_text() == results
  assert sorted(p.name for p in (workdir / "blp_transe" / "checkpoints").iterdir()) == sorted(
      p.name for p in (uninterrupted / "blp_transe" / "checkpoints").iterdir())


def test_two_processes_match_one_process(kg_dir, tfds_dir, uninterrupted, tmp_path):
  multi = tmp_path / "multi"
  address = f"127.0.0.1:{tiny_training.free_port()}"
  processes = [subprocess.Popen(kg_fixtures.main_command(kg_dir, tfds_dir, multi, f"--coordinator_address={address}",
                                              "--num_processes=2", f"--process_id={i}"),
                                cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
               for i in range(2)]
  outputs = [p.communicate(timeout=600)[0].decode() for p in processes]
  for process, output in zip(processes, outputs):
    assert process.returncode == 0, output[-3000:]
  _assert_trees_close(_final_params(multi), _final_params(uninterrupted), atol=1e-5)
  assert json.loads((multi / "results.json").read_text()) == pytest.approx(
      json.loads((uninterrupted / "results.json").read_text()), abs=1e-4)


def test_sigterm_in_a_multi_process_job_saves_one_agreed_step_and_every_process_exits(kg_dir, tfds_dir,
                                                                                     uninterrupted, tmp_path):
  # Each process gets SIGTERM (as every host of a preempted slice does) during its step 3; JAX's preemption
  # service makes them agree on the step to save, and each then exits saying so.
  stopped = tmp_path / "multi"
  script = kg_fixtures.signalling_main(3, signal.SIGTERM)
  address = f"127.0.0.1:{tiny_training.free_port()}"
  # Steps to spare: the service sets the step to save a little after the notice, once every process has heard.
  command = [*kg_fixtures.main_command(kg_dir, tfds_dir, stopped), "--config.train.num_steps=60"]
  processes = [subprocess.Popen([sys.executable, "-c", script, *command[2:], f"--coordinator_address={address}",
                                 "--num_processes=2", f"--process_id={i}"],
                                cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
               for i in range(2)]
  outputs = [p.communicate(timeout=600)[0] for p in processes]
  for process, output in zip(processes, outputs):
    assert process.returncode == 143, output[-3000:]
    assert "blp_transe: stopped by a preemption notice at step" in output, output[-3000:]
  steps = sorted(int(p.name) for p in (stopped / "blp_transe" / "checkpoints").iterdir() if p.name.isdigit())
  assert steps[-1] < 60 and not (stopped / "results.json").exists()


def test_workdir_of_another_config_is_refused(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  run_dirs.RunDir(tmp_path).record_config(config)
  recorded = (tmp_path / run_dirs.CONFIG_FILE).read_text()
  (tmp_path / "checkpoints" / "2").mkdir(parents=True)  # A trained step.
  config.mesh.shape = (2, 4)  # Where it runs, how it reads ahead and whether it recomputes may change...
  config.data.update(num_workers=2, prefetch=0)
  config.model.remat = True
  run_dirs.RunDir(tmp_path).record_config(config)
  config.model.scoring = "distmult"  # ...what it computes may not.
  with pytest.raises(run_dirs.ConfigMismatchError, match="model.scoring"):
    run_dirs.RunDir(tmp_path).record_config(config)
  assert (tmp_path / run_dirs.CONFIG_FILE).read_text() == recorded


def test_a_run_recorded_before_a_key_was_added_resumes_only_with_the_earlier_value(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  run_dirs.RunDir(tmp_path).record_config(config)
  recorded = json.loads((tmp_path / run_dirs.CONFIG_FILE).read_text())
  # As a run before these keys wrote it.
  del recorded["optim"]["schedule"], recorded["data"]["drop_stopwords"], recorded["data"]["train_entity_fraction"]
  (tmp_path / run_dirs.CONFIG_FILE).write_text(json.dumps(recorded))
  (tmp_path / "checkpoints" / "2").mkdir(parents=True)
  run_dirs.RunDir(tmp_path).record_config(config)  # "linear" and no stop-word removal: what it trained with.
  config.optim.schedule = "constant"
  with pytest.raises(run_dirs.ConfigMismatchError, match="optim.schedule"):
    run_dirs.RunDir(tmp_path).record_config(config)


@pytest.mark.parametrize("run", ["docent_dual", "docent_dual_tags", "bos_bert_tags"])
def test_a_run_recorded_with_the_former_eval_block_resumes_and_loads_with_its_keys_renamed(run, tmp_path):
  config = {c.name: c for c in experiment.model_configs(docent.get_config("dual"))}[run]
  run_dirs.RunDir(tmp_path).record_config(config)
  recorded = json.loads((tmp_path / run_dirs.CONFIG_FILE).read_text())
  # As a run before `eval` went wrote it: the renamed keys in that block, and evaluator settings beside them.
  former = {"link_prediction_batch_size": 512}
  for old, new in run_dirs.RENAMED_KEYS.items():
    *parents, leaf = new.split(".")
    block = functools.reduce(dict.get, parents, recorded)
    if block is not None and leaf in block:
      former[old.split(".", 1)[1]] = block.pop(leaf)
  if recorded.get("tags") == {}:  # The main run had no tags block then.
    del recorded["tags"]
  (tmp_path / run_dirs.CONFIG_FILE).write_text(json.dumps({**recorded, "eval": former}))
  (tmp_path / "checkpoints" / "2").mkdir(parents=True)
  run_dirs.RunDir(tmp_path).record_config(config)  # Resumes: the same config under today's names.
  loaded = run_dirs.RunDir(tmp_path).recorded_config()
  assert "eval" not in loaded and loaded.to_dict() == json.loads(config.to_json_best_effort())
  config.train.best_mode = "min"
  with pytest.raises(run_dirs.ConfigMismatchError, match="train.best_mode"):
    run_dirs.RunDir(tmp_path).record_config(config)


def _scalars(directory: pathlib.Path, tag: str) -> dict[int, float]:
  """step -> value of one scalar of the TensorBoard event files in `directory`."""
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  from tensorboard.util import tensor_util  # pylint: disable=g-import-not-at-top
  events = event_accumulator.EventAccumulator(str(directory), size_guidance={event_accumulator.TENSORS: 0})
  events.Reload()
  return {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in events.Tensors(tag)}


def test_evaluation_during_training_reaches_tensorboard_and_the_best_params_are_reported(trained):
  config, workdir, results = trained
  run_dir = workdir / "blp_transe"
  mrr = _scalars(run_dir, "validation/mrr")
  assert sorted(mrr) == list(range(1, 9))
  best_step = max(mrr, key=mrr.get)
  assert mrr[8] < mrr[best_step], "this run's last step must be worse than an earlier one"
  assert [p.name for p in (run_dir / "best").iterdir() if p.name.isdigit()] == [str(best_step)]
  # results.json holds the best step's validation MRR, and test numbers of the same params.
  assert results["blp_transe/validation/mrr"] == pytest.approx(mrr[best_step], abs=1e-6)
  trainer = trainers.Trainer(config, run_dir)
  best_params = trainer.restore_params()[0]
  test = evaluators.specs(config)[1]
  assert test.name == "test"
  tested = test.run(trainer.objective.model(best_params), trainer.objective.evaluation_data())
  assert results["blp_transe/test/mrr"] == pytest.approx(tested["test/mrr"], abs=1e-6)
  # Final numbers reach TensorBoard too.
  assert _scalars(run_dir, "final/test/mrr")[8] == pytest.approx(results["blp_transe/test/mrr"], abs=1e-6)


def test_training_keeps_one_step_in_flight_however_slow_the_devices(kg_dir, tfds_dir, tmp_path, monkeypatch):
  """JAX returns from a step before the devices finish it. Each step here is followed by about 0.1 s of device
  work, which a loop that never waited would queue up step after step; the trainer waits for each step's
  predecessor, so CLU's steps/s and ETA count finished steps."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 10
  config.train.log_every_steps = 100  # No loss is read back, so nothing else waits for the devices.
  config.train.checkpoint_every_steps = 100
  config.evals.validation.every_steps = 0  # Training only.
  config.train.best_metric = ""

  @jax.jit
  def slow(metrics):
    square = jnp.full((256, 256), metrics["loss"] * 1e-3)
    busy = jax.lax.fori_loop(0, 400, lambda _, x: jnp.tanh(x @ x), square)
    return {**metrics, "loss": metrics["loss"] + 0 * busy[0, 0]}

  compile_train_step = trainers.Trainer.compile_train_step
  returned, unfinished = [], []

  def slow_train_step(self, *args):
    train_step = compile_train_step(self, *args)

    def step(state, batch):
      unfinished.append(sum(not leaf.is_ready() for metrics in returned[:-1] for leaf in jax.tree.leaves(metrics)))
      state, metrics = train_step(state, batch)
      returned.append(slow(metrics))
      return state, returned[-1]
    return step

  monkeypatch.setattr(trainers.Trainer, "compile_train_step", slow_train_step)
  trainers.Trainer(config, tmp_path).train()
  assert len(unfinished) == 10 and not any(unfinished), unfinished


def test_a_non_finite_loss_stops_the_run_before_its_state_is_saved(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.optim.learning_rate = 1e30
  config.optim.warmup_steps = 0
  config.train.log_every_steps = 1
  with pytest.raises(FloatingPointError, match=r"blp_transe step \d: non-finite .*stopped before saving"):
    trainers.Trainer(config, tmp_path).train()
  saved = [int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()]
  for step in saved:  # Whatever was saved before the stop is finite.
    params = ocp.StandardCheckpointer().restore(tmp_path / "checkpoints" / str(step) / "state")["params"]
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params)), step


def test_a_gs_workdir_trains_resumes_and_evaluates_on_cloud_storage(kg_dir, tfds_dir, gcs_emulator, tmp_path,
                                                                    monkeypatch):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.evals.validation.every_steps = 3
  # TensorFlow's summary writer reaches Cloud Storage through its own client, which has no emulator
  # endpoint: the test checks the URL it is given and lets it write locally.
  summary_dirs = []
  create_writer = metric_writers.create_default_writer

  def local_writer(logdir, **kwargs):
    summary_dirs.append(os.fspath(logdir))
    return create_writer(tmp_path / "summaries" / pathlib.Path(os.fspath(logdir)).name, **kwargs)

  monkeypatch.setattr(metric_writers, "create_default_writer", local_writer)
  workdir = "gs://bucket/runs/tiny"
  results = experiment.train_and_evaluate(config, workdir)

  run = epath.Path(workdir)
  assert json.loads((run / "results.json").read_text()) == results
  assert (run / "blp_transe" / run_dirs.CONFIG_FILE).exists()
  assert {p.name for p in (run / "blp_transe" / "checkpoints").iterdir()} >= {"4", "6"}
  assert [p.name for p in (run / "blp_transe" / "best").iterdir() if p.name.isdigit()] in (["3"], ["6"])
  assert set(summary_dirs) == {f"{workdir}/blp_transe"}
  assert not (tmp_path / "gs:").exists(), "a gs:// path went through pathlib"

  # A second launch restores the finished run from the bucket; evaluate mode recomputes the results.
  assert experiment.train_and_evaluate(config, workdir) == pytest.approx(results, abs=1e-6)
  (run / "results.json").unlink()
  assert experiment.evaluate(config, workdir) == pytest.approx(results, abs=1e-6)
  assert json.loads((run / "results.json").read_text()) == pytest.approx(results, abs=1e-6)
  assert not (tmp_path / "gs:").exists()


def test_a_run_stopped_during_an_evaluation_evaluates_that_step_when_it_resumes(trained, kg_dir, tfds_dir, tmp_path,
                                                                                 monkeypatch):
  config, trained_dir, results = trained
  workdir = tmp_path / "run"

  class Stopped(Exception):
    pass

  calls, run = [], evaluators.EvalSpec.run

  def stop_at_fourth_validation(spec, model, data):
    calls.append(spec.name)
    if calls.count("validation") == 4:  # Step 4: its checkpoint is saved, its validation never finishes.
      raise Stopped
    return run(spec, model, data)

  monkeypatch.setattr(evaluators.EvalSpec, "run", stop_at_fourth_validation)
  with pytest.raises(Stopped):
    experiment.train_and_evaluate(config, workdir)
  monkeypatch.setattr(evaluators.EvalSpec, "run", run)
  run_dir = workdir / "blp_transe"
  assert run_dirs.RunDir(run_dir).state_checkpoints().latest_step() == 4
  logged = [json.loads(line) for line in (run_dir / run_dirs.EVALUATIONS_FILE).read_text().splitlines()]
  assert [(e["step"], e["evaluator"]) for e in logged] == [(1, "validation"), (2, "validation"), (3, "validation")]

  assert experiment.train_and_evaluate(config, workdir) == pytest.approx(results, abs=1e-5)
  # Every step's validation reached TensorBoard and the log once, step 4 included.
  assert _scalars(run_dir, "validation/mrr") == pytest.approx(_scalars(trained_dir / "blp_transe", "validation/mrr"),
                                                             abs=1e-5)
  logged = [json.loads(line) for line in (run_dir / run_dirs.EVALUATIONS_FILE).read_text().splitlines()]
  assert [e["step"] for e in logged if e["evaluator"] == "validation"] == list(range(1, 9))
  # A restart of the finished run owes nothing.
  assert experiment.train_and_evaluate(config, workdir) == pytest.approx(results, abs=1e-5)
  assert len((run_dir / run_dirs.EVALUATIONS_FILE).read_text().splitlines()) == len(logged)


def test_a_damaged_evaluation_log_names_its_file_and_line(tmp_path):
  log = tmp_path / run_dirs.EVALUATIONS_FILE
  log.write_text('{"step": 1, "evaluator": "validation", "metrics": {}}\n{"step": 2, "evalua')
  with pytest.raises(ValueError, match=rf"{run_dirs.EVALUATIONS_FILE}:2: not an evaluation record"):
    run_dirs.RunDir(tmp_path).evaluation_log()


def test_the_final_table_shows_headline_test_metrics_within_100_columns():
  results = {f"model_{i}/{split}/{metric}": 0.5 for i in range(3) for split in ("validation", "test")
             for metric in ("mrr", "hits@1", "hits@10", "num_queries", "classification_accuracy",
                            "transfer_mrr")}
  results.update({"model_0/test/head/mrr": 0.25, "model_0/analogy_word/accuracy": 0.75})
  results.update({f"universal/analogy_{kind}/accuracy": 0.6 for kind in ("word", "phrase", "phrase_set",
                                                                          "sentence", "extra")})
  lines = experiment.results_table(results).splitlines()
  assert all(len(line) <= 100 for line in lines)  # Columns that would not fit are left to results.json.
  assert lines[0].split()[:4] == ["model", "test/mrr", "test/hits@10", "test/classification_accuracy"]
  assert [line.split()[0] for line in lines[1:]] == ["model_0", "model_1", "model_2", "universal"]
  assert lines[1].split()[1:4] == ["0.5000", "0.5000", "0.5000"]
