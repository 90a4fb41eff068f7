"""The training loop of one run: nothing here is specific to a method; `config.objective` supplies the rest.

`Trainer(config, run_dir)` builds the objective's sharded state on the config's mesh, trains it to
`train.num_steps` (resuming from the run's last checkpoint), runs the evaluators of `config.evals` that have
`every_steps` and keeps the best params by `train.best_metric`; at the end every evaluator runs on the reported
params (the best, else the last). Which runs a config has, and results.json, are `experiment`'s.
"""
import collections
import contextlib
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Iterator

from absl import logging
from etils import epath
import flax
from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from docent_jax import checkpoints
from docent_jax import config_schema
from docent_jax import early_stopping
from docent_jax import methods
from docent_jax import optim
from docent_jax import parallel
from docent_jax import profiling
from docent_jax import run_dir as run_dirs
from docent_jax import writers
from docent_jax.data import pipeline
from docent_jax.evaluation import registry as evaluators
from docent_jax.inference import protocol
from docent_jax.objectives import base as objective_base

if TYPE_CHECKING:  # Imported where a writer is made (`writers.create`).
  from clu import metric_writers


EvaluationCallback = Callable[[str, int, dict[str, float]], None]


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
_PROGRESS_SECONDS = 30.0  # Steps/s, ETA and a step's loss reach the log (and steps/s TensorBoard) this often.


def _duration(seconds: float) -> str:
  """'1h13m', '6m', '45s' (rounded down)."""
  if not np.isfinite(seconds):
    return "unknown"
  minutes, hours = int(seconds) // 60, int(seconds) // 3600
  return f"{hours}h{minutes % 60:02d}m" if hours else f"{minutes}m" if minutes else f"{int(seconds)}s"


class _ConsoleProgress:
  """One console line per progress report: the step, its loss, the steps/s since the last report, the ETA at that
  rate, and the share of the time spent evaluating so far."""

  def __init__(self, name: str, start: int, num_steps: int):
    self.name, self.num_steps = name, num_steps
    self.started = self.reported_time = time.monotonic()
    self.reported_step = start
    self.evaluation_seconds = 0.0

  @contextlib.contextmanager
  def evaluating(self) -> Iterator[None]:
    began = time.monotonic()
    try:
      yield
    finally:
      self.evaluation_seconds += time.monotonic() - began

  def line(self, step: int, loss: float) -> str:
    now = time.monotonic()
    rate = (step - self.reported_step) / max(now - self.reported_time, 1e-9)
    self.reported_step, self.reported_time = step, now
    eta = (self.num_steps - step) / rate if rate > 0 else float("inf")
    evaluation = (f", {100 * self.evaluation_seconds / (now - self.started):.0f}% of the time evaluating"
                  if self.evaluation_seconds else "")
    return (f"{self.name} step {step}/{self.num_steps}: loss {loss:.4f}, {rate:.2f} steps/s, "
            f"ETA {_duration(eta)}{evaluation}")


