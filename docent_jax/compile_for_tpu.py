"""Compiles a config's training step and search for a Cloud TPU topology ahead of time, on any machine, and says
whether they fit in the chips' memory, how fast they could run at best, and which collectives they hold.

  python -m docent_jax.compile_for_tpu --config=configs/default.py --topology=v4:2x2x1 --output=r.json

libtpu (`pip install -e '.[tpu]'`) describes the topology's chips (`jax.experimental.topologies`); XLA compiles the
real step for them on this CPU, as the TPU VM would, and the compiled program reports its memory per chip, its
FLOPs and bytes, and its HLO (all-gathers, all-reduces, ...). No dataset is read and no TPU is needed: the counts
the data would give (entities, relations) come from the benchmark (the objective's `dataset_shapes`), the config's
own `shapes` block, or --num_entities / --num_relations, each over the one before. Every method builds its objective
from those shapes (`objectives.base.Shapes`); --run picks one run of a config (a baseline, a fine-tuning stage).

Compiled: the training step (`train_step`); where the model has a vector of one text (`vector_width`), one evaluation
batch of texts encoded (`encode`, at `model.inference_batch_size`) and, where it has an entity set, the exact top-k
search over it (`search_top_k`); and what the config's evaluators run on the devices besides
(`evaluation.registry.register_lowered`: the link-prediction evaluator's filtered ranking of one batch of queries
against every entity, `block_ranking`, at its entries' largest `query_batch_size`). The entity softmax is part of
the step (DOCENT's full softmax).
The report (JSON) holds per compiled function: `hbm_bytes_per_device` (arguments + outputs + temporaries -
aliased), `hbm_capacity_bytes`, `fits`, `flops` and `bytes_accessed` per device and step,
`step_seconds_lower_bound` (a compile-time estimate from XLA's cost model: the larger of its FLOPs at the chip's
peak bf16 rate and its bytes at the HBM bandwidth), and its collectives; for the training step also
`projected_seconds` (the config's `train.num_steps` times that estimate) and, when it does not fit (or with
--search_batch), the largest global batch that a compile verified to fit, in 3 compiles (`largest_fitting_batch`);
a step that does not fit is answered by that search alone. Exit 0 when everything fits; 1 with one line per misfit.
"""
from collections.abc import Callable, Iterator
import collections
import contextlib
import dataclasses
import json
import math
import os
import re
import sys
import time
from typing import Any

from absl import app
from absl import flags
from absl import logging
import jax
from jax.experimental import topologies
from jax.experimental.compilation_cache import compilation_cache
import jax.numpy as jnp
from ml_collections import config_flags
import ml_collections

from docent_jax import cli
from docent_jax import cpu_flags
from docent_jax import experiment
from docent_jax import methods
from docent_jax import outputs
from docent_jax import parallel
from docent_jax import trainer as trainers
from docent_jax.evaluation import registry as evaluator_registry
from docent_jax.inference import search
from docent_jax.modules import bert
from docent_jax.modules import entity_table
from docent_jax.modules import pretrained
from docent_jax.objectives import base as objective_base


@dataclasses.dataclass(frozen=True)
class Chip:
  """A TPU generation's public figures, and how libtpu names it."""
  libtpu_name: str
  chip_config: str  # 'megacore': one device per chip of two TensorCores (v4, v5p).
  hbm_bytes: int
  bf16_flops_per_second: float
  hbm_bytes_per_second: float


GIB = 1 << 30
CHIPS = {
    "v4": Chip("v4", "megacore", 32 * GIB, 275e12, 1.2e12),
    "v5e": Chip("v5e", "default", 16 * GIB, 197e12, 0.82e12),
    "v5p": Chip("v5", "megacore", 95 * GIB, 459e12, 2.77e12),
    "v6e": Chip("v6e", "default", 32 * GIB, 918e12, 1.64e12),
}
_CHIPS_PER_HOST = (2, 2, 1)  # Every TPU VM host of these generations holds 4 chips (MaxText's table too).

DEFAULT_TOKENIZER = "minilm-l6"  # A tokenizer shipped as a package: its vocabulary sizes a fresh encoder.
_COLLECTIVE = re.compile(r"=\s*(.+?)\s+(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)"
                         r"(?:-start)?\(")
