"""DOCENT tag prediction by a scorer of (item, tag) pairs fine-tuned against frozen item vectors.

A `TagScorer` says what a fine-tuning step samples, its loss and how every pair is scored (FULL's
pair classifier is in `tag_classifier`); the fine-tuning itself is a trainer run
(`objectives.tag_finetuning`). Protocol (Zemlyanskiy et al., EACL 2021), with this module's
`DualScorer` for dual-encoder models (DUAL, HYBRID):
  * score(e, t) = g(e) . f(t): g(e) is the trained entity vector, kept frozen; f(t) is the mean of
    BERT's token outputs over the tag text, fine-tuned from the trained model's BERT.
  * Each step samples a batch of training items and a set of candidate tags (all tags when few,
    else the batch's known tags plus random others). Every known (item, tag) pair is a positive of
    a softmax over that tag and the candidates that are *not* known tags of the item, weighted by
    its votes (or log(1 + votes)).
  * Closed vocabulary: train on the training movies, score every tag for the held-out movies.
    Open vocabulary: train on a fraction of the tags, score the other tags for the held-out movies.
  * Bag of sentences (BoS-BERT): the items are single review sentences (frozen pretrained vectors)
    labelled with their movie's tags; a movie's scores are the mean over its sentences.
Metrics come from `tag_prediction.evaluate_tag_predictions`.
"""
import abc
from collections.abc import Callable, Sequence
import dataclasses
import functools
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.evaluation import tag_prediction
from docent_jax.models import bert
from docent_jax.models import entity_table

POOLINGS = ("mean", "cls")
VOTE_WEIGHTINGS = ("votes", "log_votes")
# Reported cut-offs of P@k and NDCG@k: enough for a curve, few enough to read.
KS = (1, 5, 10, 20)


@dataclasses.dataclass(frozen=True)
class StepOptions:
  """What one fine-tuning step of a tag scorer samples, and how known pairs are weighted."""
  items_per_step: int = 32
  tags_per_step: int = 64
  vote_weighting: str = "votes"

  def __post_init__(self):
    if self.vote_weighting not in VOTE_WEIGHTINGS:
      raise ValueError(f"Unknown vote weighting {self.vote_weighting!r}; valid: {list(VOTE_WEIGHTINGS)}.")
    if min(self.items_per_step, self.tags_per_step) < 1:
      raise ValueError(f"items_per_step and tags_per_step must be positive: {self}.")


def step_options(eval_config: ml_collections.ConfigDict) -> StepOptions:
  """The options of a DOCENT config's `eval` block (`tag_items_per_step`, `tag_tags_per_step`, ...)."""
  return StepOptions(items_per_step=eval_config.tag_items_per_step, tags_per_step=eval_config.tag_tags_per_step,
                     vote_weighting=eval_config.tag_vote_weighting)


@dataclasses.dataclass(frozen=True)
class LabelSet:
  """Texts of the labels of one task and their [E, T] int votes; positive at `vote_threshold` votes."""
  name: str
  texts: list[str]
  votes: np.ndarray
  vote_threshold: int


def pool(encoder: bert.BertModel, params: Any, tokens: jax.Array, pooling: str) -> jax.Array:
  """[N, d] sentence vectors: [CLS] output, or the mean output over the non-padding tokens."""
  mask = bert.attention_mask(tokens, encoder.config)
  hidden = encoder.apply({"params": params}, tokens, mask).last_hidden_state
  if pooling == "cls":
    return hidden[:, 0]
  if pooling == "mean":
    return bert.mean_pool(hidden, mask)
  raise ValueError(f"Unknown pooling {pooling!r}; valid: {list(POOLINGS)}.")


def encode_texts(encoder: bert.BertModel, params: Any, tokens: np.ndarray, pooling: str, *, batch_size: int,
                 mesh: Mesh) -> np.ndarray:
  """Normalised pooled vectors of token rows, batched over the mesh's data axis."""
  params = jax.device_put(params, parallel.replicated(mesh))
  return parallel.map_batches(_normalized_pool(encoder, pooling), params, tokens, batch_size=batch_size, mesh=mesh)


@functools.cache
def _normalized_pool(encoder: bert.BertModel, pooling: str) -> Callable[[Any, jax.Array], jax.Array]:
  """One function per (encoder, pooling), so that every encoding with them reuses its compilation."""
  return lambda params, tokens: entity_table.l2_normalize(pool(encoder, params, tokens, pooling))


def label_tokens(tokenizer: Any, texts: Sequence[str], max_len: int) -> np.ndarray:
  """Token rows of short label texts, cut to the longest one (labels are a few word pieces)."""
  tokens = tokenization.tokenize_texts(tokenizer, texts, max_len)
  return tokens[:, :max(int((tokens != tokenizer.pad_token_id).sum(axis=1).max()), 2)]


def subsample_per_entity(sentence_entity: np.ndarray, entities: np.ndarray, per_entity: int,
                         seed: int) -> np.ndarray:
  """Sorted indices of at most `per_entity` random sentences of each of `entities`."""
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(sentence_entity))
  keep = np.isin(sentence_entity[order], entities)
  order = order[keep]
  # Rank of each sentence among its entity's sentences in the random order.
  by_entity = np.argsort(sentence_entity[order], kind="stable")
  sorted_entities = sentence_entity[order][by_entity]
  starts = np.searchsorted(sorted_entities, sorted_entities, side="left")
  rank = np.empty(len(order), np.int64)
  rank[by_entity] = np.arange(len(order)) - starts
  return np.sort(order[rank < per_entity])


