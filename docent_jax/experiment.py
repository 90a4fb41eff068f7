"""An experiment: every run of a config in one workdir, and its results.json.

`train_and_evaluate(config, workdir)` trains each run of the config in its own run directory
(`WORKDIR/<model>`, `run_dir.RunDir`): the main model, each of `config.baselines` (the same config with a few
values changed), and each fine-tuning stage of `config.finetune`, which starts from the params of the model it
fine-tunes (`model_init`). `WORKDIR/results.json` gets `<model>/<split>/<metric>`, and for a model run over seeds
(`num_seeds`: `<model>_seed<N>`) the mean and standard deviation as `<model>@seeds/...`. `evaluate(...,
trained_run=DIR)` trains nothing: the config's evaluators score that run's model on the config's data (transfer).
"""
from collections.abc import Callable, Sequence
import re
import time

from absl import logging
from etils import epath
import jax
from jax.sharding import Mesh
import ml_collections

from docent_jax import config_schema
from docent_jax import methods
from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
from docent_jax.evaluation import seeds
from docent_jax.inference import model as inference_model
from docent_jax.inference import protocol
from docent_jax.modules import pretrained
from docent_jax.objectives import base as objective_base

_SEED_SUFFIX = re.compile(r"_seed\d+$")
FORCED_KEY = "forced/step"  # `<model>/forced/step` in results.json: the step of params evaluated with --force.


def results_table(results: dict[str, float], max_width: int = 100) -> str:
  """A short table of `results` (`<model>/<split>/<metric>`) for the console: a row per model, a column per
  headline metric of its test split (else of every split), as many as fit in `max_width` characters;
  results.json has them all."""
  rows: dict[str, dict[str, float]] = {}
  for key, value in results.items():
    model, _, metric = key.partition("/")
    if metric.count("/") == 1 and trainers.is_headline(metric):
      rows.setdefault(model, {})[metric] = value
  for model, metrics in rows.items():
    tested = {k: v for k, v in metrics.items() if k.startswith("test/")}
    rows[model] = tested or metrics
  width = max([len("model"), *map(len, rows)])
  columns, line = [], width
  for column in sorted({metric for metrics in rows.values() for metric in metrics},
                       key=lambda m: (trainers.HEADLINE_METRICS.index(m.split("/")[1]), m)):
    line += 1 + max(len(column), 6)
    if line > max_width:
      break
    columns.append(column)
  lines = [" ".join([f"{'model':<{width}}", *(f"{column:>{max(len(column), 6)}}" for column in columns)])]
  for model, metrics in sorted(rows.items()):
    cells = [f"{metrics[c]:.4f}" if c in metrics else "-" for c in columns]
    lines.append(" ".join([f"{model:<{width}}", *(f"{cell:>{max(len(c), 6)}}" for cell, c in zip(cells, columns))]))
  return "\n".join(lines)


def check_same_encoder(parent: protocol.Model, config: ml_collections.ConfigDict) -> None:
  """Refuses a run whose `model_init` parent has another encoder architecture: its arrays can have the same shapes
  (heads split one width differently) and still make another model. A `ConfigError` names the keys."""
  theirs, ours = (pretrained.encoder_architecture(c.model) for c in (parent.config, config))
  differing = sorted(key for key in theirs.keys() | ours.keys() if theirs.get(key) != ours.get(key))
  if differing:
    raise config_schema.ConfigError(
        f"config.model_init = {config.model_init!r}: its encoder is not this run's; they differ in "
        f"{', '.join(f'model.{key} (there {theirs.get(key)!r}, here {ours.get(key)!r})' for key in differing)}. "
        "Start from a run of the same architecture, or set the same model keys.")


# Config blocks that a baseline or a fine-tuning stage gives whole: which evaluations and stages it has.
_REPLACED_KEYS = ("evals", "finetune")


def with_overrides(config: ml_collections.ConfigDict,
                   overrides: ml_collections.ConfigDict | dict) -> ml_collections.ConfigDict:
  """`config` with `overrides` applied; an override's `evals` or `finetune` replaces the config's (not merged)."""
  derived = ml_collections.ConfigDict(config.to_dict())
  overrides = overrides.to_dict() if isinstance(overrides, ml_collections.ConfigDict) else dict(overrides)
  for key in _REPLACED_KEYS:
    if key in overrides:
      derived[key] = ml_collections.ConfigDict()
  derived.update(overrides)
  return derived


def _with_overrides(config: ml_collections.ConfigDict, overrides: ml_collections.ConfigDict,
                    name: str) -> ml_collections.ConfigDict:
  """A baseline's or stage's run: `with_overrides`, named `name`, without baselines of its own."""
  derived = with_overrides(config, overrides)
  derived.name = name
  derived.baselines = {}
  return derived


