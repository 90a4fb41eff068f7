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

VARIANTS = ("multitask", "faq", "faq_retrieved", "faq_mining")
# Fine-tuned FAQ models run with this many seeds (the paper reports mean and standard deviation).
FAQ_SEEDS = 5
SELECTION_SEEDS = 3  # Per candidate negatives of the FAQ recipe, on its validation fifth.


def get_config(arg: str = "multitask") -> ml_collections.ConfigDict:
  variant, _, faq_source = arg.partition(",")
  if variant not in VARIANTS:
    raise ValueError(f"Unknown universal variant {variant!r}; valid: {list(VARIANTS)}.")
  if variant == "faq":
    return faq_config(faq_source or "stackfaq")
  if variant == "faq_retrieved":
    return faq_retrieved_config(faq_source or "stackfaq")
  if variant == "faq_mining":
    return faq_mining_config(faq_source or "stackfaq")
  config = ml_collections.ConfigDict()
  config.objective = "universal"
  config.name = "universal_multitask"
  config.seed = 0
  config.writers = common.WRITERS
  config.num_seeds = 1  # N > 1: each trained run again with seeds seed+1 .. seed+N-1; <model>@seeds: mean, std.
  config.model_init = ""

  config.data = common.data("", max_len=32)
  del config.data.dataset  # The sources below name the data.
  config.data.nli_sources = ("snli", "mnli")  # Builder configs, or directories of JSON-lines files.
  config.data.validation_fraction = 0.05  # Of an NLI source that has no training split (the dev sets offline).
  config.data.ppdb_pack = ""  # A PPDB 2.0 pack; "" derives the relations from WordNet.
  config.data.max_pairs_per_class = 20000  # Phrase pairs per relation; 0 keeps all.
  config.data.task_ratio = ml_collections.ConfigDict(dict(nli=1.0, phrase=1.0))  # Rows of each task per batch.

  config.model = common.bert_model()
  config.model.pooling = "mean"  # Of the encoder's outputs; "input_word_pieces": the static baseline (below).

  config.optim = common.optimizer(learning_rate=2e-5, warmup_steps=30)
  config.train = common.training(global_batch_size=32, num_steps=300, log_every_steps=25,
                                 checkpoint_every_steps=100, best_metric="validation/accuracy")
  # What every model reports: held-out accuracy of its tasks (model selection), analogies and phrase similarity
  # (both read from data.manual_dir: analogy/questions-*.txt, ppdb/ppdb-sample.tsv).
  model_evals = dict(validation=common.evaluator("pair_tasks", split="validation", max_pairs=1000, every_steps=100),
                     analogies=common.evaluator("analogies"), phrase_similarity=common.evaluator("phrase_similarity"))
  config.evals = ml_collections.ConfigDict(model_evals)

  config.mesh = common.mesh()

  encoder_evals = {name: model_evals[name] for name in ("analogies", "phrase_similarity")}
  config.baselines = ml_collections.ConfigDict({
      "universal_nli": {"data": {"task_ratio": {"phrase": 0.0}}, "evals": model_evals},
      "universal_phrase": {"data": {"task_ratio": {"nli": 0.0}}, "evals": model_evals},
      # The pretrained encoder as shipped (its task heads untrained, so no pair_tasks).
      "pretrained": {"train": {"num_steps": 0, "best_metric": ""}, "evals": encoder_evals},
      # The static baseline: the same pretrained model's input word-piece vectors, averaged.
      "static_wordpiece": {"train": {"num_steps": 0, "best_metric": ""}, "model": {"pooling": "input_word_pieces"},
                           "evals": encoder_evals},
  })
  return config


