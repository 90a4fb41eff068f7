"""`config.selection`: a config that chooses among named candidates (sets of overrides) by their validation score
over several seeds, then trains the chosen one (FAQ retrieval's negatives, `configs/universal.py:faq`).

  config.selection = dict(metric="validation/top1", mode="max", num_seeds=3,
                          validation={...overrides that hold out a validation split and evaluate on it...},
                          candidates={"retrieved": {}, "random": {"loss": {"negatives": "random"}}, ...},
                          preference=("retrieved", "random", ...))

The candidates train as a grid sweep in `WORKDIR/selection/` (a trial per candidate and seed, the study's journal:
a killed selection goes on) of the config with `validation` applied, one seed a trial, without baselines. The
chosen candidate has the best mean; where others are level with it (means closer than two standard errors of their
difference over the seeds), the first of those in `preference` (every candidate's name, the preferred first), so
that a lead the seeds' spread can explain does not decide. Then the config
with the chosen candidate's overrides trains and evaluates as any config does; results.json gets every candidate's
validation mean and std (`<model>/selection/<candidate>/<metric>`), and `WORKDIR/selection.json` the choice and why.
"""
import json
import math
from typing import Any, Sequence

from absl import logging
from etils import epath
import ml_collections

from docent_jax import config_schema
from docent_jax import experiment
from docent_jax import outputs
from docent_jax import run_dir as run_dirs
from docent_jax.sweep import study

SELECTION_DIR = "selection"
CHOICE_FILE = "selection.json"
CANDIDATE_AXIS = "candidate"


def _noise(a: dict[str, Any], b: dict[str, Any]) -> float:
  """Two standard errors of the difference of two settings' means over their seeds: a lead within it is level."""
  return 2 * math.sqrt(a["std"] ** 2 / a["count"] + b["std"] ** 2 / b["count"])


def choose(summary: dict[str, Any], order: Sequence[str]) -> dict[str, Any]:
  """The candidate a selection's `summary` (`study.summarize`, settings best first) picks, and why."""
  settings = [setting for setting in summary["settings"] if setting["mean"] is not None]
  if not settings:
    raise RuntimeError(f"The selection has no finished candidate to choose ({summary['metric']}).")
  best = settings[0]
  name = lambda setting: setting["params"][CANDIDATE_AXIS]
  level = [s for s in settings if abs(s["mean"] - best["mean"]) <= _noise(s, best)]
  chosen = min(level, key=lambda setting: order.index(name(setting)))
  others = [setting for setting in settings if setting is not chosen]
  choice = {"chosen": name(chosen), "metric": summary["metric"], "mode": summary["mode"],
            "level_with_the_best": [name(setting) for setting in level],
            "candidates": {name(s): {"mean": s["mean"], "std": s["std"], "seeds": s["count"]} for s in settings}}
  if others:
    choice.update(next=name(others[0]), chosen_minus_next=chosen["mean"] - others[0]["mean"])
  return choice


def selected_config(config: ml_collections.ConfigDict, choice: dict[str, Any]) -> ml_collections.ConfigDict:
  """The config with the chosen candidate's overrides, without its `selection` block."""
  final = experiment.with_overrides(config, config.selection.candidates[choice["chosen"]])
  del final["selection"]
  return final


def select(config: ml_collections.ConfigDict, workdir: epath.PathLike) -> dict[str, Any]:
  """Trains the candidates on the validation split (or goes on with them), writes and returns the choice."""
  workdir = outputs.as_path(workdir)
  selection = config.selection
  if sorted(selection.preference) != sorted(selection.candidates):
    raise config_schema.ConfigError(f"config.selection.preference {list(selection.preference)}: must name every "
                                    f"candidate once ({sorted(selection.candidates)}).")
  candidates = {name: selection.candidates[name].to_dict() for name in selection.preference}
  trial = experiment.with_overrides(config, selection.validation)
  del trial["selection"]
  trial.num_seeds = 1
  axes = [study.Axis(CANDIDATE_AXIS, values=tuple(candidates), presets=candidates),
          study.Axis(study.SEED_KEY, values=tuple(range(config.seed, config.seed + selection.num_seeds)))]
  summary = study.run(trial, workdir / SELECTION_DIR, axes, metric=selection.metric, mode=selection.mode,
                      prune=False)
  choice = choose(summary, list(candidates))
  outputs.write_atomically(workdir / CHOICE_FILE, json.dumps(choice, indent=1))
  if len(choice["level_with_the_best"]) > 1:
    others = [name for name in choice["level_with_the_best"] if name != choice["chosen"]]
    why = f"level with {', '.join(others)} (within two standard errors), and preferred"
  else:
    why = f"{choice.get('chosen_minus_next', 0.0):+.4f} over {choice.get('next', 'no other')}"
  logging.info("%s: chose %s by %s (%s): %s.", config.name, choice["chosen"], selection.metric,
               ", ".join(f"{name} {c['mean']:.4f} ± {c['std']:.4f}" for name, c in choice["candidates"].items()), why)
  return choice


def read_choice(workdir: epath.PathLike) -> dict[str, Any]:
  """The choice `select` wrote in `workdir`; a workdir without one is an error saying to train first."""
  path = outputs.as_path(workdir) / CHOICE_FILE
  if not path.exists():
    raise FileNotFoundError(f"{path}: no selection was made in this workdir; train it first (--mode=train).")
  return outputs.read_json(path)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: epath.PathLike,
                       take_over_other_hosts: bool = False, runs: Sequence[str] = ()) -> dict[str, float]:
  """`select`, then `experiment.train_and_evaluate` of the chosen config; results.json also gets each candidate's
  validation mean and std."""
  choice = select(config, workdir)
  results = experiment.train_and_evaluate(selected_config(config, choice), workdir,
                                          take_over_other_hosts=take_over_other_hosts, runs=runs)
  metric = choice["metric"].split("/", 1)[1]
  scores = {}
  for name, candidate in choice["candidates"].items():
    key = f"{config.name}/selection/{name}/{metric}"
    scores.update({key: candidate["mean"], f"{key}_std": candidate["std"]})
  run_dirs.Workdir(workdir).write_results({**results, **scores})
  return {**results, **scores}
