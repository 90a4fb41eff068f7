"""Supervised contrastive product matching (Peeters & Bizer, WWW 2022 companion).

Two steps over the offers of a matching dataset:
  1. Pre-training (this objective's loss): an offer encoder (BERT, mean-pooled) learns by the
     supervised contrastive loss over batches of offers and their matching partners. Labels are the
     offers' product ids where the data has them, else the connected components of a seeded
     fraction of the training and validation matches; `loss.labels = 'self'` gives every offer its
     own label (the self-supervised variant: a partner is the offer itself, seen through dropout
     and augmentation). Batches come from one source-aware sampled dataset each, or from all
     offers (`data.source_aware = False`, the paper's ablation).
  2. A pair classifier over [u, v, |u - v|, u * v] on the labelled pairs: with the pre-trained
     encoder frozen, the `pair_probe` evaluator (`evaluation/pair_matching`, a logistic regression); with it
     trained, a fine-tuning run of `objectives.pair_matching` that starts from this model's params.
"""
import functools
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from docent_jax import losses
from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.data.offers import labels as offer_labels
from docent_jax.data.offers import sampling as offer_sampling
from docent_jax.objectives import base
from docent_jax.objectives import offers

LABELS = ("supervised", "self")


def offer_labels_of(corpus: offer_corpus.OfferCorpus, kind: str, *, fraction: float, seed: int) -> np.ndarray:
  """int32 [num_offers]: each offer's pre-training label (see the module docstring).

  Only offers of training and validation pairs are pre-trained on, as in the paper: an offer that is
  only in test pairs gets `offer_labels.UNLABELLED` (its product id, a test label, is never read).
  """
  if kind not in LABELS:
    raise ValueError(f"Unknown loss.labels {kind!r}; valid: {list(LABELS)}.")
  known = np.concatenate([corpus.pairs["train"], corpus.pairs["validation"]])
  in_pool = np.zeros(corpus.num_offers, bool)
  in_pool[known[:, :2].ravel()] = True
  if kind == "self":
    labels = np.arange(corpus.num_offers, dtype=np.int32)
  elif any(corpus.product_ids):
    labels = offer_labels.product_labels([p if pooled else "" for p, pooled in zip(corpus.product_ids, in_pool)])
  else:
    labels, num_edges = offer_labels.correspondence_labels(corpus.num_offers, known, fraction=fraction, seed=seed)
    logging.info("%s: %d labels from %d correspondence edges over %d offers.", corpus.name,
                 len(np.unique(labels[in_pool])), num_edges, int(in_pool.sum()))
  labels[~in_pool] = offer_labels.UNLABELLED
  logging.info("%s: %d of %d offers are in training or validation pairs and pre-trained on; %d only in test "
               "pairs are left out.", corpus.name, int(in_pool.sum()), corpus.num_offers, int((~in_pool).sum()))
  return labels


class SupconObjective(offers.OfferObjective, base.MeanPooledBertObjective):
  """Contrastive pre-training of the offer encoder (mean-pooled BERT)."""

  rows_per_example = 2  # Each anchor is followed by its partner.

  @functools.cached_property
  def labels(self) -> np.ndarray:
    """Each offer's pre-training label (`offer_labels_of`)."""
    loss = self.config.loss
    return offer_labels_of(self.corpus, loss.labels, fraction=loss.correspondence_fraction, seed=self.config.seed)

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays: each anchor's and its partner's token ids and labels."""
    rows = self.rows_per_example * global_batch_size
    return {"tokens": jax.ShapeDtypeStruct((rows, self.config.data.max_len), jnp.int32),
            "label": jax.ShapeDtypeStruct((rows,), jnp.int32)}

  def train_batches(self, seed: int) -> Any:
    data = self.config.data
    return offer_sampling.contrastive_batches(
        self.corpus.texts, self.labels, self.corpus.source, self.tokenizer,
        batch_size=self.config.train.global_batch_size, max_len=data.max_len, seed=seed,
        source_aware=data.source_aware, augmentation=data.augmentation or None,
        augmentation_probability=data.augmentation_probability)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    vectors = self.encode(params, batch["tokens"], deterministic=False, rng=rng)
    loss, metrics = losses.supcon_loss(vectors, batch["label"], self.config.loss.temperature)
    return loss, {**metrics, "loss": loss}

  def evaluation_data(self) -> offer_corpus.OfferCorpus:
    return self.corpus
