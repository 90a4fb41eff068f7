"""Class labels of product offers for supervised contrastive training.

Offers with the same label are positives of each other. Two ways to get labels, as in Peeters &
Bizer (2022): from product ids where the data has them (WDC Computers), or from the matching pairs
of a pair dataset (Abt-Buy, Amazon-Google), where the connected components of a sample of the
matches are the products.
"""
from collections.abc import Sequence

from absl import logging
import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

# The label of an offer that pre-training never sees (e.g. one only in test pairs).
UNLABELLED = -1


def product_labels(product_ids: Sequence[str]) -> np.ndarray:
  """One label per distinct product id, numbered in order of first appearance.

  Args:
    product_ids: the product id of each offer, '' where it has none.

  Returns:
    int32 [num_offers]; every offer without a product id gets a label of its own.
  """
  label_of_id: dict[str, int] = {}
  labels = np.empty(len(product_ids), np.int32)
  next_label = 0
  for offer, product_id in enumerate(product_ids):
    if product_id == "":
      labels[offer], next_label = next_label, next_label + 1
    else:
      if product_id not in label_of_id:
        label_of_id[product_id], next_label = next_label, next_label + 1
      labels[offer] = label_of_id[product_id]
  return labels


def check_pairs(pairs: np.ndarray, num_offers: int, split: str, selects: str = "") -> np.ndarray:
  """`pairs` as int64 [m, 3] (left, right, label), m > 0, after checking offer indices and 0/1 labels.

  `selects`: what the split's F1 chooses (e.g. "the probe's C"); then it needs a match, else F1 is 0 for
  every model and the choice is made on nothing.
  """
  pairs = np.asarray(pairs)
  if pairs.ndim != 2 or pairs.shape[1] != 3 or not len(pairs) or not np.issubdtype(pairs.dtype, np.integer):
    raise ValueError(f"{split} pairs: expected a non-empty int array [m, 3] (left, right, label); got "
                     f"{pairs.dtype} {pairs.shape}.")
  bad_offer = ((pairs[:, :2] < 0) | (pairs[:, :2] >= num_offers)).any(axis=1)
  if bad_offer.any():
    row = int(np.flatnonzero(bad_offer)[0])
    raise ValueError(f"{split} pairs row {row}: offer indices {pairs[row, :2].tolist()} are outside "
                     f"[0, {num_offers}) ({int(bad_offer.sum())} such rows).")
  bad_label = ~np.isin(pairs[:, 2], (0, 1))
  if bad_label.any():
    row = int(np.flatnonzero(bad_label)[0])
    raise ValueError(f"{split} pairs row {row}: label {pairs[row, 2]} is not 0 or 1 "
                     f"({int(bad_label.sum())} such rows).")
  if selects and not pairs[:, 2].any():
    raise ValueError(f"{split} pairs: none of the {len(pairs)} is a match, so F1 is 0 for every model and "
                     f"{selects} would be chosen on nothing. Add matching pairs to that split.")
  return pairs.astype(np.int64)


def correspondence_labels(num_offers: int, pairs: np.ndarray, fraction: float = 0.8,
                          seed: int = 0) -> tuple[np.ndarray, int]:
  """Labels from the connected components of a seeded sample of the matching pairs.

  The paper builds its correspondence graph from 80% of the matches of the training and validation
  pairs, so that the remaining matches are not all closed by transitivity; pass both splits
  concatenated. A match listed twice (in either direction) is one edge.

  Args:
    num_offers: the number of offers.
    pairs: int [m, 3] rows of (left offer, right offer, label 1 for a match or 0).
    fraction: the fraction of the distinct matches used as edges (rounded to a whole count).
    seed: the seed of the sample; the same inputs and seed give the same labels.

  Returns:
    (int32 [num_offers] labels: one per connected component of the edges, every offer in no edge
    a label of its own; the number of edges used).
  """
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f"fraction must be in [0, 1]; got {fraction}.")
  pairs = check_pairs(pairs, num_offers, "correspondence")
  matches = np.unique(np.sort(pairs[pairs[:, 2] == 1, :2], axis=1), axis=0)
  num_edges = round(fraction * len(matches))
  edges = matches[np.sort(np.random.default_rng(seed).permutation(len(matches))[:num_edges])]
  graph = scipy.sparse.coo_matrix((np.ones(num_edges, np.int8), (edges[:, 0], edges[:, 1])),
                                  shape=(num_offers, num_offers))
  # Components are numbered in order of their lowest offer index, so the labels are deterministic.
  num_labels, labels = scipy.sparse.csgraph.connected_components(graph, directed=False)
  logging.info("Correspondence graph: %d of %d distinct matches as edges, %d labels for %d offers.", num_edges,
               len(matches), num_labels, num_offers)
  return labels.astype(np.int32), num_edges
