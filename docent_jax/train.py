"""The training loop: nothing here is specific to a method; `config.objective` supplies the rest.

`train_and_evaluate(config, workdir)` trains the configured model and each of `config.baselines`
(the same config with a few values changed) in its own sub-directory, evaluates them and writes
`WORKDIR/results.json`: flat `<model>/<split>/<metric>` -> number.
"""
import json
import pathlib
import re
import time
from typing import Any

from absl import logging
from clu import metric_writers
from clu import periodic_actions
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from docent_jax import checkpoints
from docent_jax import objectives
from docent_jax import parallel

RESULTS_FILE = "results.json"


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def create_optimizer(config: ml_collections.ConfigDict, num_steps: int) -> optax.GradientTransformation:
  """AdamW with linear warm-up then linear decay to zero, after global-norm gradient clipping.

  Biases and LayerNorm parameters (all 1-D) are not decayed.
  """
  warmup = min(config.warmup_steps, num_steps)
  schedule = optax.join_schedules(
      [optax.linear_schedule(0.0, config.learning_rate, max(warmup, 1)),
       optax.linear_schedule(config.learning_rate, 0.0, max(num_steps - warmup, 1))], [warmup])
  decay_mask = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)
  return optax.chain(
      optax.clip_by_global_norm(config.grad_clip_norm),
      optax.adamw(schedule, b1=config.b1, b2=config.b2, eps=config.eps, weight_decay=config.weight_decay,
                   mask=decay_mask),
      scale_by_path(config.lr_multipliers))


def param_path(path: tuple[Any, ...]) -> str:
  """'entities/embedding' for the tree path of params['entities']['embedding']."""
  return "/".join(str(getattr(key, "key", getattr(key, "name", key))) for key in path)


def scale_by_path(multipliers: Any) -> optax.GradientTransformation:
  """Multiplies the updates of params whose path matches a regex: ((regex, multiplier), ...).

  The first matching regex wins. A table whose rows are updated only when their entity is in the
  batch (e.g. an entity table) typically needs a larger learning rate than the encoder.
  """
  patterns = [(re.compile(pattern), float(multiplier)) for pattern, multiplier in multipliers]

  def factor(path: tuple[Any, ...]) -> float:
    name = param_path(path)
    return next((multiplier for pattern, multiplier in patterns if pattern.search(name)), 1.0)

  def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
    del params
    return jax.tree_util.tree_map_with_path(lambda path, u: u * factor(path), updates), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


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


