"""Batches of offers and their positives for supervised contrastive training, sampled source-aware.

Peeters & Bizer (2022): with labels from a correspondence graph, an offer of one source that is in
no training match gets a label of its own, although its product may well be offered by the other
source under another label. Such false negatives are avoided by drawing each batch from one
*sampled dataset*: the offers of one source plus the offers of other sources that share a label
with them. Two singletons of different sources then never meet in a batch.
"""
from collections.abc import Sequence
from typing import Any

from absl import logging
import grain
import numpy as np

from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.offers import augmentation as augmentation_lib
from docent_jax.data.offers import labels as offer_labels

# Streams of the random generator, so that each random choice has its own seed sequence.
_SCHEDULE, _ANCHORS, _PARTNERS, _AUGMENTATION = range(4)


def _check_offer_arrays(labels: np.ndarray, source: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  labels, source = np.asarray(labels), np.asarray(source)
  if labels.ndim != 1 or source.shape != labels.shape:
    raise ValueError(f"labels and source must be [num_offers]; got {labels.shape} and {source.shape}.")
  if not (np.issubdtype(labels.dtype, np.integer) and np.issubdtype(source.dtype, np.integer)):
    raise ValueError(f"labels and source must be integers; got {labels.dtype} and {source.dtype}.")
  return labels, source


def sampled_datasets(labels: np.ndarray, source: np.ndarray, *, source_aware: bool = True) -> list[np.ndarray]:
  """The offers of each sampled dataset.

  Args:
    labels: int [num_offers] label of each offer; offers labelled `offer_labels.UNLABELLED` are in no dataset.
    source: int [num_offers] source of each offer.
    source_aware: one dataset per source with labelled offers (in order of source index): its offers
      plus the other sources' offers whose label one of its offers has. Else one dataset of all
      labelled offers (the paper's mixed-sampling ablation).

  Returns:
    Sorted int64 offer indices of each dataset.
  """
  labels, source = _check_offer_arrays(labels, source)
  labelled = labels != offer_labels.UNLABELLED
  if not source_aware:
    return [np.flatnonzero(labelled)]
  return [np.flatnonzero(labelled & np.isin(labels, labels[labelled & (source == s)]))
          for s in np.unique(source[labelled])]


class ContrastiveSampler:
  """The offers of every global batch: batch i is a pure function of (seed, i).

  Training runs in rounds. A round holds len(dataset) // batch_size batches of every sampled
  dataset in a seeded random order, so the dataset of a batch is random, drawn in proportion to the
  datasets' sizes; the anchors of a dataset's batches are consecutive slices of a new seeded
  permutation of its offers each round (the few offers past its last whole batch wait for another
  round). Each anchor's partner is another offer of the same dataset with its label, drawn
  uniformly, or the anchor itself when it has none (its two views then differ only by dropout and
  augmentation). Rows are interleaved: row 2j is anchor j and row 2j + 1 its partner, so every
  process's slice of a batch holds whole pairs.
  """

  def __init__(self, labels: np.ndarray, source: np.ndarray, *, batch_size: int, seed: int,
               source_aware: bool = True):
    labels, source = _check_offer_arrays(labels, source)
    if batch_size < 1:
      raise ValueError(f"batch_size must be positive; got {batch_size}.")
    self.batch_size, self.seed = batch_size, seed
    self.datasets, self.group_start, self.group_size = [], [], []
    for number, offers in enumerate(sampled_datasets(labels, source, source_aware=source_aware)):
      if len(offers) < batch_size:
        raise ValueError(f"Sampled dataset {number} has {len(offers)} offers, fewer than one batch of "
                         f"{batch_size} anchors.")
      # Offers sorted by label, so that each label's offers are one slice of the dataset.
      offers = offers[np.argsort(labels[offers], kind="stable")]
      _, start, inverse, size = np.unique(labels[offers], return_index=True, return_inverse=True,
                                          return_counts=True)
      self.datasets.append(offers)
      self.group_start.append(start[inverse])
      self.group_size.append(size[inverse])
    self.batches_per_dataset = np.array([len(offers) // batch_size for offers in self.datasets])
    self.batches_per_round = int(self.batches_per_dataset.sum())
    logging.info("Contrastive sampling: %d datasets of %s offers, %d batches of %d anchors per round.",
                 len(self.datasets), [len(offers) for offers in self.datasets], self.batches_per_round,
                 batch_size)

  def anchors(self, index: int) -> tuple[int, np.ndarray]:
    """The sampled dataset of batch `index` and its anchors' positions in that dataset."""
    round_, slot = divmod(index, self.batches_per_round)
    schedule = np.random.default_rng((self.seed, _SCHEDULE, round_)).permutation(
        np.repeat(np.arange(len(self.datasets)), self.batches_per_dataset))
    dataset = int(schedule[slot])
    position = int(np.sum(schedule[:slot] == dataset))
    order = np.random.default_rng((self.seed, _ANCHORS, round_, dataset)).permutation(len(self.datasets[dataset]))
    return dataset, order[position * self.batch_size:(position + 1) * self.batch_size]

  def __call__(self, index: int) -> np.ndarray:
    """int64 [2 * batch_size] offer indices of batch `index`: anchor, partner, anchor, partner, ..."""
    dataset, anchors = self.anchors(index)
    start, size = self.group_start[dataset][anchors], self.group_size[dataset][anchors]
    # Uniform over the label's other offers: draw among size - 1 slots and skip the anchor's own.
    draw = start + np.random.default_rng((self.seed, _PARTNERS, index)).integers(0, np.maximum(size - 1, 1))
    partners = np.where(size > 1, draw + (draw >= anchors), anchors)
    return self.datasets[dataset][np.stack([anchors, partners], axis=1).reshape(-1)]


def contrastive_batches(texts: Sequence[str], labels: np.ndarray, source: np.ndarray, tokenizer: Any, *,
                        batch_size: int, max_len: int, seed: int, source_aware: bool = True,
                        augmentation: str | None = None, augmentation_probability: float = 0.1,
                        num_epochs: int | None = None) -> grain.IterDataset:
  """Token ids and labels of anchors and their partners; each process gets its slice of every batch.

  Batches as in `ContrastiveSampler` (2 * batch_size rows, pairs interleaved). Like
  `pipeline.process_batches`, every process computes the offers of the whole global batch (cheap)
  and augments and tokenizes only its own rows, so N hosts see exactly the batches of one.

  Args:
    texts: the serialized offers.
    labels: int [num_offers] label of each offer (`offer_labels`; `UNLABELLED` offers are never drawn).
    source: int [num_offers] source of each offer.
    tokenizer: a Hugging Face fast tokenizer.
    batch_size: anchors per global batch (over all processes).
    max_len: token ids per offer, [CLS] and [SEP] included (longer offers are truncated).
    seed: seed of the batches and the augmentation.
    source_aware: source-aware sampled datasets, else one of all offers.
    augmentation: a name of `augmentation.AUGMENTATIONS` applied to every row, or None.
    augmentation_probability: the probability that augmentation chooses each word.
    num_epochs: rounds to run (see `ContrastiveSampler`); None repeats forever.

  Returns:
    A grain dataset; its iterator yields dicts of numpy arrays 'tokens' int32 [rows, max_len] and
    'label' int32 [rows], rows = 2 * batch_size / processes, and its get_state() / set_state()
    resume exactly where the state was taken.
  """
  sampler = ContrastiveSampler(labels, source, batch_size=batch_size, seed=seed, source_aware=source_aware)
  labels = np.asarray(labels)
  if len(texts) != len(labels):
    raise ValueError(f"{len(texts)} texts but {len(labels)} labels.")
  if not np.iinfo(np.int32).min <= labels.min() <= labels.max() <= np.iinfo(np.int32).max:
    raise ValueError(f"labels in [{labels.min()}, {labels.max()}] do not fit int32.")
  if augmentation is not None:
    augmentation_lib.get_augmentation(augmentation)  # An unknown name fails here, not in the first batch.
  anchors = pipeline.process_rows(batch_size, "batch_size")
  rows = slice(2 * anchors.start, 2 * anchors.stop)  # Each anchor's row is followed by its partner's.

  def read(index: int) -> dict[str, np.ndarray]:
    offers = sampler(index)[rows]
    batch_texts = [texts[offer] for offer in offers]
    if augmentation is not None:
      # One generator per global row: the same row is augmented alike however many processes run.
      batch_texts = [
          augmentation_lib.augment(text, augmentation,
                                   np.random.default_rng((seed, _AUGMENTATION, index, rows.start + row)),
                                   augmentation_probability)
          for row, text in enumerate(batch_texts)]
    return {"tokens": tokenization.tokenize_texts(tokenizer, batch_texts, max_len),
            "label": labels[offers].astype(np.int32)}

  return (grain.MapDataset.range(sampler.batches_per_round).repeat(num_epochs)
          .map_with_index(lambda index, _: read(index))
          .to_iter_dataset(pipeline.IN_ORDER))
