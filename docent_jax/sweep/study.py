"""A sweep's study: its axes, the trials (each a run of its own), the journal that lets a killed sweep go on, and the
summary (see the package's docstring, `docent_jax.sweep`)."""
from collections.abc import Iterable, Sequence
import dataclasses
import itertools
import json
import math
import statistics
from typing import Any

from absl import logging
from etils import epath
import ml_collections
import optuna
from optuna.storages import journal

from docent_jax import config_schema
from docent_jax import experiment
from docent_jax import outputs

JOURNAL_FILE = "study.journal"
TRIALS_DIR = "trials"
SUMMARY_FILE = "sweep.json"
PLOT_FILE = "sweep.png"
STUDY_NAME = "sweep"
SEED_KEY = "seed"
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)


@dataclasses.dataclass(frozen=True)
class Axis:
  """One swept config key: listed values, or a range (`low`..`high`, log-scaled or not) for an Optuna search; or,
  with `presets`, named sets of overrides (its values are their names, `key` only labels them)."""
  key: str
  values: tuple[Any, ...] = ()
  low: float | None = None
  high: float | None = None
  log: bool = False
  presets: dict[str, dict[str, Any]] | None = None

  def suggest(self, trial: optuna.Trial) -> Any:
    if self.values:
      return trial.suggest_categorical(self.key, self.values)
    if isinstance(self.low, int) and isinstance(self.high, int):
      return trial.suggest_int(self.key, self.low, self.high, log=self.log)
    return trial.suggest_float(self.key, self.low, self.high, log=self.log)


def _literal(text: str) -> Any:
  """'3' -> 3, '2e-5' -> 2e-05, 'true' -> True, anything else the string itself."""
  if text.lower() in ("true", "false"):
    return text.lower() == "true"
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text


def parse_axis(spec: str) -> Axis:
  """`KEY=V1,V2,...` or `KEY=LOW:HIGH[:log]`; a malformed one is a `ConfigError` quoting it."""
  key, equals, values = spec.partition("=")
  if not equals or not key or not values:
    raise config_schema.ConfigError(f"--sweep={spec}: expected KEY=V1,V2,... or KEY=LOW:HIGH[:log].")
  if ":" in values and "," not in values:
    low, _, rest = values.partition(":")
    high, _, scale = rest.partition(":")
    low, high = _literal(low), _literal(high)
    if (not isinstance(low, (int, float)) or not isinstance(high, (int, float)) or low >= high
        or scale not in ("", "log") or (scale == "log" and low <= 0)):
      raise config_schema.ConfigError(f"--sweep={spec}: a range is LOW:HIGH or LOW:HIGH:log, numbers with LOW < HIGH "
                                      "(and LOW > 0 on a log scale).")
    return Axis(key, low=low, high=high, log=scale == "log")
  return Axis(key, values=tuple(dict.fromkeys(_literal(v) for v in values.split(","))))


def trial_config(config: ml_collections.ConfigDict, params: dict[str, Any],
                 axes: Sequence[Axis] = ()) -> ml_collections.ConfigDict:
  """`config` with the trial's values set (each key must exist, and take its value's type), without baselines; a
  preset axis's value applies its overrides (`experiment.with_overrides`)."""
  presets = {axis.key: axis.presets for axis in axes if axis.presets}
  derived = ml_collections.ConfigDict(config.to_dict())
  for key, value in params.items():
    if key in presets:
      derived = experiment.with_overrides(derived, presets[key][value])
      continue
    *parents, leaf = key.split(".")
    block = derived
    for part in parents:
      block = block.get(part) if isinstance(block, ml_collections.ConfigDict) else None
    if not isinstance(block, ml_collections.ConfigDict) or leaf not in block:
      raise config_schema.ConfigError(f"--sweep={key}=...: config.{key} is not a key of this config.")
    current = block[leaf]
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
      value = float(value)
    try:
      block[leaf] = value
    except TypeError as error:
      raise config_schema.ConfigError(f"--sweep={key}=...: {value!r} is not a value of config.{key} "
                                      f"({type(current).__name__}).") from error
  derived.baselines = {}
  return derived


