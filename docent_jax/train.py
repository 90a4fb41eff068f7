"""The training loop: nothing here is specific to a method; `config.objective` supplies the rest.

`train_and_evaluate(config, workdir)` trains each run of the config in its own sub-directory: the
main model, each of `config.baselines` (the same config with a few values changed), and each
fine-tuning stage of `config.finetune`, which starts from the params of the model it fine-tunes
(`model_init`). During training the evaluators of `config.evals` with `every_steps` report to
TensorBoard and keep the best params (`eval.best_metric`); at the end every evaluator runs on the
reported params (the best, else the last) and `WORKDIR/results.json` gets `<model>/<split>/<metric>`,
and for a model run over seeds (`num_seeds`: `<model>_seed<N>`) the mean and standard deviation as
`<model>@seeds/...`.
"""
import collections
import contextlib
import json
import re
import signal
import time
from typing import Any, Iterator, Sequence

from absl import logging
from clu import metric_writers
from etils import epath
import flax
from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax import checkpoints
from docent_jax import outputs
from docent_jax import config_schema
from docent_jax import objectives
from docent_jax import optim
from docent_jax import parallel
from docent_jax.data import pipeline
from docent_jax.evaluation import seeds
from docent_jax.evaluation import registry as evaluators
from docent_jax.inference import model as inference_model
from docent_jax.inference import protocol
from docent_jax.models import pretrained

RESULTS_FILE = "results.json"
_SEED_SUFFIX = re.compile(r"_seed\d+$")
FORCED_KEY = "forced/step"  # `<model>/forced/step` in results.json: the step of params evaluated with --force.


class Preempted(RuntimeError):
  """Training stopped on SIGTERM (or a multi-process preemption notice) after saving the current step."""


class IncompleteRunError(RuntimeError):
  """--mode=evaluate on a run that never finished, or whose best params are missing (see --force)."""


@contextlib.contextmanager
def _termination_notice() -> Iterator[list[str]]:
  """While open, SIGTERM appends its name to the yielded list instead of ending the process, so that the
  loop can save the step it is on. Only a single process installs it: in a multi-process job JAX's
  preemption service handles SIGTERM and agrees on the step for every process."""
  received: list[str] = []
  if jax.process_count() > 1:
    yield received
    return
  previous = signal.signal(signal.SIGTERM, lambda number, frame: received.append(signal.Signals(number).name))
  try:
    yield received
  finally:
    signal.signal(signal.SIGTERM, previous)


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def overwrite_params(params: Any, pretrained: dict[str, Any], path: str = "") -> Any:
  """Replaces leaves of `params` by the pretrained ones, keeping each leaf's sharding.

  Pretrained entries with no counterpart (e.g. a pooler the encoder does not use) are logged and
  left out; a shape mismatch is an error.
  """
  if not isinstance(pretrained, dict):
    if params.shape != pretrained.shape:
      raise ValueError(f"Pretrained {path} has shape {pretrained.shape}; the model expects {params.shape}.")
    return jax.device_put(jnp.asarray(pretrained, params.dtype), params.sharding)
  merged = dict(params)
  for key, value in pretrained.items():
    if key not in params:
      logging.info("Pretrained %s/%s is not used by this model.", path, key)
      continue
    merged[key] = overwrite_params(params[key], value, f"{path}/{key}")
  return merged


