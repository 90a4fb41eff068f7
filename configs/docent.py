"""DOCENT: entity representations from everything written about the entities (Zemlyanskiy et al., 2021).

get_config("VARIANT[,DATASET[,SETTING]]"): VARIANT is dual (RELIC: P(entity | sentence)), full (entity tokens
in BERT's vocabulary, masked prediction of words and entities) or hybrid (dual encoder plus masked LM
conditioned on the entity); DATASET is
imdb_movielens (default, also when empty), reviews2movielens, or a directory of review TSV files; SETTING
`tag_curve` selects the open-vocabulary tag curve (see `tag_curve`). Examples:
  --config=configs/docent.py:dual
  --config=configs/docent.py:dual,/data/my_reviews --config.loss.negatives=full
  --config=configs/docent.py:dual,imdb_movielens,tag_curve
  --config=configs/docent.py:dual --config.data.search_queries=/data/queries.jsonl
"""
import ml_collections

from configs import common

VARIANTS = ("dual", "full", "hybrid")
NUM_STEPS = {"dual": 1_500, "full": 1_000, "hybrid": 800}
# Fractions of the tag vocabulary trained on: the default run's open-vocabulary point, and the curve's points.
OPEN_VOCABULARY_FRACTION = 0.5
TAG_CURVE_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9)