def _flat(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
  """Evaluator name -> its `<split>/<metric>` numbers, as one dict of `<split>/<metric>` numbers."""
  return {key: value for evaluated in metrics.values() for key, value in evaluated.items()}


def is_headline(key: str) -> bool:
  """Whether `[<model>/]<split>/<metric>` is a metric the console shows."""
  return key.rsplit("/", 1)[-1] in HEADLINE_METRICS


def format_duration(seconds: float) -> str:
  seconds = int(round(seconds))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Trainer:
  """Builds the sharded state of one run's objective, trains it, evaluates it."""

  def __init__(self, config: ml_collections.ConfigDict, run_dir: run_dirs.RunDir | str | epath.PathLike, *,
               objective: objective_base.Objective | None = None, on_evaluation: EvaluationCallback | None = None):
    """`run_dir`: the run's directory (`WORKDIR/<model>`). `objective`: one already built on its mesh (e.g. from
    shapes, to compile for devices elsewhere); by default the config's, with its data, on every device of this
    machine. `on_evaluation(run name, step, metrics)` is called after each periodic evaluation (a sweep's
    pruner); what it raises ends the run there, its state saved."""
    self.config = config
    self.on_evaluation = on_evaluation
    self.run_dir = run_dirs.RunDir(run_dir)
    self.mesh = parallel.create_mesh(config.mesh) if objective is None else objective.mesh
    objective_class = methods.objective_class(config.objective)
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

  def _writer(self) -> "metric_writers.MetricWriter":
    # CLU's writers import TensorFlow (seconds): only a run that gets this far pays for it, so a refused config,
    # data or workdir is reported at once.
    return writers.create(self.config.get("writers", writers.DEFAULT), self.run_dir.path,
                          workdir=self.run_dir.workdir.path, run_name=self.config.name)

  def _best_params(self) -> checkpoints.BestParams | None:
    train = self.config.train
    return self.run_dir.best_params(train.best_metric, train.best_mode) if train.best_metric else None

  def evaluate(self, model: protocol.Model, specs: list[evaluators.EvalSpec]) -> dict[str, dict[str, float]]:
    """Per evaluator name, its `<split>/<metric>` numbers for `model` on this run's data."""
    data = self.objective.evaluation_data()
    return {spec.name: spec.run(model, data) for spec in specs}

  def _evaluate_periodic(self, step: int, state: TrainState, specs: list[evaluators.EvalSpec],
                         writer: "metric_writers.MetricWriter", best: checkpoints.BestParams | None,
                         log: run_dirs.EvaluationLog) -> dict:
    metrics = self.evaluate(self.objective.model(state.params), specs)
    flat = _flat(metrics)
    writer.write_scalars(step, flat)
    # The console gets the headline numbers; TensorBoard gets all.
    headline = {k: v for k, v in flat.items() if k.count("/") == 1 and is_headline(k)}
    logging.info("%s step %d: %s", self.config.name, step, ", ".join(f"{k}={v:.4g}" for k, v in sorted(headline.items())))
    if best is not None and best.metric in flat:
      best.offer(step, state.params, flat)
    log.add(step, metrics)
    if self.on_evaluation is not None:
      self.on_evaluation(self.config.name, step, flat)
    return metrics

  def train(self, take_over_other_hosts: bool = False) -> tuple[Any, dict[str, dict[str, float]]]:
    """Trains (or resumes) to `train.num_steps`, holding the run's training lock.

    Returns the params to report (the best by `train.best_metric` when set, else the last) and the
    evaluations already computed on them (at the last step), so that they are not computed twice.
    SIGTERM (a Spot VM's or a scheduler's notice) saves the current step and raises `Preempted`.
    """
    with self.run_dir.training_lock(take_over_other_hosts):
      checkpointer = self.run_dir.state_checkpoints(every_steps=self.config.train.checkpoint_every_steps,
                                                    keep=self.config.train.keep_checkpoints)
      try:
        return self._train(checkpointer)
      finally:
        checkpointer.close()

  def _train(self, checkpointer: checkpoints.StateCheckpoints) -> tuple[Any, dict[str, dict[str, float]]]:
    config = self.config
    self._record()
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
    log = self.run_dir.evaluation_log()
    last_metrics = {}
    owed = [spec for spec in periodic if start > 0 and spec.due(start, num_steps) and not log.done(start, spec.name)]
    if owed:
      logging.info("%s: step %d was saved but not evaluated (%s) before the run stopped; evaluating it now.",
                   config.name, start, ", ".join(spec.name for spec in owed))
      last_metrics = self._evaluate_periodic(start, state, owed, writer, best, log)
    stopper = early_stopping.from_config(config.train)
    end = self._end_step(start, stopper, log)
    logging.info("%s: training from step %d to %d on mesh %s.", config.name, start, num_steps, dict(self.mesh.shape))
    # CLU: when to report, and steps/s to TensorBoard; the console gets one line per report (`_ConsoleProgress`).
    from clu import periodic_actions  # pylint: disable=g-import-not-at-top  # TensorFlow too: see `_writer`.
    progress = periodic_actions.ReportProgress(num_train_steps=num_steps, writer=writer, every_secs=_PROGRESS_SECONDS)
    progress(start)  # Measures from here.
    console = _ConsoleProgress(config.name, start, num_steps)
    previous_metrics = None
    profile = profiling.StepProfile(config.train.get("profile"), self.run_dir.profile_dir(), start)
    with _termination_notice() as terminated, contextlib.closing(profile):
      for step in range(start + 1, end + 1):
        batch = parallel.global_batch(next(batches), self.mesh, self.objective.shared_batch_keys)
        if train_step is None:
          train_step = self.compile_train_step(state, jax.tree.map(lambda x: x.sharding, batch))
        with profile.step(step):
          state, metrics = train_step(state, batch)
        profile.step_done(step, metrics)
        if step == start + 1:  # What compiling costs a run (nothing much where the compilation cache holds it).
          jax.block_until_ready(metrics)
          logging.info("%s: step %d done %.1f s after training started, compiling it included.", config.name, step,
                       time.monotonic() - console.started)
        # JAX dispatches steps ahead of the devices; one step in flight keeps the devices busy, while more would
        # let `progress` count dispatched steps as done (its steps/s and ETA) and queue batches without bound.
        jax.block_until_ready(previous_metrics)
        previous_metrics = metrics
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
            writer.write_scalars(step, metrics)
        if progress(step):
          logging.info("%s", console.line(step, float(jax.device_get(metrics["loss"]))))
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
          with progress.timed("evaluation", wait_jax_async_dispatch=False), console.evaluating():
            last_metrics = self._evaluate_periodic(step, state, due, writer, best, log)
          reason = stopper.update(step, _flat(last_metrics)) if stopper is not None else None
          if reason and step < num_steps:
            if not saving:
              checkpointer.save(step, state, batches, force=True)
            checkpointer.wait_until_finished()
            self.run_dir.record_early_stop(step, reason)
            logging.info("%s: stopped early at step %d of %d: %s.", config.name, step, num_steps, reason)
            end = step
            break
    if latest is None and num_steps == 0:
      # Nothing to train: the initial state still serves --mode=evaluate and later stages.
      checkpointer.save(0, state, batches, force=True)
    batches.close()  # Stops its reading thread or worker processes.
    checkpointer.wait_until_finished()
    writer.close()  # Finishes a tracker's run (the report's writer joins it again).
    step, is_best = self.run_dir.reported_step()
    if best is not None and not is_best and num_steps > 0:
      raise ValueError(f"config.train.best_metric {best.metric!r}: no periodic evaluation reported it "
                       f"(evals with every_steps > 0: {[s.name for s in periodic]}).")
    is_best = is_best and best is not None
    if is_best:
      logging.info("%s: best %s at step %d of %d.", config.name, best.metric, step, num_steps)
    params = state.params
    if is_best and step != end:
      params, last_metrics = best.restore(self.abstract_state().params), {}
    if best is not None:
      best.close()
    return params, last_metrics

  def _end_step(self, start: int, stopper: early_stopping.EarlyStopping | None, log: run_dirs.EvaluationLog) -> int:
    """The last step to train to: `train.num_steps`, or `start` where early stopping ended the run there (also
    where its last evaluations, replayed into `stopper`'s count, end it but the run stopped before recording so)."""
    stopped = self.run_dir.early_stop()
    if stopped is None and stopper is not None:
      reason = stopper.replay(log.by_step(start))
      if reason and start < self.config.train.num_steps:
        self.run_dir.record_early_stop(start, reason)
        stopped = self.run_dir.early_stop()
    if stopped is None:
      if stopper is not None and stopper.best is not None:
        logging.info("%s: early stopping resumes with %d of %d evaluations without improving %s.", self.config.name,
                     stopper.evaluations_without_improvement, stopper.patience, stopper.metric)
      return self.config.train.num_steps
    logging.info("%s: stopped early at step %d: %s.", self.config.name, stopped["step"], stopped["reason"])
    return int(stopped["step"])

  def _record(self) -> None:
    """Records in the run directory, or checks against its records, this run's config and data, and what loading
    the run needs (`docent_jax.load`)."""
    self.run_dir.record_config(self.config)
    self.run_dir.record_data(self.objective.data_fingerprint())
    self.run_dir.record_model(self.objective.inference_record())

  def restore_params(self, force: bool = False) -> tuple[Any, int | None]:
    """The params the run reported: the best checkpoint's where the config selects one, else the last step's.

    A run that never reached `train.num_steps`, or whose best params are missing, is refused unless `force`:
    then the best params where kept, else the latest step's. Returns the params and, when forced, the step
    they are from (None when they are what the run reported).
    """
    self._record()
    reported = self.run_dir.reported_step()
    if reported is None:
      raise FileNotFoundError(f"No checkpoint in {self.run_dir} to evaluate.")
    step, is_best = reported
    latest, num_steps, best = self.run_dir.latest_step(), self.config.train.num_steps, self._best_params()
    problems = []
    if latest < self.run_dir.final_step(num_steps):
      problems.append(f"it stopped at step {latest} of {num_steps}")
    if best is not None and not is_best and num_steps > 0:
      problems.append(f"its best params by {best.metric} are missing from {self.run_dir.best_dir()}")
    if problems and not force:
      raise IncompleteRunError(f"{self.run_dir}: not evaluated, since {' and '.join(problems)}. Finish the run with "
                               "--mode=train, or pass --force to evaluate the params it has (marked as forced).")
    if problems:
      logging.warning("%s: evaluating although %s (--force).", self.run_dir, " and ".join(problems))
    if is_best and best is not None:
      params = best.restore(self.abstract_state().params)
    else:
      checkpointer = self.run_dir.state_checkpoints()
      params = checkpointer.restore(step, self.abstract_state(), None).params
      checkpointer.close()
    if best is not None:
      best.close()
    return params, (step if problems else None)

  def report(self, model: protocol.Model, computed: dict[str, dict[str, float]]) -> dict[str, float]:
    """Every evaluator of the config on `model` (reusing `computed` ones): `<report_as>/<split>/<metric>`."""
    metrics = {**computed, **self.evaluate(model, [spec for spec in self.evals if spec.name not in computed])}
    writer = self._writer()
    writer.write_scalars(self.config.train.num_steps,
                         {f"final/{k}": v for m in metrics.values() for k, v in m.items()})
    writer.close()
    return {f"{spec.report_as}/{key}": value for spec in self.evals for key, value in metrics[spec.name].items()}


