"""FAQ retrieval: metrics and their tie rule, cosine / TF-IDF / BM25 scores, seed aggregation."""
import numpy as np
import pytest

from docent_jax.evaluation import faq_retrieval
from docent_jax.evaluation import metrics
from docent_jax.inference import search

# Every document has three words; "account" is in three of them, "refund" only in the last.
DOCUMENTS = ["account login help", "account email change", "account close now", "refund status check"]


def test_metrics_of_hand_ranked_queries():
  scores = np.array([
      [0.9, 0.1, 0.2, 0.3, 0.0],  # item 0 ranks 1st
      [0.5, 0.9, 0.1, 0.7, 0.0],  # item 3 ranks 2nd
      [0.5, 0.9, 0.1, 0.7, 0.0],  # item 2 ranks 4th
  ])
  result = faq_retrieval.retrieval_metrics(scores, np.array([0, 3, 2]))
  assert result == pytest.approx({"top1": 1 / 3, "mrr": (1 + 1 / 2 + 1 / 4) / 3})


def test_ties_count_in_expectation():
  scores = np.array([
      [2.0, 2.0, 2.0, 1.0],  # relevant 0 tied with two others at the top: rank 2, first with chance 1/3
      [3.0, 2.0, 2.0, 1.0],  # relevant 1 tied with one other below the top: rank 2.5, never first
      [0.0, 0.0, 0.0, 0.0],  # constant scores: rank 2.5, first with chance 1/4
  ])
  result = faq_retrieval.retrieval_metrics(scores, np.array([0, 1, 3]))
  assert result == pytest.approx({"top1": (1 / 3 + 0 + 1 / 4) / 3, "mrr": (1 / 2 + 1 / 2.5 + 1 / 2.5) / 3})


def test_mrr_agrees_with_the_tie_averaged_ranks_of_metrics():
  rng = np.random.default_rng(0)
  scores = rng.integers(0, 3, (40, 6)).astype(np.float64)  # many ties
  relevant = rng.integers(0, 6, 40)
  ranks = np.asarray(metrics.ranks_from_scores(scores, relevant), np.float64)
  relevant_scores = scores[np.arange(40), relevant]
  first_chance = (relevant_scores == scores.max(axis=1)) / (scores == scores.max(axis=1, keepdims=True)).sum(axis=1)
  result = faq_retrieval.retrieval_metrics(scores, relevant)
  assert result == pytest.approx({"top1": first_chance.mean(), "mrr": np.mean(1.0 / ranks)})


@pytest.mark.parametrize("scores, relevant, message", [
    ([[1.0, np.nan]], [0], "NaN or infinite"),
    ([[1.0, 2.0]], [2], r"must lie in \[0, 2\)"),
    ([[1.0, 2.0]], [0, 1], "2 relevant item indices for 1 rows"),
    ([[1.0, 2.0]], [0.0], "1-D int array"),
])
def test_retrieval_metrics_rejects_bad_input(scores, relevant, message):
  with pytest.raises(ValueError, match=message):
    faq_retrieval.retrieval_metrics(np.array(scores), np.array(relevant))


def test_cosine_scores_match_a_direct_computation():
  rng = np.random.default_rng(1)
  queries, items = rng.normal(size=(3, 5)), rng.normal(size=(4, 5))
  items[2] = 0.0
  expected = [[q @ v / (np.linalg.norm(q) * np.linalg.norm(v)) if v.any() else 0.0 for v in items] for q in queries]
  np.testing.assert_allclose(search.cosine_scores(queries, items), expected, atol=1e-12)
  np.testing.assert_allclose(search.cosine_scores(7.0 * queries, items), expected, atol=1e-12)
  with pytest.raises(ValueError, match="Expected query vectors"):
    search.cosine_scores(queries, items[:, :4])


@pytest.mark.parametrize("scorer", [faq_retrieval.tfidf_scores, faq_retrieval.bm25_scores])
def test_lexical_baselines_rank_the_rare_word_first(scorer):
  # "Account" and "Refund" each match one word of equally long items; only the rarer word's weight decides.
  scores = scorer(["Account REFUND?", "nothing known"], DOCUMENTS)
  assert scores.shape == (2, 4)
  assert scores[0, 3] > scores[0, :3].max() > 0
  np.testing.assert_array_equal(scores[1], 0.0)


def test_tfidf_scores_are_cosines():
  scores = faq_retrieval.tfidf_scores([DOCUMENTS[1]], DOCUMENTS)
  np.testing.assert_allclose(scores[0, 1], 1.0)
  assert (scores[0, [0, 2, 3]] < 1.0).all()


def test_answer_top1_counts_an_item_with_the_right_answer_and_only_where_answers_are_shared():
  scores = np.array([[0.2, 0.9, 0.1],    # Item 1, the twin of the right item 0, ranks first: right by answer.
                     [0.5, 0.5, 0.9],    # Item 2, another answer, first: wrong either way.
                     [0.7, 0.7, 0.1]])   # The right item 1 tied with its twin 0 at the top.
  found = faq_retrieval.retrieval_metrics(scores, np.array([0, 0, 1]), answer_groups=np.array([0, 0, 1]))
  assert found["top1"] == pytest.approx((0 + 0 + 0.5) / 3)
  assert found["answer_top1"] == pytest.approx((1 + 0 + 1) / 3)
  assert "answer_top1" not in faq_retrieval.retrieval_metrics(scores, np.array([0, 0, 1]), np.array([0, 1, 2]))