_LAYOUT = re.compile(r"\{[^}]*\}")
_ARRAY = re.compile(r"(pred|[a-z]+\d+)\[([\d,]*)\]")
_SEARCH_QUERIES = 256  # Queries per compiled search call (`ExactSearch`'s default batch).
# The share of a chip's memory the batch search aims at: near the limit, memory grows faster than the line through
# two smaller batches says, so a batch aimed at the whole of it often fails the check.
_TARGET_SHARE = 0.95


def topology_devices(topology: str, num_slices: int = 1) -> tuple[Chip, list[Any]]:
  """The chip and compile-only devices of a topology `<generation>:<shape>` (v4:2x2x1, v5e:2x4, v5p:2x2x1,
  v6e:2x4), over `num_slices` slices."""
  generation, _, shape = topology.partition(":")
  if generation not in CHIPS or not re.fullmatch(r"\d+(x\d+){1,2}", shape):
    raise app.UsageError(f"--topology={topology}: expected <generation>:<shape> with a generation of "
                         f"{sorted(CHIPS)}, e.g. v5e:2x4 or v4:2x2x1.")
  chip = CHIPS[generation]
  chips = math.prod(int(d) for d in shape.split("x")) * num_slices
  # libtpu looks for the TPU VM it runs on when it starts, and warns when it finds none: it is told, for this
  # call only (processes started later must not inherit another topology's type). Its lock file keeps a second
  # process from a TPU's chips; compiling uses none, so processes that compile do not wait for each other.
  hints = {"TPU_ACCELERATOR_TYPE": accelerator_type(generation, chips), "TPU_WORKER_HOSTNAMES": "localhost",
           "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
  saved = {key: os.environ.get(key) for key in hints}
  os.environ.update({key: value for key, value in hints.items() if saved[key] is None})
  try:
    description = topologies.get_topology_desc(
        topology_name=f"{chip.libtpu_name}:{shape}", platform="tpu", chip_config_name=chip.chip_config,
        chips_per_host_bounds=_CHIPS_PER_HOST, num_slices=num_slices)
  finally:
    for key, value in saved.items():
      if value is None:
        os.environ.pop(key, None)
  return chip, list(description.devices)


def accelerator_type(generation: str, chips: int) -> str:
  """Cloud TPU's name of `chips` chips of a generation (v4 and v5p count TensorCores: two per chip)."""
  return {"v4": f"v4-{2 * chips}", "v5p": f"v5p-{2 * chips}", "v5e": f"v5litepod-{chips}",
          "v6e": f"v6e-{chips}"}[generation]


def collectives(hlo: str) -> list[dict[str, Any]]:
  """The collectives of an HLO module's text, one entry per kind and result shape: {op, shape, bytes, count}."""
  counts = collections.Counter((_LAYOUT.sub("", shape), op) for shape, op in _COLLECTIVE.findall(hlo))
  return [{"op": op, "shape": shape, "bytes": _shape_bytes(shape), "count": count}
          for (shape, op), count in sorted(counts.items(), key=lambda item: (item[0][1], item[0][0]))]


def _shape_bytes(shape: str) -> int:
  sizes = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
           "f64": 8, "s64": 8, "u64": 8}
  return sum(sizes.get(dtype, 4) * math.prod(int(d) for d in dims.split(",") if d)
             for dtype, dims in _ARRAY.findall(shape))


def analyse(compiled: Any, chip: Chip) -> dict[str, Any]:
  """Memory per device, FLOPs and bytes per step, the step-time bound and the collectives of one compiled
  function."""
  memory = compiled.memory_analysis()
  hbm = (memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes
         - memory.alias_size_in_bytes + memory.generated_code_size_in_bytes)
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  flops, accessed = float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))
  return {"hbm_bytes_per_device": int(hbm), "hbm_capacity_bytes": chip.hbm_bytes, "fits": hbm <= chip.hbm_bytes,
          "argument_bytes": int(memory.argument_size_in_bytes), "output_bytes": int(memory.output_size_in_bytes),
          "temp_bytes": int(memory.temp_size_in_bytes), "alias_bytes": int(memory.alias_size_in_bytes),
          "flops": flops, "bytes_accessed": accessed,
          "step_seconds_lower_bound": max(flops / chip.bf16_flops_per_second, accessed / chip.hbm_bytes_per_second),
          "collectives": collectives(compiled.as_text())}


_OUT_OF_MEMORY = re.compile(r"RESOURCE_EXHAUSTED: Ran out of memory.*?\(([\d.]+)([KMGT])\) exceeds available")


