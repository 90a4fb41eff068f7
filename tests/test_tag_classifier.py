"""FULL's tag classifier on [CLS] of (entity, tag): loss, pair sampling, learning a toy task, fixed entity rows."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from docent_jax import parallel
from docent_jax.data.reviews import tag_labels
from docent_jax.modules import tag_scorers
from docent_jax.evaluation import tag_prediction
from docent_jax.modules import bert
from docent_jax.modules import docent_full
from docent_jax.modules import pretrained
from test_tag_finetuning import _DIM, _TAGS, fit, toy_task


def test_loss_weights_known_pairs_by_votes_and_never_counts_them_as_negatives():
  softplus = lambda x: np.logaddexp(0.0, x)
  logits = jnp.array([[2.0, -1.0, 0.5, 1.0]])
  votes = jnp.array([[3, 1, 0, 0]])
  negatives = (softplus(0.5) + softplus(1.0)) / 2
  assert float(tag_scorers.pair_classifier_loss(logits, votes, "votes")) == pytest.approx(
      (3 * softplus(-2.0) + softplus(1.0)) / 4 + negatives, rel=1e-6)
  log_weights = np.log1p([3.0, 1.0])
  assert float(tag_scorers.pair_classifier_loss(logits, votes, "log_votes")) == pytest.approx(
      np.dot(log_weights, [softplus(-2.0), softplus(1.0)]) / log_weights.sum() + negatives, rel=1e-6)
  # Raising a known pair's logit only lowers the loss; raising an unknown one's raises it.
  grads = np.asarray(jax.grad(tag_scorers.pair_classifier_loss)(logits, votes))
  assert (grads[0, :2] < 0).all() and (grads[0, 2:] > 0).all()


def test_sampled_pairs_hold_one_known_tag_then_distinct_unknown_tags():
  rng = np.random.default_rng(0)
  votes = np.zeros((30, 12), np.int32)
  votes[np.arange(30), np.arange(30) % 12] = 1 + np.arange(30) % 3
  votes[np.arange(0, 30, 2), (np.arange(0, 30, 2) + 5) % 12] = 2  # Half the items have two known tags.
  positives = []
  for _ in range(30):
    items, tags = tag_scorers.sample_pairs(rng, votes, items_per_step=8, pairs_per_item=5)
    assert items.shape == (8,) and tags.shape == (8, 5)
    known = votes[items[:, None], tags] > 0
    assert known[:, 0].all() and not known[:, 1:].any()
    assert all(len(set(row)) == 5 for row in tags)
    positives.extend(zip(items, tags[:, 0]))
  assert len(set(positives)) > 30 + 10  # Items with two known tags get each of them.
  # An item with every tag known: the pairs fill up with known tags, which the loss counts as positives.
  _, tags = tag_scorers.sample_pairs(rng, np.ones((1, 3), np.int32), items_per_step=2, pairs_per_item=3)
  assert sorted(tags[0]) == [0, 1, 2]


def test_classifier_learns_a_toy_task_from_fixed_entity_rows():
  config = bert.BertConfig.from_hf_dict(dict(vocab_size=30522, hidden_size=_DIM, num_hidden_layers=1,
                                             num_attention_heads=4, intermediate_size=64))
  tokens = jnp.zeros((1, 8), jnp.int32)
  bert_params = bert.BertModel(config, add_pooler=False).init(jax.random.key(0), tokens, tokens)["params"]
  mesh = parallel.create_mesh(ml_collections.ConfigDict(dict(shape=(2, 4))))
  tokenizer = pretrained.load_tokenizer("minilm-l6")
  scorer = tag_scorers.PairClassifierScorer(docent_full.DocentFull(config, num_entities=1),
                                               slot_id=tokenizer.mask_token_id, sep_id=tokenizer.sep_token_id,
                                               pad_id=tokenizer.pad_token_id, batch_size=16, mesh=mesh)
  head = {"kernel": np.random.default_rng(0).normal(0.0, config.initializer_range, _DIM).astype(np.float32),
          "bias": np.zeros((), np.float32)}
  initial = {"bert": bert_params, "head": head}
  train_rows, train_votes = toy_task(24, seed=1)  # Entity rows near one of 4 directions, one per tag.
  test_rows, test_votes = toy_task(12, seed=2)
  label_set = tag_labels.LabelSet("tags", _TAGS, np.concatenate([train_votes, test_votes]), vote_threshold=1)
  test_movies = np.arange(24, 36)
  tag_tokens = tag_scorers.label_tokens(tokenizer, _TAGS, 16)
  auc = lambda scores: tag_prediction.evaluate_label_scores(scores, label_set, test_movies)["auc"]
  untrained = scorer.scores(initial, test_rows, tag_tokens)
  rows_before = train_rows.copy()
  options = tag_scorers.StepOptions(items_per_step=8, tags_per_step=24)
  params = fit(scorer, initial, train_rows, train_votes, tag_tokens, options, num_steps=150, learning_rate=3e-3)
  np.testing.assert_array_equal(train_rows, rows_before)
  assert set(params) == {"bert", "head"}  # The entity rows are inputs, not parameters.
  scores = scorer.scores(params, test_rows, tag_tokens)
  assert auc(scores) > 0.95 and auc(untrained) < 0.8
  # Every entry is its own pair's logit (item-major; tags of different lengths are scored apart),
  # and the pair's entity row is what it reads.
  texts = _TAGS + ["a lonely cowboy rides his horse to a dusty saloon at midnight"]
  tokens = tag_scorers.label_tokens(tokenizer, texts, 16)
  assert (tokens != 0).sum(axis=1).max() > 8 >= (tokens[:-1] != 0).sum(axis=1).max()
  scores = scorer.scores(params, test_rows, tokens)
  items, tags = np.array([0, 5, 11, 7, 3]), np.array([3, 0, 2, 1, 4])
  direct = scorer.logits(params, test_rows[items], tokens[tags])
  np.testing.assert_allclose(scores[items, tags], direct, rtol=1e-5, atol=1e-5)
  swapped = scorer.scores(params, test_rows[::-1], tokens)
  np.testing.assert_allclose(swapped, scores[::-1], rtol=1e-5, atol=1e-5)
