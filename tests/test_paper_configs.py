"""The papers' own settings (`configs/*.py:...,paper`): their values, and a short CPU run of each."""
import json

import jax
import numpy as np
import pytest

from configs import blp as blp_config
from configs import supcon as supcon_config
import docent_jax
from docent_jax import experiment
import kg_fixtures
import test_supcon
import tiny_training


@pytest.mark.parametrize("dataset, triples", [("wn18rr", 69_585), ("fb15k237", 215_085)])
def test_blp_paper_setting_has_the_papers_values(dataset, triples):
  config = blp_config.get_config(f"{dataset},transe,paper")
  epoch = -(-triples // 64)
  assert config.train.global_batch_size == 64 and config.loss.num_negatives == 64
  assert config.train.num_steps == 40 * epoch
  assert config.optim.learning_rate == 2e-5 and config.optim.weight_decay == 0.0
  assert config.optim.warmup_steps == config.train.num_steps // 5
  assert config.loss.name == "margin" and config.loss.margin == 1.0
  assert config.data.max_len == 32 and config.model.dim == 128
  assert config.model.bert.hidden_size == 768 and config.model.bert.num_hidden_layers == 12
  # Model selection: validation MRR once an epoch, the best checkpoint reported.
  assert config.evals.validation.every_steps == epoch and config.train.best_metric == "validation/mrr"
  # The tokenizer follows the encoder's directory.
  config.model.pretrained = "/models/bert-base-cased"
  assert config.model.tokenizer == "/models/bert-base-cased"
  assert blp_config.get_config(f"{dataset},distmult,paper").model.scoring == "distmult"


@pytest.mark.parametrize("dataset, triples", [("wn18rr", 69_585), ("fb15k237", 215_085)])
def test_blp_bebow_paper_setting_has_the_released_scripts_values(dataset, triples):
  config = blp_config.get_config(f"{dataset},transe,paper_bebow")
  epoch = -(-triples // 64)
  assert config.model.encoder == "bow" and config.model.dim == 0 and config.data.drop_stopwords
  assert config.data.max_len == 32 and config.model.bert.hidden_size == 768
  assert config.train.global_batch_size == 64 and config.train.num_steps == 80 * epoch
  assert (config.loss.name, config.loss.margin, config.loss.num_negatives) == ("margin", 1.0, 64)
  optim = config.optim
  assert (optim.learning_rate, optim.warmup_steps, optim.schedule) == (1e-4, 0, "constant")
  assert optim.grad_clip_norm == 0.0 and optim.weight_decay == 0.0
  assert config.evals.validation.every_steps == epoch and config.train.best_metric == "validation/mrr"
  config.model.pretrained = "minilm-l6"
  assert config.model.tokenizer == "minilm-l6"


def test_supcon_paper_setting_has_the_papers_values():
  config = supcon_config.get_config("abt_buy,paper")
  # Pre-training: 1024 offers a batch (512 anchors, each with a partner), 200 epochs of Abt-Buy's 2,034 offers.
  assert config.train.global_batch_size == 512 and config.train.num_steps == 200 * 2
  assert config.loss.temperature == 0.07 and config.optim.learning_rate == 5e-5
  assert config.optim.warmup_steps == config.train.num_steps // 20 and config.optim.weight_decay == 0.01
  assert config.data.max_len == 128 and config.data.augmentation == "all" and config.data.source_aware
  assert config.model.bert.hidden_size == 768 and config.model.bert.num_hidden_layers == 12  # RoBERTa-base's shape.
  # Fine-tuning: 50 epochs of the 5,743 training pairs, 64 a batch, the lowest validation loss reported.
  fine_tuning = config.finetune.trained
  epoch = -(-5_743 // 64)
  assert fine_tuning.train.num_steps == 50 * epoch and fine_tuning.train.global_batch_size == 64
  assert fine_tuning.optim.learning_rate == 5e-5 and fine_tuning.optim.lr_multipliers == ()
  assert fine_tuning.evals.validation.every_steps == epoch
  assert (fine_tuning.train.best_metric, fine_tuning.train.best_mode) == ("validation/loss", "min")
  # R-SupCon (F): a fresh classification layer on the frozen encoder, 5 epochs.
  head = config.finetune.head
  assert head.objective == "pair_matching" and head.model.freeze_encoder and head.model.head_init == "fresh"
  assert head.train.num_steps == 5 * epoch and head.optim.lr_multipliers == (("^head/", 1.0), (".", 0.0))
  assert fine_tuning.model.head_init == "fresh" and not fine_tuning.model.get("freeze_encoder", False)
  # (F) and (UF) without augmentation: the same stages after pre-training without it; three seeds each.
  runs = {run.name: run for run in experiment.model_configs(config)}
  assert runs["supcon_no_augmentation"].data.augmentation == ""
  assert runs["supcon_no_augmentation_head"].model_init == "supcon_no_augmentation"
  assert runs["supcon_no_augmentation_head"].data.augmentation == ""
  assert {name for name in runs if name.endswith("_seed2")} == {f"{name}_seed2" for name in (
      "supcon", "supcon_head", "supcon_trained", "supcon_no_augmentation", "supcon_no_augmentation_head",
      "supcon_no_augmentation_trained")}
  config.model.pretrained = "/models/roberta-base"
  assert config.model.tokenizer == "/models/roberta-base"


@pytest.mark.parametrize("make, arg", [(blp_config.get_config, "wordnet_kg,transe,paper"),
                                       (supcon_config.get_config, "wdc_computers_small,paper"),
                                       (supcon_config.get_config, "abt_buy,papers")])
def test_a_paper_setting_outside_the_papers_benchmarks_is_refused(make, arg):
  with pytest.raises(ValueError, match="paper"):
    make(arg)


def _tiny(config, tfds_dir, **shrink_options):
  """The paper setting with a tiny fresh BERT and a few steps (the CPU smoke run a user would start)."""
  config = tiny_training.shrink(config, tfds_dir, **shrink_options)
  # The paper's tokenizer is a reference to its encoder's directory: setting it would set `pretrained` too (and
  # load MiniLM in place of the tiny fresh BERT).
  del config.model["tokenizer"]
  config.model.tokenizer = "minilm-l6"
  assert config.model.pretrained == ""
  return config


@pytest.mark.parametrize("setting", ["paper", "paper_bebow"])
def test_blp_paper_setting_runs_on_cpu_with_a_tiny_override(tmp_path, setting):
  config = _tiny(blp_config.get_config(f"wn18rr,transe,{setting}"), tmp_path / "tfds", max_len=12,
                 checkpoint_every_steps=2, eval_batch_size=16)
  config.data.dataset = str(kg_fixtures.write_tiny_kg(tmp_path / "kg"))
  config.train.num_steps = 4
  config.evals.validation.every_steps = 2
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  assert 0.0 < results["blp_transe/test/mrr"] <= 1.0
  assert json.loads((tmp_path / "run" / "results.json").read_text()) == results


def test_supcon_paper_setting_runs_on_cpu_with_a_tiny_override(tmp_path):
  config = _tiny(supcon_config.get_config("abt_buy,paper"), tmp_path / "tfds", max_len=16, global_batch_size=4)
  config.data.dataset = str(test_supcon.write_products(tmp_path / "products"))
  config.baselines, config.num_seeds = {}, 1
  for stage in config.finetune.values():
    stage.train.update(num_steps=4, global_batch_size=8, checkpoint_every_steps=2)
    stage.evals.validation.every_steps = 2
  results = experiment.train_and_evaluate(config, tmp_path / "run")
  for model in ("supcon_frozen", "supcon_head", "supcon_trained"):
    assert 0.0 <= results[f"{model}/test/f1"] <= 1.0, model
  assert (tmp_path / "run" / "supcon_trained" / "best").is_dir()
  # (F) trained its head only: the encoder is the pre-trained one to the bit, weight decay included.
  pretrained = docent_jax.load(tmp_path / "run" / "supcon").params
  head_run = docent_jax.load(tmp_path / "run" / "supcon_head").params
  trained = docent_jax.load(tmp_path / "run" / "supcon_trained").params
  for encoder, name in ((head_run["bert"], "frozen"), (trained["bert"], "trained")):
    same = jax.tree.leaves(jax.tree.map(lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), encoder,
                                        pretrained["bert"]))
    assert all(same) if name == "frozen" else not all(same), name