@contextlib.contextmanager
def _without_compilation_cache() -> Iterator[None]:
  """JAX's persistent cache off for what compiles inside: an executable compiled for compile-only TPU devices
  cannot be read back from it ('PjRtCompiler must be constructed with a Client'), so writing it would only fill
  the cache. JAX decides once per process whether the cache is used; resetting it makes it decide again."""
  enabled = jax.config.jax_enable_compilation_cache
  compilation_cache.reset_cache()
  jax.config.update("jax_enable_compilation_cache", False)
  try:
    yield
  finally:
    jax.config.update("jax_enable_compilation_cache", enabled)
    compilation_cache.reset_cache()


def compiled_report(compile_fn: Callable[[], Any], chip: Chip) -> dict[str, Any]:
  """`analyse` of `compile_fn()`, compiled afresh; a program that the TPU compiler refuses for memory does not fit,
  and needs at least the temporaries it names."""
  try:
    with _without_compilation_cache():
      compiled = compile_fn()
    return analyse(compiled, chip)
  except jax.errors.JaxRuntimeError as error:
    found = _OUT_OF_MEMORY.search(str(error))
    if not found:
      raise
    needed = float(found.group(1)) * 1024 ** "KMGT".index(found.group(2)) * 1024
    return {"hbm_bytes_per_device": int(needed), "hbm_capacity_bytes": chip.hbm_bytes, "fits": False,
            "flops": None, "bytes_accessed": None, "step_seconds_lower_bound": None, "collectives": [],
            "compiler": " ".join(str(error).split())[:300]}


def with_local_encoder(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """`config`, or, where its pretrained encoder is not on this machine (a paper's BERT-base), a copy with a fresh
  encoder of `model.bert`'s shape (the papers' configs state it there) and MiniLM's tokenizer: the same shapes,
  so the same memory and FLOPs, but for the vocabulary's size."""
  if not config.model.get("pretrained"):
    return config
  try:
    pretrained.resolve_model_dir(config.model.pretrained)
    return config
  except FileNotFoundError:
    pass
  local = ml_collections.ConfigDict(config.to_dict())  # References resolved: the tokenizer no longer follows.
  local.model.pretrained, local.model.tokenizer = "", DEFAULT_TOKENIZER
  bert = ", ".join(f"{key}={value}" for key, value in local.model.bert.items())
  logging.warning("model.pretrained=%r is not on this machine: compiling a fresh encoder of model.bert's shape "
                  "(%s) with the %s tokenizer.", config.model.pretrained, bert, DEFAULT_TOKENIZER)
  return local


def config_shapes(config: ml_collections.ConfigDict) -> dict[str, int]:
  """The counts the data would give the config's shapes: its benchmark's (the objective's `dataset_shapes`), over
  which the config's own `shapes` block (e.g. `shapes=dict(num_entities=...)` for a dataset of its own) wins; no
  data is read."""
  shapes = methods.objective_class(config.objective).dataset_shapes(config)
  own = config.get("shapes") or {}
  unknown = sorted(set(own) - {"num_entities", "num_relations"})
  if unknown:
    raise app.UsageError(f"config.shapes.{unknown[0]}: not a shape; valid: num_entities, num_relations.")
  shapes.update({key: int(value) for key, value in own.items() if value})
  return shapes


def build_objective(config: ml_collections.ConfigDict, devices: list[Any],
                    shapes: dict[str, int]) -> objective_base.Objective:
  """The config's objective from shapes alone, on a mesh of `devices`."""
  mesh = parallel.create_mesh(config.mesh, devices)
  try:
    return methods.objective_class(config.objective)(config, mesh, objective_base.Shapes(shapes))
  except ValueError as error:
    raise app.UsageError(str(error)) from None


@_without_compilation_cache()
def compile_train_step(trainer: trainers.Trainer, global_batch_size: int) -> Any:
  """The trainer's own jitted step for one global batch, compiled for its mesh: the batch's rows split over the data
  axis, its shared entries (`shared_batch_keys`) whole on every device."""
  objective = trainer.objective
  shapes = objective.batch_shapes(global_batch_size)
  shardings = parallel.batch_entry_shardings(shapes, trainer.mesh, objective.shared_batch_keys)
  batch = {key: jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=shardings[key])
           for key, value in shapes.items()}
  state = trainer.abstract_state()
  step = trainer.compile_train_step(state, jax.tree.map(lambda x: x.sharding, batch))
  return step.lower(state, batch).compile()


