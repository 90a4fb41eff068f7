"""DOCENT tag prediction by a scorer of (item, tag) pairs fine-tuned against frozen item vectors.

A `TagScorer` says what a fine-tuning step samples, its loss and how every pair is scored; the fine-tuning
itself is a trainer run (`objectives.tag_finetuning`) and its evaluation `evaluation.tag_prediction`.
Protocol (Zemlyanskiy et al., EACL 2021), with `DualScorer` for dual-encoder models (DUAL, HYBRID):
  * score(e, t) = g(e) . f(t): g(e) is the trained entity vector, kept frozen; f(t) is the mean of
    BERT's token outputs over the tag text, fine-tuned from the trained model's BERT.
  * Each step samples a batch of training items and a set of candidate tags (all tags when few,
    else the batch's known tags plus random others). Every known (item, tag) pair is a positive of
    a softmax over that tag and the candidates that are *not* known tags of the item, weighted by
    its votes (or log(1 + votes)).
  * Closed vocabulary: train on the training movies, score every tag for the held-out movies.
    Open vocabulary: train on a fraction of the tags for every movie, score the other tags for every movie.
  * Bag of sentences (BoS-BERT): the items are single review sentences (frozen pretrained vectors)
    labelled with their movie's tags; a movie's scores are the mean over its sentences.

`PairClassifierScorer`, for models that read entities as input tokens (FULL):
  * score(e, t) = w . h(e, t) + b: h is [CLS]'s last hidden state of the two-segment input whose
    entity slot holds e's trained row (visible). BERT, from the trained model, and a fresh logistic
    head (w, b) are fine-tuned; the entity rows are inputs, never parameters, so they stay fixed.
  * Each step takes `items_per_step` training items, each with one known tag (a positive, weighted
    by its votes or log(1 + votes)) and tags that are not known tags of the item (negatives):
    max(2, tags_per_step // items_per_step) pairs per item, about as many sequences as the tags a
    DUAL step encodes. The loss is binary cross-entropy, each class averaged on its own.
  * Every (item, tag) pair is a forward pass, `batch_size` pairs at a time over the mesh. Tags are
    scored in groups of similar length, so that a few long tags do not lengthen every sequence.
"""
import abc
from collections.abc import Callable, Sequence
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import config_schema
from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.modules import bert
from docent_jax.modules import docent_full
from docent_jax.modules import entity_table

VOTE_WEIGHTINGS = ("votes", "log_votes")


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


def step_options(tags: ml_collections.ConfigDict) -> StepOptions:
  """The step options of a DOCENT config's `tags` block (`items_per_step`, `tags_per_step`, `vote_weighting`)."""
  return StepOptions(items_per_step=tags.items_per_step, tags_per_step=tags.tags_per_step,
                     vote_weighting=tags.vote_weighting)


def pool(encoder: bert.BertModel, params: Any, tokens: jax.Array, pooling: str) -> jax.Array:
  """[N, d] sentence vectors: [CLS] output, or the mean output over the non-padding tokens."""
  mask = bert.attention_mask(tokens, encoder.config)
  hidden = encoder.apply({"params": params}, tokens, mask).last_hidden_state
  if pooling == "cls":
    return hidden[:, 0]
  if pooling == "mean":
    return bert.mean_pool(hidden, mask)
  raise ValueError(f"Unknown pooling {pooling!r}; valid: {list(config_schema.SENTENCE_POOLINGS)}.")


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
  def candidates_shape(self, options: StepOptions) -> tuple[int, ...]:
    """The most tag indices `sample` gives a step: (c,) or (b, k)."""

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

  def candidates_shape(self, options: StepOptions) -> tuple[int, ...]:
    return (options.tags_per_step,)

  def loss(self, params: Any, item_vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array,
           weighting: str) -> jax.Array:
    return tag_softmax_loss(item_vectors @ pool(self.encoder, params, tag_tokens, "mean").T, votes, weighting)

  def tag_vectors(self, params: Any, tag_tokens: np.ndarray) -> np.ndarray:
    """[T, d] f(t) of token rows."""
    return np.asarray(_pool_jit(self.encoder, params, tag_tokens, "mean"))

  def scores(self, params: Any, item_vectors: np.ndarray, tag_tokens: np.ndarray) -> np.ndarray:
    return item_vectors @ self.tag_vectors(params, tag_tokens).T


# Columns added to `[CLS] tag [SEP]` rows for the entity slot and its [SEP].
_ENTITY_SEGMENT = docent_full.SENTENCE_START - 1
# Scoring cuts tag rows to lengths in multiples of this: short sequences, few compilations.
_LENGTH_STEP = 8