def inherit_params(params: Any, parent_params: Any, encoder_path: tuple[str, ...],
                   parent_encoder_path: tuple[str, ...], model_init: str) -> Any:
  """`params` with every leaf the parent has in the same shape replaced by the parent's (keeping each leaf's
  sharding): its encoder (found at `parent_encoder_path`, put at `encoder_path`), then any same-path head.

  Logs what it took and what stays fresh; a parent with nothing usable is an error naming `model_init`.
  """
  own = traverse_util.flatten_dict(params)
  theirs = traverse_util.flatten_dict(parent_params)
  taken, fresh, merged = collections.Counter(), [], {}
  for path, leaf in own.items():
    candidates = [path]
    if path[:len(encoder_path)] == encoder_path:
      candidates.insert(0, parent_encoder_path + path[len(encoder_path):])
    source = next((theirs[c] for c in candidates if c in theirs and theirs[c].shape == leaf.shape), None)
    name = "/".join(path)
    if source is None:
      merged[path] = leaf
      fresh.append(name)
      continue
    merged[path] = jax.device_put(np.asarray(parallel.fetch(source), leaf.dtype), leaf.sharding)
    taken["/".join(path[:max(len(encoder_path), 1)])] += 1
  if not taken:
    raise ValueError(f"config.model_init = {model_init!r}: that run has no params this model can start from (its "
                     f"encoder at {'/'.join(parent_encoder_path) or 'the root'} matches nothing at "
                     f"{'/'.join(encoder_path) or 'the root'}, and no other param has the same path and shape).")
  logging.info("model_init %s: took %d arrays (%s); %d stay as initialised%s.", model_init, sum(taken.values()),
               ", ".join(f"{k}: {v}" for k, v in sorted(taken.items())), len(fresh),
               f" ({', '.join(fresh[:8])}{', ...' if len(fresh) > 8 else ''})" if fresh else "")
  return traverse_util.unflatten_dict(merged)


# Metrics the console shows (`<split>/<metric>`); TensorBoard and results.json get every one.
HEADLINE_METRICS = ("mrr", "hits@10", "search_mrr", "classification_accuracy", "accuracy", "f1", "auc", "map",
                    "top1", "spearman", "ndcg@10")
_CONSOLE_SECONDS = 30.0  # A training step's line reaches the console at most this often.


def is_headline(key: str) -> bool:
  """Whether `[<model>/]<split>/<metric>` is a metric the console shows."""
  return key.rsplit("/", 1)[-1] in HEADLINE_METRICS


