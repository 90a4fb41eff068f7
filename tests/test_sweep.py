"""`docent_jax.sweep`: axes, trial configs, the summary, and a 3 x 2 grid with pruning that is killed mid-trial and
finishes when the same command runs again, re-running no finished trial."""
import json
import pathlib
import signal
import subprocess
import sys

from etils import epath
import ml_collections
import optuna
import pytest

from configs import blp
from docent_jax import config_schema
from docent_jax import run_dir as run_dirs
from docent_jax.sweep import study as sweep
import kg_fixtures
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_axes_parse_values_and_ranges_and_refuse_malformed_ones():
  assert sweep.parse_axis("optim.learning_rate=1e-5,2e-5,5e-5") == sweep.Axis(
      "optim.learning_rate", values=(1e-5, 2e-5, 5e-5))
  assert sweep.parse_axis("seed=0,1").values == (0, 1)
  assert sweep.parse_axis("loss.name=margin,nll").values == ("margin", "nll")
  assert sweep.parse_axis("optim.learning_rate=1e-5:1e-3:log") == sweep.Axis(
      "optim.learning_rate", low=1e-5, high=1e-3, log=True)
  for bad in ("optim.learning_rate", "=1,2", "x=3:1", "x=0:1:log", "x=1:2:cubic"):
    with pytest.raises(config_schema.ConfigError, match="--sweep"):
      sweep.parse_axis(bad)


def test_a_trial_config_sets_existing_keys_and_names_a_wrong_one():
  config = ml_collections.ConfigDict(dict(seed=0, optim=dict(learning_rate=1e-3), baselines=dict(bow=dict()),
                                          loss=dict(name="margin")))
  derived = sweep.trial_config(config, {"optim.learning_rate": 1, "seed": 3})
  assert derived.optim.learning_rate == 1.0 and isinstance(derived.optim.learning_rate, float)
  assert derived.seed == 3 and not derived.baselines and config.seed == 0
  with pytest.raises(config_schema.ConfigError, match="config.optim.learning_rat is not a key"):
    sweep.trial_config(config, {"optim.learning_rat": 1e-3})
  with pytest.raises(config_schema.ConfigError, match="'nll!' is not a value of config.seed"):
    sweep.trial_config(config, {"seed": "nll!"})


def test_the_summary_ranks_settings_by_their_seeds_mean():
  study = optuna.create_study(direction="maximize")
  for rate, seed, value in ((1e-3, 0, 0.5), (1e-3, 1, 0.7), (1e-2, 0, 0.65), (1e-2, 1, 0.67)):
    study.add_trial(optuna.trial.create_trial(
        params={"optim.learning_rate": rate, "seed": seed}, value=value,
        distributions={"optim.learning_rate": optuna.distributions.CategoricalDistribution([1e-3, 1e-2]),
                       "seed": optuna.distributions.CategoricalDistribution([0, 1])}))
  axes = [sweep.Axis("optim.learning_rate", values=(1e-3, 1e-2)), sweep.Axis("seed", values=(0, 1))]
  summary = sweep.summarize(study, axes, metric="m/validation/mrr", mode="max")
  assert [s["params"] for s in summary["settings"]] == [{"optim.learning_rate": 1e-2}, {"optim.learning_rate": 1e-3}]
  assert summary["best"]["mean"] == pytest.approx(0.66) and summary["best"]["std"] == pytest.approx(0.0141421, 1e-4)
  lines = sweep.table(summary).splitlines()
  assert lines[0].split() == ["optim.learning_rate", "m/validation/mrr", "(max)", "trials"]
  assert lines[1].startswith("0.01") and "0.6600 ± 0.0141 (2 seeds)" in lines[1] and "2 complete" in lines[1]


