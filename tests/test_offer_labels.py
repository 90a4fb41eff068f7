"""Tests of offer labels from product ids and from the correspondence graph of matching pairs."""
import numpy as np
import pytest

from docent_jax.data.offers import labels as offer_labels


def _same_label(labels):
  return labels[:, None] == labels[None, :]


def test_product_labels_group_equal_ids_and_give_missing_ids_their_own():
  ids = ["p1", "", "p2", "p1", "", "p3", "p2", ""]
  labels = offer_labels.product_labels(ids)
  assert labels.dtype == np.int32 and labels.shape == (8,)
  expected = np.array([[a == b and (a != "" or i == j) for j, b in enumerate(ids)] for i, a in enumerate(ids)])
  np.testing.assert_array_equal(_same_label(labels), expected)
  assert offer_labels.product_labels([]).shape == (0,)


def _components(num_offers, edges):
  """Connected components by a plain union-find: a root per offer."""
  parent = list(range(num_offers))

  def find(x):
    while parent[x] != x:
      parent[x] = parent[parent[x]]
      x = parent[x]
    return x

  for a, b in edges:
    parent[find(a)] = find(b)
  return np.array([find(x) for x in range(num_offers)])


def _random_forest_pairs(rng, num_offers, num_matches, num_non_matches):
  """Matches forming a forest (so every edge joins two components) plus random non-matches."""
  children = rng.choice(np.arange(1, num_offers), num_matches, replace=False)
  matches = np.stack([children, [rng.integers(child) for child in children], np.ones(num_matches, int)], axis=1)
  non_matches = np.concatenate([rng.integers(num_offers, size=(num_non_matches, 2)),
                                np.zeros((num_non_matches, 1), int)], axis=1)
  return np.concatenate([matches, non_matches]).astype(np.int64)


def test_all_matches_give_the_connected_components():
  pairs = np.array([[0, 1, 1], [1, 2, 1], [4, 5, 1], [2, 3, 0], [5, 6, 0], [3, 6, 0]], np.int64)
  labels, num_edges = offer_labels.correspondence_labels(8, pairs, fraction=1.0)
  assert num_edges == 3 and labels.dtype == np.int32
  # {0, 1, 2}, {4, 5}; 3, 6, 7 alone (non-matches join nothing).
  np.testing.assert_array_equal(_same_label(labels), _same_label(np.array([0, 0, 0, 1, 2, 2, 3, 4])))


def test_a_fraction_of_the_matches_is_sampled_reproducibly():
  rng = np.random.default_rng(0)
  num_offers = 300
  pairs = _random_forest_pairs(rng, num_offers, num_matches=150, num_non_matches=100)
  labels, num_edges = offer_labels.correspondence_labels(num_offers, pairs, fraction=0.8, seed=4)
  assert num_edges == 120
  # In a forest every sampled edge merges two labels.
  assert len(np.unique(labels)) == num_offers - num_edges
  # Each label lies within one component of all the matches.
  full = _components(num_offers, pairs[pairs[:, 2] == 1, :2])
  assert all(len(np.unique(full[labels == label])) == 1 for label in np.unique(labels))
  again, _ = offer_labels.correspondence_labels(num_offers, pairs, fraction=0.8, seed=4)
  np.testing.assert_array_equal(again, labels)
  other, _ = offer_labels.correspondence_labels(num_offers, pairs, fraction=0.8, seed=5)
  assert not np.array_equal(_same_label(other), _same_label(labels))
  singletons, none_used = offer_labels.correspondence_labels(num_offers, pairs, fraction=0.0)
  assert none_used == 0 and len(np.unique(singletons)) == num_offers


def test_repeated_and_reversed_matches_are_one_edge():
  pairs = np.array([[0, 1, 1], [1, 0, 1], [0, 1, 1], [2, 3, 1]], np.int64)
  labels, num_edges = offer_labels.correspondence_labels(4, pairs, fraction=0.5, seed=0)
  assert num_edges == 1  # Half of the two distinct matches.
  assert len(np.unique(labels)) == 3


def test_labels_on_random_graphs_with_cycles_match_union_find():
  rng = np.random.default_rng(1)
  pairs = np.concatenate([rng.integers(60, size=(80, 2)), rng.integers(2, size=(80, 1))], axis=1)
  labels, _ = offer_labels.correspondence_labels(60, pairs, fraction=1.0)
  np.testing.assert_array_equal(_same_label(labels), _same_label(_components(60, pairs[pairs[:, 2] == 1, :2])))


@pytest.mark.parametrize("pairs, message", [
    (np.array([[0, 1, 1], [0, 9, 0]]), "correspondence pairs row 1: offer indices \\[0, 9\\] are outside \\[0, 5\\)"),
    (np.array([[0, 1, 1], [2, -1, 1]]), "row 1: offer indices"),
    (np.array([[0, 1, 2]]), "row 0: label 2 is not 0 or 1"),
    (np.array([[0, 1]]), "\\[m, 3\\]"),
    (np.array([[0.0, 1.0, 1.0]]), "non-empty int array"),
])
def test_bad_pairs_are_rejected_with_the_row(pairs, message):
  with pytest.raises(ValueError, match=message):
    offer_labels.correspondence_labels(5, pairs)


def test_fraction_outside_unit_interval_is_rejected():
  with pytest.raises(ValueError, match="fraction"):
    offer_labels.correspondence_labels(3, np.array([[0, 1, 1]]), fraction=1.5)
