"""Supervised contrastive product matching (Peeters & Bizer, 2022): SupCon pre-training, then a pair classifier.

get_config("DATASET"): abt_buy (default), wdc_computers_small, wdc_computers_medium, or a directory
in the DeepMatcher layout (tableA.csv, tableB.csv, train.csv, valid.csv, test.csv). The main model
is SupCon with source-aware sampling, fine-tuned with its encoder frozen (`supcon_frozen`) and
trained (`supcon_trained`); the baselines are self-supervised pre-training, mixed sampling and a
cross-encoder without pre-training. Examples:
  --config=configs/supcon.py:abt_buy
  --config=configs/supcon.py:/data/my_deepmatcher_dataset
"""
import ml_collections

from configs import common

DATASETS = {
    "abt_buy": "abt_buy",
    "wdc_computers_small": "wdc_computers/small",
    "wdc_computers_medium": "wdc_computers/medium",
}


def get_config(arg: str = "abt_buy") -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.objective = "supcon"
  config.name = "supcon"
  config.seed = 0

  # Offers are serialized name first, so truncation to max_len cuts long descriptions, not names.
  config.data = common.data(DATASETS.get(arg, arg), max_len=64)
  config.data.source_aware = True  # False: batches from all offers (the paper's "mixed" ablation).
  config.data.augmentation = "all"  # A name of data.augmentation.AUGMENTATIONS; "" for none.
  config.data.augmentation_probability = 0.1

  config.model = common.bert_model()

  config.loss = ml_collections.ConfigDict()
  config.loss.labels = "supervised"  # supervised (product ids, else correspondence graph) | self
  config.loss.temperature = 0.07
  config.loss.correspondence_fraction = 0.8  # Training + validation matches used as graph edges.

  config.optim = common.optimizer(learning_rate=5e-5, warmup_steps=20)
  # global_batch_size anchors per step, each with a matching partner: 2 x 32 offers.
  config.train = common.training(global_batch_size=32, num_steps=200, log_every_steps=20,
                                 checkpoint_every_steps=100)

  # Fine-tuning: early stopping on the validation loss after every epoch. A frozen encoder trains a
  # logistic regression on [u, v, |u - v|, u * v] (cheap: offer vectors are computed once); a trained
  # encoder and the cross-encoder get the same step budget, which on 2 CPU cores is under one epoch.
  config.classifier = ml_collections.ConfigDict()
  config.classifier.encoder_modes = ("frozen", "trained")
  config.classifier.max_epochs = 50
  config.classifier.patience = 10
  config.classifier.batch_size = 32
  config.classifier.frozen_learning_rate = 1e-3
  config.classifier.trained_learning_rate = 5e-5
  config.classifier.trained_max_steps = 150
  # Under one epoch, a fresh head at the encoder's rate barely leaves the prior (F1 0 on Abt-Buy), so
  # with a trained encoder the head learns 20x faster, and SupCon's head starts from the frozen fit.
  config.classifier.trained_lr_multipliers = (("^head/", 20.0),)
  config.classifier.trained_from_frozen_head = True
  config.classifier.cross_encoder_max_len = 128  # Both offers of a pair: twice data.max_len.

  config.eval = ml_collections.ConfigDict()
  config.eval.batch_size = 128

  config.mesh = common.mesh()

  frozen_only = {"classifier": {"encoder_modes": ("frozen",)}}
  baselines = {
      "self_supervised": {"loss": {"labels": "self"}, **frozen_only},
      "supcon_mixed": {"data": {"source_aware": False}, **frozen_only},
      # Equal compute: without pre-training, the cross-encoder fine-tunes for the pre-training's steps plus
      # the trained encoder's (a step of 32 pairs x 128 tokens = one of 2 x 32 offers x 64 tokens).
      "cross_encoder": {"objective": "cross_encoder", "train": {"num_steps": 0},
                        "classifier": {"trained_max_steps": (config.train.get_ref("num_steps")
                                                             + config.classifier.get_ref("trained_max_steps"))}},
  }
  if arg.startswith("wdc_computers"):
    del baselines["supcon_mixed"]  # One source: mixed sampling draws the very batches of source-aware sampling.
  config.baselines = ml_collections.ConfigDict(baselines)
  return config
