"""Supervised contrastive product matching (Peeters & Bizer, 2022): SupCon pre-training, then a pair classifier.

get_config("DATASET[,SETTING]"): abt_buy (default), wdc_computers_small, wdc_computers_medium, or a directory
in the DeepMatcher layout (tableA.csv, tableB.csv, train.csv, valid.csv, test.csv); SETTING `paper` selects
the paper's own training setting and its four pair classifiers over three seeds (abt_buy; see `paper_setting`),
`sampling` the source-aware against mixed sampling curve (see `sampling_setting`), `cross_encoder` the
cross-encoder baseline alone over three seeds (see `cross_encoder_setting`). The main model is SupCon with
source-aware sampling; its pair classifier is reported with the encoder frozen, as a logistic regression on the
pre-trained offer vectors (`supcon_frozen`) and as the paper's classification layer trained on the frozen
encoder (`supcon_head`, R-SupCon (F)), and with the encoder trained (`supcon_trained`, (UF): a fine-tuning run
that starts from the pre-trained params). The baselines are self-supervised pre-training, mixed sampling and a
cross-encoder without pre-training. Examples:
  --config=configs/supcon.py:abt_buy
  --config=configs/supcon.py:/data/my_deepmatcher_dataset
  --config=configs/supcon.py:abt_buy,paper --config.model.pretrained=/models/roberta-base
  --config=configs/supcon.py:abt_buy,sampling --config.train.num_steps=3000
  --config=configs/supcon.py:abt_buy,cross_encoder
"""
import math

import ml_collections

from configs import common

DATASETS = {
    "abt_buy": "abt_buy",
    "wdc_computers_small": "wdc_computers/small",
    "wdc_computers_medium": "wdc_computers/medium",
}
FINETUNE_STEPS = 150
# The frozen-encoder head: a step costs a forward pass only. At the fine-tuning head's 1e-3 a fresh head on
# MiniLM's frozen Abt-Buy vectors kept every validation pair below p = 0.5 for 150 steps (F1 0); at 1e-2 its
# validation F1 passed the logistic-regression probe's (0.796) by step 250 (0.810; 0.816 at 300).
FROZEN_HEAD_STEPS = 450
FROZEN_HEAD_LEARNING_RATE = 1e-2
# Abt-Buy's offers in training or validation pairs (pre-training's epoch) and its training pairs (fine-tuning's).
ABT_BUY_PRETRAINING_OFFERS = 2_034
ABT_BUY_TRAINING_PAIRS = 5_743
CROSS_ENCODER_SEEDS = 3
PAPER_SEEDS = 3  # The paper reports the mean of three runs.


