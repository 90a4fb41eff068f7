"""The cross-encoder baseline (`configs/supcon.py:...,cross_encoder`) on a tiny pair set it can separate."""
import pathlib

import numpy as np
import pytest

from configs import supcon as supcon_config
from docent_jax import trainer as trainers
from docent_jax.evaluation import pair_matching
import tiny_training

NUM_PRODUCTS = 60
NON_MATCHES = 8  # Per product: one match in nine pairs, about Abt-Buy's 11%.
_BRANDS = ("acme", "globex", "initech", "umbrella", "hooli", "vandelay")


def write_separable_pairs(directory: pathlib.Path) -> pathlib.Path:
  """Table A: 60 cameras; table B: the same cameras and 60 cables. Each camera is paired with its own offer in
  table B (a match) and with 8 cables; products 0-39 train, 40-49 validate, 50-59 test."""
  directory.mkdir(parents=True, exist_ok=True)
  cameras = [f"{i},{_BRANDS[i % 6]} camera model x{100 + i}" for i in range(NUM_PRODUCTS)]
  table_b = [f"{i},x{100 + i} {_BRANDS[i % 6]} digital camera" for i in range(NUM_PRODUCTS)]
  table_b += [f"{NUM_PRODUCTS + i},{_BRANDS[i % 6]} usb charging cable {i % 5 + 1} m" for i in range(NUM_PRODUCTS)]
  (directory / "tableA.csv").write_text("\n".join(["id,name", *cameras]) + "\n")
  (directory / "tableB.csv").write_text("\n".join(["id,name", *table_b]) + "\n")

  def pairs(products: range) -> str:
    rows = ["ltable_id,rtable_id,label"]
    for i in products:
      rows += [f"{i},{i},1"] + [f"{i},{NUM_PRODUCTS + (i + 7 * k) % NUM_PRODUCTS},0" for k in range(1, NON_MATCHES + 1)]
    return "\n".join(rows) + "\n"

  (directory / "train.csv").write_text(pairs(range(0, 40)))
  (directory / "valid.csv").write_text(pairs(range(40, 50)))
  (directory / "test.csv").write_text(pairs(range(50, 60)))
  return directory


def test_a_fresh_cross_encoder_starts_at_the_match_rate_and_learns_separable_pairs(tmp_path):
  config = supcon_config.get_config(f"{write_separable_pairs(tmp_path / 'pairs')},cross_encoder")
  config.baselines = {}  # One seed.
  config = tiny_training.shrink(config, tmp_path / "tfds", max_len=24, global_batch_size=16, num_steps=60,
                                log_every_steps=20, checkpoint_every_steps=60, eval_batch_size=64)
  config.optim.learning_rate = 5e-3
  config.evals.validation.every_steps = 60
  trainer = trainers.Trainer(config, tmp_path / "run")
  objective = trainer.objective
  labels = objective.pairs["train"][:, 2]
  assert labels.mean() == pytest.approx(1 / (NON_MATCHES + 1))
  # A head at bias 0 would start every pair at probability 0.5 (loss 0.69): the first steps would all push the
  # logits down together. At the match rate's log-odds the loss starts at the prior's entropy (0.35).
  data = objective.evaluation_data()
  start = pair_matching.classify_pairs(objective.model(trainer.initial_state().params), data, "train")
  rate = labels.mean()
  assert start["train/loss"] == pytest.approx(-rate * np.log(rate) - (1 - rate) * np.log(1 - rate), abs=0.02)
  params, _ = trainer.train()
  for split in ("validation", "test"):
    assert pair_matching.classify_pairs(objective.model(params), data, split)[f"{split}/f1"] > 0.9