class Trainer:
  """Builds the sharded state of one objective and runs its training steps."""

  def __init__(self, config: ml_collections.ConfigDict, workdir: str | pathlib.Path):
    self.config = config
    self.workdir = pathlib.Path(workdir)
    self.mesh = parallel.create_mesh(config.mesh)
    self.objective = objectives.get_objective(config.objective)(config, self.mesh)
    self.optimizer = create_optimizer(config.optim, config.train.num_steps)
    self.rng = jax.random.key(config.seed)
    self.abstract_params = jax.eval_shape(self.objective.init_variables, self.rng)
    self.param_shardings = parallel.param_shardings(self.abstract_params, self.mesh,
                                                    parallel.rules_from_config(config.mesh))

  def abstract_state(self) -> TrainState:
    """Shapes and target shardings of the state on this run's mesh; restoring needs no real init."""
    params = jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                          nn.unbox(self.abstract_params), self.param_shardings)
    # The optimizer state follows the params' shardings through XLA's propagation; leaves that
    # depend on no param (step counts) are replicated.
    replicated = parallel.replicated(self.mesh)
    opt_shardings = jax.tree.map(
        lambda sharding: sharding if sharding.device_set == replicated.device_set else replicated,
        jax.jit(self.optimizer.init).lower(params).compile().output_shardings)
    opt_state = jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                             jax.eval_shape(self.optimizer.init, params), opt_shardings)
    step = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated)
    return TrainState(step=step, params=params, opt_state=opt_state)

  def initial_state(self) -> TrainState:
    """Fresh params (then the pretrained ones) and optimizer state, created directly on their shards."""
    abstract = self.abstract_state()
    shardings = jax.tree.map(lambda x: x.sharding, abstract)
    init = jax.jit(lambda rng: nn.unbox(self.objective.init_variables(rng)), out_shardings=shardings.params)
    params = overwrite_params(init(jax.random.fold_in(self.rng, 0)), self.objective.pretrained_params())
    opt_state = jax.jit(self.optimizer.init, out_shardings=shardings.opt_state)(params)
    return TrainState(step=jax.device_put(jnp.zeros((), jnp.int32), shardings.step), params=params,
                      opt_state=opt_state)

  def compile_train_step(self, state: TrainState):
    state_shardings = jax.tree.map(lambda x: x.sharding, state)
    batch_sharding = parallel.batch_sharding(self.mesh)
    step_rng = jax.random.fold_in(self.rng, 1)

    def train_step(state: TrainState, batch: dict[str, jax.Array]) -> tuple[TrainState, dict[str, jax.Array]]:
      rng = jax.random.fold_in(step_rng, state.step)
      grads, metrics = jax.grad(self.objective.loss, has_aux=True)(state.params, batch, rng)
      updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
      params = optax.apply_updates(state.params, updates)
      metrics["grad_norm"] = optax.global_norm(grads)
      return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

    return jax.jit(train_step, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, parallel.replicated(self.mesh)), donate_argnums=(0,))

  def train(self) -> TrainState:
    config = self.config
    checkpoints.guard_workdir_config(self.workdir, config)
    manager = checkpoints.create_manager(self.workdir / "checkpoints", every_steps=config.train.checkpoint_every_steps,
                                         keep=config.train.keep_checkpoints)
    loader = self.objective.train_batches(config.seed)
    batches = iter(loader)
    latest = manager.latest_step()
    if latest is None:
      state = self.initial_state()
    else:
      state = checkpoints.restore(manager, latest, self.abstract_state(), batches)
    start = int(state.step)
    num_steps = config.train.num_steps
    writer = metric_writers.create_default_writer(self.workdir, just_logging=jax.process_index() > 0)
    if start == 0:
      writer.write_hparams({k: v for k, v in _flatten(config.to_dict()).items() if isinstance(v, (int, float, str))})
    train_step = self.compile_train_step(state)
    progress = periodic_actions.ReportProgress(num_train_steps=num_steps, writer=writer,
                                               every_steps=config.train.log_every_steps, every_secs=None)
    logging.info("Training %s from step %d to %d on mesh %s.", config.name, start, num_steps, dict(self.mesh.shape))
    step = start
    for step in range(start + 1, num_steps + 1):
      batch = parallel.global_batch(next(batches), self.mesh)
      state, metrics = train_step(state, batch)
      progress(step)
      if step % config.train.log_every_steps == 0 or step == num_steps:
        writer.write_scalars(step, jax.device_get(metrics))
      checkpoints.save(manager, step, state, batches, force=step == num_steps)
    if start == num_steps == 0 and latest is None:
      # Nothing to train (a baseline without pre-training): the initial state still serves --mode=evaluate.
      checkpoints.save(manager, 0, state, batches, force=True)
    manager.wait_until_finished()
    manager.close()
    writer.flush()
    return state

  def restore_params(self) -> Any:
    """The params of the workdir's latest checkpoint, on this run's mesh."""
    checkpoints.guard_workdir_config(self.workdir, self.config)
    manager = checkpoints.create_manager(self.workdir / "checkpoints", every_steps=1, keep=None)
    latest = manager.latest_step()
    if latest is None:
      raise FileNotFoundError(f"No checkpoint in {self.workdir / 'checkpoints'} to evaluate.")
    return checkpoints.restore(manager, latest, self.abstract_state(), None).params


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def model_configs(config: ml_collections.ConfigDict) -> list[ml_collections.ConfigDict]:
  """The main model's config, then one per baseline (the main config with the baseline's overrides)."""
  configs = [config]
  for name, overrides in config.get("baselines", {}).items():
    baseline = ml_collections.ConfigDict(config.to_dict())
    baseline.update(overrides.to_dict())
    baseline.name = name
    baseline.baselines = {}
    configs.append(baseline)
  return configs


def model_results(name: str, metrics: dict[str, Any]) -> dict[str, float]:
  """`<name>/<split>/<metric>` -> number. A nested dict `{suffix: metrics}` holds the metrics of model
  `<name>_<suffix>`: several models evaluated from one training (SupCon's frozen- and trained-encoder
  classifiers over one pre-trained encoder)."""
  results = {}
  for key, value in metrics.items():
    if isinstance(value, dict):
      results.update(model_results(f"{name}_{key}", value))
    else:
      results[f"{name}/{key}"] = float(value)
  return results


def _run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path, train: bool) -> dict[str, float]:
  results = {}
  for index, model_config in enumerate(model_configs(config)):
    started = time.time()
    trainer = Trainer(model_config, pathlib.Path(workdir) / model_config.name)
    if index == 0:
      results.update(trainer.objective.baselines())
    params = trainer.train().params if train else trainer.restore_params()
    metrics = trainer.objective.evaluate(params)
    logging.info("%s: evaluated in %.0f s (with training if any): %s", model_config.name, time.time() - started,
                 metrics)
    results.update(model_results(model_config.name, metrics))
  write_results(workdir, results)
  return results


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path) -> dict[str, float]:
  """Trains (or resumes) every model of the config, evaluates each and writes results.json."""
  return _run(config, workdir, train=True)


def evaluate(config: ml_collections.ConfigDict, workdir: str | pathlib.Path) -> dict[str, float]:
  """Recomputes the evaluation from the workdir's latest checkpoints, without training."""
  return _run(config, workdir, train=False)


def write_results(workdir: str | pathlib.Path, results: dict[str, float]) -> None:
  if jax.process_index() != 0:
    return
  path = pathlib.Path(workdir) / RESULTS_FILE
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
  logging.info("Wrote %s:\n%s", path, json.dumps(results, indent=2, sort_keys=True))