class EpathJournal(journal.BaseJournalBackend):
  """Optuna's journal as one JSON-lines file read and replaced whole through epath (local or gs://; Optuna's own
  file backend appends to a local file only). One sweep process writes it."""

  def __init__(self, path: epath.Path):
    self.path = path
    self._logs = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

  def read_logs(self, log_number_from: int) -> Iterable[dict[str, Any]]:
    return self._logs[log_number_from:]

  def append_logs(self, logs: list[dict[str, Any]]) -> None:
    self._logs.extend(logs)
    outputs.write_atomically(self.path, "".join(json.dumps(log) + "\n" for log in self._logs))


def _study(workdir: epath.Path, axes: Sequence[Axis], trials: int, mode: str, prune: bool, warmup_steps: int,
           seed: int) -> optuna.Study:
  """The sweep's study, created or read from its journal. A grid's combinations are queued in it when it is created
  (Optuna's grid sampler ends a study only from inside `Study.optimize`, which does not resume a trial)."""
  pruner = (optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=warmup_steps) if prune
            else optuna.pruners.NopPruner())
  workdir.mkdir(parents=True, exist_ok=True)
  study = optuna.create_study(storage=journal.JournalStorage(EpathJournal(workdir / JOURNAL_FILE)),
                              study_name=STUDY_NAME, sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner,
                              load_if_exists=True, direction="maximize" if mode == "max" else "minimize")
  if not trials and not study.get_trials(deepcopy=False):
    for values in itertools.product(*(axis.values for axis in axes)):
      study.enqueue_trial(dict(zip((axis.key for axis in axes), values)))
  return study


def _run_trial(study: optuna.Study, trial: optuna.Trial, config: ml_collections.ConfigDict, axes: Sequence[Axis],
               workdir: epath.Path, metric: str, run_name: str, take_over_other_hosts: bool) -> None:
  """Trains and evaluates one trial (resuming its directory), reporting `metric` of `run_name` to Optuna."""
  params = {axis.key: axis.suggest(trial) for axis in axes}
  relative = f"{TRIALS_DIR}/{trial.number:03d}"
  trial.set_user_attr("workdir", relative)  # In the sweep's workdir, wherever that moves.
  trial_dir = workdir / relative
  logging.info("Sweep trial %d: %s.", trial.number, ", ".join(f"{k}={v}" for k, v in params.items()))

  def report(name: str, step: int, metrics: dict[str, float]) -> None:
    if name == run_name and metric in metrics:
      trial.report(float(metrics[metric]), step)
      if trial.should_prune():
        raise optuna.TrialPruned(f"{metric} {metrics[metric]:.4g} at step {step}: below the median of earlier trials")

  try:
    results = experiment.train_and_evaluate(trial_config(config, params, axes), trial_dir, on_evaluation=report,
                                            take_over_other_hosts=take_over_other_hosts)
  except optuna.TrialPruned as pruned:
    logging.info("Sweep trial %d pruned: %s.", trial.number, pruned)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return
  except FloatingPointError as error:  # A setting that diverges is a result of the sweep, not its end.
    logging.warning("Sweep trial %d failed: %s", trial.number, error)
    trial.set_user_attr("error", str(error))
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return
  key = f"{run_name}/{metric}"
  if key not in results:
    raise config_schema.ConfigError(f"--metric={metric} --run={run_name}: {key} is not among the trial's results "
                                    f"({', '.join(sorted(results)[:12])}, ...).")
  study.tell(trial, results[key])