def pair_classifier_loss(logits: jax.Array, votes: jax.Array, weighting: str = "votes") -> jax.Array:
  """Binary cross-entropy of (item, tag) logits: the mean over positives plus the mean over negatives.

  logits, votes: [items, tags]. A known pair (votes > 0) is a positive weighted by its votes (or
  log(1 + votes)); every other pair is a negative of weight 1, so a known tag is never a negative.
  Averaging each class on its own keeps the sampled ratio of negatives from shifting the balance.
  """
  weights = vote_weights(votes, weighting)
  negative = votes == 0
  positive_loss = (weights * jax.nn.softplus(-logits)).sum() / jnp.maximum(weights.sum(), 1e-6)
  negative_loss = jnp.where(negative, jax.nn.softplus(logits), 0.0).sum() / jnp.maximum(negative.sum(), 1)
  return positive_loss + negative_loss


def sample_pairs(rng: np.random.Generator, item_votes: np.ndarray, items_per_step: int,
                 pairs_per_item: int) -> tuple[np.ndarray, np.ndarray]:
  """Items [b] of one step and their tags [b, pairs_per_item]: one known tag, then distinct other tags.

  The known tag is drawn uniformly among the item's known tags (vote weights enter the loss); the
  others uniformly among the tags that are not known tags of the item, while there are enough.
  """
  num_items, _ = item_votes.shape
  items = rng.choice(num_items, items_per_step, replace=num_items < items_per_step)
  known = item_votes[items] > 0
  draws = rng.random(known.shape)
  positives = np.argmax(np.where(known, draws, -1.0), axis=1)
  # Sorting puts the item's unknown tags first, in random order; known ones follow only to fill up.
  negatives = np.argsort(np.where(known, 1.0 + draws, draws), axis=1)[:, :pairs_per_item - 1]
  return items, np.concatenate([positives[:, None], negatives], axis=1)


@dataclasses.dataclass(frozen=True)
class PairClassifierScorer(TagScorer):
  """logit(e, t) of a logistic head on [CLS] of `[CLS] e [SEP] tag [SEP]`; params {'bert', 'head'}."""
  model: docent_full.DocentFull
  slot_id: int
  sep_id: int
  pad_id: int
  batch_size: int
  mesh: Mesh

  def logits(self, params: Any, entity_rows: jax.Array, tag_tokens: jax.Array) -> jax.Array:
    """[n] logits of entity rows [n, d] paired with `[CLS] tag [SEP]` rows [n, L]."""
    tag_tokens = jnp.pad(tag_tokens, ((0, 0), (0, _ENTITY_SEGMENT)), constant_values=self.pad_id)
    tokens, token_types = docent_full.two_segment_inputs(tag_tokens, slot_id=self.slot_id, sep_id=self.sep_id,
                                                         pad_id=self.pad_id)
    states = self.model.apply({"params": {"bert": params["bert"]}}, tokens, token_types,
                              (tokens != self.pad_id).astype(jnp.int32), entity_rows,
                              method=docent_full.DocentFull.cls_states)
    return states.astype(jnp.float32) @ params["head"]["kernel"] + params["head"]["bias"]

  def sample(self, rng: np.random.Generator, item_votes: np.ndarray,
             options: StepOptions) -> tuple[np.ndarray, np.ndarray]:
    return sample_pairs(rng, item_votes, *self.candidates_shape(options))

  def candidates_shape(self, options: StepOptions) -> tuple[int, ...]:
    return (options.items_per_step, max(2, options.tags_per_step // options.items_per_step))

  def loss(self, params: Any, item_vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array,
           weighting: str) -> jax.Array:
    items, pairs, length = tag_tokens.shape
    logits = self.logits(params, jnp.repeat(item_vectors, pairs, axis=0), tag_tokens.reshape(items * pairs, length))
    return pair_classifier_loss(logits.reshape(items, pairs), votes, weighting)

  def scores(self, params: Any, item_vectors: np.ndarray, tag_tokens: np.ndarray) -> np.ndarray:
    round_up = lambda n: -(-n // _LENGTH_STEP) * _LENGTH_STEP
    width = tag_tokens.shape[1]
    tag_tokens = np.pad(tag_tokens, ((0, 0), (0, round_up(width) - width)), constant_values=self.pad_id)
    lengths = round_up((tag_tokens != self.pad_id).sum(axis=1))
    scores = np.empty((len(item_vectors), len(tag_tokens)), np.float32)
    for length in np.unique(lengths):
      tags = np.flatnonzero(lengths == length)
      # Row-major (item, tag) index pairs; rows and tags travel once, replicated, beside the params.
      pairs = np.stack(np.divmod(np.arange(len(item_vectors) * len(tags), dtype=np.int32), len(tags)), axis=1)
      constants = jax.device_put({"params": params, "rows": item_vectors, "tags": tag_tokens[tags, :length]},
                                 parallel.replicated(self.mesh))
      logits = parallel.map_batches(self._pair_logits, constants, pairs, batch_size=self.batch_size,
                                    mesh=self.mesh)
      scores[:, tags] = logits.reshape(len(item_vectors), len(tags))
    return scores

  def _pair_logits(self, constants: dict[str, Any], pairs: jax.Array) -> jax.Array:
    """Logits of (item row, tag) index pairs [n, 2] into `constants`' rows and tags."""
    return self.logits(constants["params"], constants["rows"][pairs[:, 0]], constants["tags"][pairs[:, 1]])
