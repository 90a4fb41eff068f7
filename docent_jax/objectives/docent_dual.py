"""DOCENT-DUAL (Zemlyanskiy et al., EACL 2021), i.e. RELIC: P(entity | sentence) from a dual encoder.

Every sentence written about an entity is a training example: its BERT [CLS] must pick the entity
out of the other entities of the global batch (in-batch negatives) or out of the whole entity table
(full softmax, computed shard by shard). No labels are used; tags only serve the evaluation:
zero-shot search, and tag prediction by a tag encoder fine-tuned against the frozen entity vectors
(`tag_finetuning`), beside BM25, bag-of-sentences, tag-popularity and TF-IDF baselines.
"""
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import evaluators
from docent_jax import losses
from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import pipeline as review_pipeline
from docent_jax.evaluation import bm25
from docent_jax.evaluation import movie_search
from docent_jax.evaluation import tag_finetuning
from docent_jax.evaluation import tag_prediction
from docent_jax.models import bert
from docent_jax.models import dual_encoder
from docent_jax.models import pretrained
from docent_jax.objectives import base

NEGATIVES = ("in_batch", "full")
ENTITY_INITS = ("random", "sentence_mean")


def search_tasks(corpus: review_corpus.ReviewCorpus,
                 min_votes: int) -> dict[str, tuple[np.ndarray, movie_search.QuerySet]]:
  """Zero-shot search on tag queries, per split ('test': held-out movies, 'all': every movie).

  Returns the ranked movies (entity indices) and the queries: each tag with a movie of the split
  having at least `min_votes` votes for it; relevant = those movies. A split without such a tag (e.g.
  a corpus without tags.tsv) has no search task; the reason is logged.
  """
  tasks = {}
  for split, movies in (("test", corpus.entity_split["test"]), ("all", np.arange(corpus.num_entities))):
    votes = corpus.tag_votes[movies].toarray()
    tags = np.flatnonzero((votes >= min_votes).any(axis=0))
    if not len(tags):
      logging.log_first_n(logging.WARNING, "%s: no tag has a %s movie with %d votes (%d tags in all); search on "
                          "%s movies is skipped.", 4, corpus.name, split, min_votes, len(corpus.tags), split)
      continue
    tasks[split] = (movies, movie_search.tag_query_set(corpus.tags, votes, tags, min_votes=min_votes))
  return tasks


def label_sets(corpus: review_corpus.ReviewCorpus, tag_vote_threshold: int) -> list[tag_finetuning.LabelSet]:
  """MovieLens tags (votes; positive at `tag_vote_threshold`) and genres (one vote each)."""
  return [tag_finetuning.LabelSet("tags", list(corpus.tags), corpus.tag_votes.toarray(), tag_vote_threshold),
          tag_finetuning.LabelSet("genres", list(corpus.genres), corpus.genre_labels.astype(np.int32), 1)]


def pretrained_or_fixed_bert(bert_params: Any | None, bert_config: bert.BertConfig,
                             config: ml_collections.ConfigDict) -> Any:
  """The config's pretrained BERT params, or a fixed random BERT (seeded by `config.seed`) when it names none."""
  if bert_params is not None:
    return bert_params
  tokens = jnp.zeros((1, config.data.max_len), jnp.int32)
  encoder = bert.BertModel(bert_config, add_pooler=False)
  return nn.unbox(encoder.init(jax.random.key(config.seed), tokens, tokens)["params"])


