"""The data of universal representations loaded from TFDS: the labelled text-pair tasks (NLI, phrase
relations) and FAQ retrieval sets.

A task is first texts, second texts and labels per split ('train', 'validation'). NLI sources are the
`nli_pairs` builder's configs ('snli', 'mnli') or a directory of JSON-lines files; a source with a 'train'
split trains on it and validates on its dev split(s), while a source of dev sets only (the offline default)
is split by a seed into training and validation pairs. Phrase relations come from the `phrase_relations`
builder (WordNet by default, or a PPDB 2.0 pack).
"""
from collections.abc import Sequence
import dataclasses
import functools

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import fingerprint
from docent_jax.data import tfds_loading
from docent_jax.data.universal import analogies
from docent_jax.data.universal import builders
from docent_jax.data.universal import faq
from docent_jax.data.universal import nli
from docent_jax.data.universal import phrases

TASK_SPLITS = ("train", "validation")
# Where each NLI source lies in a manual directory that holds several datasets (e.g. nli/snli/dev.jsonl).
NLI_MANUAL_SUBDIRS = {"snli": "nli/snli", "mnli": "nli/mnli"}
FAQ_MANUAL_SUBDIR = "faq/stackfaq"
# The dev splits an NLI source with a training split validates on.
_NLI_DEV_SPLITS = ("dev", "dev_matched", "validation")
# The builders of each kind of source, by TFDS name, as `tfds_loading.make_builder` takes them. NLI: the predefined
# configs 'nli_pairs/snli' and 'nli_pairs/mnli', or a directory of JSON-lines files.
NLI_BUILDERS = tfds_loading.BuilderRegistry(
    what="NLI dataset",
    builders={builders.NliPairs.name: builders.NliPairs},
    directory_builder=builders.NliPairs,
    config=lambda options, directory: builders.nli_directory_config(directory))
# Phrase relations: options `builders.PhraseOptions` (a PPDB pack, or WordNet), no directory of their own; a config
# name holds WordNet's options ('phrase_relations/wordnet_max1000_seed1').
PHRASE_BUILDERS = tfds_loading.BuilderRegistry(
    what="phrase-relation dataset",
    builders={builders.PhraseRelations.name: builders.PhraseRelations},
    config=lambda options, directory: builders.phrase_config(options),
    parse_config_name=builders.parse_wordnet_config_name,
    default_options=builders.PhraseOptions())
# FAQ: options `builders.FaqOptions` (the query split) of StackFAQ ('faq/stackfaq_test0.2_seed1') or a directory.
FAQ_BUILDERS = tfds_loading.BuilderRegistry(
    what="FAQ dataset",
    builders={builders.Faq.name: builders.Faq},
    directory_builder=builders.Faq,
    config=lambda options, directory: builders.faq_config(directory, options.test_fraction, options.seed),
    parse_config_name=builders.parse_stackfaq_config_name,
    default_options=builders.FaqOptions())


@dataclasses.dataclass(frozen=True)
class PairTask:
  """One classification task over text pairs.

  Attributes:
    name: 'nli' or 'phrase'.
    label_names: label id -> name.
    first, second: split -> the pairs' first and second texts.
    labels: split -> int32 [m] label ids.
  """
  name: str
  label_names: tuple[str, ...]
  first: dict[str, list[str]]
  second: dict[str, list[str]]
  labels: dict[str, np.ndarray]

  def fingerprint(self) -> fingerprint.Fingerprint:
    return {**{f"{self.name}/{split}": len(labels) for split, labels in sorted(self.labels.items())},
            f"{self.name}/digest": fingerprint.digest(
                [self.label_names, *(part[split] for split in sorted(self.labels)
                                     for part in (self.first, self.second, self.labels))])}


# Under a manual directory: Mikolov's analogy questions and the PPDB pairs rated by people.
ANALOGY_FILES = {"words": "analogy/questions-words.txt", "phrases": "analogy/questions-phrases.txt"}
PPDB_SAMPLE_FILE = "ppdb/ppdb-sample.tsv"


