"""Configs and the objective registry fail clearly on names that do not exist."""
import re

import pytest

from configs import blp
from configs import default
from configs import docent
from configs import supcon
from configs import universal
from docent_jax import experiment
from docent_jax import methods


def test_unknown_objective_lists_valid_ones():
  valid = ("blp", "cross_encoder", "docent_dual", "docent_full", "docent_hybrid", "faq_retrieval", "pair_matching",
           "supcon", "tag_finetuning", "universal")
  with pytest.raises(ValueError, match=re.escape(f"valid objectives: {list(valid)}")):
    methods.objective_class("relic")


def test_locked_config_rejects_unknown_keys_listing_present_ones():
  config = blp.get_config("wn18rr")
  config.lock()
  with pytest.raises(AttributeError, match="global_batch_size"):
    config.train.batch = 3


def test_model_name_follows_scoring_function():
  config = blp.get_config("wn18rr,distmult")
  assert config.name == "blp_distmult"
  config.model.scoring = "complex"
  assert config.name == "blp_complex"


def test_default_config_trains_blp_transe_beside_be_bow():
  configs = experiment.model_configs(default.get_config())
  assert [(c.name, c.model.encoder, c.model.scoring) for c in configs] == [
      ("blp_transe", "bert", "transe"), ("be_bow", "bow", "transe")]
  assert configs[1].train.to_dict() == configs[0].train.to_dict()  # Same budget and batches.
  assert configs[1].data.to_dict() == configs[0].data.to_dict()


def test_supcon_runs_the_mixed_sampling_ablation_only_on_several_sources():
  assert "supcon_mixed" in supcon.get_config("abt_buy").baselines
  assert "supcon_mixed" not in supcon.get_config("wdc_computers_small").baselines
  assert {"self_supervised", "cross_encoder"} <= set(supcon.get_config("wdc_computers_small").baselines)


def test_supcon_cross_encoder_budget_follows_the_pre_training_steps():
  config = supcon.get_config("abt_buy")
  config.train.num_steps = 30
  runs = {c.name: c for c in experiment.model_configs(config)}
  assert runs["cross_encoder"].train.num_steps == 30 + supcon.FINETUNE_STEPS
  assert runs["supcon_trained"].train.num_steps == supcon.FINETUNE_STEPS


def test_supcon_runs_each_fine_tuning_after_the_model_it_starts_from():
  runs = experiment.model_configs(supcon.get_config("abt_buy"))
  assert [(c.name, c.objective, c.get("model_init", "")) for c in runs] == [
      ("supcon", "supcon", ""), ("supcon_head", "pair_matching", "supcon"), ("supcon_trained", "pair_matching", "supcon"),
      ("cross_encoder", "cross_encoder", ""),
      ("self_supervised", "supcon", ""), ("supcon_mixed", "supcon", "")]
  by_name = {c.name: c for c in runs}
  # A stage's evaluations replace its model's: the fine-tuned classifier is scored, not probed again.
  assert set(by_name["supcon_trained"].evals) == {"validation", "test"}
  assert by_name["supcon"].evals.frozen.report_as == "supcon_frozen"
  assert "report_as" not in by_name["self_supervised"].evals.frozen


@pytest.mark.parametrize("config", [default.get_config(), blp.get_config("wn18rr,transe,paper_bebow"),
                                    docent.get_config("full"), supcon.get_config("abt_buy"),
                                    universal.get_config("multitask"), universal.get_config("faq")],
                         ids=["default", "blp", "docent", "supcon", "universal", "faq"])
def test_every_evaluator_of_every_run_can_be_made_periodic_from_the_command_line(config):
  # A flag such as --config.evals.search.every_steps=500 sets an existing key; it cannot add one.
  config.lock()
  for run in experiment.model_configs(config):
    for name, entry in run.evals.items():
      assert entry.every_steps >= 0, f"{run.name}: config.evals.{name}"
      entry.every_steps = 7


def test_supcon_sampling_curve_probes_both_samplings_as_often_under_their_own_names():
  config = supcon.get_config("abt_buy,sampling")
  config.evals.frozen.every_steps = 250
  config.train.num_steps = 1_500
  runs = {c.name: c for c in experiment.model_configs(config)}
  assert sorted(runs) == ["supcon", "supcon_head", "supcon_mixed", "supcon_mixed_head", "supcon_mixed_trained",
                          "supcon_trained"]
  assert [runs[name].data.source_aware for name in ("supcon", "supcon_mixed")] == [True, False]
  assert [runs[name].evals.frozen.every_steps for name in ("supcon", "supcon_mixed")] == [250, 250]
  assert [runs[name].train.num_steps for name in ("supcon", "supcon_mixed")] == [1_500, 1_500]
  assert runs["supcon"].evals.frozen.report_as == "supcon_frozen"
  assert "report_as" not in runs["supcon_mixed"].evals.frozen
  with pytest.raises(ValueError, match="one source"):
    supcon.get_config("wdc_computers_small,sampling")


def test_the_default_configs_all_baselines_adds_blps_other_baselines_beside_make_runs_two():
  runs = {run.name: run for run in experiment.model_configs(default.get_config("all_baselines"))}
  assert set(runs) == {"blp_transe", "be_bow", "be_dkrl", "be_avg", "sbert_mean"}
  assert {name: runs[name].model.encoder for name in runs} == {
      "blp_transe": "bert", "be_bow": "bow", "be_dkrl": "cnn", "be_avg": "bow", "sbert_mean": "bert_mean"}
  assert runs["be_avg"].train.num_steps == runs["sbert_mean"].train.num_steps == 0  # Untrained, as BLP's table 4.
  assert runs["be_avg"].model.dim == runs["sbert_mean"].model.dim == 0
  assert {run.name for run in experiment.model_configs(default.get_config())} == {"blp_transe", "be_bow"}
  with pytest.raises(ValueError, match="all_baselines"):
    default.get_config("everything")
