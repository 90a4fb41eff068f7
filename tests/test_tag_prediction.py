"""Tag-prediction protocol and baselines against hand-computed values, and on MovieLens tags."""
import math

import numpy as np
import pytest

from docent_jax.data.reviews import files as review_files
from docent_jax.data.reviews import tag_labels
from docent_jax.evaluation import tag_prediction

# Movie 0: positives (>= 2 votes) tags 0 and 3, ranked 1st and 3rd. Movie 1: positive tag 1, ranked
# 3rd. Movie 2: no positive, skipped.
SCORES = np.array([[0.9, 0.1, 0.5, 0.3], [0.2, 0.4, 0.6, 0.8], [0.1, 0.2, 0.3, 0.4]])
VOTES = np.array([[3, 0, 1, 2], [0, 2, 0, 0], [1, 1, 1, 1]])


def test_evaluate_tag_predictions_by_hand():
  result = tag_prediction.evaluate_tag_predictions(SCORES, VOTES, ks=[1, 2])
  log3 = math.log2(3)
  assert result == pytest.approx({
      "map": ((1 + 2 / 3) / 2 + 1 / 3) / 2,
      "auc": (3 / 4 + 1 / 3) / 2,
      # Pooled: 0.9 beats all 5 negatives (0.1, 0.5, 0.2, 0.6, 0.8); 0.3 and 0.4 beat 2 each.
      "auc_micro": 9 / 15,
      "p@1": 1 / 2,
      "p@2": 1 / 4,
      # Relevance = votes: movie 0 ranks votes 3, 1 on top, the ideal is 3, 2; movie 1 has 0 gain.
      "ndcg@1": 1 / 2,
      "ndcg@2": (3 + 1 / log3) / (3 + 2 / log3) / 2,
      "num_entities": 2,
      "num_skipped_entities": 1,
  })


def test_exclude_mask_removes_pairs_from_ranking():
  exclude = np.zeros(SCORES.shape, bool)
  exclude[0, 2] = True  # the negative that outranked a positive of movie 0
  exclude[1, 1] = True  # the only positive of movie 1: nothing left to evaluate there
  result = tag_prediction.evaluate_tag_predictions(SCORES, VOTES, ks=[2], exclude_mask=exclude)
  assert (result["map"], result["auc"], result["p@2"]) == (1.0, 1.0, 1.0)
  assert (result["num_entities"], result["num_skipped_entities"]) == (1, 2)


def test_evaluate_tag_predictions_rejects_bad_input():
  with pytest.raises(ValueError, match="one shape"):
    tag_prediction.evaluate_tag_predictions(SCORES, VOTES[:, :2])
  with pytest.raises(ValueError, match="non-negative integers"):
    tag_prediction.evaluate_tag_predictions(SCORES, VOTES - 2)
  with pytest.raises(ValueError, match="No movie of 3"):
    tag_prediction.evaluate_tag_predictions(SCORES, VOTES, vote_threshold=4)
  with pytest.raises(ValueError, match="NaN or infinite"):
    tag_prediction.evaluate_tag_predictions(np.where(SCORES > 0.85, np.nan, SCORES), VOTES)


def test_tag_vote_matrix():
  entity_tags = {"7": {"funny": 2, "dark": 1}, "9": {"dark": 3}}
  tags, votes = tag_prediction.tag_vote_matrix(entity_tags, ["9", "7", "8"])
  assert tags == ["dark", "funny"]
  np.testing.assert_array_equal(votes, [[3, 0], [1, 2], [0, 0]])
  tags, votes = tag_prediction.tag_vote_matrix(entity_tags, ["7"], tags=["funny", "sad"])
  np.testing.assert_array_equal(votes, [[2, 0]])


