"""Runs over seeds (`config.num_seeds`) and their results: the mean and standard deviation of a model and its
`<model>_seed<N>` runs."""
import numpy as np
import pytest

from configs import blp as blp_config
from configs import docent as docent_config
from configs import supcon as supcon_config
from docent_jax import experiment
from docent_jax.evaluation import seeds
import kg_fixtures
import test_supcon


def test_mean_and_std_over_seeds():
  per_seed = [{"top1": 0.5, "mrr": 0.6}, {"top1": 0.7, "mrr": 0.65}, {"mrr": 0.9, "top1": 0.4}]
  top1, mrr = np.array([0.5, 0.7, 0.4]), np.array([0.6, 0.65, 0.9])
  assert seeds.mean_and_std(per_seed) == pytest.approx({
      "top1": top1.mean(), "top1_std": top1.std(ddof=1), "mrr": mrr.mean(), "mrr_std": mrr.std(ddof=1)})
  assert seeds.mean_and_std(per_seed[:1]) == {"top1": 0.5, "top1_std": 0.0, "mrr": 0.6, "mrr_std": 0.0}


@pytest.mark.parametrize("per_seed, message", [
    ([], "at least one seed"),
    ([{"top1": 0.5, "mrr": 0.6}, {"top1": 0.5}], "Seed 1 has keys"),
    ([{"mrr": 0.5, "mrr_std": 0.1}], "would clash"),
])
def test_mean_and_std_rejects_bad_input(per_seed, message):
  with pytest.raises(ValueError, match=message):
    seeds.mean_and_std(per_seed)


def test_summary_groups_a_model_with_its_seeds_only():
  results = {"faq/test/top1": 0.5, "faq/test/num_queries": 10.0,
             "faq_seed1/test/top1": 0.7, "faq_seed1/test/num_queries": 10.0,
             "faq_seed2/test/top1": 0.4, "faq_seed2/test/num_queries": 10.0,
             "faq_seed2/validation/top1": 0.9,  # Only one seed has it: left out.
             "bm25/test/top1": 0.3,  # No seeds.
             "other_seed1/test/top1": 0.1}  # No model 'other': not a group.
  summary = seeds.summarize(results)
  assert summary == pytest.approx({
      "faq@seeds/test/top1": np.mean([0.5, 0.7, 0.4]), "faq@seeds/test/top1_std": np.std([0.5, 0.7, 0.4], ddof=1),
      "faq@seeds/test/num_queries": 10.0, "faq@seeds/test/num_queries_std": 0.0, "faq@seeds/test/num_seeds": 3.0})
  assert seeds.summarize({"faq/test/top1": 0.5, "bm25/test/top1": 0.3}) == {}


def _seed_pairs(results: dict[str, float], model: str, key: str) -> None:
  """`<model>@seeds/<key>` (and its _std) are the mean and sample std of `<model>/<key>` and `<model>_seed1/<key>`."""
  per_seed = [results[f"{model}/{key}"], results[f"{model}_seed1/{key}"]]
  assert results[f"{model}@seeds/{key}"] == pytest.approx(np.mean(per_seed))
  assert results[f"{model}@seeds/{key}_std"] == pytest.approx(np.std(per_seed, ddof=1))
  assert results[f"{model}@seeds/{key.split('/')[0]}/num_seeds"] == 2