def run(config: ml_collections.ConfigDict, workdir: str | epath.PathLike, axes: Sequence[Axis], *, trials: int = 0,
        metric: str = "", mode: str = "", run_name: str = "", prune: bool = True, prune_warmup_steps: int = 0,
        take_over_other_hosts: bool = False) -> dict[str, Any]:
  """Runs (or goes on with) the sweep; returns its summary, also written to `sweep.json` and `sweep.png`.
  `take_over_other_hosts`: see `experiment.train_and_evaluate`."""
  workdir = outputs.as_path(workdir)
  metric, mode, run_name = metric or config.train.best_metric, mode or config.train.best_mode, run_name or config.name
  if not metric:
    raise config_schema.ConfigError("--metric: empty, and so is config.train.best_metric; name the metric the "
                                    "sweep compares (e.g. validation/mrr).")
  if not axes:
    raise config_schema.ConfigError("--sweep: give at least one axis (KEY=V1,V2,...).")
  ranges = [axis.key for axis in axes if not axis.values]
  if not trials and ranges:
    raise config_schema.ConfigError(f"--sweep {', '.join(ranges)}: a range needs --trials (an Optuna search); "
                                    "a grid takes listed values.")
  if trials and any(axis.key == SEED_KEY for axis in axes):
    raise config_schema.ConfigError("--sweep=seed=...: seeds are an axis of grid sweeps; with --trials, set "
                                    "--config.num_seeds and --metric to the runs' mean (e.g. --run=MODEL@seeds).")
  for axis in axes:  # Every value of every axis, before anything is trained.
    for value in axis.values or (axis.low,):
      trial_config(config, {axis.key: value}, axes)
  study = _study(workdir, axes, trials, mode, prune, prune_warmup_steps, config.seed)
  target = trials or math.prod(len(axis.values) for axis in axes)
  # A trial left running by a killed sweep resumes first, with its values, in its directory.
  for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
    logging.info("Sweep trial %d was running when the sweep stopped; resuming it.", frozen.number)
    resumed = optuna.trial.Trial(study, frozen._trial_id)  # pylint: disable=protected-access
    _run_trial(study, resumed, config, axes, workdir, metric, run_name, take_over_other_hosts)
  finished = lambda: len(study.get_trials(deepcopy=False, states=FINISHED))
  if finished() >= target:
    logging.info("Sweep: all %d trials finished before; summarizing.", target)
  while finished() < target:
    _run_trial(study, study.ask(), config, axes, workdir, metric, run_name, take_over_other_hosts=False)
  summary = summarize(study, axes, metric=f"{run_name}/{metric}", mode=mode, workdir=workdir)
  outputs.write_atomically(workdir / SUMMARY_FILE, json.dumps(summary, indent=1))
  plot(summary, workdir / PLOT_FILE)
  return summary


def _other_splits(trial_dir: epath.Path, metric: str) -> dict[str, float]:
  """The trial's results of `metric`'s model and metric on the other splits (e.g. test/mrr beside validation/mrr),
  from its results.json."""
  model, _, split_metric = metric.partition("/")
  name = split_metric.split("/", 1)[-1]
  results = outputs.read_results(trial_dir / "results.json")
  return {key.removeprefix(f"{model}/"): value for key, value in results.items()
          if key.startswith(f"{model}/") and key.endswith(f"/{name}") and key != metric and key.count("/") == 2}


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
  """The mean and sample standard deviation (0 for one value; None for none)."""
  if not values:
    return None, None
  return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(study: optuna.Study, axes: Sequence[Axis], metric: str, mode: str,
              workdir: epath.Path | None = None) -> dict[str, Any]:
  """Every trial (values, state, value, the other splits' same metric from its results in `workdir`, its workdir)
  and every setting (the values but the seed): the finished seeds' mean ± sample std of the metric (and of the
  other splits'), best first."""
  trials = []
  for trial in study.get_trials(deepcopy=False):
    steps = sorted(trial.intermediate_values)
    trial_dir = trial.user_attrs.get("workdir")
    complete = trial.state == optuna.trial.TrialState.COMPLETE and trial_dir and workdir is not None
    trials.append({"number": trial.number, "params": trial.params, "state": trial.state.name.lower(),
                   "value": trial.value,
                   "other_splits": _other_splits(workdir / trial_dir, metric) if complete else {},
                   "last_reported": trial.intermediate_values[steps[-1]] if steps else None,
                   "last_step": steps[-1] if steps else None, "workdir": trial.user_attrs.get("workdir"),
                   **({"error": trial.user_attrs["error"]} if "error" in trial.user_attrs else {})})
  settings: dict[str, dict[str, Any]] = {}
  for trial in trials:
    values = {key: value for key, value in trial["params"].items() if key != SEED_KEY}
    setting = settings.setdefault(json.dumps(values, sort_keys=True), {"params": values, "trials": [], "finished": []})
    setting["trials"].append(trial["number"])
    if trial["state"] == "complete":
      setting["finished"].append(trial)
  for setting in settings.values():
    finished = setting.pop("finished")
    mean, std = _mean_std([trial["value"] for trial in finished])
    others = {key: _mean_std([trial["other_splits"][key] for trial in finished if key in trial["other_splits"]])
              for key in sorted({key for trial in finished for key in trial["other_splits"]})}
    setting.update(count=len(finished), mean=mean, std=std,
                   other_splits={key: {"mean": m, "std": sd} for key, (m, sd) in others.items()})
  sign = -1 if mode == "max" else 1
  ranked = sorted(settings.values(), key=lambda s: (s["mean"] is None, sign * (s["mean"] or 0.0)))
  return {"metric": metric, "mode": mode, "axes": [dataclasses.asdict(axis) for axis in axes], "trials": trials,
          "settings": ranked, "best": ranked[0] if ranked and ranked[0]["mean"] is not None else None}


