"""Evaluators registered by name; a config lists the ones a run reports in `config.evals`.

An evaluator is a function `(model, data, **options) -> {'<split>/<metric>': number}`: `model` is the model
protocol (`inference.protocol.Model`: encode texts, entities, task heads) over the params being evaluated, and
`data` the run's evaluation data (its objective's `evaluation_data()`: a knowledge graph, a review corpus, ...).
Each module of `evaluation/` registers its evaluators with `@register`; none knows objectives or trainers. The
trainer runs the ones a config lists, every `every_steps` steps (TensorBoard, best checkpoint) and at the end
on the reported params (results.json):

  config.evals = {
      "validation": dict(type="link_prediction", split="validation", every_steps=100),
      "test": dict(type="link_prediction", split="test", every_steps=0),   # 0: at the end only
  }

(`configs/common.evaluator` builds such entries.)

`report_as` names the model a metric is reported under in results.json (default: the run's name); `baseline`
marks an evaluator of an untrained baseline (`configs/common.baseline`), left out when another run is evaluated
on the config's data.
"""
from collections.abc import Callable
import dataclasses
import importlib
import pkgutil
import time
from typing import Any

from absl import logging
import ml_collections

Evaluator = Callable[..., dict[str, float]]
_REGISTRY: dict[str, Evaluator] = {}
# (model, shapes, mesh, vector_width, entries) -> {program name: (lowered program, what it is lowered for)}.
LoweredPrograms = Callable[..., dict[str, tuple[Any, dict[str, Any]]]]
_LOWERED: dict[str, LoweredPrograms] = {}
# Keys of an entry of `config.evals` that are not options of its evaluator.
ENTRY_KEYS = ("type", "every_steps", "report_as", "baseline")


def register(name: str) -> Callable[[Evaluator], Evaluator]:
  """Decorator: registers an evaluator under `name` (unique)."""

  def decorator(fn: Evaluator) -> Evaluator:
    if name in _REGISTRY and _REGISTRY[name] is not fn:
      raise ValueError(f"Evaluator {name!r} is registered twice.")
    _REGISTRY[name] = fn
    return fn

  return decorator


def register_lowered(name: str) -> Callable[[LoweredPrograms], LoweredPrograms]:
  """Decorator: registers what evaluator `name` runs on the devices beyond encoding texts, lowered from shapes alone
  for ahead-of-time compiles (`docent_jax.compile_for_tpu`): fn(model, shapes, mesh, vector_width, entries), where
  `entries` are the options of every entry of `config.evals` of that type."""

  def decorator(fn: LoweredPrograms) -> LoweredPrograms:
    _LOWERED[name] = fn
    return fn

  return decorator


def lowered_programs(kind: str) -> LoweredPrograms | None:
  """The lowered programs of evaluator `kind` (`register_lowered`), or None where it runs only the model's encoder."""
  lookup(kind)
  return _LOWERED.get(kind)


def registered() -> list[str]:
  """The names of every evaluator of `evaluation/` (its modules are imported on first use)."""
  package = importlib.import_module(__package__)
  for module in pkgutil.iter_modules(package.__path__):
    importlib.import_module(f"{__package__}.{module.name}")  # Cached after the first time.
  return sorted(_REGISTRY)


def lookup(kind: str) -> Evaluator | None:
  """The evaluator registered as `kind`, or None. The module of `kind`'s name is imported first, and every module
  only when that one does not register it: a run imports what it evaluates with (all of them take 1.5 s)."""
  if kind not in _REGISTRY and kind.isidentifier():
    try:
      importlib.import_module(f"{__package__}.{kind}")
    except ModuleNotFoundError as e:
      if e.name != f"{__package__}.{kind}":
        raise
  if kind not in _REGISTRY:
    registered()
  return _REGISTRY.get(kind)


@dataclasses.dataclass(frozen=True)
class EvalSpec:
  """One entry of `config.evals`."""
  name: str
  type: str
  every_steps: int
  report_as: str
  options: dict[str, Any]

  def due(self, step: int, last_step: int) -> bool:
    """Periodic evaluators run every `every_steps` steps and at the last step."""
    return self.every_steps > 0 and (step % self.every_steps == 0 or step == last_step)

  def run(self, model: Any, data: Any) -> dict[str, float]:
    # Which evaluator ran and for how long; a long one logs its own progress (`parallel.Progress`) meanwhile.
    logging.vlog(1, "Evaluator %s (%s) of %s...", self.name, self.type, model.name)
    started = time.time()
    metrics = _REGISTRY[self.type](model, data, **self.options)
    logging.info("Evaluator %s (%s) of %s: %.1f s.", self.name, self.type, model.name, time.time() - started)
    return {key: float(value) for key, value in metrics.items()}


def specs(config: ml_collections.ConfigDict) -> list[EvalSpec]:
  """The evaluators a run's config lists, validated (unknown types and bad steps name the config key)."""
  result = []
  for name, entry in config.get("evals", {}).items():
    entry = entry.to_dict() if isinstance(entry, ml_collections.ConfigDict) else dict(entry)
    kind = entry.get("type", name)
    if lookup(kind) is None:
      raise ValueError(f"config.evals.{name}.type: unknown evaluator {kind!r}; registered: {registered()}.")
    every_steps = int(entry.get("every_steps", 0))
    if every_steps < 0:
      raise ValueError(f"config.evals.{name}.every_steps must be >= 0 (0: at the end only); got {every_steps}.")
    options = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
    result.append(EvalSpec(name, kind, every_steps, entry.get("report_as") or config.name, options))
  return result