def pair_classifier_training(num_steps) -> dict:
  """A pair classifier trained end to end (Peeters & Bizer: AdamW, 5% warm-up, linear decay), evaluated on
  validation every 50 steps; the params of the best validation F1 are reported. `num_steps` may be a
  FieldReference. Under one epoch on 2 CPU cores, a fresh head at the encoder's rate barely leaves the prior
  (F1 0 on Abt-Buy), so the head learns 20x faster."""
  return dict(
      optim=dict(learning_rate=5e-5, warmup_steps=num_steps // 20, lr_multipliers=(("^head/", 20.0),)),
      train=dict(num_steps=num_steps, log_every_steps=25, checkpoint_every_steps=50, best_metric="validation/f1"),
      evals=dict(validation=common.evaluator("pair_matching", split="validation", every_steps=50),
                 test=common.evaluator("pair_matching", split="test")),
      finetune={},
  )


def frozen_head_training(num_steps, learning_rate: float) -> dict:
  """Peeters & Bizer's frozen setting (F): a fresh classification layer trained with binary cross-entropy on the
  frozen encoder (no gradient into it, and no update: the optimizer scales every other param's update by 0, weight
  decay included) at `learning_rate`, otherwise as `pair_classifier_training`."""
  stage = pair_classifier_training(num_steps)
  stage["model"] = dict(freeze_encoder=True, head_init="fresh")
  stage["optim"].update(learning_rate=learning_rate, lr_multipliers=(("^head/", 1.0), (".", 0.0)))
  return stage


def get_config(arg: str = "abt_buy") -> ml_collections.ConfigDict:
  arg, _, setting = arg.partition(",")
  if setting not in ("", *SETTINGS):
    raise ValueError(f"configs/supcon.py:{arg},{setting}: unknown setting {setting!r}; valid: {list(SETTINGS)} "
                     "or none.")
  config = ml_collections.ConfigDict()
  config.objective = "supcon"
  config.name = "supcon"
  config.seed = 0
  config.writers = common.WRITERS
  config.num_seeds = 1  # N > 1: each trained run again with seeds seed+1 .. seed+N-1; <model>@seeds: mean, std.
  config.model_init = ""  # A run to start from (its reported params): a run directory, or a run of this config.

  # Offers are serialized name first, so truncation to max_len cuts long descriptions, not names.
  config.data = common.data(DATASETS.get(arg, arg), max_len=64)
  config.data.source_aware = True  # False: batches from all offers (the paper's "mixed" ablation).
  config.data.augmentation = "all"  # A name of data.augmentation.AUGMENTATIONS; "" for none.
  config.data.augmentation_probability = 0.1

  config.model = common.bert_model()
  # A fine-tuned pair classifier's head starts at the frozen encoder's linear probe (or 'fresh').
  config.model.head_init = "probe"

  config.loss = ml_collections.ConfigDict()
  config.loss.labels = "supervised"  # supervised (product ids, else correspondence graph) | self
  config.loss.temperature = 0.07
  config.loss.correspondence_fraction = 0.8  # Training + validation matches used as graph edges.

  config.optim = common.optimizer(learning_rate=5e-5, warmup_steps=20)
  # global_batch_size anchors per step, each with a matching partner: 2 x 32 offers.
  config.train = common.training(global_batch_size=32, num_steps=200, log_every_steps=20,
                                 checkpoint_every_steps=100)

  # The frozen encoder's pair classifier: a logistic regression on [u, v, |u - v|, u * v], C chosen on validation F1.
  probe = common.evaluator("pair_probe", c_values=(0.01, 0.1, 1.0, 10.0, 100.0))
  config.evals = ml_collections.ConfigDict(dict(frozen=dict(probe, report_as="supcon_frozen")))
  # The trained encoder's: a fine-tuning run (`supcon_trained`) from the pre-trained params.
  # The paper's frozen classifier, R-SupCon (F): a fresh head trained on the frozen encoder (`supcon_head`).
  config.finetune = ml_collections.ConfigDict(dict(
      trained=dict(objective="pair_matching", **pair_classifier_training(FINETUNE_STEPS)),
      head=dict(objective="pair_matching", **frozen_head_training(FROZEN_HEAD_STEPS, FROZEN_HEAD_LEARNING_RATE))))

  config.mesh = common.mesh()

  frozen_only = {"evals": {"frozen": probe}, "finetune": {}}
  baselines = {
      "self_supervised": {"loss": {"labels": "self"}, **frozen_only},
      "supcon_mixed": {"data": {"source_aware": False}, **frozen_only},
      # Equal compute: without pre-training, the cross-encoder trains for the pre-training's steps plus the
      # fine-tuning's (a step of 32 pairs x 128 tokens = one of 2 x 32 offers x 64 tokens).
      "cross_encoder": {"objective": "cross_encoder", "data": {"max_len": 128},
                        **pair_classifier_training(config.train.get_ref("num_steps") + FINETUNE_STEPS)},
  }
  if arg.startswith("wdc_computers"):
    del baselines["supcon_mixed"]  # One source: mixed sampling draws the very batches of source-aware sampling.
  config.baselines = ml_collections.ConfigDict(baselines)
  return SETTINGS[setting](config, arg) if setting else config


def paper_setting(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """Peeters & Bizer's setting for Abt-Buy, from the paper and its released scripts: RoBERTa-base
  (`model.pretrained`: its Hugging Face directory), offers of 128 tokens (the scripts'; the paper states no
  length); pre-training on batches of 1024 offers (512 anchors and their partners) at 5e-5, temperature 0.07,
  200 epochs, source-aware; then a fresh pair classifier on 64 pairs a step at 5e-5, with AdamW (weight decay
  0.01), 5% warm-up and linear decay, the epoch of the lowest validation loss reported. The paper's four
  classifiers, each over `PAPER_SEEDS` seeds (it reports the mean of 3 runs; Abt-Buy test F1 in parentheses):
    supcon_head                       R-SupCon (F)+aug: `all` augmentation in pre-training, then a classification
                                      layer trained with binary cross-entropy for 5 epochs (the scripts')
                                      on the frozen encoder (94.29, the paper's best)
    supcon_trained                    (UF)+aug: the classifier and encoder trained end to end for 50 epochs
                                      (77.84)
    supcon_no_augmentation_head       (F) without augmentation
    supcon_no_augmentation_trained    (UF) without augmentation (79.99)
  The paper (Sec. 3) states fine-tuning on 64 pairs a step for up to 50 epochs, stopped early after 10 epochs
  without a lower validation loss, as `supcon_trained` does (`train.early_stopping`, an evaluation every epoch);
  the 5 and 50 epochs are the released scripts'. The paper finds the frozen
  encoder better than the fine-tuned one on every dataset. Its scripts also augment the classifier's training
  pairs in the +aug runs; here augmentation is in pre-training only. The frozen encoder's scikit-learn probe is
  reported beside (`supcon_frozen`, `supcon_no_augmentation_frozen`); the other baselines are left out, each a
  run of its own at this scale."""
  if dataset != "abt_buy":
    raise ValueError(f"configs/supcon.py: the paper setting is defined for abt_buy, not {dataset!r}.")
  pretraining_steps = 200 * math.ceil(ABT_BUY_PRETRAINING_OFFERS / 1024)
  epoch = math.ceil(ABT_BUY_TRAINING_PAIRS / 64)
  config.data.update(max_len=128, augmentation="all", source_aware=True)
  config.model.pretrained = "roberta-base"
  config.model.tokenizer = config.model.get_ref("pretrained")
  # RoBERTa-base's shape: what compiling this setting ahead of time builds where its weights are not at hand.
  config.model.bert.update(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
  config.loss.temperature = 0.07
  config.optim.update(learning_rate=5e-5, warmup_steps=pretraining_steps // 20, weight_decay=0.01)
  config.train.update(global_batch_size=512, num_steps=pretraining_steps, checkpoint_every_steps=100)
  config.finetune = ml_collections.ConfigDict(dict(head=_paper_classifier(5, epoch, frozen=True),
                                                   trained=_paper_classifier(50, epoch, frozen=False)))
  probe = config.evals.frozen.to_dict()
  config.baselines = ml_collections.ConfigDict({"supcon_no_augmentation": {
      "data": {"augmentation": ""},
      "evals": {"frozen": dict(probe, report_as="supcon_no_augmentation_frozen")}}})
  config.num_seeds = PAPER_SEEDS
  return config


def _paper_classifier(epochs: int, epoch: int, *, frozen: bool) -> dict:
  """The paper's pair classifier training over `epochs` epochs of `epoch` steps: on the frozen encoder (F), else
  end to end (UF); a fresh head either way."""
  num_steps = epochs * epoch
  stage = frozen_head_training(num_steps, 5e-5) if frozen else pair_classifier_training(num_steps)
  stage["objective"] = "pair_matching"
  stage["model"] = dict(stage.get("model", {}), head_init="fresh")
  stage["optim"].update(learning_rate=5e-5, warmup_steps=num_steps // 20, weight_decay=0.01)
  if not frozen:
    stage["optim"]["lr_multipliers"] = ()
  stage["train"].update(global_batch_size=64, checkpoint_every_steps=epoch)
  stage["evals"]["validation"]["every_steps"] = epoch
  stage["train"].update(best_metric="validation/loss", best_mode="min")
  if not frozen:  # "up to 50 epochs", stopped after 10 epochs without a lower validation loss (Sec. 3).
    stage["train"]["early_stopping"] = dict(metric="", mode="", patience=10, min_delta=0.0)
  return stage


def sampling_setting(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """Source-aware against mixed sampling over a longer pre-training (the paper reports the drop without
  source-aware sampling, Abt-Buy F1 93.70 -> 38.24, Amazon-Google 79.28 -> 42.44): SupCon with source-aware and
  with mixed sampling, 1,000 steps each (`train.num_steps`), each probed with the frozen
  encoder every 200 steps (`evals.frozen.every_steps`, TensorBoard `test/f1`) and given the trained and the
  frozen-encoder pair classifiers at the end. The other baselines are left out."""
  if "supcon_mixed" not in config.baselines:
    raise ValueError(f"configs/supcon.py: {dataset!r} has one source, so mixed sampling is source-aware sampling.")
  config.train.update(num_steps=1_000, checkpoint_every_steps=200)
  config.evals.frozen.every_steps = 200
  # The mixed-sampling baseline as defined above, probed as often as the main model (one flag sets both) and,
  # without its own `finetune`, fine-tuned like it.
  mixed = config.baselines.supcon_mixed
  mixed.evals.frozen.every_steps = config.evals.frozen.get_ref("every_steps")
  del mixed["finetune"]
  config.baselines = ml_collections.ConfigDict({"supcon_mixed": mixed})
  return config


def cross_encoder_setting(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """The cross-encoder baseline alone, as defined above (its steps those of the default pre-training plus
  fine-tuning), trained with `CROSS_ENCODER_SEEDS` seeds (`num_seeds`: runs `cross_encoder` and
  `cross_encoder_seed<N>`); results.json gets their mean and standard deviation as `cross_encoder@seeds/...`."""
  del dataset
  cross_encoder = config.baselines.cross_encoder.to_dict()
  for key in ("evals", "finetune"):  # Given whole by the baseline, as the trainer applies a baseline's overrides.
    config[key] = ml_collections.ConfigDict()
  config.update(cross_encoder)
  config.name = "cross_encoder"
  config.baselines = ml_collections.ConfigDict()
  config.num_seeds = CROSS_ENCODER_SEEDS
  return config


SETTINGS = {"paper": paper_setting, "sampling": sampling_setting, "cross_encoder": cross_encoder_setting}