def results_table(results: dict[str, float], max_width: int = 100) -> str:
  """A short table of `results` (`<model>/<split>/<metric>`) for the console: a row per model, a column per
  headline metric of its test split (else of every split), as many as fit in `max_width` characters;
  results.json has them all."""
  rows: dict[str, dict[str, float]] = {}
  for key, value in results.items():
    model, _, metric = key.partition("/")
    if metric.count("/") == 1 and is_headline(metric):
      rows.setdefault(model, {})[metric] = value
  for model, metrics in rows.items():
    tested = {k: v for k, v in metrics.items() if k.startswith("test/")}
    rows[model] = tested or metrics
  width = max([len("model"), *map(len, rows)])
  columns, line = [], width
  for column in sorted({metric for metrics in rows.values() for metric in metrics},
                       key=lambda m: (HEADLINE_METRICS.index(m.split("/")[1]), m)):
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


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Trainer:
  """Builds the sharded state of one run's objective, trains it, evaluates it."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str | epath.PathLike, *,
               objective: objectives.base.Objective | None = None):
    """`objective`: one already built on its mesh (e.g. from shapes, to compile for devices elsewhere); by default
    the config's, with its data, on every device of this machine."""
    self.config = config
    self.workdir = outputs.as_path(workdir)
    self.mesh = parallel.create_mesh(config.mesh) if objective is None else objective.mesh
    objective_class = objectives.get_objective(config.objective)
    config_schema.check_config(config, self.mesh, objective_class.rows_per_example, objective_class.config_rules())
    self.objective = objective_class(config, self.mesh) if objective is None else objective
    self.evals = evaluators.specs(config)
    self.optimizer = optim.create_optimizer(config.optim, config.train.num_steps)
    self.rng = jax.random.key(config.seed)
    self.abstract_params = jax.eval_shape(self.objective.init_variables, self.rng)
    self.param_shardings = parallel.param_shardings(self.abstract_params, self.mesh,
                                                    parallel.rules_from_config(config.mesh))

  def abstract_state(self) -> TrainState:
    """Shapes and target shardings of the state on this run's mesh; restoring needs no real init."""
    params = jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                          nn.unbox(self.abstract_params), self.param_shardings)
    # Each param's optimizer state (Adam's moments) is sharded as the param is; leaves of no param (step counts)
    # are replicated. Left to XLA's propagation, the TPU compiler replicated the moments of sharded params, and
    # gathered every sharded param and gradient each step to update them.
    replicated = parallel.replicated(self.mesh)
    opt_shapes = jax.eval_shape(self.optimizer.init, params)
    opt_shardings = optax.tree_map_params(self.optimizer, lambda _, sharding: sharding, opt_shapes,
                                          self.param_shardings, transform_non_params=lambda _: replicated)
    opt_state = jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                             opt_shapes, opt_shardings)
    step = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
    return TrainState(step=step, params=params, opt_state=opt_state)

  def initial_state(self) -> TrainState:
    """Fresh params (then the pretrained or `model_init` ones) and optimizer state, created on their shards."""
    abstract = self.abstract_state()
    shardings = jax.tree.map(lambda x: x.sharding, abstract)
    init = jax.jit(lambda rng: nn.unbox(self.objective.init_variables(rng)), out_shardings=shardings.params)
    params = overwrite_params(init(jax.random.fold_in(self.rng, 0)), self.objective.pretrained_params())
    if self.objective.parent is not None:
      params = inherit_params(params, self.objective.params_from_parent(), self.objective.encoder_path,
                              self.objective.parent.encoder_path, self.config.model_init)
    opt_state = jax.jit(self.optimizer.init, out_shardings=shardings.opt_state)(params)
    return TrainState(step=jax.device_put(jnp.zeros((), jnp.int32), shardings.step), params=params,
                      opt_state=opt_state)

  def compile_train_step(self, state: TrainState, batch_shardings: Any = None):
    """The jitted step; batches are split over the data axis unless `batch_shardings` says otherwise."""
    state_shardings = jax.tree.map(lambda x: x.sharding, state)
    batch_sharding = parallel.batch_sharding(self.mesh) if batch_shardings is None else batch_shardings
    step_rng = jax.random.fold_in(self.rng, 1)

    def train_step(state: TrainState, batch: dict[str, jax.Array]) -> tuple[TrainState, dict[str, jax.Array]]:
      rng = jax.random.fold_in(step_rng, state.step)
      grads, metrics = jax.grad(self.objective.loss, has_aux=True)(state.params, batch, rng)
      updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
      params = optax.apply_updates(state.params, updates)
      metrics["grad_norm"] = optax.global_norm(grads)
      # 1 while every updated param is finite: checked before a state is saved.
      finite = jnp.stack([jnp.isfinite(p).all() for p in jax.tree.leaves(params)])
      metrics["params_finite"] = jnp.all(finite).astype(jnp.float32)
      return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return jax.jit(train_step, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, parallel.replicated(self.mesh)), donate_argnums=(0,))

  def _writer(self) -> metric_writers.MetricWriter:
    return metric_writers.create_default_writer(self.workdir, just_logging=jax.process_index() > 0,
                                                asynchronous=False)

  def _best_params(self) -> checkpoints.BestParams | None:
    metric = self.config.eval.get("best_metric", "")
    if not metric:
      return None
    return checkpoints.BestParams(self.workdir / checkpoints.BEST_DIR, metric, self.config.eval.get("best_mode", "max"))

  def evaluate(self, model: protocol.Model, specs: list[evaluators.EvalSpec]) -> dict[str, dict[str, float]]:
    """Per evaluator name, its `<split>/<metric>` numbers for `model` on this run's data."""
    data = self.objective.evaluation_data()
    return {spec.name: spec.run(model, data) for spec in specs}

  def _evaluate_periodic(self, step: int, state: TrainState, specs: list[evaluators.EvalSpec],
                         writer: metric_writers.MetricWriter, best: checkpoints.BestParams | None,
                         log: checkpoints.EvaluationLog) -> dict:
    metrics = self.evaluate(self.objective.model(state.params), specs)
    flat = {k: v for m in metrics.values() for k, v in m.items()}
    writer.write_scalars(step, flat)
    # The console gets the headline numbers; TensorBoard gets all.
    headline = {k: v for k, v in flat.items() if k.count("/") == 1 and is_headline(k)}
    logging.info("%s step %d: %s", self.config.name, step, ", ".join(f"{k}={v:.4g}" for k, v in sorted(headline.items())))
    if best is not None and best.metric in flat:
      best.offer(step, state.params, flat)
    log.add(step, metrics)
    return metrics

  def train(self, take_over_other_hosts: bool = False) -> tuple[Any, dict[str, dict[str, float]]]:
    """Trains (or resumes) to `train.num_steps`, holding the workdir's training lock.

    Returns the params to report (the best by `eval.best_metric` when set, else the last) and the
    evaluations already computed on them (at the last step), so that they are not computed twice.
    SIGTERM (a Spot VM's or a scheduler's notice) saves the current step and raises `Preempted`.
    """
    with checkpoints.workdir_lock(self.workdir, take_over_other_hosts):
      checkpointer = checkpoints.StateCheckpoints(self.workdir, every_steps=self.config.train.checkpoint_every_steps,
                                                  keep=self.config.train.keep_checkpoints)
      try:
        return self._train(checkpointer)
      finally:
        checkpointer.close()

  def _train(self, checkpointer: checkpoints.StateCheckpoints) -> tuple[Any, dict[str, dict[str, float]]]:
    config = self.config
    self._guard_workdir()
    best = self._best_params()
    batches = pipeline.batch_iterator(self.objective.train_batches(config.seed),
                                      num_workers=config.data.get("num_workers", 0),
                                      prefetch=config.data.get("prefetch", 0))
    latest = checkpointer.latest_step()
    if latest is None:
      state = self.initial_state()
    else:
      state = checkpointer.restore(latest, self.abstract_state(), batches)
    start = int(state.step)
    num_steps = config.train.num_steps
    writer = self._writer()
    if start == 0:
      writer.write_hparams({k: v for k, v in config_schema.flatten(config.to_dict()).items() if isinstance(v, (int, float, str))})
    train_step = None
    periodic = [spec for spec in self.evals if spec.every_steps]
    log = checkpoints.EvaluationLog(self.workdir)
    last_metrics = {}
    owed = [spec for spec in periodic if start > 0 and spec.due(start, num_steps) and not log.done(start, spec.name)]
    if owed:
      logging.info("%s: step %d was saved but not evaluated (%s) before the run stopped; evaluating it now.",
                   config.name, start, ", ".join(spec.name for spec in owed))
      last_metrics = self._evaluate_periodic(start, state, owed, writer, best, log)
    logging.info("%s: training from step %d to %d on mesh %s.", config.name, start, num_steps, dict(self.mesh.shape))
    timer = (time.time(), start)
    console_line = 0.0  # When the console last got a step's line: the first logged step always does.
    with _termination_notice() as terminated:
      for step in range(start + 1, num_steps + 1):
        batch = parallel.global_batch(next(batches), self.mesh, self.objective.shared_batch_keys)
        if train_step is None:
          train_step = self.compile_train_step(state, jax.tree.map(lambda x: x.sharding, batch))
        state, metrics = train_step(state, batch)
        # One process: its own SIGTERM handler; several: JAX's preemption service agrees on a step for all.
        stopping = checkpointer.reached_preemption(step) or bool(terminated)
        saving = checkpointer.should_save(step) or step == num_steps or stopping
        if step % config.train.log_every_steps == 0 or saving:
          metrics = jax.device_get(metrics)
          bad = sorted(k for k, v in metrics.items() if not np.all(np.isfinite(v)))
          bad += [] if metrics["params_finite"] else ["params"]
          if bad:
            raise FloatingPointError(f"{config.name} step {step}: non-finite {', '.join(bad)}; stopped before saving "
                                     "this state (lower optim.learning_rate, or check the data).")
          if step % config.train.log_every_steps == 0 or step == num_steps:
            seconds = time.time() - timer[0]
            metrics["steps_per_sec"] = (step - timer[1]) / max(seconds, 1e-9)
            timer = (time.time(), step)
            writer.write_scalars(step, metrics)
            if step == num_steps or time.time() - console_line >= _CONSOLE_SECONDS:  # TensorBoard gets every one.
              console_line = time.time()
              eta = (num_steps - step) / metrics["steps_per_sec"]
              logging.info("%s step %d/%d: loss %.4f, %.2f steps/s, ETA %s", config.name, step, num_steps,
                           float(metrics["loss"]), metrics["steps_per_sec"], _duration(eta))
        checkpointer.save(step, state, batches, force=step == num_steps or stopping)
        if stopping:
          checkpointer.wait_until_finished()
          batches.close()
          writer.flush()
          raise Preempted(f"{config.name}: stopped by {terminated[0] if terminated else 'a preemption notice'} at "
                          f"step {step} of {num_steps}; its checkpoint is saved in {checkpointer.directory}. Run the "
                          "same command again to resume.")
        due = [spec for spec in periodic if spec.due(step, num_steps)]
        if due:
          checkpointer.wait_until_finished()
          last_metrics = self._evaluate_periodic(step, state, due, writer, best, log)
          timer = (time.time(), step)  # Steps/s and ETA count training only.
    if latest is None and num_steps == 0:
      # Nothing to train: the initial state still serves --mode=evaluate and later stages.
      checkpointer.save(0, state, batches, force=True)
    batches.close()  # Stops its reading thread or worker processes.
    checkpointer.wait_until_finished()
    writer.flush()
    if best is None or best.best_step() is None:
      if best is not None and num_steps > 0:
        raise ValueError(f"config.eval.best_metric {best.metric!r}: no periodic evaluation reported it "
                         f"(evals with every_steps > 0: {[s.name for s in periodic]}).")
      return state.params, last_metrics
    best_step = best.best_step()
    logging.info("%s: best %s at step %d of %d.", config.name, best.metric, best_step, num_steps)
    params = state.params if best_step == num_steps else best.restore(self.abstract_state().params)
    best.close()
    return params, (last_metrics if best_step == num_steps else {})

  def _guard_workdir(self) -> None:
    """Records, or checks against the workdir's records, this run's config and data; records what loading the
    run needs (`docent_jax.load`)."""
    checkpoints.guard_workdir_config(self.workdir, self.config)
    checkpoints.guard_workdir_data(self.workdir, self.objective.data_fingerprint())
    record = self.objective.inference_record()
    path = self.workdir / checkpoints.MODEL_FILE
    if jax.process_index() == 0 and not path.exists():
      outputs.write_atomically(path, json.dumps(record))

  def restore_params(self, force: bool = False) -> tuple[Any, int | None]:
    """The params the run reported: the best checkpoint's where the config selects one, else the last step's.

    A run that never reached `train.num_steps`, or whose best params are missing, is refused unless `force`:
    then the best params where kept, else the latest step's. Returns the params and, when forced, the step
    they are from (None when they are what the run reported).
    """
    self._guard_workdir()
    checkpointer = checkpoints.StateCheckpoints(self.workdir)
    latest = checkpointer.latest_step()
    checkpointer.close()
    if latest is None:
      raise FileNotFoundError(f"No checkpoint in {self.workdir / checkpoints.CHECKPOINTS_DIR} to evaluate.")
    num_steps = self.config.train.num_steps
    best = self._best_params()
    best_step = None if best is None else best.best_step()
    problems = []
    if latest < num_steps:
      problems.append(f"it stopped at step {latest} of {num_steps}")
    if best is not None and best_step is None and num_steps > 0:
      problems.append(f"its best params by {best.metric} are missing from {self.workdir / checkpoints.BEST_DIR}")
    if problems and not force:
      raise IncompleteRunError(f"{self.workdir}: not evaluated, since {' and '.join(problems)}. Finish the run with "
                               "--mode=train, or pass --force to evaluate the params it has (marked as forced).")
    if problems:
      logging.warning("%s: evaluating although %s (--force).", self.workdir, " and ".join(problems))
    if best_step is not None:
      params = best.restore(self.abstract_state().params)
      best.close()
      return params, (best_step if problems else None)
    checkpointer = checkpoints.StateCheckpoints(self.workdir)
    params = checkpointer.restore(latest, self.abstract_state(), None).params
    checkpointer.close()
    return params, (latest if problems else None)

  def report(self, model: protocol.Model, computed: dict[str, dict[str, float]]) -> dict[str, float]:
    """Every evaluator of the config on `model` (reusing `computed` ones): `<report_as>/<split>/<metric>`."""
    metrics = {**computed, **self.evaluate(model, [spec for spec in self.evals if spec.name not in computed])}
    writer = self._writer()
    writer.write_scalars(self.config.train.num_steps,
                         {f"final/{k}": v for m in metrics.values() for k, v in m.items()})
    writer.flush()
    return {f"{spec.report_as}/{key}": value for spec in self.evals for key, value in metrics[spec.name].items()}


