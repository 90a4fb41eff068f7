"""BLP: entity encoders over descriptions trained by link prediction (Daza, Cochez & Groth, 2021).

get_config("DATASET[,SCORING]"): DATASET is wordnet_kg[/CONFIG], wn18rr, fb15k237 or a directory in the
KG-BERT layout; SCORING is transe (default), distmult, complex or simple. Examples:
  --config=configs/blp.py:wn18rr,distmult
  --config=configs/blp.py:/data/my_kg
"""
import ml_collections


def get_config(arg: str = "wn18rr") -> ml_collections.ConfigDict:
  dataset, _, scoring = arg.partition(",")
  config = ml_collections.ConfigDict()
  config.objective = "blp"
  config.seed = 0

  config.data = ml_collections.ConfigDict()
  config.data.dataset = dataset
  config.data.tfds_data_dir = ml_collections.FieldReference(None, field_type=str)  # TFDS default when None.
  config.data.manual_dir = ml_collections.FieldReference(None, field_type=str)  # Download when None and online.
  config.data.max_len = 32

  config.model = ml_collections.ConfigDict()
  config.model.encoder = "bert"  # bert | bow (BE-BOW) | cnn (DKRL)
  config.model.pretrained = "minilm-l6"  # Alias or Hugging Face BERT directory; "" = fresh, shaped by model.bert.
  config.model.tokenizer = "minilm-l6"
  config.model.bert = ml_collections.ConfigDict(dict(  # Only used when model.pretrained is "".
      hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536))
  config.model.dim = 128
  config.model.scoring = scoring or "transe"
  config.model.dtype = "float32"

  config.loss = ml_collections.ConfigDict()
  config.loss.name = "margin"  # margin | nll
  config.loss.margin = 1.0
  config.loss.num_negatives = 64

  config.optim = ml_collections.ConfigDict()
  config.optim.learning_rate = 2e-5
  config.optim.warmup_steps = 1000
  config.optim.weight_decay = 0.01
  config.optim.grad_clip_norm = 1.0
  config.optim.b1 = 0.9
  config.optim.b2 = 0.999
  config.optim.eps = 1e-8
  config.optim.lr_multipliers = ()  # ((param path regex, learning-rate multiplier), ...)

  config.train = ml_collections.ConfigDict()
  config.train.global_batch_size = 64
  config.train.num_steps = 50_000
  config.train.log_every_steps = 100
  config.train.checkpoint_every_steps = 2_000
  config.train.keep_checkpoints = 3

  config.eval = ml_collections.ConfigDict()
  config.eval.batch_size = 256
  config.eval.link_prediction_batch_size = 512
  config.eval.classification_c_values = (0.01, 0.1, 1.0, 10.0, 100.0)

  config.mesh = ml_collections.ConfigDict()
  config.mesh.shape = (-1, 1)  # (data, model); -1 takes the remaining devices.
  config.mesh.rules = ()  # Overrides of parallel.DEFAULT_RULES: ((logical axis, mesh axes), ...).

  # Runs that share this config but for the values given; each trains and evaluates beside the main model.
  config.name = "blp_" + config.model.get_ref("scoring")
  config.baselines = ml_collections.ConfigDict()
  return config
