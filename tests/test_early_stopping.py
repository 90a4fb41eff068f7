"""`train.early_stopping`: the rule, a tiny run that stops where it says and keeps its best params, and a resume
after SIGTERM that keeps the count."""
import json
import pathlib
import signal
import subprocess
import sys

import ml_collections
import pytest

from docent_jax import config_schema
from docent_jax import early_stopping
from docent_jax import experiment
from docent_jax import parallel
from docent_jax import run_dir as run_dirs
import kg_fixtures
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_rule_counts_evaluations_without_an_improvement_beyond_min_delta():
  rule = early_stopping.EarlyStopping(metric="validation/loss", mode="min", patience=2, min_delta=0.01)
  assert rule.update(10, {"validation/loss": 1.0}) is None
  assert rule.update(20, {"validation/loss": 0.995}) is None  # Better, but by less than min_delta.
  assert rule.update(30, {"validation/loss": 0.9}) is None  # Resets the count.
  assert rule.update(40, {"validation/other": 0.1}) is None  # Another evaluator's step: not counted.
  assert rule.update(50, {"validation/loss": 0.95}) is None
  reason = rule.update(60, {"validation/loss": 0.91})
  assert reason is not None and "for 2 evaluations" in reason and "best 0.9 at step 30" in reason
  replayed = early_stopping.EarlyStopping(metric="validation/mrr", mode="max", patience=3)
  assert replayed.replay([(1, {"validation/mrr": 0.2}), (2, {"validation/mrr": 0.1})]) is None
  assert (replayed.best_step, replayed.evaluations_without_improvement) == (1, 1)


def test_off_by_default_and_its_metric_and_mode_default_to_best_metrics():
  train = ml_collections.ConfigDict(dict(best_metric="validation/mrr", best_mode="max",
                                         early_stopping=dict(metric="", mode="", patience=0, min_delta=0.0)))
  assert early_stopping.from_config(train) is None
  train.early_stopping.patience = 4
  rule = early_stopping.from_config(train)
  assert (rule.metric, rule.mode, rule.patience) == ("validation/mrr", "max", 4)


@pytest.mark.parametrize("key, value, message", [
    ("train.early_stopping.mode", "lowest", "must be 'max', 'min' or ''"),
    ("train.best_metric", "", "name the metric to watch"),
    ("train.early_stopping.patience", -1, "must be at least 0"),
])
def test_bad_early_stopping_settings_name_their_key(kg_dir, tfds_dir, key, value, message):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.early_stopping.patience = 2
  config.evals.validation.every_steps = 1
  block, leaf = key.rsplit(".", 1)
  target = config
  for part in block.split("."):
    target = target[part]
  target[leaf] = value
  with pytest.raises(config_schema.ConfigError, match=message):
    config_schema.check_config(config, parallel.create_mesh(config.mesh), 1)


def _stopping_config(kg_dir, tfds_dir) -> ml_collections.ConfigDict:
  """Validated every step; no later evaluation can beat the first by min_delta 1 (an MRR is at most 1), so the
  run stops at step 1 + patience."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 8
  config.evals.validation.every_steps = 1
  config.train.early_stopping.update(patience=2, min_delta=1.0)
  return config


def test_a_run_stops_at_the_step_the_rule_names_and_keeps_its_best_params(kg_dir, tfds_dir, tmp_path):
  config = _stopping_config(kg_dir, tfds_dir)
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  run = run_dirs.RunDir(tmp_path / "run" / config.name)
  assert run.early_stop()["step"] == 3 and "for 2 evaluations" in run.early_stop()["reason"]
  assert run.latest_step() == 3
  evaluations = run.evaluation_log().by_step(8)
  assert [step for step, _ in evaluations] == [1, 2, 3]
  best_step = max(evaluations, key=lambda item: item[1]["validation/mrr"])[0]
  assert run.reported_step() == (best_step, True)
  assert f"{config.name}/test/mrr" in results
  # Run again, the same command: nothing more is trained.
  experiment.train_and_evaluate(config, tmp_path / "run")
  assert run.latest_step() == 3 and [step for step, _ in run.evaluation_log().by_step(8)] == [1, 2, 3]


def test_a_resume_after_sigterm_keeps_the_count(kg_dir, tfds_dir, tmp_path):
  flags = ["--config.evals.validation.every_steps=1", "--config.train.early_stopping.patience=3",
           "--config.train.early_stopping.min_delta=1.0"]
  command = kg_fixtures.main_command(kg_dir, tfds_dir, tmp_path / "run", *flags)
  # SIGTERM during step 3: steps 1 and 2 were evaluated (no improvement at 2), step 3 is saved unevaluated.
  stopped = subprocess.run([sys.executable, "-c", kg_fixtures.signalling_main(3, signal.SIGTERM), *command[2:]],
                           cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert stopped.returncode == 143, stopped.stderr[-3000:]
  resumed = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True,
                           text=True)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "early stopping resumes with 2 of 3 evaluations without improving validation/mrr" in resumed.stderr
  run = run_dirs.RunDir(tmp_path / "run" / "blp_transe")
  # Evaluations at 1 (the best), 2, 3 (owed after the restart) and 4: three without improvement.
  assert run.early_stop()["step"] == 4, run.early_stop()
  assert json.loads((tmp_path / "run" / "results.json").read_text())