def test_num_seeds_repeats_every_trained_run_and_its_stages_with_the_next_seeds():
  config = supcon_config.get_config("abt_buy")
  config.seed = 7
  config.num_seeds = 3
  config.baselines.untrained = {"train": {"num_steps": 0}, "finetune": {}}
  runs = {run.name: run for run in experiment.model_configs(config)}
  assert "untrained_seed1" not in runs  # Nothing in an untrained run depends on the seed.
  for offset in (1, 2):
    seeded = runs[f"supcon_seed{offset}"]
    assert seeded.seed == 7 + offset and seeded.num_seeds == 1
    # The frozen probe reports as `supcon_frozen`, so its seeds report as `supcon_frozen_seed<N>`.
    assert seeded.evals.frozen.report_as == f"supcon_frozen_seed{offset}"
    stage = runs[f"supcon_trained_seed{offset}"]
    assert (stage.model_init, stage.seed, stage.objective) == (f"supcon_seed{offset}", 7 + offset, "pair_matching")
    assert {entry.report_as for entry in stage.evals.values()} == {f"supcon_trained_seed{offset}"}
    assert runs[f"cross_encoder_seed{offset}"].seed == 7 + offset
  assert list(runs)[:len(experiment.model_configs(supcon_config.get_config("abt_buy"))) + 1] == [
      name for name in runs if "_seed" not in name]  # The first seed's runs come first.


@pytest.mark.parametrize("num_seeds", [0, -2])
def test_num_seeds_must_be_at_least_one(num_seeds):
  config = blp_config.get_config("wn18rr")
  config.num_seeds = num_seeds
  with pytest.raises(ValueError, match="config.num_seeds"):
    experiment.model_configs(config)


def test_one_override_gives_blp_seeds_their_mean_and_std(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 2
  config.evals = {"test": config.evals.test}
  config.train.best_metric = ""
  config.num_seeds = 2
  results = experiment.train_and_evaluate(config, tmp_path)
  assert results["blp_transe/test/mrr"] != results["blp_transe_seed1/test/mrr"]  # Another initialisation and order.
  _seed_pairs(results, "blp_transe", "test/mrr")
  # More seeds later: the same workdir trains only the new one.
  config.num_seeds = 3
  more = experiment.train_and_evaluate(config, tmp_path)
  assert {key: more[key] for key in results if "@seeds" not in key} == pytest.approx(
      {key: value for key, value in results.items() if "@seeds" not in key}, abs=1e-6)
  assert more["blp_transe@seeds/test/num_seeds"] == 3


def test_one_override_gives_supcon_and_its_fine_tuning_seeds_their_mean_and_std(tmp_path):
  config = test_supcon.tiny_config(test_supcon.write_products(tmp_path / "products"), tmp_path / "tfds")
  config.baselines = {}
  config.finetune = {"trained": config.finetune.trained}
  config.num_seeds = 2
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  _seed_pairs(results, "supcon_frozen", "test/f1")
  _seed_pairs(results, "supcon_trained", "test/f1")


def test_a_tag_stage_of_a_seed_starts_from_that_seeds_model_and_reports_under_it():
  config = docent_config.get_config("dual")
  config.num_seeds = 2
  runs = {run.name: run for run in experiment.model_configs(config)}
  stage = runs["docent_dual_tags_seed1"]
  assert (stage.model_init, stage.seed) == ("docent_dual_seed1", 1)
  # The tag stage reports under its model, so `docent_dual@seeds` averages the tag metrics of both seeds too.
  assert {entry.report_as for entry in stage.evals.values()} == {"docent_dual_seed1"}
  assert {entry.report_as for entry in runs["docent_dual_tags"].evals.values()} == {"docent_dual"}


def test_runs_selects_models_and_stages_with_their_seeds():
  config = supcon_config.get_config("abt_buy")
  config.num_seeds = 2
  runs = experiment.model_configs(config)
  chosen = experiment.selected_runs(runs, ["supcon", "supcon_trained"])
  assert [run.name for run in chosen] == ["supcon", "supcon_trained", "supcon_seed1", "supcon_trained_seed1"]
  assert experiment.selected_runs(runs, []) == runs
  with pytest.raises(ValueError, match="supcon_trained starts from supcon, which is left out; add supcon"):
    experiment.selected_runs(runs, ["supcon_trained"])
  with pytest.raises(ValueError, match="--runs supcon_seed1, trained: not a run of this config; its runs: supcon, "):
    experiment.selected_runs(runs, ["trained", "supcon_seed1"])