@dataclasses.dataclass(frozen=True)
class EvaluationSources:
  """What the universal-representation evaluators score a model on besides its pair tasks; each file is read
  when an evaluator first asks for it, once.

  Attributes:
    tasks: the trained pair tasks (their held-out pairs).
    manual_dir: the directory of the analogy question files and the rated PPDB sample (`ANALOGY_FILES`,
      `PPDB_SAMPLE_FILE`).
    candidates_dir: where the analogy candidates are kept once made.
    reference: the pretrained model whose word pieces choose the analogy candidates.
    tokenizer: the tokenizer of the reference's word pieces.
  """
  tasks: dict[str, PairTask]
  manual_dir: str
  candidates_dir: epath.Path
  reference: str
  tokenizer: str

  @functools.cached_property
  def word_analogies(self) -> list[analogies.AnalogyQuestion]:
    """Mikolov's word analogy questions (questions-words.txt)."""
    return analogies.read_analogies(epath.Path(self.manual_dir) / ANALOGY_FILES["words"])

  @functools.cached_property
  def phrase_analogies(self) -> list[analogies.AnalogyQuestion]:
    """Mikolov's phrase analogy questions (questions-phrases.txt)."""
    return analogies.read_analogies(epath.Path(self.manual_dir) / ANALOGY_FILES["phrases"])

  @functools.cached_property
  def rated_phrase_pairs(self) -> list[phrases.RatedPair]:
    """The PPDB phrase pairs people rated for similarity."""
    return phrases.read_ppdb_sample(epath.Path(self.manual_dir) / PPDB_SAMPLE_FILE)


Columns = tuple[list[str], list[str], np.ndarray]  # First texts, second texts, labels.


def _columns(source, names: Sequence[str]) -> Columns:
  columns = tfds_loading.read_columns(source, names)
  return columns[names[0]], columns[names[1]], np.asarray(columns[names[2]], np.int32).reshape(-1)


def _concatenate(parts: Sequence[Columns]) -> Columns:
  return ([text for part in parts for text in part[0]], [text for part in parts for text in part[1]],
          np.concatenate([part[2] for part in parts]).astype(np.int32))


def _split_by_seed(columns: Columns, validation_fraction: float, seed: int) -> dict[str, Columns]:
  order = np.random.default_rng(seed).permutation(len(columns[2]))
  num_validation = int(round(validation_fraction * len(order)))
  rows = {"train": np.sort(order[num_validation:]), "validation": np.sort(order[:num_validation])}
  return {split: ([columns[0][i] for i in r], [columns[1][i] for i in r], columns[2][r]) for split, r in rows.items()}


def _task(name: str, label_names: Sequence[str], splits: dict[str, Columns]) -> PairTask:
  return PairTask(name, tuple(label_names), {s: c[0] for s, c in splits.items()},
                  {s: c[1] for s, c in splits.items()}, {s: c[2] for s, c in splits.items()})


def load_nli_task(sources: Sequence[str], *, data_dir: epath.PathLike | None, manual_dir: epath.PathLike | None,
                  validation_fraction: float, seed: int) -> PairTask:
  """NLI pairs of every source ('snli', 'mnli' or a directory), concatenated (see the module docstring).

  Args:
    sources: builder configs or directories of JSON-lines files.
    data_dir: the TFDS data directory.
    manual_dir: a directory holding the named sources at `NLI_MANUAL_SUBDIRS` (None: downloaded).
    validation_fraction: the share of validation pairs of a source without a training split.
    seed: seeds that draw.
  """
  parts: dict[str, list[Columns]] = {split: [] for split in TASK_SPLITS}
  for source in sources:
    if epath.Path(source).is_dir():
      dataset, source_manual_dir = source, None
    elif source in NLI_MANUAL_SUBDIRS:
      dataset = f"{builders.NliPairs.name}/{source}"
      source_manual_dir = epath.Path(manual_dir) / NLI_MANUAL_SUBDIRS[source] if manual_dir else None
    else:
      raise ValueError(f"Unknown NLI source {source!r}: not a directory and not one of {sorted(NLI_MANUAL_SUBDIRS)}.")
    builder = tfds_loading.make_builder(NLI_BUILDERS, dataset, data_dir=data_dir)
    splits = {split: _columns(data, ("premise", "hypothesis", "label"))
              for split, data in sorted(tfds_loading.prepare(builder, source_manual_dir).items())}
    if "train" in splits:
      parts["train"].append(splits["train"])
      parts["validation"] += [splits[split] for split in _NLI_DEV_SPLITS if split in splits]
    else:
      for split, columns in _split_by_seed(_concatenate(list(splits.values())), validation_fraction, seed).items():
        parts[split].append(columns)
    logging.info("NLI source %s: %s pairs.", source, {split: len(c[2]) for split, c in splits.items()})
  return _task("nli", nli.LABELS, {split: _concatenate(p) for split, p in parts.items()})


