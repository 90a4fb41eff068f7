"""Tag prediction by a fine-tuned tag encoder: loss, sampling, subsampling and learning on a toy task."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax.evaluation import tag_finetuning
from docent_jax.models import bert
from docent_jax.models import pretrained

_TAGS = ["space", "horror", "romance", "western"]
_DIM = 32


def test_loss_excludes_known_tags_from_the_negatives_and_weights_by_votes():
  votes = jnp.array([[3, 1, 0, 0]])
  scores = jnp.array([[1.0, 0.5, -1.0, 0.2]])
  negatives = np.logaddexp(-1.0, 0.2)
  per_pair = [np.logaddexp(s, negatives) - s for s in (1.0, 0.5)]
  assert float(tag_finetuning.tag_softmax_loss(scores, votes, "votes")) == pytest.approx(
      (3 * per_pair[0] + per_pair[1]) / 4, rel=1e-6)
  log_weights = np.log1p([3.0, 1.0])
  assert float(tag_finetuning.tag_softmax_loss(scores, votes, "log_votes")) == pytest.approx(
      np.dot(log_weights, per_pair) / log_weights.sum(), rel=1e-6)
  # Another known tag scoring higher is no competitor; a negative scoring higher is.
  raised = float(tag_finetuning.tag_softmax_loss(scores.at[0, 1].set(9.0), votes))
  assert raised == pytest.approx((3 * per_pair[0] + np.logaddexp(9.0, negatives) - 9.0) / 4, rel=1e-6)
  base = tag_finetuning.tag_softmax_loss(scores, votes)
  assert float(tag_finetuning.tag_softmax_loss(scores.at[0, 2].set(9.0), votes)) > float(base) + 1.0
  only_known = tag_finetuning.tag_softmax_loss(scores[:, :2], votes[:, :2])
  grads = jax.grad(tag_finetuning.tag_softmax_loss)(scores[:, :2], votes[:, :2])
  assert float(only_known) == pytest.approx(0.0, abs=1e-6) and np.isfinite(grads).all()


def test_sampled_candidates_hold_the_batch_known_tags_and_are_distinct():
  rng = np.random.default_rng(0)
  votes = np.zeros((50, 40), np.int32)
  votes[np.arange(50), np.arange(50) % 40] = 2
  for _ in range(20):
    items, tags = tag_finetuning.sample_step(rng, votes, items_per_step=4, tags_per_step=10)
    assert items.shape == (4,) and tags.shape == (10,) and len(set(tags)) == 10
    assert set(np.flatnonzero(votes[items].any(axis=0))) <= set(tags)
  items, tags = tag_finetuning.sample_step(rng, votes, items_per_step=30, tags_per_step=10)
  assert len(set(tags)) == 10 and votes[np.ix_(items, tags)].any(axis=1).sum() >= 10  # Too many known: a subset.
  _, tags = tag_finetuning.sample_step(rng, votes[:, :6], items_per_step=4, tags_per_step=10)
  np.testing.assert_array_equal(tags, np.arange(6))  # Few tags: every tag, every step.
  with pytest.raises(ValueError, match="vote weighting"):
    tag_finetuning.FinetuneOptions(vote_weighting="sqrt")


def test_subsample_keeps_at_most_k_sentences_of_each_chosen_entity():
  sentence_entity = np.repeat(np.arange(5), [1, 3, 7, 2, 9]).astype(np.int32)
  sampled = tag_finetuning.subsample_per_entity(sentence_entity, np.array([0, 2, 4]), 3, seed=1)
  assert (np.diff(sampled) > 0).all()
  np.testing.assert_array_equal(np.bincount(sentence_entity[sampled], minlength=5), [1, 0, 3, 0, 3])
  np.testing.assert_array_equal(sampled, tag_finetuning.subsample_per_entity(sentence_entity, np.array([0, 2, 4]),
                                                                            3, seed=1))
  assert not np.array_equal(sampled, tag_finetuning.subsample_per_entity(sentence_entity, np.array([0, 2, 4]), 3,
                                                                         seed=2))


def _toy_task(num_items: int, seed: int) -> tuple[tag_finetuning.Items, np.ndarray]:
  """Items near one of 4 random unit directions, tagged with that direction's tag (1..3 votes)."""
  rng = np.random.default_rng(seed)
  directions = np.random.default_rng(0).normal(size=(len(_TAGS), _DIM))
  theme = np.arange(num_items) % len(_TAGS)
  vectors = directions[theme] + 0.3 * rng.normal(size=(num_items, _DIM))
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  votes = np.zeros((num_items, len(_TAGS)), np.int32)
  votes[np.arange(num_items), theme] = 1 + np.arange(num_items) % 3
  return tag_finetuning.Items(vectors.astype(np.float32), np.arange(num_items)), votes


def test_finetuned_tag_encoder_learns_a_toy_task_and_reports_closed_and_open_metrics():
  config = bert.BertConfig.from_hf_dict(dict(vocab_size=30522, hidden_size=_DIM, num_hidden_layers=1,
                                             num_attention_heads=4, intermediate_size=64))
  tokens = jnp.zeros((1, 8), jnp.int32)
  params = bert.BertModel(config, add_pooler=False).init(jax.random.key(0), tokens, tokens)["params"]
  tokenizer = pretrained.load_tokenizer("minilm-l6")
  options = tag_finetuning.FinetuneOptions(num_steps=40, learning_rate=3e-3, items_per_step=8, tags_per_step=2)
  finetuner = tag_finetuning.TagFinetuner(config, jax.tree.map(np.asarray, params), tokenizer, max_len=8,
                                          options=options)
  train_items, train_votes = _toy_task(24, seed=1)
  test_items, test_votes = _toy_task(12, seed=2)
  votes = np.concatenate([train_votes, test_votes])
  train = tag_finetuning.Items(train_items.vectors, np.arange(24))
  test = tag_finetuning.Items(test_items.vectors, np.arange(24, 36))
  label_set = tag_finetuning.LabelSet("tags", _TAGS, votes, vote_threshold=2)

  untrained = test.vectors @ finetuner.tag_vectors(finetuner.initial_params, _TAGS).T
  untrained_auc = tag_finetuning.evaluate_label_scores(untrained, label_set, test.entity)["auc"]
  results = tag_finetuning.evaluate_tag_tasks(finetuner, [label_set], train, test, open_vocabulary_fractions=(0.5,))
  assert results["tags_auc"] == pytest.approx(1.0) and results["tags_auc"] > untrained_auc
  assert results["tags_p@1"] == pytest.approx(1.0)
  assert results["tags_num_entities"] == 8  # The 4 test movies with a single vote are below the threshold.
  assert results["tags_open0.5_num_train_tags"] == 2 and results["tags_open0.5_num_heldout_tags"] == 2
  assert 0.0 <= results["tags_open0.5_auc"] <= 1.0
  # Sentences as items: a movie's scores are the mean over its sentences.
  sentences = tag_finetuning.Items(np.repeat(test.vectors, 2, axis=0), np.repeat(test.entity, 2))
  bag = tag_finetuning.evaluate_tag_tasks(finetuner, [label_set], train, sentences)
  assert bag["tags_auc"] == pytest.approx(results["tags_auc"]) and bag["tags_num_entities"] == 8
  # No test movie reaches the threshold: nothing is fitted or reported.
  strict = tag_finetuning.LabelSet("tags", _TAGS, votes, vote_threshold=4)
  assert tag_finetuning.evaluate_tag_tasks(finetuner, [strict], train, test) == {"tags_num_entities": 0}