@_without_compilation_cache()
def compile_encode(objective: objective_base.Objective, params: Any, batch_size: int) -> Any:
  """One evaluation batch of texts encoded, as `parallel.map_batches` runs it: params as training keeps them,
  texts split over the data axis, vectors replicated."""
  mesh = objective.mesh
  tokens = jax.ShapeDtypeStruct((batch_size, objective.config.data.max_len), jnp.int32,
                                sharding=parallel.batch_sharding(mesh))
  encode = jax.jit(objective.model().encode_tokens, out_shardings=parallel.replicated(mesh))
  return encode.lower(params, tokens).compile()


@_without_compilation_cache()
def compile_search(mesh: Any, num_entities: int, dim: int, k: int = 10) -> Any:
  """Exact top-k search (`inference.search.ExactSearch`) of a query batch over `num_entities` vectors split by
  rows over every device."""
  padded = entity_table.padded_rows(num_entities, mesh.size)
  layout = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(tuple(mesh.axis_names)))
  vectors = jax.ShapeDtypeStruct((padded, dim), jnp.float32, sharding=layout)
  queries = jax.ShapeDtypeStruct((_SEARCH_QUERIES, dim), jnp.float32, sharding=parallel.replicated(mesh))
  return search.sharded_top_k.lower(queries, vectors, k=k, block_size=16384, num_rows=num_entities, mesh=mesh,
                                    approx_recall=None, normalize=True).compile()


