"""Universal representations from word to sentence (Li & Zhao): siamese multi-task training of one encoder.

get_config("VARIANT"): multitask (default): NLI and phrase relations in every batch, with the NLI-only
(Sentence-BERT style) and phrase-only ablations, the pretrained encoder as shipped and a static word-piece
model as baselines. The offline data: the SNLI and MultiNLI dev
sets (`data.manual_dir` holding nli/snli and nli/mnli; downloaded in full when online and no manual
directory is given) and phrase relations derived from WordNet, standing in for PPDB (`data.ppdb_pack` names
a PPDB 2.0 pack instead). Example:
  --config=configs/universal.py:multitask --config.data.manual_dir=/data
"""
import ml_collections

from configs import common

VARIANTS = ("multitask",)


def get_config(arg: str = "multitask") -> ml_collections.ConfigDict:
  if arg not in VARIANTS:
    raise ValueError(f"Unknown universal variant {arg!r}; valid: {list(VARIANTS)}.")
  config = ml_collections.ConfigDict()
  config.objective = "universal"
  config.name = "universal_multitask"
  config.seed = 0
  config.model_init = ""

  config.data = common.data("", max_len=32)
  del config.data.dataset  # The sources below name the data.
  config.data.nli_sources = ("snli", "mnli")  # Builder configs, or directories of JSON-lines files.
  config.data.validation_fraction = 0.05  # Of an NLI source that has no training split (the dev sets offline).
  config.data.ppdb_pack = ""  # A PPDB 2.0 pack; "" derives the relations from WordNet.
  config.data.max_pairs_per_class = 20000  # Phrase pairs per relation; 0 keeps all.
  config.data.task_ratio = ml_collections.ConfigDict(dict(nli=1.0, phrase=1.0))  # Rows of each task per batch.

  config.model = common.bert_model()

  config.optim = common.optimizer(learning_rate=2e-5, warmup_steps=30)
  config.train = common.training(global_batch_size=32, num_steps=300, log_every_steps=25,
                                 checkpoint_every_steps=100)

  config.eval = common.evaluation(batch_size=128, best_metric="validation/accuracy")
  # What every model reports: held-out accuracy of its tasks (model selection), analogies and phrase similarity
  # (both read from data.manual_dir: analogy/questions-*.txt, ppdb/ppdb-sample.tsv).
  model_evals = dict(validation=dict(type="pair_tasks", split="validation", every_steps=100),
                     analogies=dict(type="analogies"), phrase_similarity=dict(type="phrase_similarity"))
  # The static baseline: the reference model's input word pieces, averaged (reported once, by the main model).
  static = dict(static_analogies=dict(type="analogies", static=True, report_as="static_wordpiece"),
                static_similarity=dict(type="phrase_similarity", static=True, report_as="static_wordpiece"))
  config.evals = ml_collections.ConfigDict({**model_evals, **static})

  config.mesh = common.mesh()

  config.baselines = ml_collections.ConfigDict({
      "universal_nli": {"data": {"task_ratio": {"phrase": 0.0}}, "evals": model_evals},
      "universal_phrase": {"data": {"task_ratio": {"nli": 0.0}}, "evals": model_evals},
      # The pretrained encoder as shipped (its task heads untrained, so no pair_tasks).
      "pretrained": {"train": {"num_steps": 0}, "eval": {"best_metric": ""},
                     "evals": {name: model_evals[name] for name in ("analogies", "phrase_similarity")}},
  })
  return config
