"""Pair-matching evaluation: input checks, pair tokenization, metrics, and the frozen encoder's linear probe."""
import numpy as np
import pytest
from sklearn import metrics as sklearn_metrics

from docent_jax.data import tokenization
from docent_jax.data.offers import labels as offer_labels
from docent_jax.evaluation import pair_matching
from docent_jax.modules import pair_probe
from docent_jax.modules import pretrained


@pytest.fixture(scope="module")
def tokenizer():
  return pretrained.load_tokenizer("minilm-l6")


def test_pairs_are_checked_with_split_and_row():
  good = np.array([[0, 1, 1], [2, 0, 0]])
  assert offer_labels.check_pairs(good, 3, "train").dtype == np.int64
  with pytest.raises(ValueError, match=r"test pairs row 1: offer indices \[3, 0\] are outside \[0, 3\)"):
    offer_labels.check_pairs(np.array([[0, 1, 1], [3, 0, 0]]), 3, "test")
  with pytest.raises(ValueError, match="validation pairs row 0: label 2 is not 0 or 1"):
    offer_labels.check_pairs(np.array([[0, 1, 2]]), 3, "validation")
  with pytest.raises(ValueError, match=r"train pairs: expected a non-empty int array \[m, 3\]"):
    offer_labels.check_pairs(np.zeros((0, 3), np.int64), 3, "train")
  with pytest.raises(ValueError, match="non-empty int array"):
    offer_labels.check_pairs(good.astype(np.float32), 3, "train")


def test_tokenize_pairs_gives_token_types_and_cuts_the_longer_text_first(tokenizer):
  rows = tokenization.tokenize_pairs(tokenizer, ["red apple", "one two three four five six"], ["apple", "seven"], 8)
  assert rows.shape == (2, 2, 8) and rows.dtype == np.int32
  cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
  red, apple = tokenizer.convert_tokens_to_ids(["red", "apple"])
  np.testing.assert_array_equal(rows[0, 0], [cls, red, apple, sep, apple, sep, 0, 0])
  np.testing.assert_array_equal(rows[0, 1], [0, 0, 0, 0, 1, 1, 0, 0])
  # 8 = [CLS] + 4 of the long text + [SEP] + "seven" + [SEP].
  np.testing.assert_array_equal(rows[1, 0], tokenizer("one two three four", "seven")["input_ids"])
  with pytest.raises(ValueError, match="2 left texts but 1 right texts"):
    tokenization.tokenize_pairs(tokenizer, ["a", "b"], ["c"], 8)


def test_match_metrics_agree_with_scikit_learn():
  rng = np.random.default_rng(0)
  logits, labels = rng.normal(size=200), rng.integers(0, 2, 200)
  result = pair_matching.match_metrics(logits, labels)
  predictions = logits > 0
  assert result["precision"] == pytest.approx(sklearn_metrics.precision_score(labels, predictions))
  assert result["recall"] == pytest.approx(sklearn_metrics.recall_score(labels, predictions))
  assert result["f1"] == pytest.approx(sklearn_metrics.f1_score(labels, predictions))
  assert result["loss"] == pytest.approx(sklearn_metrics.log_loss(labels, 1 / (1 + np.exp(-logits))))
  with pytest.raises(FloatingPointError, match="1 of 2 pair logits are not finite"):
    pair_matching.match_metrics(np.array([0.0, np.nan]), np.array([0, 1]))


def test_linear_probe_learns_matches_from_the_pair_features_and_picks_c_on_validation():
  rng = np.random.default_rng(0)
  # 40 products, 4 offers each: an offer vector is its product's vector plus noise.
  products = rng.normal(size=(40, 8))
  product_of = np.repeat(np.arange(40), 4)
  vectors = (products[product_of] + 0.1 * rng.normal(size=(160, 8))).astype(np.float32)
  pairs = {}
  for split, offers in (("train", np.arange(0, 96)), ("validation", np.arange(96, 128)),
                        ("test", np.arange(128, 160))):
    left = rng.choice(offers, 300)
    right = np.where(rng.random(300) < 0.3, offers[0] + 4 * ((left - offers[0]) // 4) + rng.integers(0, 4, 300),
                     rng.choice(offers, 300))
    pairs[split] = np.stack([left, right, product_of[left] == product_of[right]], axis=1).astype(np.int64)
  probe = pair_probe.fit_linear_probe(vectors, pairs, c_values=(1e-4, 1.0, 100.0))
  test_f1 = pair_matching.match_metrics(probe.logits["test"], pairs["test"][:, 2])["f1"]
  assert test_f1 > 0.9
  assert probe.c != 1e-4  # Far too strong a regularisation predicts no match: it is not chosen.
  # The logits are those of the head the probe's weights give (`model.head_init = 'probe'`).
  features = pair_probe.pair_features(vectors, pairs["test"])
  np.testing.assert_allclose(features @ probe.weights + probe.bias, probe.logits["test"], rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match="needs a 'validation' split"):
    pair_probe.fit_linear_probe(vectors, {"train": pairs["train"]})
  # A validation split without a match would choose C on F1 = 0 for every C.
  no_match = pairs["validation"][pairs["validation"][:, 2] == 0]
  with pytest.raises(ValueError, match=r"validation pairs: none of the \d+ is a match.*the probe's C would be chosen"):
    pair_probe.fit_linear_probe(vectors, {**pairs, "validation": no_match})
