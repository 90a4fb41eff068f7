"""tools/profile_train_step.py: the parts of a real training step, timed on a tiny BLP config."""
import pathlib
import sys

import jax
import pytest

from docent_jax import trainer as trainers
import kg_fixtures

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import profile_train_step  # pylint: disable=g-import-not-at-top,g-bad-import-order


def test_profile_times_each_part_and_counts_params_and_tokens(tmp_path):
  config = kg_fixtures.tiny_config(kg_fixtures.write_tiny_kg(tmp_path / "kg"), tmp_path / "tfds")
  config.mesh.shape = (1, 1)
  trainer = trainers.Trainer(config, tmp_path / "run")
  result = profile_train_step.profile(trainer, calls=2)
  parts = ("read_batch", "loss", "loss_and_gradient", "optimizer_update", "train_step")
  assert set(result["seconds"]) == set(parts) and all(result["seconds"][p] > 0 for p in parts)
  assert result["steps_per_second"] == pytest.approx(1 / result["seconds"]["train_step"], rel=0.01)
  # The optimizer updates every param of the model; each batch holds head and tail descriptions.
  assert result["params"] == sum(x.size for x in jax.tree.leaves(trainer.initial_state().params))
  assert result["tokens_per_batch"] == 2 * config.train.global_batch_size * config.data.max_len
