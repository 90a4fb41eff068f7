"""DOCENT-DUAL (Zemlyanskiy et al., EACL 2021), i.e. RELIC: P(entity | sentence) from a dual encoder.

Every sentence written about an entity is a training example: its BERT [CLS] must pick the entity
out of the other entities of the global batch (in-batch negatives) or out of the whole entity table
(full softmax, computed shard by shard). No labels are used; tags only serve the evaluation (`evaluation/`):
search by tag queries the model never trained on (every movie's reviews are in pre-training: the test movies are
a candidate pool, not unseen entities), and tag prediction by a tag encoder fine-tuned against the frozen entity vectors
(`tag_finetuning`), beside BM25, bag-of-sentences, tag-popularity and TF-IDF baselines.
"""
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import losses
from docent_jax.data import tokenization
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import pipeline as review_pipeline
from docent_jax.modules import bert
from docent_jax.modules import dual_encoder
from docent_jax.modules import entity_table
from docent_jax.modules import pretrained
from docent_jax.modules import tag_scorers
from docent_jax.objectives import base

NEGATIVES = ("in_batch", "full")
ENTITY_INITS = ("random", "sentence_mean")


def entity_init_sentences(corpus: review_corpus.ReviewCorpus, tokenizer: Any,
                          config: ml_collections.ConfigDict) -> tuple[np.ndarray, np.ndarray]:
  """Indices and token rows of the up to `model.entity_init_sentences` sentences per entity that place the
  `sentence_mean` entity rows."""
  sampled = tag_scorers.subsample_per_entity(corpus.sentence_entity, np.arange(corpus.num_entities),
                                             config.model.entity_init_sentences, config.seed)
  return sampled, tokenization.tokenize_texts(tokenizer, [corpus.sentences[i] for i in sampled], config.data.max_len)


def review_evaluation(corpus: review_corpus.ReviewCorpus,
                      config: ml_collections.ConfigDict) -> review_corpus.ReviewEvaluation:
  """The corpus with the evaluation labels of a DOCENT config."""
  return review_corpus.ReviewEvaluation(corpus, search_min_votes=config.data.search_min_votes,
                                        tag_vote_threshold=config.data.tag_vote_threshold, seed=config.seed,
                                        search_queries=config.data.search_queries)


def load_corpus(config: ml_collections.ConfigDict) -> review_corpus.ReviewCorpus:
  """The review corpus of a DOCENT config (`data.dataset`)."""
  return review_corpus.load_review_corpus(config.data.dataset, data_dir=config.data.tfds_data_dir,
                                          manual_dir=config.data.manual_dir)


def known_corpus_shapes(config: ml_collections.ConfigDict) -> dict[str, int]:
  """The movie count of a DOCENT config's benchmark corpus, where it is known without reading it."""
  return dict(review_corpus.BUILDERS.known_shapes.get(config.data.dataset, {}))


class MovieObjective(base.Objective):
  """What DOCENT's entity models share (DUAL, HYBRID, FULL): review sentences labelled with their movie, a BERT and
  a row per movie, evaluated by tag-query search and tag prediction."""

  shapes_needed = ("num_entities",)

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    if config.model.entity_init not in ENTITY_INITS:
      raise ValueError(f"Unknown model.entity_init {config.model.entity_init!r}; valid: {list(ENTITY_INITS)}.")
    super().__init__(config, mesh, inputs)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(config.model, self.tokenizer.vocab_size)

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> review_corpus.ReviewCorpus:
    return load_corpus(config)

  @classmethod
  def dataset_shapes(cls, config: ml_collections.ConfigDict) -> dict[str, int]:
    return known_corpus_shapes(config)

  @property
  def corpus(self) -> review_corpus.ReviewCorpus:
    return self.data

  @property
  def module(self) -> Any:
    """The Flax module the loss applies: its model's (`model()`), the one evaluation and `load()` use."""
    return self.model().module

  def vector_width(self) -> int:
    """The width of an entity's row (what search ranks)."""
    return self.bert_config.hidden_size

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays: sentences' token ids and their entities."""
    return {"tokens": jax.ShapeDtypeStruct((global_batch_size, self.config.data.max_len), jnp.int32),
            "entity": jax.ShapeDtypeStruct((global_batch_size,), jnp.int32)}

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.corpus.fingerprint()

  def train_batches(self, seed: int) -> Any:
    return review_pipeline.sentence_batches(
        self.corpus.sentence_source, self.tokenizer, global_batch_size=self.config.train.global_batch_size,
        seed=seed, max_len=self.config.data.max_len)

  def inference_record(self) -> dict[str, Any]:
    return {"entity_ids": list(self.corpus.entity_ids), "titles": list(self.corpus.titles)}

  def evaluation_data(self) -> review_corpus.ReviewEvaluation:
    return review_evaluation(self.corpus, self.config)


class DocentDualObjective(MovieObjective):
  """Sentence -> entity classification with a scaled-cosine dual encoder; evaluated by tag-query search."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    if config.loss.negatives not in NEGATIVES:
      raise ValueError(f"Unknown loss.negatives {config.loss.negatives!r}; valid: {list(NEGATIVES)}.")
    super().__init__(config, mesh, inputs)

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return self.module.init(rng, tokens, jnp.zeros((1,), jnp.int32))["params"]

  def pretrained_params(self) -> dict[str, Any]:
    params = {} if self.pretrained_bert is None else {"bert": self.pretrained_bert}
    if self.config.model.entity_init == "sentence_mean":
      params["entities"] = {"embedding": entity_table.pad_rows(self.sentence_mean_entities(),
                                                               self.module.entity_rows_multiple)}
    return params

  def sentence_mean_entities(self) -> np.ndarray:
    """[N, d]: each entity's mean f(s) over up to `model.entity_init_sentences` of its sentences.

    f is the initial sentence encoder ([CLS] of the pretrained BERT), so training starts from rows
    that already score an entity's own sentences highest on average, instead of random rows that
    each of the few updates per epoch must first pull into the sentences' space.
    """
    corpus = self.corpus
    sampled, tokens = entity_init_sentences(corpus, self.tokenizer, self.config)
    vectors = tag_scorers.encode_texts(
        bert.BertModel(self.bert_config, add_pooler=False),
        pretrained.pretrained_or_fixed_bert(self.pretrained_bert, self.bert_config, self.config.seed), tokens, "cls",
        batch_size=self.config.model.inference_batch_size, mesh=self.mesh)
    sums = np.zeros((corpus.num_entities, vectors.shape[1]), np.float32)
    np.add.at(sums, corpus.sentence_entity[sampled], vectors)
    logging.info("Entity rows initialised from the mean of %d sentences.", len(sampled))
    return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    queries, entities, scale = self.module.apply({"params": params}, batch["tokens"], batch["entity"],
                                                deterministic=False, rngs={"dropout": rng})
    if self.config.loss.negatives == "in_batch":
      loss, metrics = losses.in_batch_softmax_loss(queries, entities, batch["entity"], scale)
    else:
      table = self.module.apply({"params": params}, method=dual_encoder.DualEncoder.entity_table)
      loss, metrics = losses.full_softmax_loss(queries, table, batch["entity"], scale, mesh=self.mesh,
                                               num_rows=self.module.num_entities)
    return loss, {**metrics, "loss": loss, "scale": scale}