def largest_fitting_batch(needs: Callable[[int], int], start: int, multiple: int, capacity: int,
                          limit: int = 3) -> int | None:
  """The largest global batch (a multiple of `multiple`) that a compile found to need at most `capacity` bytes per
  device, by `needs(batch)` (one compile each, `start`'s included, `limit` at most); None when none of them fits.

  Memory is modelled as a fixed part and a part per example (a line through two compiles): after `start`, a
  batch well inside the capacity (twice `start` where it fits, else half the batch at which a line through the
  origin and `start` meets the capacity); then the batch where the line through the two meets `_TARGET_SHARE`
  of the capacity, which a compile checks. Each further compile moves the line to the two batches whose needs
  lie nearest the capacity (near it memory is not quite linear: the compiler trades memory for recomputation),
  or, where the line points outside the batches between the largest fit and the smallest misfit, takes their
  geometric mean.
  """
  measured: dict[int, int] = {start: needs(start)}
  if limit >= 2:
    inside = (2 * start if measured[start] <= capacity else
              max(multiple, int(start * capacity / measured[start] / 2) // multiple * multiple))
    if inside != start:
      measured[inside] = needs(inside)
  while 2 <= len(measured) < limit:
    largest_fit = max((batch for batch, needed in measured.items() if needed <= capacity), default=0)
    smallest_misfit = min((batch for batch, needed in measured.items() if needed > capacity), default=math.inf)
    first, second = sorted(measured, key=lambda batch: abs(measured[batch] - capacity))[:2]
    slope = (measured[first] - measured[second]) / (first - second)
    target = (int(first + (_TARGET_SHARE * capacity - measured[first]) / slope) // multiple * multiple
              if slope > 0 else 0)
    if not largest_fit < target < smallest_misfit:
      if not largest_fit or smallest_misfit == math.inf:
        break
      # The line says nothing new (memory far from linear between the two): halve the gap, on a log scale.
      target = int(math.sqrt(largest_fit * smallest_misfit)) // multiple * multiple
      if not largest_fit < target < smallest_misfit:
        break
    measured[target] = needs(target)
  return max((batch for batch, needed in measured.items() if needed <= capacity), default=None)


def _timed_report(compile_fn: Callable[[], Any], chip: Chip, **facts: Any) -> dict[str, Any]:
  started = time.time()
  return {**compiled_report(compile_fn, chip), "compile_seconds": round(time.time() - started, 1), **facts}


def report(config: ml_collections.ConfigDict, topology: str, num_slices: int, shapes: dict[str, int],
           search_batch: bool = False, batch_compiles: int = 3, evaluations: bool = True) -> dict[str, Any]:
  """Compiles the config's training step and, where it fits and `evaluations`, the evaluation's programs for the
  topology; the report (see the module docstring). A step that does not fit is answered after its batch search
  alone: no run of it starts, whatever the evaluation would need. The model computes as on TPU: the "auto"
  matmul dtype is bfloat16 and every product multiplies bfloat16 operands (`bert.compiling_for`)."""
  with bert.compiling_for("tpu"):
    return _report(config, topology, num_slices, shapes, search_batch, batch_compiles, evaluations)


def _report(config: ml_collections.ConfigDict, topology: str, num_slices: int, shapes: dict[str, int],
            search_batch: bool, batch_compiles: int, evaluations: bool) -> dict[str, Any]:
  chip, devices = topology_devices(topology, num_slices)
  config = with_local_encoder(config)
  objective = build_objective(config, devices, shapes)
  trainer = trainers.Trainer(config, "unused", objective=objective)
  mesh = objective.mesh
  compile_step = lambda batch: compiled_report(lambda: compile_train_step(trainer, batch), chip)
  train_step = _timed_report(lambda: compile_train_step(trainer, config.train.global_batch_size), chip,
                             global_batch_size=config.train.global_batch_size)
  if train_step["step_seconds_lower_bound"] is not None:
    train_step["projected_seconds"] = train_step["step_seconds_lower_bound"] * config.train.num_steps
  if search_batch or not train_step["fits"]:
    multiple = mesh.shape[parallel.DATA_AXIS] * objective.rows_per_example
    measured = {config.train.global_batch_size: train_step["hbm_bytes_per_device"]}

    def needs(batch: int) -> int:
      if batch not in measured:
        measured[batch] = compile_step(batch)["hbm_bytes_per_device"]
      return measured[batch]

    train_step["largest_fitting_global_batch"] = largest_fitting_batch(
        needs, config.train.global_batch_size, multiple, chip.hbm_bytes, limit=batch_compiles)
    train_step["batches_tried"] = {str(batch): needed for batch, needed in sorted(measured.items())}
  functions = {"train_step": train_step}
  if evaluations and train_step["fits"]:
    functions.update(evaluation_reports(trainer, shapes, chip))
  return {"config": config.get("name", ""), "objective": config.objective, "topology": topology,
          "num_slices": num_slices, "devices": len(devices), "hosts": len({d.process_index for d in devices}),
          "mesh": dict(mesh.shape), "chip": dataclasses.asdict(chip), "shapes": shapes,
          "train_steps": config.train.num_steps, "functions": functions,
          "matmul_dtype": cpu_flags.matmul_dtype(config.model.get("matmul_dtype", "float32"), "tpu")}


def evaluation_reports(trainer: trainers.Trainer, shapes: dict[str, int], chip: Chip) -> dict[str, dict[str, Any]]:
  """What evaluation runs on the devices, compiled: one batch of texts encoded, the search over the entity set, and
  the config's evaluators' own programs (`evaluation.registry.register_lowered`)."""
  objective, config, mesh = trainer.objective, trainer.config, trainer.mesh
  functions = {}
  params = trainer.abstract_state().params
  dim = objective.vector_width()
  if dim:  # A model with a vector of one text.
    eval_batch = config.model.inference_batch_size
    functions["encode"] = _timed_report(lambda: compile_encode(objective, params, eval_batch), chip,
                                        batch_size=eval_batch)
  if "num_entities" in shapes and dim:  # A model with an entity set to search.
    functions["search_top_k"] = _timed_report(lambda: compile_search(mesh, shapes["num_entities"], dim), chip,
                                              num_entities=shapes["num_entities"], queries=_SEARCH_QUERIES)
  entries: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
  for entry in config.evals.values():
    entries[entry["type"]].append(dict(entry))
  for kind, options in entries.items():
    lowered_programs = evaluator_registry.lowered_programs(kind)
    if lowered_programs is None:
      continue
    for name, (lowered, facts) in lowered_programs(objective.model(), shapes, mesh, dim, options).items():
      functions[name] = _timed_report(lowered.compile, chip, **facts)
  return functions


def misfits(result: dict[str, Any]) -> list[str]:
  """One line per compiled function that does not fit."""
  generation = result["topology"].split(":")[0]
  lines = []
  for name, function in result["functions"].items():
    if function["fits"]:
      continue
    line = (f"{name} needs {function['hbm_bytes_per_device'] / GIB:.1f} GiB of "
            f"{function['hbm_capacity_bytes'] / GIB:.0f} GiB per {generation} chip")
    if "global_batch_size" in function:
      largest = function.get("largest_fitting_global_batch")
      line += f" at batch {function['global_batch_size']}: " + (
          f"largest that fits is {largest}" if largest else
          f"none of the batches tried fits (down to {min(map(int, function['batches_tried']))}; "
          "--batch_compiles tries more)")
    lines.append(line)
  return lines


FLAGS = flags.FLAGS


def chosen_run(config: ml_collections.ConfigDict, run: str) -> ml_collections.ConfigDict:
  """The config's run named `run` (its main model when empty): a baseline or fine-tuning stage compiles as its own
  run config."""
  if not run:
    return config
  runs = {each.name: each for each in experiment.model_configs(config)}
  if run not in runs:
    raise app.UsageError(f"--run={run}: not a run of this config; its runs: {', '.join(runs)}.")
  return runs[run]


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config = chosen_run(FLAGS.config, FLAGS.run)
  shapes = config_shapes(config)
  shapes.update({key: value for key, value in (("num_entities", FLAGS.num_entities),
                                               ("num_relations", FLAGS.num_relations)) if value})
  missing = [key for key in methods.objective_class(config.objective).shapes_needed if key not in shapes]
  if missing:
    raise app.UsageError(f"config.data.dataset={config.data.get('dataset', '')!r} has no known shapes: set "
                         "config.shapes or pass "
                         f"{' and '.join(f'--{key}' for key in missing)}.")
  output = outputs.check_writable(FLAGS.output, "--output") if FLAGS.output else None
  result = report(config, FLAGS.topology, FLAGS.num_slices, shapes, search_batch=FLAGS.search_batch,
                  batch_compiles=FLAGS.batch_compiles, evaluations=FLAGS.evaluations)
  if output is not None:
    outputs.write_atomically(output, json.dumps(result, indent=1) + "\n")
  for name, function in result["functions"].items():
    if function["flops"] is None:
      continue  # Refused by the compiler: its misfit line says it.
    logging.info("%s on %s: %.2f of %.0f GiB per chip, %.3g FLOP, estimated step %.3g s, %d collectives (%s).", name,
                 FLAGS.topology, function["hbm_bytes_per_device"] / GIB, function["hbm_capacity_bytes"] / GIB,
                 function["flops"], function["step_seconds_lower_bound"],
                 sum(c["count"] for c in function["collectives"]),
                 ", ".join(sorted({c["op"] for c in function["collectives"]})) or "none")
  problems = misfits(result)
  for line in problems:
    print(line, file=sys.stderr)
  if problems:
    sys.exit(1)


if __name__ == "__main__":
  config_flags.DEFINE_config_file("config", None, "Experiment config (a configs/*.py file, optionally :arg).",
                                  lock_config=True)
  flags.DEFINE_string("topology", None, "The TPU topology, <generation>:<shape>: v4:2x2x1 (v4-8), v5e:2x4 "
                      "(v5e-8), v5p:2x2x1 (v5p-8), v4:2x2x2 (v4-16, 2 hosts), v5e:4x4 (v5e-16, 4 hosts), ...")
  flags.DEFINE_string("run", "", "One run of the config to compile (a baseline or fine-tuning stage, as --runs of "
                      "docent_jax.main names it); empty: its main model.")
  flags.DEFINE_integer("num_slices", 1, "Slices of the topology (multislice over the data-center network).")
  flags.DEFINE_integer("num_entities", 0, "Entities, over the benchmark's and the config's `shapes` block.")
  flags.DEFINE_integer("num_relations", 0, "Relations (BLP), over the benchmark's and the config's `shapes` block.")
  flags.DEFINE_bool("search_batch", False, "Also find the largest batch that fits when the config's fits.")
  flags.DEFINE_integer("batch_compiles", 3, "Compiles at most, the config's batch included, spent finding the largest "
                       "batch that fits.")
  flags.DEFINE_bool("evaluations", True, "Also compile what evaluation runs on the devices (encoding, search, the "
                    "evaluators' programs) where the step fits; false: the step's one compile answers.")
  flags.DEFINE_string("output", "", "Where the report (JSON) goes; empty: the log only.")
  flags.mark_flags_as_required(["config", "topology"])
  cli.run(main, "compile_for_tpu", flags_parser=lambda argv: flags.FLAGS(argv))
