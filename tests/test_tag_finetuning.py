"""Tag prediction by a fine-tuned tag encoder: loss, sampling, subsampling and learning on a toy task."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from docent_jax import optim
from docent_jax.data.reviews import tag_labels
from docent_jax.modules import tag_scorers
from docent_jax.evaluation import tag_prediction
from docent_jax.modules import bert
from docent_jax.modules import pretrained

_TAGS = ["space", "horror", "romance", "western"]
_DIM = 32


def test_loss_excludes_known_tags_from_the_negatives_and_weights_by_votes():
  votes = jnp.array([[3, 1, 0, 0]])
  scores = jnp.array([[1.0, 0.5, -1.0, 0.2]])
  negatives = np.logaddexp(-1.0, 0.2)
  per_pair = [np.logaddexp(s, negatives) - s for s in (1.0, 0.5)]
  assert float(tag_scorers.tag_softmax_loss(scores, votes, "votes")) == pytest.approx(
      (3 * per_pair[0] + per_pair[1]) / 4, rel=1e-6)
  log_weights = np.log1p([3.0, 1.0])
  assert float(tag_scorers.tag_softmax_loss(scores, votes, "log_votes")) == pytest.approx(
      np.dot(log_weights, per_pair) / log_weights.sum(), rel=1e-6)
  # Another known tag scoring higher is no competitor; a negative scoring higher is.
  raised = float(tag_scorers.tag_softmax_loss(scores.at[0, 1].set(9.0), votes))
  assert raised == pytest.approx((3 * per_pair[0] + np.logaddexp(9.0, negatives) - 9.0) / 4, rel=1e-6)
  base = tag_scorers.tag_softmax_loss(scores, votes)
  assert float(tag_scorers.tag_softmax_loss(scores.at[0, 2].set(9.0), votes)) > float(base) + 1.0
  only_known = tag_scorers.tag_softmax_loss(scores[:, :2], votes[:, :2])
  grads = jax.grad(tag_scorers.tag_softmax_loss)(scores[:, :2], votes[:, :2])
  assert float(only_known) == pytest.approx(0.0, abs=1e-6) and np.isfinite(grads).all()


def test_sampled_candidates_hold_the_batch_known_tags_and_are_distinct():
  rng = np.random.default_rng(0)
  votes = np.zeros((50, 40), np.int32)
  votes[np.arange(50), np.arange(50) % 40] = 2
  for _ in range(20):
    items, tags = tag_scorers.sample_step(rng, votes, items_per_step=4, tags_per_step=10)
    assert items.shape == (4,) and tags.shape == (10,) and len(set(tags)) == 10
    assert set(np.flatnonzero(votes[items].any(axis=0))) <= set(tags)
  items, tags = tag_scorers.sample_step(rng, votes, items_per_step=30, tags_per_step=10)
  assert len(set(tags)) == 10 and votes[np.ix_(items, tags)].any(axis=1).sum() >= 10  # Too many known: a subset.
  _, tags = tag_scorers.sample_step(rng, votes[:, :6], items_per_step=4, tags_per_step=10)
  np.testing.assert_array_equal(tags, np.arange(6))  # Few tags: every tag, every step.
  with pytest.raises(ValueError, match="vote weighting"):
    tag_scorers.StepOptions(vote_weighting="sqrt")


def test_subsample_keeps_at_most_k_sentences_of_each_chosen_entity():
  sentence_entity = np.repeat(np.arange(5), [1, 3, 7, 2, 9]).astype(np.int32)
  sampled = tag_scorers.subsample_per_entity(sentence_entity, np.array([0, 2, 4]), 3, seed=1)
  assert (np.diff(sampled) > 0).all()
  np.testing.assert_array_equal(np.bincount(sentence_entity[sampled], minlength=5), [1, 0, 3, 0, 3])
  np.testing.assert_array_equal(sampled, tag_scorers.subsample_per_entity(sentence_entity, np.array([0, 2, 4]),
                                                                            3, seed=1))
  assert not np.array_equal(sampled, tag_scorers.subsample_per_entity(sentence_entity, np.array([0, 2, 4]), 3,
                                                                         seed=2))


def toy_task(num_items: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Item vectors near one of 4 random unit directions, tagged with that direction's tag (1..3 votes)."""
  rng = np.random.default_rng(seed)
  directions = np.random.default_rng(0).normal(size=(len(_TAGS), _DIM))
  theme = np.arange(num_items) % len(_TAGS)
  vectors = directions[theme] + 0.3 * rng.normal(size=(num_items, _DIM))
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  votes = np.zeros((num_items, len(_TAGS)), np.int32)
  votes[np.arange(num_items), theme] = 1 + np.arange(num_items) % 3
  return vectors.astype(np.float32), votes


def fit(scorer, params, vectors, votes, tag_tokens, options, *, num_steps: int, learning_rate: float):
  """Fine-tunes a scorer's params by its own sampling and loss (the trainer's optimizer, no warm-up)."""
  optimizer = optim.create_optimizer(ml_collections.ConfigDict(dict(
      learning_rate=learning_rate, warmup_steps=0, weight_decay=0.0, grad_clip_norm=1.0, b1=0.9, b2=0.999,
      eps=1e-8, lr_multipliers=())), num_steps)
  step = jax.jit(lambda p, s, v, t, w: (lambda g: optimizer.update(g, s, p))(
      jax.grad(scorer.loss)(p, v, t, w, options.vote_weighting)))
  state, rng = optimizer.init(params), np.random.default_rng(0)
  for _ in range(num_steps):
    items, tags = scorer.sample(rng, votes, options)
    updates, state = step(params, state, vectors[items], tag_tokens[tags], votes[items[:, None], tags])
    params = optax.apply_updates(params, updates)
  return params


def test_finetuned_tag_encoder_learns_a_toy_task():
  config = bert.BertConfig.from_hf_dict(dict(vocab_size=30522, hidden_size=_DIM, num_hidden_layers=1,
                                             num_attention_heads=4, intermediate_size=64))
  tokens = jnp.zeros((1, 8), jnp.int32)
  params = bert.BertModel(config, add_pooler=False).init(jax.random.key(0), tokens, tokens)["params"]
  scorer = tag_scorers.DualScorer(bert.BertModel(config, add_pooler=False))
  tag_tokens = tag_scorers.label_tokens(pretrained.load_tokenizer("minilm-l6"), _TAGS, 8)
  train_vectors, train_votes = toy_task(24, seed=1)
  test_vectors, test_votes = toy_task(12, seed=2)
  label_set = tag_labels.LabelSet("tags", _TAGS, np.concatenate([train_votes, test_votes]), vote_threshold=2)
  test_movies = np.arange(24, 36)
  metrics = lambda p: tag_prediction.evaluate_label_scores(scorer.scores(p, test_vectors, tag_tokens), label_set,
                                                           test_movies)
  untrained = metrics(params)
  options = tag_scorers.StepOptions(items_per_step=8, tags_per_step=2)
  trained = metrics(fit(scorer, params, train_vectors, train_votes, tag_tokens, options, num_steps=40,
                        learning_rate=3e-3))
  assert trained["auc"] == pytest.approx(1.0) and trained["auc"] > untrained["auc"]
  assert trained["p@1"] == pytest.approx(1.0)
  assert trained["num_entities"] == 8  # The 4 test movies with a single vote are below the threshold.
  # No test movie reaches the threshold: nothing is reported.
  strict = tag_labels.LabelSet("tags", _TAGS, label_set.votes, vote_threshold=4)
  assert tag_prediction.evaluate_label_scores(np.zeros((12, 4)), strict, test_movies) == {"num_entities": 0}