# Config blocks that a baseline or a fine-tuning stage gives whole: which evaluations and stages it has.
_REPLACED_KEYS = ("evals", "finetune")


def _with_overrides(config: ml_collections.ConfigDict, overrides: ml_collections.ConfigDict,
                    name: str) -> ml_collections.ConfigDict:
  """`config` with `overrides` applied; an override's `evals` or `finetune` replaces the config's (not merged)."""
  derived = ml_collections.ConfigDict(config.to_dict())
  overrides = overrides.to_dict()
  for key in _REPLACED_KEYS:
    if key in overrides:
      derived[key] = ml_collections.ConfigDict()
  derived.update(overrides)
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
         take_over_other_hosts: bool = False, runs: Sequence[str] = ()) -> dict[str, float]:
  workdir = outputs.as_path(workdir)
  runs = selected_runs(model_configs(config), runs)
  transfer = not train and config.get("model_init") and config.model_init not in {run.name for run in runs}
  if transfer:
    runs = [_transfer_config(config)]
  for run_config in runs:  # Every run's values, before anything is read, built or trained.
    objective_class = objectives.get_objective(run_config.objective)
    try:
      config_schema.check_config(run_config, parallel.create_mesh(run_config.mesh),
                                 objective_class.rows_per_example, objective_class.config_rules())
    except config_schema.ConfigError as error:
      raise config_schema.ConfigError(
          f"{error}" if run_config is runs[0] else f"run {run_config.name}: {error}") from None
  results, reported = {}, {}
  read_results(workdir)  # A damaged results.json stops the run now, not after training.
  for index, run_config in enumerate(runs):
    started = time.time()
    try:
      trainer = Trainer(run_config, workdir / run_config.name)
      parent = (_model_init(run_config.model_init, workdir, reported, trainer.mesh) if run_config.get("model_init")
                else None)
      if parent is not None and not transfer:
        check_same_encoder(parent, run_config)
        trainer.objective.start_from(parent)
    except objectives.base.SkipRun as reason:
      logging.warning("%s: skipped: %s", run_config.name, reason)
      continue
    forced_step = None
    if transfer:  # The trained run's own model, evaluated on this config's data.
      model, computed = parent, {}
    elif train:
      params, computed = trainer.train(take_over_other_hosts)
      model = trainer.objective.model(params)
    else:
      (params, forced_step), computed = trainer.restore_params(force), {}
      model = trainer.objective.model(params)
    reported[run_config.name] = model
    run_results = trainer.report(model, computed)
    if forced_step is not None:
      run_results.update({f"{name}/{FORCED_KEY}": forced_step for name in {k.split("/")[0] for k in run_results}})
    logging.info("%s: done in %s.", run_config.name, _duration(time.time() - started))
    results.update(run_results)
    write_results(workdir, results)
  summary = seeds.summarize(results)
  if summary:
    results.update(summary)
    write_results(workdir, results)
  if jax.process_index() == 0 and results:
    print(results_table(results), flush=True)
  return results