def load_phrase_task(pack: str, *, data_dir: epath.PathLike | None, max_pairs_per_class: int | None,
                     seed: int) -> PairTask:
  """Phrase-relation pairs: from WordNet when `pack` is '', else from that PPDB 2.0 pack."""
  builder = tfds_loading.make_builder(PHRASE_BUILDERS, builders.PhraseRelations.name, data_dir=data_dir,
                                     options=builders.PhraseOptions(pack, max_pairs_per_class, seed))
  splits = tfds_loading.prepare(builder, None)
  return _task("phrase", phrases.RELATIONS,
               {split: _columns(splits[split], ("phrase1", "phrase2", "label")) for split in TASK_SPLITS})


@dataclasses.dataclass(frozen=True)
class FaqSet:
  """FAQ items and the queries of each split ('train', 'test', and 'validation' where some training queries are
  held out), with the index of the item each asks for."""
  name: str
  questions: list[str]
  answers: list[str]
  queries: dict[str, list[str]]
  relevant: dict[str, np.ndarray]

  def fingerprint(self) -> fingerprint.Fingerprint:
    return {"faq/items": len(self.questions),
            **{f"faq/{split}_queries": len(queries) for split, queries in sorted(self.queries.items())},
            "faq/digest": fingerprint.digest([self.questions, self.answers,
                                              *(part[split] for split in sorted(self.queries)
                                                for part in (self.queries, self.relevant))])}


def load_faq(source: str, *, data_dir: epath.PathLike | None, manual_dir: epath.PathLike | None,
             test_fraction: float, seed: int, validation_fraction: float = 0.0) -> FaqSet:
  """A FAQ set: 'stackfaq' (from `FAQ_MANUAL_SUBDIR` of `manual_dir`, else downloaded) or a FAQ directory
  (see `faq.read_faq_directory`); queries without a split are drawn into train and test by `seed`, and
  `validation_fraction` of the training queries (0: none) into 'validation', also by `seed`."""
  if source == builders.STACKFAQ:
    dataset = builders.Faq.name
    source_manual_dir = epath.Path(manual_dir) / FAQ_MANUAL_SUBDIR if manual_dir else None
  elif epath.Path(source).is_dir():
    dataset, source_manual_dir = source, None
  else:
    raise ValueError(f"Unknown FAQ source {source!r}: not 'stackfaq' and not a directory.")
  builder = tfds_loading.make_builder(FAQ_BUILDERS, dataset, data_dir=data_dir,
                                     options=builders.FaqOptions(test_fraction, seed))
  splits = tfds_loading.prepare(builder, source_manual_dir)
  items = tfds_loading.read_columns(splits["faq"], ("question", "answer"))
  queries, relevant = {}, {}
  for split in faq.QUERY_SPLITS:
    columns = tfds_loading.read_columns(splits[f"{split}_queries"], ("query", "faq_index"))
    queries[split] = columns["query"]
    relevant[split] = np.asarray(columns["faq_index"], np.int64).reshape(-1)
  if validation_fraction:
    _hold_out_validation(queries, relevant, validation_fraction, seed)
  return FaqSet(f"{builder.name}/{builder.builder_config.name}", items["question"], items["answer"], queries,
                relevant)


def _hold_out_validation(queries: dict[str, list[str]], relevant: dict[str, np.ndarray], fraction: float,
                         seed: int) -> None:
  """Moves a seeded draw of `fraction` of the training queries into a 'validation' split, both in file order."""
  kept, held = faq.seeded_holdout(len(queries["train"]), fraction, seed)
  if not (len(kept) and len(held)):
    raise ValueError(f"data.validation_query_fraction={fraction} of {len(queries['train'])} training queries "
                     "leaves a split without queries.")
  for split, rows in (("validation", held), ("train", kept)):
    queries[split] = [queries["train"][row] for row in rows]
    relevant[split] = relevant["train"][rows]