def table(summary: dict[str, Any]) -> str:
  """The settings, best first: their values, the metric's mean ± std over finished seeds, and the trials' states."""
  keys = [axis["key"] for axis in summary["axes"] if axis["key"] != SEED_KEY]
  states = {trial["number"]: trial["state"] for trial in summary["trials"]}
  header = [*keys, f"{summary['metric']} ({summary['mode']})", "trials"]
  rows = []
  for setting in summary["settings"]:
    score = "-" if setting["mean"] is None else f"{setting['mean']:.4f}"
    if setting["count"] > 1:
      score += f" ± {setting['std']:.4f} ({setting['count']} seeds)"
    counts: dict[str, int] = {}
    for number in setting["trials"]:
      counts[states[number]] = counts.get(states[number], 0) + 1
    rows.append([*(f"{setting['params'].get(key)}" for key in keys), score,
                 ", ".join(f"{count} {state}" for state, count in sorted(counts.items()))])
  widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
  return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows])


def plot(summary: dict[str, Any], path: epath.Path) -> None:
  """The metric against each swept value (not the seed): every finished trial, and the settings' means."""
  import matplotlib  # pylint: disable=g-import-not-at-top  # Only the summary draws.
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  keys = [axis["key"] for axis in summary["axes"] if axis["key"] != SEED_KEY]
  figure, panels = pyplot.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.6), squeeze=False)
  for panel, key in zip(panels[0], keys):
    for state, marker in (("complete", "o"), ("pruned", "x")):
      points = [(trial["params"][key], trial["value"] if state == "complete" else trial["last_reported"])
                for trial in summary["trials"] if trial["state"] == state and key in trial["params"]]
      points = [(x, y) for x, y in points if y is not None]
      if points:
        panel.scatter(*zip(*points), marker=marker, alpha=0.7, label=state if state == "complete" else
                      "pruned (last report)")
    means = sorted((s["params"][key], s["mean"]) for s in summary["settings"]
                   if s["mean"] is not None and len(keys) == 1 and isinstance(s["params"].get(key), (int, float)))
    if means:
      panel.plot(*zip(*means), color="black", linewidth=1, label="mean over seeds")
    numeric = [trial["params"][key] for trial in summary["trials"] if isinstance(trial["params"].get(key),
                                                                                 (int, float))]
    if numeric and min(numeric) > 0 and max(numeric) / min(numeric) >= 10:
      panel.set_xscale("log")
    panel.set_xlabel(key)
    panel.set_ylabel(summary["metric"])
    panel.legend(fontsize="small")
  figure.tight_layout()
  with outputs.atomic_writer(path, "wb") as file:
    figure.savefig(file, format="png", dpi=120)
  pyplot.close(figure)