def vote_weights(votes: jax.Array, weighting: str) -> jax.Array:
  """Float32 weights of (item, tag) pairs: their votes, or log(1 + votes); 0 where unknown."""
  votes = votes.astype(jnp.float32)
  return votes if weighting == "votes" else jnp.log1p(votes)


def tag_softmax_loss(scores: jax.Array, votes: jax.Array, weighting: str = "votes") -> jax.Array:
  """Vote-weighted mean over known pairs of -log softmax of the pair among the item's negatives.

  scores, votes: [items, candidate tags]; a pair is known when votes > 0, a negative otherwise, so
  an item's other known tags never compete with one of its known tags.
  """
  negative = votes == 0
  # A large finite value, not -inf: an item whose candidates are all known tags has a zero loss and
  # finite gradients.
  negative_lse = jax.nn.logsumexp(jnp.where(negative, scores, -1e9), axis=1, keepdims=True)
  losses = jnp.logaddexp(scores, negative_lse) - scores
  weights = vote_weights(votes, weighting)
  return (weights * losses).sum() / jnp.maximum(weights.sum(), 1e-6)


def sample_step(rng: np.random.Generator, item_votes: np.ndarray, items_per_step: int,
                tags_per_step: int) -> tuple[np.ndarray, np.ndarray]:
  """Item and candidate-tag indices of one training step.

  The candidates are all tags when there are at most `tags_per_step`, else the items' known tags
  (a random subset when too many) filled up with random other tags.
  """
  num_items, num_tags = item_votes.shape
  items = rng.choice(num_items, items_per_step, replace=num_items < items_per_step)
  if num_tags <= tags_per_step:
    return items, np.arange(num_tags)
  known = np.flatnonzero(item_votes[items].any(axis=0))
  if len(known) >= tags_per_step:
    return items, rng.choice(known, tags_per_step, replace=False)
  others = np.setdiff1d(np.arange(num_tags), known)
  return items, np.concatenate([known, rng.choice(others, tags_per_step - len(known), replace=False)])


class TagScorer(abc.ABC):
  """How fine-tuned params score (item, tag) pairs: what a step trains on, its loss, every pair's score.

  A scorer is a static argument of the jitted train step: hashable, and equal to another scorer
  that computes the same functions (a frozen dataclass of modules and numbers is).
  """

  @abc.abstractmethod
  def sample(self, rng: np.random.Generator, item_votes: np.ndarray,
             options: StepOptions) -> tuple[np.ndarray, np.ndarray]:
    """Item indices [b] of one step and tag indices: [c] (each item with every one) or [b, k] (per item)."""

  @abc.abstractmethod
  def loss(self, params: Any, item_vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array,
           weighting: str) -> jax.Array:
    """Scalar loss of a step: item vectors [b, d], tokens of `sample`'s tags ([c, L] or [b, k, L]), their votes."""

  @abc.abstractmethod
  def scores(self, params: Any, item_vectors: np.ndarray, tag_tokens: np.ndarray) -> np.ndarray:
    """[N, T] scores (higher = more likely) of items [N, d] against the tags' token rows [T, L]."""


# Module-level jits with the encoder or scorer and the options static: fits of one shape share one compilation.
_pool_jit = jax.jit(pool, static_argnames=("encoder", "pooling"))


@dataclasses.dataclass(frozen=True)
class DualScorer(TagScorer):
  """score(e, t) = g(e) . f(t), f(t) the mean of `encoder`'s outputs; a softmax over sampled candidate tags."""
  encoder: bert.BertModel

  def sample(self, rng: np.random.Generator, item_votes: np.ndarray,
             options: StepOptions) -> tuple[np.ndarray, np.ndarray]:
    return sample_step(rng, item_votes, options.items_per_step, options.tags_per_step)

  def loss(self, params: Any, item_vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array,
           weighting: str) -> jax.Array:
    return tag_softmax_loss(item_vectors @ pool(self.encoder, params, tag_tokens, "mean").T, votes, weighting)

  def tag_vectors(self, params: Any, tag_tokens: np.ndarray) -> np.ndarray:
    """[T, d] f(t) of token rows."""
    return np.asarray(_pool_jit(self.encoder, params, tag_tokens, "mean"))

  def scores(self, params: Any, item_vectors: np.ndarray, tag_tokens: np.ndarray) -> np.ndarray:
    return item_vectors @ self.tag_vectors(params, tag_tokens).T


def _evaluable(votes: np.ndarray, label_set: LabelSet) -> bool:
  """Whether some movie has both a positive and a negative label (else no metric is defined; logged)."""
  labels = votes >= label_set.vote_threshold
  if (labels.any(axis=1) & (~labels).any(axis=1)).any():
    return True
  logging.warning("Tag prediction (%s): none of %d movies has both a label with >= %d votes and one without; "
                  "nothing to evaluate.", label_set.name, len(votes), label_set.vote_threshold)
  return False


def evaluate_label_scores(scores: np.ndarray, label_set: LabelSet, movies: np.ndarray,
                          tags: np.ndarray | None = None) -> dict[str, float | int]:
  """Tag-prediction metrics of [len(movies), len(tags)] scores (tags: all by default).

  P@k and NDCG@k are reported for k in `KS`. When no movie has both a positive and a negative
  label, the result is only {'num_entities': 0}.
  """
  votes = label_set.votes[movies] if tags is None else label_set.votes[np.ix_(movies, tags)]
  if not _evaluable(votes, label_set):
    return {"num_entities": 0}
  return tag_prediction.evaluate_tag_predictions(scores, votes, vote_threshold=label_set.vote_threshold, ks=KS)