def get_config(arg: str = "dual") -> ml_collections.ConfigDict:
  variant, _, rest = arg.partition(",")
  dataset, _, setting = rest.partition(",")
  if variant not in VARIANTS:
    raise ValueError(f"Unknown DOCENT variant {variant!r}; valid: {list(VARIANTS)}.")
  if setting not in ("", *SETTINGS):
    raise ValueError(f"configs/docent.py:{arg}: unknown setting {setting!r}; valid: {list(SETTINGS)} or none.")
  config = ml_collections.ConfigDict()
  config.objective = f"docent_{variant}"
  config.name = f"docent_{variant}"
  config.seed = 0
  config.writers = common.WRITERS
  config.num_seeds = 1  # N > 1: each trained run again with seeds seed+1 .. seed+N-1; <model>@seeds: mean, std.
  config.model_init = ""  # A run to start from (its reported params): a run directory, or a run of this config.

  config.data = common.data(dataset or "imdb_movielens", max_len=64)
  # The labels of the evaluations. A movie is relevant to a tag query at `search_min_votes` votes. A tag is
  # positive for a held-out movie at `tag_vote_threshold` votes or more (genres: 1). The paper labels a pair
  # positive "iff #(m, t) > T" with "T = 2" (its tag-prediction metrics), i.e. at 3 votes or more:
  # --config.data.tag_vote_threshold=3 in this convention. In imdb_movielens only 5 movie-tag pairs reach 2 votes,
  # so 1 is the default here.
  config.data.search_min_votes = 1
  # A JSON Lines file of natural-language queries and their relevant movies (`search_queries.load_query_set`),
  # searched over all movies by the model and the search baselines (`queries/`), besides the tag queries.
  config.data.search_queries = ""
  config.data.tag_vote_threshold = 1

  config.model = common.bert_model()
  # Of the cosine similarity; learned from this value unless learn_scale is False. The paper's score is the plain
  # cosine (scale=1, learn_scale=False); a softmax over hundreds of entities of logits in [-1, 1] is nearly uniform.
  config.model.scale = 20.0
  config.model.learn_scale = True
  # Entity rows start from some of the entity's sentences, or random. sentence_mean: the mean pretrained
  # f(s) (dual, hybrid), the IDF-weighted mean word-piece embedding (full: its rows are word pieces).
  # On imdb_movielens the sentence mean raised DUAL's search MRR (see README).
  config.model.entity_init = "sentence_mean"
  config.model.entity_init_sentences = 16
  # The entity table's rows, padded to a multiple of this (rows that are never an entity), split evenly over any
  # mesh of up to 128 devices, or of a divisor of it: jit splits only equal shards, and a table it cannot split is
  # replicated and gathered on every step (docs/cloud_tpu.md). Raise it for a larger mesh.
  config.model.entity_rows_multiple = 128
  config.model.sentence_pooling = "cls"  # f(s) of DUAL and HYBRID: [CLS] (RELIC's) | mean.

  config.loss = ml_collections.ConfigDict()
  # full: softmax over the whole sharded table (every row gets a gradient each step; the default, as it
  # searched better on imdb_movielens) | in_batch: the other sentences' entities, across all devices.
  config.loss.negatives = "full"
  config.loss.mlm_weight = 1.0  # lambda of L_E + lambda * L_MLM (full, hybrid)
  config.loss.mlm_rate = 0.15  # Word pieces chosen for masked prediction (full, hybrid).
  config.loss.entity_mask_rate = 0.5  # Examples whose entity token is masked (full).

  # Each entity row is updated only when one of its sentences is in the batch.
  config.optim = common.optimizer(learning_rate=5e-5, warmup_steps=100, lr_multipliers=(("^entities/", 100.0),))

  # Each variant's run (with baselines and evaluation) fits in 30 min on 2 CPU cores with MiniLM-L6:
  # a HYBRID step runs BERT twice (clean and masked sentence), a FULL step adds the words + entities softmax.
  config.train = common.training(global_batch_size=32, num_steps=NUM_STEPS[variant], log_every_steps=50,
                                 checkpoint_every_steps=500)

  # Bag-of-sentences baselines (bos search, bos_bert tags): sentences kept per movie, and the pooling of the
  # pretrained encoder (mean | cls).
  bos_sentences_per_movie = ml_collections.FieldReference(8)
  bos_pooling = ml_collections.FieldReference("mean")
  # The model's search, and the untrained baselines (reported under their own names): BM25 search, popular tags
  # and TF-IDF for tags and genres. Bag-of-sentences search and BoS-BERT tags are runs (`baselines` below).
  config.evals = ml_collections.ConfigDict(dict(
      search=common.evaluator("movie_search"),
      bm25=common.baseline("bm25_search", "bm25"),
      top_tags=common.baseline("top_tags", "top_tags"),
      tfidf=common.baseline("tfidf_tags", "tfidf")))
  # Tag prediction fine-tunes a scorer against the frozen entity vectors (AdamW, linear decay), one run per
  # task (`finetune` below): f(t) for DUAL and HYBRID, a pair classifier for FULL. These settings are shared by
  # every tag run (each sets its task in `tags` too).
  config.tags = ml_collections.ConfigDict(dict(
      finetune_steps=100, learning_rate=1e-4, weight_decay=0.01,
      items_per_step=32,  # Training movies (BoS-BERT: sentences) per step.
      tags_per_step=64,  # Candidate tags encoded per step: the batch's known tags, then random ones.
      vote_weighting="votes",  # votes | log_votes: the weight of a known (movie, tag) pair.
      sentences_per_movie=bos_sentences_per_movie, sentence_pooling=bos_pooling))  # items="sentences" (BoS-BERT).

  config.mesh = common.mesh()

  # Tag prediction runs, each starting from the trained model: tags and genres with a closed vocabulary,
  # and tags with an open one (trained on half the tags of every movie, the other half scored). Reported
  # under the model.
  scorer = tag_scorer(config)
  config.finetune = ml_collections.ConfigDict({
      "tags": tag_prediction(config, scorer, "tags", 1.0),
      "genres": tag_prediction(config, scorer, "genres", 1.0),
      **open_vocabulary_runs(config, (OPEN_VOCABULARY_FRACTION,)),
  })

  # BoS-BERT: the same tag fine-tuning with review sentences of the pretrained encoder as items. Bag-of-sentences
  # search: the pretrained encoder (0 steps of DUAL, f(s) pooled by `bos_pooling`) scores a movie by its best
  # sentence.
  config.baselines = ml_collections.ConfigDict({
      f"bos_bert_{label_set}": tag_prediction(config, "dual", label_set, 1.0, items="sentences",
                                              report_as="bos_bert")
      for label_set in ("tags", "genres")})
  config.baselines.bos = dict(
      objective="docent_dual", model=dict(sentence_pooling=bos_pooling, entity_init="random"),
      train=dict(num_steps=0, best_metric=""), finetune={},
      evals=dict(search=common.evaluator("bos_search", sentences_per_movie=bos_sentences_per_movie)))
  return SETTINGS[setting](config) if setting else config


