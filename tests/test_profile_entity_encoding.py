"""tools/profile_entity_encoding.py: both ways of encoding a tiny graph's descriptions give the same vectors."""
import pathlib
import sys

import numpy as np

from docent_jax import trainer as trainers
import kg_fixtures

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import profile_entity_encoding  # pylint: disable=g-import-not-at-top,g-bad-import-order


def test_profile_compares_full_width_and_length_buckets_on_the_same_descriptions(tmp_path):
  config = kg_fixtures.tiny_config(kg_fixtures.write_tiny_kg(tmp_path / "kg"), tmp_path / "tfds")
  config.mesh.shape = (1, 1)
  trainer = trainers.Trainer(config, tmp_path / "run")
  result = profile_entity_encoding.profile(trainer, entities=0, repeats=1)
  tokens = trainer.objective.entity_tokens
  assert result["entities"] == len(tokens) and result["max_len"] == tokens.shape[1]
  lengths = (tokens != trainer.objective.tokenizer.pad_token_id).sum(axis=1)
  assert result["mean_tokens_per_row"]["text"] == round(float(lengths.mean()), 2)
  # Every row's bucket holds its text and is no longer than the table.
  assert lengths.mean() <= result["mean_tokens_per_row"]["length_buckets"] <= tokens.shape[1]
  assert result["max_abs_difference"] < 1e-4
  assert all(rate > 0 for rate in result["entities_per_second"].values())
  assert np.isclose(result["speedup"], result["entities_per_second"]["length_buckets"]
                    / result["entities_per_second"]["full_width"], rtol=0.01)