class ReviewBaselines:
  """The untrained baselines every DOCENT objective reports beside its own numbers, and shared set-up helpers.

  Needs `config`, `corpus`, `tokenizer`, `mesh`, `model.config` (the BERT config) and `_bert_params`.
  """

  def _label_sets(self) -> list[tag_finetuning.LabelSet]:
    return [s for s in label_sets(self.corpus, self.config.eval.tag_vote_threshold) if s.texts]

  def _entity_init_sentences(self) -> tuple[np.ndarray, np.ndarray]:
    """Indices and token rows of the up to `model.entity_init_sentences` sentences per entity that
    place the `sentence_mean` entity rows."""
    corpus = self.corpus
    sampled = tag_finetuning.subsample_per_entity(
        corpus.sentence_entity, np.arange(corpus.num_entities), self.config.model.entity_init_sentences,
        self.config.seed)
    return sampled, tokenization.tokenize_texts(self.tokenizer, [corpus.sentences[i] for i in sampled],
                                                self.config.data.max_len)

  def _pretrained_bert(self) -> Any:
    """The pretrained encoder of the baselines (a fixed random one when the config names none)."""
    return pretrained_or_fixed_bert(self._bert_params, self.model.config, self.config)

  def baselines(self) -> dict[str, float]:
    """Search: BM25, bag of sentences (`bos`); tags, genres: `top_tags`, `tfidf` (BoS-BERT is a fine-tuning run)."""
    corpus, config = self.corpus, self.config.eval
    documents = [[] for _ in range(corpus.num_entities)]
    for sentence, entity in zip(corpus.sentences, corpus.sentence_entity):
      documents[entity].append(sentence)
    encoder = bert.BertModel(self.model.config, add_pooler=False)
    bert_params = self._pretrained_bert()
    encode = lambda texts: tag_finetuning.encode_texts(
        encoder, bert_params, tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len),
        config.bos_pooling, batch_size=config.batch_size, mesh=self.mesh)
    # One subsample of sentences, encoded once, serves both bag-of-sentences baselines.
    sampled = tag_finetuning.subsample_per_entity(corpus.sentence_entity, np.arange(corpus.num_entities),
                                                  config.bos_sentences_per_movie, self.config.seed)
    sentence_vectors = encode([corpus.sentences[i] for i in sampled])
    sentence_entity = corpus.sentence_entity[sampled]
    movie_texts = [" ".join(sentences) for sentences in documents]
    in_split = lambda movies: np.isin(sentence_entity, movies)
    results = {}
    for split, (movies, queries) in search_tasks(corpus, config.search_min_votes).items():
      index = bm25.BM25Index([movie_texts[m] for m in movies])
      metrics = movie_search.evaluate_search(index.scores(queries.queries), queries)
      results.update({f"bm25/{split}/{k}": v for k, v in metrics.items()})
      kept = in_split(movies)
      scores = movie_search.bag_of_sentences_search_scores(
          encode(queries.queries), sentence_vectors[kept], np.searchsorted(movies, sentence_entity[kept]),
          len(movies))
      metrics = movie_search.evaluate_search(scores, queries)
      results.update({f"bos/{split}/{k}": v for k, v in metrics.items()})

    train_movies, test_movies = corpus.entity_split["train"], corpus.entity_split["test"]
    for label_set in self._label_sets():
      for name, scores in (
          ("top_tags", tag_prediction.top_tags_scores(label_set.votes[train_movies], len(test_movies),
                                                      label_set.vote_threshold)),
          # IDF over every movie's reviews (no labels involved); scores of the held-out movies.
          ("tfidf", tag_prediction.tfidf_tag_scores(movie_texts, label_set.texts)[test_movies])):
        metrics = tag_finetuning.evaluate_label_scores(scores, label_set, test_movies)
        results.update({f"{name}/test/{label_set.name}_{k}": v for k, v in metrics.items()})
    logging.info("Baselines: %s", results)
    return results


