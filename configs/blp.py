"""BLP: entity encoders over descriptions trained by link prediction (Daza, Cochez & Groth, 2021).

get_config("DATASET[,SCORING]"): DATASET is wordnet_kg[/CONFIG], wn18rr, fb15k237 or a directory in the
KG-BERT layout; SCORING is transe (default), distmult, complex or simple. Examples:
  --config=configs/blp.py:wn18rr,distmult
  --config=configs/blp.py:/data/my_kg
"""
import ml_collections

from configs import common


def get_config(arg: str = "wn18rr") -> ml_collections.ConfigDict:
  dataset, _, scoring = arg.partition(",")
  config = ml_collections.ConfigDict()
  config.objective = "blp"
  config.seed = 0
  config.model_init = ""  # A run to start from: a model of this config, or any finished run's workdir.

  config.data = common.data(dataset, max_len=32)

  config.model = common.bert_model()
  config.model.encoder = "bert"  # bert | bow (BE-BOW) | cnn (DKRL)
  config.model.dim = 128
  config.model.scoring = scoring or "transe"

  config.loss = ml_collections.ConfigDict()
  config.loss.name = "margin"  # margin | nll
  config.loss.margin = 1.0
  config.loss.num_negatives = 64

  config.optim = common.optimizer(learning_rate=2e-5, warmup_steps=1000)

  config.train = common.training(global_batch_size=64, num_steps=50_000, log_every_steps=100,
                                 checkpoint_every_steps=2_000)

  config.eval = common.evaluation(batch_size=256, best_metric="validation/mrr")
  config.eval.link_prediction_batch_size = 512
  # BLP keeps the checkpoint of the best validation MRR and reports test numbers from it.
  config.evals = ml_collections.ConfigDict(dict(
      validation=dict(type="link_prediction", split="validation", every_steps=2_000),
      test=dict(type="link_prediction", split="test"),
      classification=dict(type="entity_classification"),  # C from BLP's grid, 0.1 to 1e4, by validation.
  ))

  config.mesh = common.mesh()

  # Runs that share this config but for the values given; each trains and evaluates beside the main model.
  config.name = "blp_" + config.model.get_ref("scoring")
  config.baselines = ml_collections.ConfigDict()
  return config
