"""Pair-classifier fine-tuning: input checks, pair tokenization, early stopping, budgets, and learning a toy task."""
import copy

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import pytest

from docent_jax import parallel
from docent_jax.evaluation import metrics
from docent_jax.evaluation import pair_matching
from docent_jax.models import bert
from docent_jax.models import pretrained

_TINY = dict(vocab_size=30522, hidden_size=32, num_attention_heads=4, intermediate_size=64)
BI_CONFIG = bert.BertConfig.from_hf_dict(dict(_TINY, num_hidden_layers=1))
# A wide initialisation and no dropout let a tiny cross-encoder find token equality within a few epochs.
CROSS_CONFIG = bert.BertConfig.from_hf_dict(dict(_TINY, num_hidden_layers=2, initializer_range=0.3,
                                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
SPLIT_SIZES = {"train": 384, "validation": 48, "test": 48}


@pytest.fixture(scope="module")
def tokenizer():
  return pretrained.load_tokenizer("minilm-l6")


@pytest.fixture(scope="module")
def mesh():
  return parallel.create_mesh(ml_collections.ConfigDict({"shape": (2, 1)}))


@pytest.fixture(scope="module")
def toy(tokenizer):
  """Offers '<product> <filler>' of 8 products; every third pair a match: both offers name one product.

  Each pair has offers of its own, so validation and test pairs are unseen texts.
  """
  words = sorted(w for w in tokenizer.get_vocab() if w.isascii() and w.isalpha() and len(w) >= 6)
  products, fillers = words[::len(words) // 8][:8], words[7::len(words) // 4][:4]
  rng = np.random.default_rng(0)
  texts, pairs = [], {}
  for split, size in SPLIT_SIZES.items():
    rows = []
    for i in range(size):
      left, other = rng.choice(products, 2, replace=False)
      match = i % 3 == 0
      texts += [f"{left} {rng.choice(fillers)}", f"{left if match else other} {rng.choice(fillers)}"]
      rows.append((len(texts) - 2, len(texts) - 1, int(match)))
    pairs[split] = np.array(rows, np.int64)
  return texts, pairs


def _all_positive_f1(pairs):
  return metrics.precision_recall_f1(pairs[:, 2], np.ones(len(pairs)))["f1"]


def _bert_leaves_equal(a, b):
  return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def test_pairs_are_checked_with_split_and_row():
  good = np.array([[0, 1, 1], [2, 0, 0]])
  assert pair_matching.check_pairs(good, 3, "train").dtype == np.int64
  with pytest.raises(ValueError, match=r"test pairs row 1: offer indices \[3, 0\] are outside \[0, 3\)"):
    pair_matching.check_pairs(np.array([[0, 1, 1], [3, 0, 0]]), 3, "test")
  with pytest.raises(ValueError, match="validation pairs row 0: label 2 is not 0 or 1"):
    pair_matching.check_pairs(np.array([[0, 1, 2]]), 3, "validation")
  with pytest.raises(ValueError, match=r"train pairs: expected a non-empty int array \[m, 3\]"):
    pair_matching.check_pairs(np.zeros((0, 3), np.int64), 3, "train")
  with pytest.raises(ValueError, match="non-empty int array"):
    pair_matching.check_pairs(good.astype(np.float32), 3, "train")


def test_tokenize_pairs_gives_token_types_and_cuts_the_longer_text_first(tokenizer):
  rows = pair_matching.tokenize_pairs(tokenizer, ["red apple", "one two three four five six"], ["apple", "seven"], 8)
  assert rows.shape == (2, 2, 8) and rows.dtype == np.int32
  cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
  red, apple = tokenizer.convert_tokens_to_ids(["red", "apple"])
  np.testing.assert_array_equal(rows[0, 0], [cls, red, apple, sep, apple, sep, 0, 0])
  np.testing.assert_array_equal(rows[0, 1], [0, 0, 0, 0, 1, 1, 0, 0])
  # 8 = [CLS] + 4 of the long text + [SEP] + "seven" + [SEP].
  np.testing.assert_array_equal(rows[1, 0], tokenizer("one two three four", "seven")["input_ids"])
  with pytest.raises(ValueError, match="2 left texts but 1 right texts"):
    pair_matching.tokenize_pairs(tokenizer, ["a", "b"], ["c"], 8)


def test_early_stopping_keeps_the_lowest_loss_and_waits_patience_epochs():
  stopping = pair_matching.EarlyStopping(patience=2)
  assert [stopping.update(epoch, loss) for epoch, loss in enumerate([1.0, 0.8, 0.9], start=1)] == [True, True, False]
  assert not stopping.should_stop
  assert not stopping.update(4, 0.8)  # Equal is no improvement.
  assert stopping.should_stop and stopping.best_epoch == 2 and stopping.best_loss == 0.8
  with pytest.raises(FloatingPointError, match="epoch 5 is nan"):
    stopping.update(5, float("nan"))


def test_bi_encoder_with_trained_encoder_learns_the_toy_task(toy, tokenizer, mesh):
  texts, pairs = toy
  matcher = pair_matching.BiEncoderMatcher(BI_CONFIG, tokenizer, max_len=6)
  params = matcher.init_params(jax.random.key(0))
  options = pair_matching.FitOptions(max_epochs=6, batch_size=32, learning_rate=1e-2, eval_batch_size=16)
  result = pair_matching.fit_pair_classifier(matcher, params, texts, pairs, options=options, mesh=mesh)
  assert result.epochs_run == 6 and result.steps_run == 6 * 384 // 32
  assert result.best_epoch == 1 + int(np.argmin(result.validation_losses))
  assert result.summary()["best_validation_loss"] == min(result.validation_losses)
  # The caller's params are untouched (training works on a copy) and score worse.
  before = pair_matching.evaluate_pairs(matcher, params, texts, pairs["validation"], mesh=mesh, batch_size=16)
  after = pair_matching.evaluate_pairs(matcher, result.params, texts, pairs["validation"], mesh=mesh, batch_size=16)
  assert after["loss"] == pytest.approx(min(result.validation_losses), rel=1e-5)
  assert after["loss"] < 0.2 * before["loss"]
  test = pair_matching.evaluate_pairs(matcher, result.params, texts, pairs["test"], mesh=mesh, batch_size=16,
                                      split="test")
  assert set(test) == {"precision", "recall", "f1", "loss"}
  assert test["f1"] > 0.9 > _all_positive_f1(pairs["test"]) + 0.3


def test_frozen_encoder_trains_only_the_head(toy, tokenizer, mesh):
  texts, pairs = toy
  matcher = pair_matching.BiEncoderMatcher(BI_CONFIG, tokenizer, max_len=6, freeze_encoder=True)
  params = matcher.init_params(jax.random.key(1))
  options = pair_matching.FitOptions(max_epochs=8, batch_size=32, learning_rate=1e-1, eval_batch_size=16)
  result = pair_matching.fit_pair_classifier(matcher, params, texts, pairs, options=options, mesh=mesh)
  assert _bert_leaves_equal(result.params["bert"], params["bert"])
  assert not _bert_leaves_equal(result.params["head"], params["head"])
  before = pair_matching.evaluate_pairs(matcher, params, texts, pairs["validation"], mesh=mesh, batch_size=16)
  assert min(result.validation_losses) < 0.5 * before["loss"]
  test = pair_matching.evaluate_pairs(matcher, result.params, texts, pairs["test"], mesh=mesh, batch_size=16)
  assert test["f1"] > 0.8 > _all_positive_f1(pairs["test"]) + 0.2


def test_lr_multipliers_scale_the_updates_of_matching_params(toy, tokenizer, mesh):
  texts, pairs = toy
  matcher = pair_matching.BiEncoderMatcher(BI_CONFIG, tokenizer, max_len=6)
  params = matcher.init_params(jax.random.key(0))
  options = pair_matching.FitOptions(max_steps=3, batch_size=32, learning_rate=1e-2, eval_batch_size=16,
                                     lr_multipliers=(("^head/", 0.0),))
  result = pair_matching.fit_pair_classifier(matcher, params, texts, pairs, options=options, mesh=mesh)
  assert _bert_leaves_equal(result.params["head"], params["head"])
  assert not _bert_leaves_equal(result.params["bert"], params["bert"])


def test_training_stops_after_patience_epochs_and_returns_the_best_epoch(toy, tokenizer, mesh):
  texts, pairs = toy
  matcher = pair_matching.BiEncoderMatcher(BI_CONFIG, tokenizer, max_len=6, freeze_encoder=True)
  params = matcher.init_params(jax.random.key(1))
  # Validation pairs plus training pairs with flipped labels: the validation loss falls, then the better
  # fit of the training pairs makes it rise.
  flipped = pairs["train"][:16].copy()
  flipped[:, 2] = 1 - flipped[:, 2]
  validation = np.concatenate([pairs["validation"], flipped])
  options = pair_matching.FitOptions(max_epochs=30, patience=3, batch_size=32, learning_rate=1e-1,
                                     eval_batch_size=16)
  splits = {"train": pairs["train"], "validation": validation}
  result = pair_matching.fit_pair_classifier(matcher, params, texts, splits, options=options, mesh=mesh)
  losses = result.validation_losses
  assert 1 < result.best_epoch == 1 + int(np.argmin(losses))
  assert result.epochs_run == result.best_epoch + 3 < 30 and len(losses) == result.epochs_run
  assert all(loss > losses[result.best_epoch - 1] for loss in losses[result.best_epoch:])
  best = pair_matching.evaluate_pairs(matcher, result.params, texts, validation, mesh=mesh, batch_size=16)
  assert best["loss"] == pytest.approx(losses[result.best_epoch - 1], rel=1e-5)


def test_max_steps_bounds_the_budget(toy, tokenizer, mesh):
  texts, pairs = toy
  matcher = pair_matching.BiEncoderMatcher(BI_CONFIG, tokenizer, max_len=6, freeze_encoder=True)
  options = pair_matching.FitOptions(max_steps=15, batch_size=32, learning_rate=1e-1, eval_batch_size=16)
  result = pair_matching.fit_pair_classifier(matcher, matcher.init_params(jax.random.key(1)), texts, pairs,
                                             options=options, mesh=mesh)
  # 12 steps per epoch: the second epoch is cut after 3 steps, then validated.
  assert (result.steps_run, result.epochs_run, len(result.validation_losses)) == (15, 2, 2)
  with pytest.raises(ValueError, match="needs a 'validation' split"):
    pair_matching.fit_pair_classifier(matcher, matcher.init_params(jax.random.key(1)), texts,
                                      {"train": pairs["train"]}, options=options, mesh=mesh)
  with pytest.raises(ValueError, match="batch_size 7 does not split over the mesh's 2 data shards"):
    pair_matching.fit_pair_classifier(matcher, matcher.init_params(jax.random.key(1)), texts, pairs,
                                      options=pair_matching.FitOptions(batch_size=7), mesh=mesh)
  with pytest.raises(ValueError, match="must be positive"):
    pair_matching.FitOptions(max_steps=0)


def test_cross_encoder_learns_the_toy_task_by_the_same_protocol(toy, tokenizer, mesh):
  texts, pairs = toy
  matcher = pair_matching.CrossEncoderMatcher(CROSS_CONFIG, tokenizer, max_len=8)
  params = matcher.init_params(jax.random.key(0))
  options = pair_matching.FitOptions(max_epochs=8, batch_size=32, learning_rate=3e-3, eval_batch_size=16)
  result = pair_matching.fit_pair_classifier(matcher, params, texts, pairs, options=options, mesh=mesh)
  before = pair_matching.evaluate_pairs(matcher, params, texts, pairs["validation"], mesh=mesh, batch_size=16)
  assert min(result.validation_losses) < 0.2 * before["loss"]
  test = pair_matching.evaluate_pairs(matcher, result.params, texts, pairs["test"], mesh=mesh, batch_size=16)
  assert test["f1"] > 0.9


def test_init_params_puts_a_pretrained_encoder_under_bert(tokenizer):
  matcher = pair_matching.CrossEncoderMatcher(BI_CONFIG, tokenizer, max_len=8)
  ids = np.zeros((1, 4), np.int32)
  pretrained_bert = nn.unbox(bert.BertModel(BI_CONFIG).init(jax.random.key(5), ids, ids)["params"])  # With a pooler.
  params = matcher.init_params(jax.random.key(0), jax.device_get(pretrained_bert))
  assert set(params) == {"bert", "head"} and "pooler" not in params["bert"]
  assert _bert_leaves_equal(params["bert"], {k: v for k, v in pretrained_bert.items() if k != "pooler"})


def test_tokenizers_must_pad_with_id_0(tokenizer):
  padding_unk = copy.deepcopy(tokenizer)
  padding_unk.pad_token = padding_unk.unk_token
  with pytest.raises(ValueError, match=f"pads with id {padding_unk.unk_token_id}; the pair models need padding id 0"):
    pair_matching.BiEncoderMatcher(BI_CONFIG, padding_unk, max_len=6)
