"""DOCENT-FULL tag prediction: a binary classifier on the [CLS] output of `[CLS] e [SEP] tag [SEP]`.

Protocol (Zemlyanskiy et al., EACL 2021), for models that read entities as input tokens (FULL):
  * score(e, t) = w . h(e, t) + b: h is [CLS]'s last hidden state of the two-segment input whose
    entity slot holds e's trained row (visible). BERT, from the trained model, and a fresh logistic
    head (w, b) are fine-tuned; the entity rows are inputs, never parameters, so they stay fixed.
  * Each step takes `items_per_step` training items, each with one known tag (a positive, weighted
    by its votes or log(1 + votes)) and tags that are not known tags of the item (negatives):
    max(2, tags_per_step // items_per_step) pairs per item, about as many sequences as the tags a
    DUAL step encodes. The loss is binary cross-entropy, each class averaged on its own.
  * Every (item, tag) pair is a forward pass, `batch_size` pairs at a time over the mesh. Tags are
    scored in groups of similar length, so that a few long tags do not lengthen every sequence.
Label sets, closed and open vocabulary and the metrics are `tag_finetuning`'s.
"""
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import numpy as np

from docent_jax import parallel
from docent_jax.evaluation import tag_finetuning
from docent_jax.models import docent_full

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
  weights = tag_finetuning.vote_weights(votes, weighting)
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
class PairClassifierScorer(tag_finetuning.TagScorer):
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
             options: tag_finetuning.StepOptions) -> tuple[np.ndarray, np.ndarray]:
    return sample_pairs(rng, item_votes, options.items_per_step,
                        max(2, options.tags_per_step // options.items_per_step))

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
