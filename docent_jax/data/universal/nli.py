"""Reads natural-language-inference pairs from a directory of JSON-lines files, one file a split.

A record is `{"premise", "hypothesis", "label"}` with the label entailment, neutral or contradiction, or an
original SNLI / MultiNLI record (`sentence1`, `sentence2`, `gold_label`), whose gold label '-' means the
annotators did not agree: such a pair is skipped, counted and logged, as users of SNLI do. Each `*.jsonl`
(or `*.jsonl.gz`) file of the directory is a split named by its stem ('dev.jsonl' -> 'dev').
"""
import dataclasses
import re

from absl import logging
from etils import epath

from docent_jax.data import io

# Label id -> name.
LABELS = ("entailment", "neutral", "contradiction")
# The gold label of an original SNLI / MultiNLI pair without annotator agreement.
NO_GOLD_LABEL = "-"
# (premise key, hypothesis key, label key) of the two record forms.
_PLAIN_KEYS = ("premise", "hypothesis", "label")
_ORIGINAL_KEYS = ("sentence1", "sentence2", "gold_label")
_SUFFIX = ".jsonl"


@dataclasses.dataclass(frozen=True)
class NliPair:
  """A premise, a hypothesis and the label's index in `LABELS`."""
  premise: str
  hypothesis: str
  label: int


@dataclasses.dataclass(frozen=True)
class NliSplits:
  """Split name -> its pairs in file order, and the counts of what was read and skipped."""
  pairs: dict[str, list[NliPair]]
  counts: dict[str, int]


def read_nli_file(path: epath.PathLike) -> tuple[list[NliPair], int]:
  """The pairs of one JSON-lines file and the number of pairs skipped for having no gold label.

  Raises:
    io.DataFormatError: a record with neither key set, an empty or non-string premise or hypothesis, or
      another label.
  """
  pairs = []
  skipped = 0
  for number, record in io.json_lines(path):
    keys = _PLAIN_KEYS if "premise" in record or "hypothesis" in record else _ORIGINAL_KEYS
    if not any(key in record for key in keys):
      raise io.DataFormatError(f"{path}:{number}: a record needs the keys {list(_PLAIN_KEYS)} or "
                               f"{list(_ORIGINAL_KEYS)}; found {sorted(record)[:10]}.")
    premise, hypothesis = (_text(path, number, record, key) for key in keys[:2])
    label = record.get(keys[2])
    if keys == _ORIGINAL_KEYS and label == NO_GOLD_LABEL:
      skipped += 1
      continue
    if label not in LABELS:
      raise io.DataFormatError(f"{path}:{number}: {keys[2]} {label!r} is not one of {list(LABELS)}.")
    pairs.append(NliPair(premise, hypothesis, LABELS.index(label)))
  if skipped:
    logging.warning("%s: skipped %d pairs without a gold label (%r).", path, skipped, NO_GOLD_LABEL)
  return pairs, skipped


def nli_files(directory: epath.PathLike, prefix: str = "") -> dict[str, epath.Path]:
  """Split name -> file, for each `*.jsonl` or `*.jsonl.gz` file of the directory.

  Args:
    directory: the directory.
    prefix: removed from the start of file stems ('snli_1.0_' names the original SNLI files 'train', 'dev',
      'test'); characters other than letters, digits and '_' then become '_', as TFDS split names need.

  Raises:
    FileNotFoundError: the directory holds no such file.
    io.DataFormatError: two files give one split name.
  """
  directory = epath.Path(directory)
  stems = sorted({path.name.removesuffix(".gz").removesuffix(_SUFFIX) for path in directory.iterdir()
                  if path.name.removesuffix(".gz").endswith(_SUFFIX)})
  files: dict[str, epath.Path] = {}
  for stem in stems:
    path = io.find_file(directory, stem + _SUFFIX)
    split = re.sub(r"\W", "_", stem.removeprefix(prefix))
    if split in files:
      raise io.DataFormatError(f"{directory}: {files[split].name} and {path.name} are both split {split!r}.")
    files[split] = path
  if not files:
    raise FileNotFoundError(f"{directory}: no *{_SUFFIX} or *{_SUFFIX}.gz files.")
  return files


def read_nli_directory(directory: epath.PathLike, prefix: str = "") -> NliSplits:
  """The pairs of every split of the directory (see `nli_files`), with '<split> pairs' and
  '<split> skipped without gold label' counts.

  Raises:
    io.DataFormatError: a file without a pair (every one skipped), besides the errors of `read_nli_file`.
  """
  pairs, counts = {}, {}
  for split, path in nli_files(directory, prefix).items():
    pairs[split], skipped = read_nli_file(path)
    if not pairs[split]:
      raise io.DataFormatError(f"{path}: no pairs with a gold label.")
    counts[f"{split} pairs"] = len(pairs[split])
    counts[f"{split} skipped without gold label"] = skipped
  return NliSplits(pairs, counts)


def _text(path: epath.Path, number: int, record: dict, key: str) -> str:
  value = record.get(key)
  if not isinstance(value, str) or not value.strip():
    raise io.DataFormatError(f"{path}:{number}: {key} is missing or empty: {value!r}.")
  return value.strip()