def faq_config(source: str) -> ml_collections.ConfigDict:
  """FAQ retrieval fine-tuning with its negatives chosen on validation (`selection`: retrieved, random, or a mining
  variant), beside random negatives (each over `FAQ_SEEDS` seeds), the zero-shot encoder and the TF-IDF and BM25
  baselines. `source`: 'stackfaq' (data.manual_dir holding
  faq/stackfaq, or downloaded) or a FAQ directory (faq.tsv, queries.tsv). `--config.model_init=<the
  workdir of a multitask run's model>` starts every fine-tuned model from it (multi-task, then FAQ)."""
  config = ml_collections.ConfigDict()
  config.objective = "faq_retrieval"
  config.name = "faq_selected"
  config.seed = 0
  config.num_seeds = FAQ_SEEDS  # Each trained run with seeds 0 .. FAQ_SEEDS - 1; <model>@seeds: mean, std.
  config.model_init = ""

  config.data = common.data("", max_len=32)
  del config.data.dataset  # `faq` names the data.
  config.data.faq = source
  config.data.test_fraction = 0.5  # Of the queries, where the source does not split them.
  config.data.split_seed = 0  # Fixed across the seeds of the models: every model answers the same test queries.
  config.data.validation_query_fraction = 0.0  # Of the training queries, held out as 'validation' (0: none).

  config.model = common.bert_model()

  # num_retrieved: of the num_negatives, how many are retrieved (the rest random); 0: all.
  config.loss = ml_collections.ConfigDict(dict(negatives="retrieved", num_negatives=4, num_retrieved=0, scale=20.0))
  # Retrieved negatives that are likely false negatives are dropped (`objectives/faq_negatives.py`): an item with
  # the right item's answer; one ranked outside [range_min, range_max) (0: no end); one scoring above
  # (1 - relative_margin) x the right item's score (0: off).
  config.loss.mining = ml_collections.ConfigDict(dict(exclude_same_answer=True, range_min=0, range_max=0,
                                                      relative_margin=0.0))

  config.optim = common.optimizer(learning_rate=2e-5, warmup_steps=10)
  # 16 training queries (each with its item and 4 negatives) per step; 60 steps: 1.5 epochs of StackFAQ, so that
  # the 11 runs fit in 30 min on 2 CPU cores (120 steps took 4.5 min a run).
  config.train = common.training(global_batch_size=16, num_steps=60, log_every_steps=20,
                                 checkpoint_every_steps=30)

  model_evals = dict(test=common.evaluator("faq_retrieval", split="test"))
  config.evals = ml_collections.ConfigDict(dict(
      **model_evals, tfidf=common.baseline("faq_retrieval", "tfidf", scorer="tfidf"),
      bm25=common.baseline("faq_retrieval", "bm25", scorer="bm25")))

  config.mesh = common.mesh()

  baselines = {"faq_zero_shot": {"train": {"num_steps": 0}, "evals": model_evals},
               "faq_random": {"loss": {"negatives": "random"}, "evals": model_evals}}
  config.baselines = ml_collections.ConfigDict(baselines)

  # The negatives are chosen on validation (`docent_jax/sweep/selection.py`): each candidate trains on the training
  # queries less a held-out fifth over SELECTION_SEEDS seeds, scored on that fifth; the best mean wins, or, among
  # candidates level with it (within two standard errors of the difference), the first in `preference`: the
  # paper's retrieved negatives, then random ones, then the mixes. No candidate wins on every FAQ set.
  config.selection = ml_collections.ConfigDict(dict(
      metric="validation/top1", mode="max", num_seeds=SELECTION_SEEDS,
      validation=dict(data=dict(validation_query_fraction=0.2),
                      evals=dict(validation=common.evaluator("faq_retrieval", split="validation"))),
      candidates=dict(retrieved={}, random=dict(loss=dict(negatives="random")),
                      retrieved_margin=dict(loss=dict(mining=MINING_VARIANTS["faq_mined_margin"])),
                      retrieved_1_random_3=dict(loss=dict(num_retrieved=1))),
      preference=("retrieved", "random", "retrieved_margin", "retrieved_1_random_3")))
  return config


def faq_retrieved_config(source: str) -> ml_collections.ConfigDict:
  """`faq_config` with retrieved negatives and no choice on validation (`faq_retrieved`): the recipe before it
  chose its negatives, whose runs docs/universal.md reports."""
  config = faq_config(source)
  del config["selection"]
  config.name = "faq_retrieved"
  return config


# The mining rules compared by `faq_mining` (besides the defaults of `faq_config`), as `loss.mining` overrides.
MINING_VARIANTS = {
    "faq_mined_plain": dict(exclude_same_answer=False),  # The plain top k, the paper's retrieval negatives.
    "faq_mined_margin": dict(relative_margin=0.05),  # NV-Retriever's TopK-PercPos at 95%.
    "faq_mined_window": dict(range_min=1),  # The top-ranked candidate skipped.
}
MINING_SEEDS = 2


def faq_mining_config(source: str) -> ml_collections.ConfigDict:
  """How `loss.mining`'s defaults were chosen: `faq_config`'s runs, trained on the training queries less a held-out
  fifth (`data.validation_query_fraction`) and scored on that fifth only, with its default rules ('faq_mined'), with each
  of `MINING_VARIANTS` and with random negatives, each over `MINING_SEEDS` seeds; no test query is read."""
  config = faq_retrieved_config(source)
  config.name = "faq_mined"
  config.num_seeds = MINING_SEEDS
  config.data.validation_query_fraction = 0.2
  config.evals = ml_collections.ConfigDict(dict(validation=common.evaluator("faq_retrieval", split="validation")))
  config.baselines = ml_collections.ConfigDict(
      {"faq_random": {"loss": {"negatives": "random"}},
       **{name: {"loss": {"mining": rules}} for name, rules in MINING_VARIANTS.items()}})
  return config