class DocentDualObjective(ReviewBaselines, base.Objective):
  """Sentence -> entity classification with a scaled-cosine dual encoder; zero-shot search evaluation."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh):
    super().__init__(config, mesh)
    if config.loss.negatives not in NEGATIVES:
      raise ValueError(f"Unknown loss.negatives {config.loss.negatives!r}; valid: {list(NEGATIVES)}.")
    if config.model.entity_init not in ENTITY_INITS:
      raise ValueError(f"Unknown model.entity_init {config.model.entity_init!r}; valid: {list(ENTITY_INITS)}.")
    self.corpus = review_corpus.load_review_corpus(
        config.data.dataset, data_dir=config.data.tfds_data_dir, manual_dir=config.data.manual_dir)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    bert_config, self._bert_params = pretrained.load_model_bert(config.model, self.tokenizer.vocab_size)
    self.model = dual_encoder.DualEncoder(
        bert_config, num_entities=self.corpus.num_entities, initial_scale=config.model.scale,
        learn_scale=config.model.learn_scale, dtype=jnp.dtype(config.model.dtype))

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.corpus.fingerprint()

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return self.model.init(rng, tokens, jnp.zeros((1,), jnp.int32))["params"]

  def pretrained_params(self) -> dict[str, Any]:
    params = {} if self._bert_params is None else {"bert": self._bert_params}
    if self.config.model.entity_init == "sentence_mean":
      params["entities"] = {"embedding": self.sentence_mean_entities()}
    return params

  def sentence_mean_entities(self) -> np.ndarray:
    """[N, d]: each entity's mean f(s) over up to `model.entity_init_sentences` of its sentences.

    f is the initial sentence encoder ([CLS] of the pretrained BERT), so training starts from rows
    that already score an entity's own sentences highest on average, instead of random rows that
    each of the few updates per epoch must first pull into the sentences' space.
    """
    corpus = self.corpus
    sampled, tokens = self._entity_init_sentences()
    vectors = tag_finetuning.encode_texts(bert.BertModel(self.model.config, add_pooler=False),
                                          self._pretrained_bert(), tokens, "cls",
                                          batch_size=self.config.eval.batch_size, mesh=self.mesh)
    sums = np.zeros((corpus.num_entities, vectors.shape[1]), np.float32)
    np.add.at(sums, corpus.sentence_entity[sampled], vectors)
    logging.info("Entity rows initialised from the mean of %d sentences.", len(sampled))
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)

  def train_batches(self, seed: int) -> Any:
    return review_pipeline.sentence_batches(
        self.corpus.sentence_source, self.tokenizer, global_batch_size=self.config.train.global_batch_size,
        seed=seed, max_len=self.config.data.max_len)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    queries, entities, scale = self.model.apply({"params": params}, batch["tokens"], batch["entity"],
                                                deterministic=False, rngs={"dropout": rng})
    if self.config.loss.negatives == "in_batch":
      loss, metrics = losses.in_batch_softmax_loss(queries, entities, batch["entity"], scale)
    else:
      table = self.model.apply({"params": params}, method=dual_encoder.DualEncoder.entity_table)
      loss, metrics = losses.full_softmax_loss(queries, table, batch["entity"], scale, mesh=self.mesh)
    return loss, {**metrics, "loss": loss, "scale": scale}

  def encode_texts(self, params: Any, texts: list[str]) -> np.ndarray:
    """Normalised [CLS] vectors of texts, batched over the data axis."""
    tokens = tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len)
    return parallel.map_batches(self._encode_sentences, params, tokens, batch_size=self.config.eval.batch_size,
                                mesh=self.mesh)

  def _encode_sentences(self, params: Any, tokens: jax.Array) -> jax.Array:
    return self.model.apply({"params": params}, tokens, method=dual_encoder.DualEncoder.encode_sentences)

  def export_embeddings(self, params: Any) -> tuple[list[str], np.ndarray]:
    table = self.model.apply({"params": params}, method=dual_encoder.DualEncoder.entity_table)
    return self.corpus.entity_ids, parallel.fetch(table)

  def search(self, params: Any) -> dict[str, float]:
    """Zero-shot movie search by P(e | query): cosine of the query's f(q) and g(e)."""
    _, table = self.export_embeddings(params)
    results = {}
    for split, (movies, queries) in search_tasks(self.corpus, self.config.eval.search_min_votes).items():
      metrics = movie_search.search_by_vectors(self.encode_texts(params, queries.queries), table[movies], queries,
                                               mesh=self.mesh)
      results.update({f"{split}/{k}": v for k, v in metrics.items()})
    return results


@evaluators.register("movie_search")
def evaluate_movie_search(objective: Any, params: Any) -> dict[str, float]:
  """Zero-shot movie search with tag queries (any DOCENT objective's `search`): `test/` and `all/` movies."""
  return objective.search(params)
