"""Tests of the offer augmentations: determinism, intact markers and attribute names, each edit."""
import re

import numpy as np
import pytest
import wn

from docent_jax.data.offers import augmentation

TEXT = ("[COL] title [VAL] Apple MacBook Pro 13-inch laptop, silver finish with retina display "
        "[COL] brand name [VAL] Apple Computer Inc [COL] price [VAL] 1299.00 dollars")
ALL_NAMES = sorted(augmentation.AUGMENTATIONS)


def _structure(text):
  """The attribute names in order (the markers around them included)."""
  return re.findall(r"\[COL\] (.*?) \[VAL\]", text), text.split().count("[COL]"), text.split().count("[VAL]")


def _values(text):
  """The words of each value, in order."""
  return [value.split() for value in re.split(r"\[COL\] .*? \[VAL\]", text)[1:]]


def _augment(text, name, seed, probability):
  return augmentation.augment(text, name, np.random.default_rng(seed), probability)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_deterministic_given_the_seed_and_markers_intact(name):
  results = {seed: _augment(TEXT, name, seed, 0.5) for seed in range(8)}
  assert all(_augment(TEXT, name, seed, 0.5) == result for seed, result in results.items())
  assert len(set(results.values())) > 1  # The seed matters.
  assert any(result != TEXT for result in results.values())
  for probability in (0.5, 1.0):
    for seed in range(4):
      assert _structure(_augment(TEXT, name, seed, probability)) == _structure(TEXT)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_probability_zero_is_identity(name):
  text = "[COL]  title [VAL] odd   spacing\tkept [COL] price [VAL] 5"
  assert _augment(text, name, 0, 0.0) == text
  assert _augment("", name, 0, 1.0) == ""


def _is_one_edit(before, after):
  """Whether one swap of neighbours, replacement, insertion or deletion turns `before` into `after`."""
  if len(after) == len(before):
    diff = [i for i in range(len(before)) if before[i] != after[i]]
    return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and before[diff[0]] == after[diff[1]]
                              and before[diff[1]] == after[diff[0]])
  shorter, longer = sorted((before, after), key=len)
  return len(longer) == len(shorter) + 1 and any(longer[:i] + longer[i + 1:] == shorter for i in range(len(longer)))


def test_typo_edits_every_chosen_word_once():
  for seed in range(5):
    result = _augment(TEXT, "typo", seed, 1.0)
    for before, after in zip(_values(TEXT), _values(result), strict=True):
      assert len(before) == len(after)
      assert all(_is_one_edit(b, a) for b, a in zip(before, after))


def test_word_swap_reorders_words_within_their_value():
  result = _augment(TEXT, "word_swap", 0, 0.5)
  assert result != TEXT
  for before, after in zip(_values(TEXT), _values(result), strict=True):
    assert sorted(before) == sorted(after)


def _is_subsequence(short, long):
  words = iter(long)
  return all(word in words for word in short)


def test_word_deletion_drops_words():
  result = _augment(TEXT, "word_deletion", 1, 0.4)
  assert len(result.split()) < len(TEXT.split())
  for before, after in zip(_values(TEXT), _values(result), strict=True):
    assert _is_subsequence(after, before)
  assert _values(_augment(TEXT, "word_deletion", 0, 1.0)) == [[], [], []]


def test_span_deletion_drops_one_contiguous_span_per_value():
  for seed in range(5):
    result = _augment(TEXT, "span_deletion", seed, 0.4)
    for before, after in zip(_values(TEXT), _values(result), strict=True):
      gone = len(before) - len(after)
      assert any(before[:i] + before[i + gone:] == after for i in range(len(before) - gone + 1))
  assert _values(_augment(TEXT, "span_deletion", 0, 1.0)) == [[], [], []]


def test_synonym_replacement_uses_wordnet_synonyms():
  oracle = wn.WordNet()
  synonyms = {name.replace("_", " ") for synset in oracle.synsets("car") for name in synset.lemma_names()} - {"car"}
  replaced = {_augment("[COL] type [VAL] car,", "synonym_replacement", seed, 1.0) for seed in range(20)}
  assert len(replaced) > 1
  for text in replaced:
    word = text.removeprefix("[COL] type [VAL] ")
    assert word.endswith(",") and word[:-1] in synonyms
  # Words WordNet lacks and the attribute name (also a WordNet word) stay.
  assert _augment("[COL] car [VAL] xqzt 12345", "synonym_replacement", 0, 1.0) == "[COL] car [VAL] xqzt 12345"


def test_word_split_cuts_words_in_two():
  result = _augment(TEXT, "word_split", 0, 1.0)
  for before, after in zip(_values(TEXT), _values(result), strict=True):
    pieces = iter(after)
    for word in before:
      first, second = next(pieces), next(pieces)
      assert first + second == word and first and second


def test_unknown_augmentation_and_bad_probability_are_rejected():
  with pytest.raises(ValueError, match="Unknown augmentation 'shuffle'.*span_deletion"):
    _augment(TEXT, "shuffle", 0, 0.1)
  with pytest.raises(ValueError, match="probability"):
    _augment(TEXT, "typo", 0, 1.5)
