"""The negatives of FAQ fine-tuning: the plain top k, the positive-aware rules and what they count, random ones."""
import numpy as np
import pytest

from docent_jax.data.universal import faq
from docent_jax.objectives import faq_negatives


def _top(scores, relevant, k=4):
  """`mine` with every rule off and every answer its own: the plain top k."""
  scores = np.asarray(scores)
  negatives, counts = faq_negatives.mine(scores, relevant, [f"answer {i}" for i in range(scores.shape[1])], k,
                                         faq_negatives.MiningRules(), np.random.default_rng(0))
  assert counts == {rule: 0 for rule in (*faq_negatives.RULES, "filled_at_random", "queries_filled")}
  return negatives


def test_hard_negatives_by_hand():
  scores = np.array([
      [0.9, 0.5, 0.7, 0.5, 0.1],  # relevant 0 scores highest; items 1 and 3 tie
      [0.2, 0.8, 0.8, 0.8, 0.0],  # relevant 2 ties with items 1 and 3
  ])
  negatives = _top(scores, np.array([0, 2]), k=3)
  np.testing.assert_array_equal(negatives, [[2, 1, 3], [1, 3, 0]])
  assert np.issubdtype(negatives.dtype, np.integer)


def test_hard_negatives_are_the_top_other_items_in_score_order():
  rng = np.random.default_rng(2)
  scores = rng.integers(0, 5, (30, 9)).astype(np.float32)  # many ties
  relevant = rng.integers(0, 9, 30)
  negatives = _top(scores, relevant)
  assert negatives.shape == (30, 4)
  for row, (row_scores, target) in enumerate(zip(scores, relevant)):
    expected = sorted((item for item in range(9) if item != target), key=lambda item: (-row_scores[item], item))
    assert negatives[row].tolist() == expected[:4]


def test_hard_negatives_need_enough_other_items():
  scores = np.zeros((2, 5))
  assert _top(scores, np.array([0, 4]), k=4).tolist() == [[1, 2, 3, 4], [0, 1, 2, 3]]
  for k in (0, 5):
    with pytest.raises(ValueError, match=r"Need 1 <= k <= 4"):
      _top(scores, np.array([0, 4]), k=k)


def test_random_negatives_are_distinct_other_items_drawn_uniformly():
  num_items, k = 6, 3
  relevant = np.arange(6000) % num_items
  negatives = faq_negatives.random_negatives(num_items, relevant, k, np.random.default_rng(3))
  assert negatives.shape == (6000, k) and np.issubdtype(negatives.dtype, np.integer)
  assert ((negatives >= 0) & (negatives < num_items)).all()
  assert (np.diff(np.sort(negatives, axis=1), axis=1) > 0).all()
  assert not (negatives == relevant[:, None]).any()
  # Each of the 5 other items is drawn for a query with chance 3 / 5.
  drawn = np.zeros((len(relevant), num_items), bool)
  drawn[np.arange(len(relevant))[:, None], negatives] = True
  for item in range(num_items):
    frequencies = drawn[relevant == item].mean(axis=0)
    np.testing.assert_allclose(np.delete(frequencies, item), k / (num_items - 1), atol=0.06)


def test_random_negatives_are_reproducible_for_a_seed():
  relevant = np.array([0, 3, 7, 7])
  first, again, other = (faq_negatives.random_negatives(10, relevant, 4, np.random.default_rng(seed))
                         for seed in (5, 5, 6))
  np.testing.assert_array_equal(first, again)
  assert not np.array_equal(first, other)
  with pytest.raises(ValueError, match=r"Need 1 <= k <= 9"):
    faq_negatives.random_negatives(10, relevant, 10, np.random.default_rng(5))


def test_a_twin_sharing_the_positives_answer_is_never_a_negative():
  # Items 0 and 1 share an answer (up to case, punctuation and spacing); each query asks for one of them, and the
  # retriever ranks the twin first among the others.
  answers = ["Open the Settings page.", "open the settings page", "Call support.", "Reset it.", "Log out.", "Wait."]
  scores = np.array([[0.9, 0.89, 0.5, 0.4, 0.3, 0.2],
                     [0.88, 0.9, 0.1, 0.5, 0.4, 0.3],
                     [0.7, 0.6, 0.9, 0.5, 0.4, 0.1]])
  relevant = np.array([0, 1, 2])
  plain = _top(scores, relevant, k=3)
  assert plain[0, 0] == 1 and plain[1, 0] == 0  # Without the rule, the twin is the hardest negative.
  negatives, counts = faq_negatives.mine(scores, relevant, answers, 3, faq_negatives.MiningRules(exclude_same_answer=True),
                                         np.random.default_rng(0))
  np.testing.assert_array_equal(negatives, [[2, 3, 4], [3, 4, 5], [0, 1, 3]])
  assert counts["same_answer"] == 2 and counts["filled_at_random"] == 0


def test_the_rank_window_and_the_relative_margin_drop_what_they_say_and_count_it():
  scores = np.array([[0.80, 0.79, 0.70, 0.60, 0.50, 0.40, 0.30, 0.20]])  # Item 0 is the positive.
  answers = [f"a{i}" for i in range(8)]
  rng = np.random.default_rng(0)
  window, counts = faq_negatives.mine(scores, [0], answers, 2, faq_negatives.MiningRules(range_min=2, range_max=5), rng)
  np.testing.assert_array_equal(window, [[3, 4]])  # Candidates 1, 2 (ranks 0, 1) skipped.
  assert counts["rank_window"] == 2
  # 0.95 x 0.80 = 0.76: item 1 (0.79) is too close to the positive to be trusted as a negative.
  margin, counts = faq_negatives.mine(scores, [0], answers, 2, faq_negatives.MiningRules(relative_margin=0.05), rng)
  np.testing.assert_array_equal(margin, [[2, 3]])
  assert counts["relative_margin"] == 1
  # Too few pass the window: the rest are drawn at random, and counted.
  filled, counts = faq_negatives.mine(scores, [0], answers, 3, faq_negatives.MiningRules(range_min=5, range_max=6),
                                      np.random.default_rng(1))
  assert filled[0, 0] == 6 and len(set(filled[0])) == 3 and 0 not in filled[0]
  assert counts["filled_at_random"] == 2 and counts["queries_filled"] == 1


@pytest.mark.parametrize("rules, message", [
    (dict(range_min=-1), "range_min -1"),
    (dict(range_min=3, range_max=3), "range_max 0 \\(no end\\) or above range_min"),
    (dict(relative_margin=1.0), "relative_margin must be in \\[0, 1\\)"),
])
def test_bad_rules_are_refused_naming_the_key(rules, message):
  with pytest.raises(ValueError, match=message):
    faq_negatives.MiningRules(**rules)


def test_answers_are_the_same_up_to_case_punctuation_and_spacing():
  assert faq.normalize_answer("  Open the SETTINGS-page!\n") == "open the settings page"
  assert faq.answer_groups(["A b.", "a  B", "c"]).tolist() == [0, 0, 1]


def test_mined_negatives_filled_at_random_keep_theirs_first_and_draw_distinct_others():
  rng = np.random.default_rng(0)
  relevant = np.array([0, 3, 5])
  mined = np.array([[1], [4], [0]])
  negatives = faq_negatives.with_random(mined, relevant, num_items=8, k=4, rng=rng)
  assert negatives.shape == (3, 4) and (negatives[:, 0] == mined[:, 0]).all()
  for query, row in enumerate(negatives):
    assert len(set(row)) == 4 and relevant[query] not in row