def _sweep_command(kg_dir, tfds_dir, workdir) -> list[str]:
  """The grid over 3 rates x 2 seeds of the tiny config: 6 steps a trial, evaluated every 2, saved every step."""
  main = kg_fixtures.main_command(kg_dir, tfds_dir, workdir, "--config.evals.validation.every_steps=2")
  main = [flag.replace("checkpoint_every_steps=2", "checkpoint_every_steps=1") for flag in main]
  return [sys.executable, "-m", "docent_jax.sweep", *main[3:], "--sweep=optim.learning_rate=1e-3,3e-3,1e-2",
          "--sweep=seed=0,1", "--prune_warmup_steps=3"]


def test_a_grid_killed_mid_trial_finishes_when_run_again_without_rerunning_finished_trials(kg_dir, tfds_dir,
                                                                                            tmp_path):
  workdir = tmp_path / "sweep"
  command = _sweep_command(kg_dir, tfds_dir, workdir)
  env = tiny_training.subprocess_env(1)
  # Trials 0 and 1 take 12 batches (the pruner waits for 2 trials, and for step 3); batch 16 is step 4 of trial 2,
  # after its checkpoint of step 2 at least.
  killed = subprocess.run([sys.executable, "-c", kg_fixtures.signalling_main(16, signal.SIGKILL, "docent_jax.sweep"),
                           *command[2:]], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
  assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
  assert not (workdir / sweep.SUMMARY_FILE).exists()
  study = optuna.load_study(study_name=sweep.STUDY_NAME, storage=optuna.storages.journal.JournalStorage(
      sweep.EpathJournal(epath.Path(workdir / sweep.JOURNAL_FILE))))
  finished = [t.number for t in study.get_trials(states=sweep.FINISHED)]
  [running] = [t.number for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,))]
  assert (finished, running) == ([0, 1], 2)
  checkpoint = run_dirs.RunDir(workdir / sweep.TRIALS_DIR / f"{running:03d}" / "blp_transe").latest_step()
  assert checkpoint is not None and 0 < checkpoint < 6

  again = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"Sweep trial {running} was running when the sweep stopped; resuming it." in again.stderr
  assert not any(f"Sweep trial {number}:" in again.stderr for number in finished)
  assert f"training from step {checkpoint} to 6" in again.stderr  # From its checkpoint.
  summary = json.loads((workdir / sweep.SUMMARY_FILE).read_text())
  assert sorted(trial["number"] for trial in summary["trials"]) == list(range(6))
  assert {trial["state"] for trial in summary["trials"]} <= {"complete", "pruned"}
  # Every trial reported its periodic evaluations to the pruner.
  assert all(trial["last_step"] in (2, 4, 6) for trial in summary["trials"])
  grid = {(t["params"]["optim.learning_rate"], t["params"]["seed"]) for t in summary["trials"]}
  assert grid == {(rate, seed) for rate in (1e-3, 3e-3, 1e-2) for seed in (0, 1)}
  assert len(summary["settings"]) == 3 and (workdir / sweep.PLOT_FILE).read_bytes().startswith(b"\x89PNG")
  assert "optim.learning_rate" in again.stdout and "blp_transe/validation/mrr (max)" in again.stdout
  for trial in summary["trials"]:
    if trial["state"] == "complete":  # A trial is a workdir of its own, with its results.
      results = json.loads((workdir / trial["workdir"] / "results.json").read_text())
      assert results["blp_transe/validation/mrr"] == pytest.approx(trial["value"])
      assert trial["other_splits"]["test/mrr"] == pytest.approx(results["blp_transe/test/mrr"])


def test_blps_paper_grid_is_its_configs_own_sweep():
  config = blp.get_config("fb15k237,transe,paper")
  axes = [sweep.parse_axis(spec) for spec in config.sweep]
  assert [(axis.key, axis.values) for axis in axes] == [("loss.name", ("margin", "nll")),
                                                         ("optim.learning_rate", (1e-5, 2e-5, 5e-5))]
  derived = sweep.trial_config(config, {"loss.name": "nll", "optim.learning_rate": 5e-5}, axes)
  assert (derived.loss.name, derived.optim.learning_rate) == ("nll", 5e-5)