def tag_scorer(config: ml_collections.ConfigDict) -> str:
  """The tag scorer of a DOCENT config's model: a pair classifier for FULL (entities are its input tokens), f(t)
  against the entity vectors for DUAL and HYBRID."""
  return "pair_classifier" if config.objective == "docent_full" else "dual"


def open_vocabulary_runs(config: ml_collections.ConfigDict, fractions: tuple[float, ...], *,
                         common_heldout_fraction: float = 0.0) -> dict[str, dict]:
  """One open-vocabulary tag run per fraction of the tags trained on, `tags_open_<percent>pct`, all split with
  `config.seed` (nested splits), reported as `all/tags_open<fraction>_<metric>`; each also scores the tags held
  out at `common_heldout_fraction` (0: none) as `all/tags_open<fraction>_common_<metric>`."""
  runs = {}
  for fraction in fractions:
    percent = 100 * fraction
    if not 0 < percent < 100 or percent != round(percent):
      raise ValueError(f"An open-vocabulary fraction must be a whole percent in (0, 1); got {fraction}.")
    runs[f"tags_open_{round(percent)}pct"] = tag_prediction(config, tag_scorer(config), "tags", fraction,
                                                            common_heldout_fraction=common_heldout_fraction)
  return runs


def tag_curve(config: ml_collections.ConfigDict,
              fractions: tuple[float, ...] = TAG_CURVE_FRACTIONS) -> ml_collections.ConfigDict:
  """The open-vocabulary tag curve: after training the model, one tag run per fraction of the tag vocabulary
  trained on (`open_vocabulary_runs`): each fits the tag scorer on every movie's training tags and scores the
  held-out tags, never seen in fitting, on every movie; and the tags held out at the largest fraction, held out
  at every point (`common_`), so that the points also compare on the same tags. The closed-vocabulary runs,
  BoS-BERT and the untrained baselines are left out; the model's own search stays."""
  config.finetune = ml_collections.ConfigDict(
      open_vocabulary_runs(config, fractions, common_heldout_fraction=max(fractions)))
  config.baselines = ml_collections.ConfigDict()
  config.evals = ml_collections.ConfigDict(dict(search=config.evals.search))
  return config


SETTINGS = {"tag_curve": tag_curve}


def tag_prediction(config: ml_collections.ConfigDict, scorer: str, label_set: str, vocabulary_fraction: float, *,
                   items: str = "entities", report_as: str = "{model}", common_heldout_fraction: float = 0.0) -> dict:
  """A tag-prediction fine-tuning run; its budget and optimizer follow `config.tags`."""
  tags = config.tags
  return dict(
      objective="tag_finetuning",
      tags=dict(scorer=scorer, label_set=label_set, vocabulary_fraction=vocabulary_fraction, items=items,
                common_heldout_fraction=common_heldout_fraction),
      optim=dict(learning_rate=tags.get_ref("learning_rate"), warmup_steps=0,
                 weight_decay=tags.get_ref("weight_decay"), lr_multipliers=()),
      train=dict(num_steps=tags.get_ref("finetune_steps"), log_every_steps=25, checkpoint_every_steps=50),
      evals=dict(tags=common.evaluator("tag_prediction", report_as=report_as)),
      finetune={},
  )
