"""A tiny knowledge graph in the KG-BERT layout, and a tiny BLP config over it, for trainer tests."""
import pathlib
import sys

import ml_collections
import numpy as np

from configs import blp
import tiny_training

_COLOURS = ["red", "green", "blue", "yellow", "black", "white"]
_THINGS = ["fruit", "tool", "animal", "river", "song", "city"]


def write_tiny_kg(directory: pathlib.Path, num_entities: int = 48, seed: int = 0) -> pathlib.Path:
  """Entities are '<colour> <thing> number <i>'; relations link equal colours, equal things, neighbours."""
  rng = np.random.default_rng(seed)
  directory.mkdir(parents=True, exist_ok=True)
  ids = [f"e{i:03d}" for i in range(num_entities)]
  colour = rng.integers(len(_COLOURS), size=num_entities)
  thing = rng.integers(len(_THINGS), size=num_entities)
  (directory / "entity2text.txt").write_text(
      "".join(f"{e}\t{_COLOURS[c]} {_THINGS[t]} number {i}\n" for i, (e, c, t) in enumerate(zip(ids, colour, thing))))
  triples = []
  for i in range(num_entities):
    for j in rng.choice(num_entities, size=4, replace=False):
      if i == j:
        continue
      if colour[i] == colour[j]:
        triples.append((ids[i], "same_colour", ids[j]))
      elif thing[i] == thing[j]:
        triples.append((ids[i], "same_thing", ids[j]))
      else:
        triples.append((ids[i], "related_to", ids[j]))
  split = np.array(["train"] * num_entities, dtype=object)
  order = rng.permutation(num_entities)
  split[order[: num_entities // 8]] = "dev"
  split[order[num_entities // 8: num_entities // 4]] = "test"
  index = {e: i for i, e in enumerate(ids)}
  parts = {"ind-train": [], "ind-dev": [], "ind-test": []}
  for h, r, t in triples:
    sides = {split[index[h]], split[index[t]]}
    name = "ind-test" if "test" in sides else "ind-dev" if "dev" in sides else "ind-train"
    parts[name].append((h, r, t))
  for name, rows in parts.items():
    (directory / f"{name}.tsv").write_text("".join("\t".join(row) + "\n" for row in rows))
  for name in ("train", "dev", "test"):
    (directory / f"{name}-ents-class.txt").write_text(
        "".join(f"{e}\t{_THINGS[thing[i]]}\n" for i, e in enumerate(ids) if split[i] == name))
  return directory


def write_transductive_kg(directory: pathlib.Path, keep_inductive: bool = False) -> pathlib.Path:
  """The tiny KG's triples as train.tsv / dev.tsv / test.tsv, every dev and test entity also in training; with
  `keep_inductive`, beside its inductive files (as WN18RR and FB15k-237 have both)."""
  write_tiny_kg(directory)
  triples = [line for name in ("ind-train", "ind-dev", "ind-test")
             for line in (directory / f"{name}.tsv").read_text().splitlines()]
  if not keep_inductive:
    for path in list(directory.glob("ind-*.tsv")) + list(directory.glob("*-ents-class.txt")):
      path.unlink()
  train, held_out = triples[::2], triples[1::2]
  seen = {entity for line in train for entity in line.split("\t")[::2]}
  held_out = [line for line in held_out if set(line.split("\t")[::2]) <= seen]
  for name, rows in (("train", train), ("dev", held_out[::2]), ("test", held_out[1::2])):
    (directory / f"{name}.tsv").write_text("".join(row + "\n" for row in rows))
  return directory


def tiny_config(kg_dir: pathlib.Path, tfds_dir: pathlib.Path) -> ml_collections.ConfigDict:
  """BLP over the tiny KG with a small, freshly initialised BERT (the MiniLM tokenizer's vocabulary)."""
  config = tiny_training.shrink(blp.get_config(str(kg_dir)), tfds_dir, max_len=12, checkpoint_every_steps=2,
                                eval_batch_size=16)
  config.model.dim = 16
  config.loss.num_negatives = 8
  config.evals.validation.query_batch_size = 16  # And the test entry's: one reference.
  return config


def main_command(kg_dir, tfds_dir, workdir, *extra):
  """`python -m docent_jax.main` on the tiny KG (6 steps, a checkpoint every 2), with `extra` flags."""
  config = tiny_config(kg_dir, tfds_dir)
  overrides = [f"--config.{k}={v}" for k, v in {
      "data.tfds_data_dir": tfds_dir, "data.max_len": config.data.max_len, "model.pretrained": "",
      **{f"model.bert.{k}": v for k, v in config.model.bert.items()}, "model.dim": 16, "loss.num_negatives": 8,
      "optim.learning_rate": 1e-3, "optim.warmup_steps": 2, "train.global_batch_size": 8,
      "train.num_steps": 6, "train.checkpoint_every_steps": 2, "model.inference_batch_size": 16,
      "evals.validation.query_batch_size": 16}.items()]
  return [sys.executable, "-m", "docent_jax.main", f"--config=configs/blp.py:{kg_dir}", f"--workdir={workdir}",
          *overrides, *extra]


def signalling_main(at_batch: int, signal_number: int, module: str = "docent_jax.main") -> str:
  """A `python -c` program: `python -m module` (argv after the program) that sends itself `signal_number` as it
  reads training batch `at_batch` (counted over every run the process trains)."""
  return ("import os, runpy, sys\n"
          "from docent_jax import parallel\n"
          "calls = []\n"
          "original = parallel.global_batch\n"
          "def global_batch(*args):\n"
          "  calls.append(1)\n"
          f"  if len(calls) == {at_batch}:\n"
          f"    os.kill(os.getpid(), {int(signal_number)})\n"
          "  return original(*args)\n"
          "parallel.global_batch = global_batch\n"
          "sys.argv = sys.argv[1:]\n"
          f"runpy.run_module({module!r}, run_name='__main__')\n")