def model_configs(config: ml_collections.ConfigDict) -> list[ml_collections.ConfigDict]:
  """Every run of a config, each after the run it starts from: the main model, one per baseline (the main
  config with the baseline's overrides), and after each of them its fine-tuning stages (`finetune`:
  `<model>_<stage>`, starting from `<model>`'s params; `{model}` in a stage's `report_as` is `<model>`).
  With `num_seeds` N > 1, every trained run then repeats with seeds `seed` + 1 .. N - 1 (see `_seed_runs`)."""
  models = [config] + [_with_overrides(config, overrides, name)
                       for name, overrides in config.get("baselines", {}).items()]
  runs = []
  for model in models:
    runs.append(model)
    for stage, overrides in model.get("finetune", {}).items():
      run = _with_overrides(model, overrides, f"{model.name}_{stage}")
      run.finetune = {}
      run.model_init = model.name
      for entry in run.get("evals", {}).values():
        if entry.get("report_as"):
          entry.report_as = entry.report_as.format(model=model.name)
      runs.append(run)
  num_seeds = config.get("num_seeds", 1)
  if num_seeds < 1:
    raise config_schema.ConfigError(f"config.num_seeds = {num_seeds}: a config runs with at least one seed.")
  return runs + [run for offset in range(1, num_seeds) for run in _seed_runs(runs, offset)]


def _seed_runs(runs: list[ml_collections.ConfigDict], offset: int) -> list[ml_collections.ConfigDict]:
  """The trained runs of `runs` again with `seed` + `offset`, as `<run>_seed<offset>` (a stage starts from its
  model's run of the same seed); each reports what it reported as `<name>_seed<offset>`, so results.json gets
  `<name>@seeds/...` (`evaluation.seeds`). Untrained runs and baseline evaluators do not depend on the seed and
  run once."""
  trained = [run for run in runs if run.train.num_steps > 0]
  names = {run.name for run in trained}
  seeded = []
  for run in trained:
    copy = ml_collections.ConfigDict(run.to_dict())
    copy.name = f"{run.name}_seed{offset}"
    copy.seed = run.seed + offset
    copy.num_seeds = 1
    if copy.get("model_init") in names:
      copy.model_init = f"{copy.model_init}_seed{offset}"
    copy.evals = {name: dict(entry, report_as=f"{entry.get('report_as') or run.name}_seed{offset}")
                  for name, entry in run.get("evals", {}).to_dict().items() if not entry.get("baseline")}
    seeded.append(copy)
  return seeded


def selected_runs(runs: list[ml_collections.ConfigDict], names: Sequence[str]) -> list[ml_collections.ConfigDict]:
  """The runs named in `names` (all when empty), each with its seeds (`<name>_seed<N>`); a run whose parent
  (`model_init`, a run of this config) is left out is an error naming it, as is a name the config has not."""
  if not names:
    return runs
  base_name = lambda run: _SEED_SUFFIX.sub("", run.name)
  unknown = sorted(set(names) - {base_name(run) for run in runs})
  if unknown:
    raise config_schema.ConfigError(f"--runs {', '.join(unknown)}: not a run of this config; its runs: "
                     f"{', '.join(dict.fromkeys(base_name(run) for run in runs))}.")
  kept = [run for run in runs if base_name(run) in names]
  all_names, kept_names = {run.name for run in runs}, {run.name for run in kept}
  for run in kept:
    if run.get("model_init") in all_names and run.model_init not in kept_names:
      raise config_schema.ConfigError(f"--runs: {run.name} starts from {run.model_init}, which is left out; add "
                       f"{_SEED_SUFFIX.sub('', run.model_init)}.")
  return kept


def _run(config: ml_collections.ConfigDict, workdir: str | epath.PathLike, *, train: bool, force: bool = False,
         take_over_other_hosts: bool = False, runs: Sequence[str] = (), trained_run: str = "",
         on_evaluation: trainers.EvaluationCallback | None = None) -> dict[str, float]:
  workdir = run_dirs.Workdir(workdir)
  runs = [_transfer_config(config, trained_run)] if trained_run else selected_runs(model_configs(config), runs)
  for run_config in runs:  # Every run's values, before anything is read, built or trained.
    objective_class = methods.objective_class(run_config.objective)
    try:
      config_schema.check_config(run_config, parallel.create_mesh(run_config.mesh),
                                 objective_class.rows_per_example, objective_class.config_rules())
    except config_schema.ConfigError as error:
      raise config_schema.ConfigError(
          f"{error}" if run_config is runs[0] else f"run {run_config.name}: {error}") from None
  results, reported = {}, {}
  workdir.read_results()  # A damaged results.json stops the run now, not after training.
  for index, run_config in enumerate(runs):
    started = time.time()
    try:
      trainer = trainers.Trainer(run_config, workdir.run(run_config.name), on_evaluation=on_evaluation)
      if trained_run:  # That run's own model, evaluated on this config's data.
        model, computed = _load_run(trained_run, reported, trainer.mesh), {}
      elif run_config.get("model_init"):
        parent = _load_run(run_config.model_init, reported, trainer.mesh)
        check_same_encoder(parent, run_config)
        trainer.objective.start_from(parent)
    except objective_base.SkipRun as reason:
      logging.warning("%s: skipped: %s", run_config.name, reason)
      continue
    forced_step = None
    if train:
      params, computed = trainer.train(take_over_other_hosts)
      model = trainer.objective.model(params)
    elif not trained_run:
      (params, forced_step), computed = trainer.restore_params(force), {}
      model = trainer.objective.model(params)
    reported[run_config.name] = model
    run_results = trainer.report(model, computed)
    if forced_step is not None:
      run_results.update({f"{name}/{FORCED_KEY}": forced_step for name in {k.split("/")[0] for k in run_results}})
    logging.info("%s: done in %s.", run_config.name, trainers.format_duration(time.time() - started))
    results.update(run_results)
    workdir.write_results(results, replaces=_superseded_by(results))
  summary = seeds.summarize(results)
  if summary:
    results.update(summary)
    workdir.write_results(results, replaces=_superseded_by(results))
  if jax.process_index() == 0 and results:
    print(results_table(results), flush=True)
  return results


