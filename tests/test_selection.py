"""`config.selection` (FAQ retrieval's negatives chosen on validation): the choice rule, and a tiny FAQ recipe that
trains its candidates on the validation fifth, then the chosen one on every training query."""
import json

import pytest

from configs import universal
from docent_jax import run_dir as run_dirs
from docent_jax.sweep import selection
import tiny_training
import universal_fixtures

ORDER = ["retrieved", "random", "retrieved_margin", "retrieved_1_random_3"]


def _summary(scores: dict[str, tuple[float, float]]) -> dict:
  """A selection's summary (settings best first) with these (mean, std) per candidate, 3 seeds each."""
  settings = [{"params": {selection.CANDIDATE_AXIS: name}, "mean": mean, "std": std, "count": 3, "trials": []}
              for name, (mean, std) in sorted(scores.items(), key=lambda item: -item[1][0])]
  return {"metric": "faq_selected/validation/top1", "mode": "max", "settings": settings}


def test_the_best_mean_wins_beyond_the_spread_and_the_first_listed_wins_among_level_ones():
  # Random negatives ahead of the rest by more than two standard errors: chosen, though retrieved is listed first.
  choice = selection.choose(_summary({"retrieved": (0.615, 0.005), "random": (0.70, 0.01),
                                      "retrieved_margin": (0.62, 0.01), "retrieved_1_random_3": (0.64, 0.02)}), ORDER)
  assert choice["chosen"] == "random" and choice["level_with_the_best"] == ["random"]
  assert choice["next"] == "retrieved_1_random_3" and choice["chosen_minus_next"] == pytest.approx(0.06)
  # Validation numbers where the margin leads and random is level with it (its std 0.036): random, listed before
  # the margin.
  choice = selection.choose(_summary({"retrieved": (0.615, 0.005), "random": (0.637, 0.036),
                                      "retrieved_margin": (0.651, 0.005)}), ORDER)
  assert choice["chosen"] == "random" and set(choice["level_with_the_best"]) == {"retrieved_margin", "random"}
  # StackFAQ's recipe run: 1 retrieved + 3 random ahead of retrieved by 0.005, within two standard errors (0.008):
  # level, so the retrieved ones, listed first.
  choice = selection.choose(_summary({"retrieved_1_random_3": (0.9627, 0.0046), "retrieved": (0.9573, 0.0046),
                                      "retrieved_margin": (0.936, 0.008), "random": (0.9333, 0.0046)}), ORDER)
  assert choice["chosen"] == "retrieved" and choice["level_with_the_best"] == ["retrieved_1_random_3", "retrieved"]
  # StackFAQ's mining comparison: the defaults ahead of the margin by more than the noise.
  choice = selection.choose(_summary({"retrieved": (0.956, 0.004), "retrieved_margin": (0.936, 0.006)}), ORDER)
  assert choice["chosen"] == "retrieved" and choice["chosen_minus_next"] == pytest.approx(0.02)


def test_the_faq_recipe_lists_its_candidates_and_validates_on_a_held_out_fifth():
  config = universal.get_config("faq")
  assert list(config.selection.preference) == ORDER and sorted(config.selection.candidates) == sorted(ORDER)
  assert config.selection.validation.data.validation_query_fraction == 0.2
  assert config.selection.metric == "validation/top1" and config.selection.num_seeds >= 3
  for variant in ("faq_mining", "faq_retrieved"):  # The comparison itself, and the recipe before it chose.
    assert "selection" not in universal.get_config(variant)
  assert universal.get_config("faq_retrieved").name == "faq_retrieved"


def test_a_tiny_recipe_trains_its_candidates_on_validation_then_the_chosen_one(tmp_path):
  faq_dir = universal_fixtures.write_faq(tmp_path / "faq")
  config = tiny_training.shrink(universal.get_config(f"faq,{faq_dir}"), tmp_path / "tfds", max_len=16, num_steps=4,
                                checkpoint_every_steps=2)
  config.baselines = {}
  config.num_seeds = 1
  config.selection.num_seeds = 2
  config.selection.candidates = {name: config.selection.candidates[name] for name in ("retrieved", "random")}
  config.selection.preference = ("retrieved", "random")
  results = selection.train_and_evaluate(config, tmp_path / "work")
  choice = json.loads((tmp_path / "work" / selection.CHOICE_FILE).read_text())
  trials = json.loads((tmp_path / "work" / selection.SELECTION_DIR / "sweep.json").read_text())["trials"]
  # Each candidate over 2 seeds, trained and scored on the held-out fifth only.
  assert sorted((t["params"]["candidate"], t["params"]["seed"]) for t in trials) == [
      ("random", 0), ("random", 1), ("retrieved", 0), ("retrieved", 1)]
  for trial in trials:
    trial_results = json.loads((tmp_path / "work" / "selection" / "trials" / f"{trial['number']:03d}" /
                                "results.json").read_text())
    assert "faq_selected/validation/top1" in trial_results and "faq_selected/test/top1" not in trial_results
    assert trial_results["faq_selected/validation/top1"] == pytest.approx(trial["value"])
  # The chosen negatives train on every training query and report test numbers.
  recorded = run_dirs.RunDir(tmp_path / "work" / "faq_selected").recorded_config()
  assert recorded.loss.negatives == ("random" if choice["chosen"] == "random" else "retrieved")
  assert recorded.data.validation_query_fraction == 0.0 and "selection" not in recorded
  assert 0.0 <= results["faq_selected/test/top1"] <= 1.0
  for name, candidate in choice["candidates"].items():
    assert results[f"faq_selected/selection/{name}/validation/top1"] == pytest.approx(candidate["mean"])
