"""BLP: entity encoders over descriptions trained by link prediction (Daza, Cochez & Groth, 2021).

get_config("DATASET[,SCORING][,SETTING]"): DATASET is wordnet_kg[/CONFIG], wn18rr, fb15k237, wikidata5m (with
BLP's training values for it, see `wikidata5m_setting`) or a directory in the KG-BERT layout; SCORING is transe
(default), distmult, complex or simple; SETTING `paper` selects the paper's own training setting of BLP and
`paper_bebow` that of its BE-BOW baseline (wn18rr and fb15k237; see `paper_setting`, `paper_bebow_setting`), and
`transductive` trains and ranks the transductive triples (`transductive_setting`). Examples:
  --config=configs/blp.py:wn18rr,distmult
  --config=configs/blp.py:wikidata5m --config.data.manual_dir=/data/wikidata5m
  --config=configs/blp.py:/data/my_kg
  --config=configs/blp.py:wn18rr,transe,paper --config.model.pretrained=/models/bert-base-cased
  --config=configs/blp.py:wn18rr,transe,paper_bebow --config.model.pretrained=minilm-l6
  --config=configs/blp.py:fb15k237,transe,transductive
"""
import math

import ml_collections

from configs import common

# Inductive training triples of the paper's benchmarks: one epoch.
PAPER_TRAIN_TRIPLES = {"wn18rr": 69_585, "fb15k237": 215_085}
# Wikidata5M's inductive training triples, from the release's page (deepgraphlearning.github.io/project/wikidata5m).
WIKIDATA5M_TRAIN_TRIPLES = 20_496_514


def get_config(arg: str = "wn18rr") -> ml_collections.ConfigDict:
  dataset, _, rest = arg.partition(",")
  scoring, _, setting = rest.partition(",")
  if setting not in ("", *PAPER_SETTINGS):
    raise ValueError(f"configs/blp.py:{arg}: unknown setting {setting!r}; valid: {sorted(PAPER_SETTINGS)} or none.")
  config = ml_collections.ConfigDict()
  config.objective = "blp"
  config.seed = 0
  config.writers = common.WRITERS
  config.num_seeds = 1  # N > 1: each trained run again with seeds seed+1 .. seed+N-1; <model>@seeds: mean, std.
  config.model_init = ""  # A run to start from (its reported params): a run directory, or a run of this config.

  config.data = common.data(dataset, max_len=32)
  config.data.drop_stopwords = False  # BLP drops English stop words and punctuation for its BOW and CNN baselines.
  config.data.setting = "inductive"  # inductive | transductive (see `transductive_setting`).
  # Train on the triples among this fraction of the training entities (drawn with `seed`); the evaluation's
  # entities and triples stay whole: BLP's Fig. 2, MRR against the number of training entities.
  config.data.train_entity_fraction = 1.0

  config.model = common.bert_model(inference_batch_size=256)
  config.model.encoder = "bert"  # bert | bert_mean (SBERT's pooling) | bow (BE-BOW) | cnn (DKRL)
  config.model.dim = 128  # Entity vectors; bow: 0 = the word-piece embeddings' width, with no linear map.
  config.model.scoring = scoring or "transe"
  # BERT, one process: a training batch's shorter half of descriptions is encoded cut to this many word pieces when
  # they all fit (the same vectors, less time per step; docs/blp.md#training-efficiency-on-cpu); 0: off.
  config.model.short_half_width = 24

  config.loss = ml_collections.ConfigDict()
  config.loss.name = "margin"  # margin | nll
  config.loss.margin = 1.0
  config.loss.num_negatives = 64

  config.optim = common.optimizer(learning_rate=2e-5, warmup_steps=1000)

  # BLP keeps the checkpoint of the best validation MRR and reports test numbers from it.
  config.train = common.training(global_batch_size=64, num_steps=50_000, log_every_steps=100,
                                 checkpoint_every_steps=2_000, best_metric="validation/mrr")

  # Link prediction ranks `query_batch_size` queries against every entity at a time.
  query_batch_size = ml_collections.FieldReference(512)
  config.evals = ml_collections.ConfigDict(dict(
      validation=common.evaluator("link_prediction", split="validation", every_steps=2_000,
                                  query_batch_size=query_batch_size),
      test=common.evaluator("link_prediction", split="test", query_batch_size=query_batch_size),
      classification=common.evaluator("entity_classification"),  # C from BLP's grid, 0.1 to 1e4, by validation.
  ))

  config.mesh = common.mesh()

  # Runs that share this config but for the values given; each trains and evaluates beside the main model.
  config.name = "blp_" + config.model.get_ref("scoring")
  config.baselines = ml_collections.ConfigDict()
  if dataset == "wikidata5m":
    config = wikidata5m_setting(config)
  return PAPER_SETTINGS[setting](config, dataset) if setting else config