def _transfer_config(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The config of evaluating another run (`model_init`, a run directory) on this config's data: the config's run
  of the same objective (else its main model), without baselines and stages, named after the trained run,
  `<its workdir>.<its model>` (e.g. default.blp_transe). Its evaluators, baseline ones left out, score the loaded
  model."""
  parent_dir = outputs.as_path(config.model_init)
  objective = checkpoints.recorded_config(parent_dir).objective
  runs = model_configs(config)
  same_objective = [run for run in runs if run.objective == objective]
  transfer = ml_collections.ConfigDict((same_objective[0] if same_objective else config).to_dict())
  transfer.name = f"{parent_dir.parent.name}.{parent_dir.name}"
  transfer.model_init = config.model_init
  transfer.baselines, transfer.finetune = {}, {}
  # The model's evaluators, reported under the transfer's name; untrained baselines are the config's own.
  transfer.evals = {name: {key: value for key, value in entry.items() if key != "report_as"}
                    for name, entry in transfer.get("evals", {}).to_dict().items() if not entry.get("baseline")}
  if len(runs) > 1:
    logging.info("Evaluating %s on %s with the evaluators of its %s run; the config's other runs are not "
                 "evaluated.", parent_dir, config.name, transfer.objective)
  return transfer


def _model_init(model_init: str, workdir: epath.Path, reported: dict[str, protocol.Model],
                mesh: Mesh) -> protocol.Model:
  """The model of the run a run starts from: a run of this config, or any run's directory (its reported params;
  those of an unfinished run with a warning), on `mesh`. A directory that loads without its data
  (`docent_jax.load`) is loaded; one trained before runs recorded what loading needs is rebuilt from its config and
  data."""
  if model_init in reported:
    return reported[model_init]
  parent_dir = outputs.as_path(model_init)
  if (parent_dir / checkpoints.MODEL_FILE).exists():
    return inference_model.load(parent_dir, mesh)
  parent = Trainer(checkpoints.recorded_config(parent_dir), parent_dir)
  params, _ = parent.restore_params(force=True)
  return parent.objective.model(params)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | epath.PathLike,
                       take_over_other_hosts: bool = False, runs: Sequence[str] = ()) -> dict[str, float]:
  """Trains (or resumes) every run of the config (or the `runs` named, see `selected_runs`), evaluates each and
  writes results.json.

  `take_over_other_hosts`: the job that held the runs' training locks is gone with its hosts (a preempted
  TPU VM), so their locks are taken over.
  """
  return _run(config, workdir, train=True, take_over_other_hosts=take_over_other_hosts, runs=runs)


def evaluate(config: ml_collections.ConfigDict, workdir: str | epath.PathLike, force: bool = False,
             runs: Sequence[str] = ()) -> dict[str, float]:
  """Recomputes the evaluation of the params each run reported (the best where the config selects them),
  training nothing. A run that never finished, or whose best params are missing, is refused unless `force`;
  forced results carry `<model>/forced/step`."""
  return _run(config, workdir, train=False, force=force, runs=runs)


def read_results(workdir: str | epath.PathLike) -> dict[str, float]:
  """The workdir's results.json ({} if there is none); a damaged one is an error naming it."""
  return outputs.read_results(outputs.as_path(workdir) / RESULTS_FILE)


def write_results(workdir: str | epath.PathLike, results: dict[str, float]) -> None:
  """Writes `results` into the workdir's results.json (whole, then renamed over it), keeping the results other
  configs wrote there."""
  if jax.process_index() != 0:
    return
  path = outputs.as_path(workdir) / RESULTS_FILE
  models = {key.split("/")[0] for key in results}
  # A model evaluated anew drops the mark of an earlier forced evaluation.
  kept = outputs.merge_results(path, results, replaces=lambda key: key.endswith(f"/{FORCED_KEY}")
                               and key.split("/")[0] in models)
  if kept:
    logging.info("%s keeps %d earlier results that this run has not rewritten.", path, len(kept))
  logging.info("Wrote %s (%d results).", path, len(results))
