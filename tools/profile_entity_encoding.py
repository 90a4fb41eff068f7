"""Entities/s of BLP's evaluation encoding: every description at the table's width against length buckets.

  python tools/profile_entity_encoding.py --config=configs/blp.py:wn18rr,transe,paper \
      --config.model.pretrained=minilm-l6 --config.data.manual_dir=../shared/data/wn18rr --entities=4096

Encodes the same evenly spaced `--entities` descriptions (all when 0) of the config's graph with its initial
params, by `parallel.map_batches` over rows of `data.max_len` tokens and by `parallel.map_token_batches`
(each row cut to the shortest multiple of 8 that holds it), alternating the two `--repeats` times after a
compiling call of each, and reports the median rates, their ratio, the tokens per row each encodes, and the
largest difference between the two sets of vectors. Prints one JSON object.
"""
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

# The package before JAX: it keeps JAX on the CPU where no accelerator is attached (libtpu would look for a TPU).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import docent_jax  # pylint: disable=g-import-not-at-top,unused-import
from absl import app
from absl import flags
import jax
import numpy as np
from ml_collections import config_flags

import bench_input_pipeline  # pylint: disable=g-import-not-at-top  # A tool beside this one.
from docent_jax import parallel  # pylint: disable=g-import-not-at-top
from docent_jax import trainer as trainers  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  config_flags.DEFINE_config_file("config", None, "A BLP training config.", lock_config=True)
  flags.DEFINE_integer("entities", 4096, "Descriptions encoded per call, evenly spaced over the graph (0: all).")
  flags.DEFINE_integer("repeats", 3, "Timed calls of each way (after a compiling one).")
  flags.mark_flags_as_required(["config"])


def profile(trainer: trainers.Trainer, entities: int, repeats: int) -> dict[str, Any]:
  """Rates, tokens per row and the largest vector difference of the two ways over `entities` descriptions."""
  config, objective = trainer.config, trainer.objective
  tokens = objective.entity_tokens
  if 0 < entities < len(tokens):
    tokens = tokens[np.linspace(0, len(tokens) - 1, entities).round().astype(int)]
  params = trainer.initial_state().params
  options = dict(batch_size=config.model.inference_batch_size, mesh=trainer.mesh)
  pad_id = objective.tokenizer.pad_token_id

  encode_entities = objective.model().encode_tokens  # One function object: one compile per shape.

  ways = {
      "full_width": lambda: parallel.map_batches(encode_entities, params, tokens, **options),
      "length_buckets": lambda: parallel.map_token_batches(encode_entities, params, tokens, pad_id=pad_id,
                                                           **options),
  }
  vectors = {name: encode() for name, encode in ways.items()}  # Compiles every shape.
  seconds = {name: [] for name in ways}
  for _ in range(repeats):
    for name, encode in ways.items():
      start = time.perf_counter()
      encode()
      seconds[name].append(time.perf_counter() - start)
  rates = {name: len(tokens) / statistics.median(times) for name, times in seconds.items()}
  lengths = (tokens != pad_id).sum(axis=1)
  groups = parallel.length_buckets(tokens, pad_id)
  bucketed = sum(bucket * len(rows) for bucket, rows in groups) / len(tokens)
  return {
      "entities": len(tokens), "max_len": tokens.shape[1],
      "mean_tokens_per_row": {"text": round(float(lengths.mean()), 2), "full_width": tokens.shape[1],
                              "length_buckets": round(float(bucketed), 2)},
      "entities_per_second": {name: round(rate, 1) for name, rate in rates.items()},
      "speedup": round(rates["length_buckets"] / rates["full_width"], 3),
      "max_abs_difference": float(np.abs(vectors["full_width"] - vectors["length_buckets"]).max()),
  }


def main(argv: list[str]) -> None:
  del argv
  config = FLAGS.config
  with tempfile.TemporaryDirectory() as workdir:
    trainer = trainers.Trainer(config, workdir)
  print(json.dumps({"cpu": bench_input_pipeline.cpu_model(), "cpu_count": os.cpu_count(),
                    "device": jax.devices()[0].device_kind, "config": config.name, "dataset": config.data.dataset,
                    **profile(trainer, FLAGS.entities, FLAGS.repeats)}, indent=2))


if __name__ == "__main__":
  define_flags()
  app.run(main)