def _transfer_config(config: ml_collections.ConfigDict, trained_run: str) -> ml_collections.ConfigDict:
  """The config of evaluating another run (`trained_run`, a run directory) on this config's data: the config's run
  of the same objective (else its main model), without baselines and stages, named after the trained run,
  `<its workdir>.<its model>` (e.g. default.blp_transe). Its evaluators, baseline ones left out, score the loaded
  model."""
  parent = run_dirs.RunDir(trained_run)
  objective = parent.recorded_config().objective
  runs = model_configs(config)
  same_objective = [run for run in runs if run.objective == objective]
  transfer = ml_collections.ConfigDict((same_objective[0] if same_objective else config).to_dict())
  transfer.name = f"{parent.workdir.name}.{parent.name}"
  transfer.model_init = ""
  transfer.baselines, transfer.finetune = {}, {}
  # The model's evaluators, reported under the transfer's name; untrained baselines are the config's own.
  transfer.evals = {name: {key: value for key, value in entry.items() if key != "report_as"}
                    for name, entry in transfer.get("evals", {}).to_dict().items() if not entry.get("baseline")}
  if len(runs) > 1:
    logging.info("Evaluating %s on %s with the evaluators of its %s run; the config's other runs are not "
                 "evaluated.", parent, config.name, transfer.objective)
  return transfer


def _load_run(run: str, reported: dict[str, protocol.Model], mesh: Mesh) -> protocol.Model:
  """The model of a run (one a run starts from, `model_init`, or one evaluated, `trained_run`): a run of this config
  by name, or any run's directory (its reported params; those of an unfinished run with a warning), on `mesh`. A
  directory that loads without its data (`docent_jax.load`) is loaded; one trained before runs recorded what loading
  needs is rebuilt from its config and data."""
  if run in reported:
    return reported[run]
  parent_dir = run_dirs.RunDir(run)
  if parent_dir.has_model_record():
    return inference_model.load(parent_dir, mesh)
  parent = trainers.Trainer(parent_dir.recorded_config(), parent_dir)
  params, _ = parent.restore_params(force=True)
  return parent.objective.model(params)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | epath.PathLike,
                       take_over_other_hosts: bool = False, runs: Sequence[str] = (),
                       on_evaluation: trainers.EvaluationCallback | None = None) -> dict[str, float]:
  """Trains (or resumes) every run of the config (or the `runs` named, see `selected_runs`), evaluates each and
  writes results.json.

  `take_over_other_hosts`: the job that held the runs' training locks is gone with its hosts (a preempted
  TPU VM), so their locks are taken over. `on_evaluation`: see `trainer.Trainer`.
  """
  return _run(config, workdir, train=True, take_over_other_hosts=take_over_other_hosts, runs=runs,
              on_evaluation=on_evaluation)


def evaluate(config: ml_collections.ConfigDict, workdir: str | epath.PathLike, force: bool = False,
             runs: Sequence[str] = (), trained_run: str = "") -> dict[str, float]:
  """Recomputes the evaluation of the params each run reported (the best where the config selects them),
  training nothing. A run that never finished, or whose best params are missing, is refused unless `force`;
  forced results carry `<model>/forced/step`.

  `trained_run`: a run directory of any workdir, evaluated instead of the config's runs: its model, scored by the
  config's evaluators on the config's data, reported as `<its workdir>.<its model>` (see `_transfer_config`)."""
  if trained_run and runs:
    raise config_schema.ConfigError("--runs picks among the config's own runs; --trained_run evaluates another run "
                                    "instead of them. Give one of the two.")
  return _run(config, workdir, train=False, force=force, runs=runs, trained_run=trained_run)


def _superseded_by(results: dict[str, float]) -> Callable[[str], bool]:
  """Which earlier keys of results.json `results` replaces besides its own: a model evaluated anew drops the mark of
  an earlier forced evaluation."""
  models = {key.split("/")[0] for key in results}
  return lambda key: key.endswith(f"/{FORCED_KEY}") and key.split("/")[0] in models