def test_top_tags_and_bag_of_sentences_baselines():
  train_votes = np.array([[2, 0, 5], [3, 1, 0], [2, 2, 0]])
  np.testing.assert_array_equal(tag_prediction.top_tags_scores(train_votes, 2), [[3, 1, 1]] * 2)
  sentence_scores = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, 5.0]])
  np.testing.assert_allclose(tag_prediction.bag_of_sentences_scores(sentence_scores, np.array([1, 0, 1]), 2),
                             [[3.0, 2.0], [3.0, 2.5]])
  with pytest.raises(ValueError, match="1 of 3 entities have no sentence"):
    tag_prediction.bag_of_sentences_scores(sentence_scores, np.array([1, 0, 1]), 3)
  with pytest.raises(ValueError, match=r"sentence_entity\[2\] = 5"):
    tag_prediction.bag_of_sentences_scores(sentence_scores, np.array([1, 0, 5]), 2)


def test_tfidf_tag_scores():
  texts = ["space alien ship alien", "romantic comedy love", "alien comedy"]
  scores = tag_prediction.tfidf_tag_scores(texts, ["Alien", "romantic comedy", "!!"])
  # scikit-learn's smooth idf over 3 texts: ln(4 / (1 + df)) + 1; rows are L2-normalised over the
  # tag words (alien, comedy, romantic). 'alien' and 'comedy' have df 2, 'romantic' df 1.
  idf_common, idf_romantic = math.log(4 / 3) + 1, math.log(2) + 1
  text1 = (idf_common + idf_romantic) / math.hypot(idf_common, idf_romantic)
  np.testing.assert_allclose(scores, [[1, 0, 0], [0, text1 / 2, 0], [1 / math.sqrt(2), 1 / math.sqrt(8), 0]],
                             rtol=1e-6)
  with pytest.raises(ValueError, match="No tag holds a word"):
    tag_prediction.tfidf_tag_scores(texts, ["!!"])


def test_split_tag_vocabulary_is_seeded_and_nested():
  train, heldout = tag_labels.split_tag_vocabulary(10, 0.7, seed=3)
  assert len(train) == 7 and len(heldout) == 3
  np.testing.assert_array_equal(np.sort(np.concatenate([train, heldout])), np.arange(10))
  np.testing.assert_array_equal(train, tag_labels.split_tag_vocabulary(10, 0.7, seed=3)[0])
  smaller, larger_heldout = tag_labels.split_tag_vocabulary(10, 0.3, seed=3)
  assert set(smaller) < set(train) and set(heldout) < set(larger_heldout)
  assert not np.array_equal(train, tag_labels.split_tag_vocabulary(10, 0.7, seed=4)[0])
  with pytest.raises(ValueError, match="no training or no held-out tag"):
    tag_labels.split_tag_vocabulary(10, 0.01, seed=0)


def test_movielens_popularity_beats_random(shared_data_dir):
  movielens = review_files.read_movielens(shared_data_dir / "movielens" / "ml-latest-small")
  movies = sorted(movielens.tags, key=int)
  tags, votes = tag_prediction.tag_vote_matrix(movielens.tags, movies)
  # Tags of at least 3 movies; ml-latest-small has few tags with 2 votes, so one vote makes a positive.
  votes = votes[:, (votes > 0).sum(axis=0) >= 3]
  assert len(movies) > 1000 and votes.shape[1] > 100 and len(tags) > votes.shape[1]
  permutation = np.random.default_rng(0).permutation(len(movies))
  train, test = permutation[:len(movies) // 2], permutation[len(movies) // 2:]
  popular = tag_prediction.evaluate_tag_predictions(
      tag_prediction.top_tags_scores(votes[train], len(test), vote_threshold=1), votes[test], vote_threshold=1)
  random = tag_prediction.evaluate_tag_predictions(
      np.random.default_rng(1).random((len(test), votes.shape[1])), votes[test], vote_threshold=1)
  assert popular["num_entities"] == random["num_entities"] > 300
  assert popular["auc"] > random["auc"] + 0.05
  assert popular["map"] > 3 * random["map"]
  assert abs(random["auc"] - 0.5) < 0.05
