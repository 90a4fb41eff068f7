"""DOCENT-DUAL (Zemlyanskiy et al., EACL 2021), i.e. RELIC: P(entity | sentence) from a dual encoder.

Every sentence written about an entity is a training example: its BERT [CLS] must pick the entity
out of the other entities of the global batch (in-batch negatives) or out of the whole entity table
(full softmax, computed shard by shard). No labels are used; tags only serve the evaluation.
"""
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import losses
from docent_jax import parallel
from docent_jax.data import review_corpus
from docent_jax.data import review_pipeline
from docent_jax.data import tokenization
from docent_jax.evaluation import bm25
from docent_jax.evaluation import movie_search
from docent_jax.models import dual_encoder
from docent_jax.models import pretrained
from docent_jax.objectives import base

NEGATIVES = ("in_batch", "full")


def search_tasks(corpus: review_corpus.ReviewCorpus,
                 min_votes: int) -> dict[str, tuple[np.ndarray, movie_search.QuerySet]]:
  """Zero-shot search on tag queries, per split ('test': held-out movies, 'all': every movie).

  Returns the ranked movies (entity indices) and the queries: each tag with a movie of the split
  having at least `min_votes` votes for it; relevant = those movies.
  """
  tasks = {}
  for split, movies in (("test", corpus.entity_split["test"]), ("all", np.arange(corpus.num_entities))):
    votes = corpus.tag_votes[movies].toarray()
    tags = np.flatnonzero((votes >= min_votes).any(axis=0))
    tasks[split] = (movies, movie_search.tag_query_set(corpus.tags, votes, tags, min_votes=min_votes))
  return tasks


class DocentDualObjective(base.Objective):
  """Sentence -> entity classification with a scaled-cosine dual encoder; zero-shot search evaluation."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh):
    super().__init__(config, mesh)
    if config.loss.negatives not in NEGATIVES:
      raise ValueError(f"Unknown loss.negatives {config.loss.negatives!r}; valid: {list(NEGATIVES)}.")
    self.corpus = review_corpus.load_review_corpus(
        config.data.dataset, data_dir=config.data.tfds_data_dir, manual_dir=config.data.manual_dir)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    bert_config, self._bert_params = pretrained.load_or_create_bert(
        config.model.pretrained, config.model.bert.to_dict(), self.tokenizer.vocab_size)
    self.model = dual_encoder.DualEncoder(
        bert_config, num_entities=self.corpus.num_entities, initial_scale=config.model.scale,
        learn_scale=config.model.learn_scale, dtype=jnp.dtype(config.model.dtype))

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return self.model.init(rng, tokens, jnp.zeros((1,), jnp.int32))["params"]

  def pretrained_params(self) -> dict[str, Any]:
    return {} if self._bert_params is None else {"bert": self._bert_params}

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
    encode = lambda p, t: self.model.apply({"params": p}, t, method=dual_encoder.DualEncoder.encode_sentences)
    return parallel.map_batches(encode, params, tokens, batch_size=self.config.eval.batch_size, mesh=self.mesh)

  def export_embeddings(self, params: Any) -> tuple[list[str], np.ndarray]:
    table = self.model.apply({"params": params}, method=dual_encoder.DualEncoder.entity_table)
    return self.corpus.entity_ids, np.asarray(jax.device_get(table))

  def evaluate(self, params: Any) -> dict[str, float]:
    """Zero-shot movie search on the tag queries of the evaluated movies, by P(e | query)."""
    _, table = self.export_embeddings(params)
    results = {}
    for split, (movies, queries) in search_tasks(self.corpus, self.config.eval.search_min_votes).items():
      scores = self.encode_texts(params, queries.queries) @ table[movies].T
      results.update({f"{split}/{k}": v for k, v in movie_search.evaluate_search(scores, queries).items()})
    return results

  def baselines(self) -> dict[str, float]:
    """BM25 over each movie's reviews on the same search tasks (no parameters involved)."""
    corpus = self.corpus
    documents = [[] for _ in range(corpus.num_entities)]
    for sentence, entity in zip(corpus.sentences, corpus.sentence_entity):
      documents[entity].append(sentence)
    results = {}
    for split, (movies, queries) in search_tasks(self.corpus, self.config.eval.search_min_votes).items():
      index = bm25.BM25Index([" ".join(documents[m]) for m in movies])
      metrics = movie_search.evaluate_search(index.scores(queries.queries), queries)
      results.update({f"bm25/{split}/{k}": v for k, v in metrics.items()})
    logging.info("Baselines: %s", results)
    return results