def wikidata5m_setting(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """BLP's Wikidata5M values where they differ from the defaults, from its released commands (github.com/dfdazac/blp:
  scripts/blp-*-wikidata5m.sh, train.py): descriptions of 64 word pieces, 1024 triples a batch, learning rate 5e-5,
  5 epochs with warm-up over the first 20% then linear decay, and validation once an epoch. BLP ranks Wikidata5M's
  validation triples among the validation entities only, as the `transfer_` metrics do, and keeps the model with the
  best such MRR (raw in BLP, filtered here). Left at the defaults: the encoder (BLP's is bert-base-cased, as in
  `paper_setting`), the weight decay (BLP has none) and the evaluation batch sizes (speed only); BLP's ComplEx runs
  add an L2 penalty of 1e-3, which this code does not have."""
  steps_per_epoch = math.ceil(WIKIDATA5M_TRAIN_TRIPLES / 1024)
  num_steps = 5 * steps_per_epoch
  config.data.max_len = 64
  config.optim.update(learning_rate=5e-5, warmup_steps=num_steps // 5)
  config.train.update(global_batch_size=1024, num_steps=num_steps)
  config.evals.validation.every_steps = steps_per_epoch
  config.train.best_metric = "validation/transfer_mrr"
  return config


def _steps_per_epoch(dataset: str) -> int:
  """Steps in one epoch of the dataset's inductive training triples at BLP's 64 triples a batch."""
  if dataset not in PAPER_TRAIN_TRIPLES:
    raise ValueError(f"configs/blp.py: the paper settings are defined for {sorted(PAPER_TRAIN_TRIPLES)}, "
                     f"not {dataset!r}.")
  return math.ceil(PAPER_TRAIN_TRIPLES[dataset] / 64)


def paper_setting(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """Daza et al.'s setting, from their released training commands: BERT-base-cased (`model.pretrained`: its
  Hugging Face directory), 128-d entities, descriptions of 32 word pieces, 64 triples a batch with 64
  negatives each, margin loss, Adam at 2e-5 without weight decay, warm-up over the first 20% of 40 epochs
  then linear decay, and the checkpoint of the best validation MRR (evaluated every epoch) reported. The paper
  (Sec. 4.1) states the 40 epochs, the batch of 64, the 64 negatives, the 20% warm-up and Adam, but of the
  learning rate only its grid, {1e-5, 2e-5, 5e-5}: 2e-5 is the released commands' value."""
  steps_per_epoch = _steps_per_epoch(dataset)
  num_steps = 40 * steps_per_epoch
  config.data.max_len = 32
  config.model.pretrained = "bert-base-cased"
  config.model.tokenizer = config.model.get_ref("pretrained")
  config.model.bert.update(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
  config.model.dim = 128
  config.loss.update(name="margin", margin=1.0, num_negatives=64)
  config.optim.update(learning_rate=2e-5, warmup_steps=num_steps // 5, weight_decay=0.0)
  config.train.update(global_batch_size=64, num_steps=num_steps, checkpoint_every_steps=steps_per_epoch)
  config.evals.validation.every_steps = steps_per_epoch
  config.train.best_metric = "validation/mrr"
  # The paper's grid for BLP (Sec. 4.1, chosen on FB15k-237's validation MRR), which `python -m docent_jax.sweep`
  # runs when given no --sweep. Its third axis, L2 coefficients {0, 1e-2, 1e-3}, penalises the batch's vectors,
  # which this trainer does not (see `paper_bebow_setting`).
  config.sweep = ("loss.name=margin,nll", "optim.learning_rate=1e-5,2e-5,5e-5")
  return config


def paper_bebow_setting(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """BLP's BE-BOW baseline as its released code trains it (scripts/bert-bow-*.sh, models.py, data.py): the mean
  of BERT-base-cased's input word-piece embeddings with no linear map (768-d entities and relations) over
  descriptions without English stop words and punctuation, cut to 32 word pieces; 64 triples a batch with 64
  negatives each, margin loss; Adam at a constant 1e-4 with no warm-up, clipping or weight decay; 80 epochs;
  the checkpoint of the best validation MRR (evaluated every epoch) reported. Not reproduced: BLP's L2 penalty
  of 1e-2 on the batch's vectors (under TransE's normalisation its entity terms are constant; the relation
  term is left out)."""
  steps_per_epoch = _steps_per_epoch(dataset)
  num_steps = 80 * steps_per_epoch
  config.data.update(max_len=32, drop_stopwords=True)
  config.model.update(encoder="bow", dim=0, pretrained="bert-base-cased")
  config.model.tokenizer = config.model.get_ref("pretrained")
  config.model.bert.update(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
  config.loss.update(name="margin", margin=1.0, num_negatives=64)
  config.optim.update(learning_rate=1e-4, warmup_steps=0, schedule="constant", grad_clip_norm=0.0, weight_decay=0.0)
  config.train.update(global_batch_size=64, num_steps=num_steps, checkpoint_every_steps=steps_per_epoch)
  config.evals.validation.every_steps = steps_per_epoch
  config.train.best_metric = "validation/mrr"
  return config


def transductive_setting(config: ml_collections.ConfigDict, dataset: str) -> ml_collections.ConfigDict:
  """BLP's transductive evaluation (the paper's appendix): training, validation and test triples are the
  source's transductive ones (train.tsv, dev.tsv, test.tsv), whose entities are, but for a few, all seen in
  training; validation is ranked among the entities of training and validation triples, test among all, filtered
  by every triple (BLP's train.py). Entity classification is left out: its classes follow the inductive
  entity split. The training values are this config's; combine with `--config.train.*` for longer runs."""
  del dataset
  config.data.setting = "transductive"
  del config.evals["classification"]
  return config


PAPER_SETTINGS = {"paper": paper_setting, "paper_bebow": paper_bebow_setting, "transductive": transductive_setting}
