"""Reads product offers and labelled offer pairs for product matching, with validation.

Three formats, each read into an `OfferDataset` (offers, their serialized text, and
train / validation / test pairs of offer indices with a 0/1 label):

  DeepMatcher   a directory with tableA.csv, tableB.csv (`id`, then attribute
                columns) and train.csv, valid.csv, test.csv (`ltable_id,rtable_id,label`);
                the two tables are the two sources. Any file may be gzipped.
  WDC pair files   one pair per line, `COL title VAL <offer 1><TAB>COL title VAL <offer 2><TAB><0|1>`
                (Ditto's form of WDC LSPC; any `COL a VAL x COL b VAL y` attributes).
                Offers carry no ids, so identical offers (same attributes, same
                values after collapsing whitespace) are one offer, and a repeated line
                is another pair (WDC's gold standard has such pairs); one source.
  WDC LSPC json   the original training sets and gold standard (JSON lines with
                id_left / id_right, title_left, brand_left, ..., cluster_id_left,
                label, pair_id) and the validation set's pair ids (CSV with pair_id);
                offers are keyed by id, their product is the cluster id; one source.

Offers are serialized as in Peeters & Bizer's supervised contrastive product
matching: `[COL] <attribute> [VAL] <value>` per attribute, whitespace collapsed.
An attribute with an empty value keeps its name (`[COL] price [VAL]`), as their
code does. WDC json values are cleaned like theirs (schema.org quoting and
language tags removed) and capped in words (`WDC_MAX_WORDS`).

Every format error (`io.DataFormatError`) names the file and line. A pair of offers with ids
listed twice in a split is kept once, counted and logged.
"""
import collections
import dataclasses
import re
from typing import Any, Mapping, Sequence

from absl import logging
from etils import epath

from docent_jax.data import io

PAIR_SPLITS = ("train", "validation", "test")
COL_TOKEN, VAL_TOKEN = "[COL]", "[VAL]"
# DeepMatcher file of each table (the source names) and pair split.
DEEPMATCHER_TABLES = {"tableA": "tableA.csv", "tableB": "tableB.csv"}
DEEPMATCHER_PAIRS = {"train": "train.csv", "validation": "valid.csv", "test": "test.csv"}
DEEPMATCHER_PAIR_COLUMNS = ("ltable_id", "rtable_id", "label")
# Word caps of Peeters & Bizer's WDC LSPC preprocessing.
WDC_MAX_WORDS = {"brand": 5, "title": 50, "description": 100, "specTableContent": 200}
WDC_ATTRIBUTES = tuple(WDC_MAX_WORDS)
# One attribute of a WDC pair-file offer: "COL <name> VAL", then the value up to the next one.
_DITTO_ATTRIBUTE = re.compile(r"(?:^|\s)COL (\S+) VAL(?=\s|$)")
_LANGUAGE_TAG = re.compile(r"\"@\S+\s+")
_SPACE = re.compile(r"\s+")

Attributes = tuple[tuple[str, str], ...]


@dataclasses.dataclass
class OfferDataset:
  """Offers and labelled pairs of offer indices.

  Attributes:
    source_names: the sources (e.g. ('tableA', 'tableB')); offers of WDC pair files
      and WDC json have one, 'offers'.
    offer_source: the source index of each offer.
    offer_ids: the offer's id in its source (for WDC pair files, where it first
      appears: '<file>:<line>:left|right').
    offer_texts: the serialized offers.
    offer_products: the product (WDC cluster id) of each offer, '' when unknown.
    pairs: 'train' / 'validation' / 'test' -> (left offer, right offer, label 0/1).
    counts: what was read (rows, pairs, positives, merged duplicates).
  """
  source_names: tuple[str, ...]
  offer_source: list[int]
  offer_ids: list[str]
  offer_texts: list[str]
  offer_products: list[str]
  pairs: dict[str, list[tuple[int, int, int]]]
  counts: dict[str, int]


def serialize(attributes: Sequence[tuple[str, str]], max_words: Mapping[str, int] | None = None) -> str:
  """`[COL] name [VAL] value [COL] ...`, whitespace collapsed; an empty value keeps its name.

  Args:
    attributes: (name, value) pairs in serialization order.
    max_words: attribute name -> number of words kept (all when absent).

  Returns:
    The serialized offer, e.g. '[COL] title [VAL] sony tv [COL] price [VAL]'.
  """
  max_words = max_words or {}
  parts = []
  for name, value in attributes:
    words = value.split()[:max_words.get(name)]
    parts.append(" ".join([COL_TOKEN, name, VAL_TOKEN, *words]))
  return " ".join(parts)


def clean_wdc_value(value: str) -> str:
  """A WDC LSPC title / brand / description as Peeters & Bizer clean it.

  schema.org values arrive quoted with a language tag ('"Sony TV"@en shop"@en'):
  keeps what lies between the first and last quote, drops language tags and
  the remaining quotes, collapses whitespace.
  """
  value = value.partition('"')[2].rpartition('"')[0]
  value = _LANGUAGE_TAG.sub(" ", value)
  return _SPACE.sub(" ", value).replace('"', "").strip()


def _label(path: epath.Path, line: int, value: Any) -> int:
  if str(value).strip() not in ("0", "1"):
    raise io.DataFormatError(f"{path}:{line}: label {value!r} is not 0 or 1.")
  return int(str(value).strip())


def _check_pairs(paths: Mapping[str, epath.PathLike], pairs: Mapping[str, list[tuple[int, int, int]]],
                 last_lines: Mapping[str, int], counts: dict[str, int]) -> None:
  """Counts pairs and positives; a split without pairs, or train without a positive, is an error."""
  for split in PAIR_SPLITS:
    split_pairs = pairs[split]
    if not split_pairs:
      raise io.DataFormatError(f"{paths[split]}:{last_lines[split]}: no {split} pairs.")
    counts[f"{split} pairs"] = len(split_pairs)
    counts[f"{split} positives"] = sum(label for _, _, label in split_pairs)
  if not counts["train positives"]:
    raise io.DataFormatError(f"{paths['train']}:1-{last_lines['train']}: none of the {counts['train pairs']} training "
                             "pairs is a match (label 1); matching needs positive pairs.")


class _KeyedPairs:
  """Pairs of offers that have ids, by split. A pair listed twice in a split is kept once (counted and
  logged), since it would count twice in that split's F1; listed again with the other label, it is an error."""

  def __init__(self):
    self.pairs: dict[str, list[tuple[int, int, int]]] = {split: [] for split in PAIR_SPLITS}
    self._first: dict[str, dict[tuple[int, int], tuple[str, int]]] = {split: {} for split in PAIR_SPLITS}
    self._repeated: collections.Counter = collections.Counter()

  def add(self, split: str, path: epath.Path, line: int, left: int, right: int, label: int) -> None:
    first = self._first[split].get((left, right))
    if first is None:
      self._first[split][(left, right)] = (f"{path.name}:{line}", label)
      self.pairs[split].append((left, right, label))
    elif first[1] != label:
      raise io.DataFormatError(f"{path}:{line}: pair labelled {label}, but {first[1]} at {first[0]}.")
    else:
      self._repeated[split] += 1

  def log_repeated(self, where: str, counts: dict[str, int]) -> None:
    for split, count in self._repeated.items():
      logging.warning("%s: dropped %d repeated %s pairs (each is scored once).", where, count, split)
      counts[f"repeated {split} pairs dropped"] = count


# ---------------------------------------------------------------------------------------------------
# DeepMatcher.


def deepmatcher_paths(directory: epath.PathLike) -> dict[str, epath.Path]:
  """The DeepMatcher files of a directory, by table ('tableA', 'tableB') and split name."""
  directory = epath.Path(directory)
  if not directory.is_dir():
    raise FileNotFoundError(f"DeepMatcher directory {directory} does not exist.")
  paths, missing = {}, []
  for key, name in {**DEEPMATCHER_TABLES, **DEEPMATCHER_PAIRS}.items():
    path = io.find_file(directory, name)
    if path is None:
      missing.append(name)
    else:
      paths[key] = path
  if missing:
    raise FileNotFoundError(f"{directory}: no {missing} (DeepMatcher layout: {list(DEEPMATCHER_TABLES.values())} "
                            f"and {list(DEEPMATCHER_PAIRS.values())}).")
  return paths


def _read_table(path: epath.Path, attributes: Sequence[str] | None) -> tuple[list[str], list[Attributes]]:
  """Ids and attributes of a DeepMatcher table (`id`, then attribute columns)."""
  header, rows = io.csv_rows(path)
  if header[0] != "id":
    raise io.DataFormatError(f"{path}:1: the first column must be 'id', found {header[0]!r}.")
  names = list(attributes) if attributes is not None else header[1:]
  missing = [name for name in names if name not in header[1:]]
  if missing:
    raise io.DataFormatError(f"{path}:1: header {header} lacks attribute columns {missing}.")
  columns = [header.index(name) for name in names]
  first_line: dict[str, int] = {}
  offers = []
  for line, row in rows:
    io.check_new_id(path, line, row[0].strip(), first_line)
    offers.append(tuple((name, row[column]) for name, column in zip(names, columns)))
  return list(first_line), offers


def read_deepmatcher(paths: Mapping[str, epath.PathLike], attributes: Sequence[str] | None = None,
                     max_words: Mapping[str, int] | None = None) -> OfferDataset:
  """Reads DeepMatcher files (see `deepmatcher_paths`): every table row is an offer, tableA's first.

  Args:
    paths: 'tableA', 'tableB', 'train', 'validation', 'test' -> file.
    attributes: the columns to serialize, in order (None: all but `id`, in file order).
    max_words: attribute -> words kept.

  Returns:
    The offers (sources 'tableA', 'tableB'; no products) and pairs.
  """
  paths = {key: epath.Path(path) for key, path in paths.items()}
  offer_source, offer_ids, offer_texts = [], [], []
  index: list[dict[str, int]] = []
  counts: dict[str, int] = {}
  for source, table in enumerate(DEEPMATCHER_TABLES):
    ids, offers = _read_table(paths[table], attributes)
    index.append({identifier: len(offer_ids) + i for i, identifier in enumerate(ids)})
    offer_source += [source] * len(ids)
    offer_ids += ids
    offer_texts += [serialize(offer, max_words) for offer in offers]
    counts[f"{table} rows"] = len(ids)
  pairs = _KeyedPairs()
  last_lines = {}
  for split in PAIR_SPLITS:
    path = paths[split]
    header, rows = io.csv_rows(path, DEEPMATCHER_PAIR_COLUMNS)
    rows = list(rows)
    left, right, label = (header.index(name) for name in DEEPMATCHER_PAIR_COLUMNS)
    for line, row in rows:
      for table, column, known in (("tableA", left, index[0]), ("tableB", right, index[1])):
        if row[column].strip() not in known:
          raise io.DataFormatError(f"{path}:{line}: {header[column]} {row[column]!r} is not an id of "
                                   f"{paths[table].name}.")
      pairs.add(split, path, line, index[0][row[left].strip()], index[1][row[right].strip()],
                _label(path, line, row[label]))
    last_lines[split] = rows[-1][0] if rows else 1
  pairs.log_repeated(str(paths["train"].parent), counts)
  _check_pairs(paths, pairs.pairs, last_lines, counts)
  return OfferDataset(source_names=tuple(DEEPMATCHER_TABLES), offer_source=offer_source, offer_ids=offer_ids,
                      offer_texts=offer_texts, offer_products=[""] * len(offer_ids), pairs=pairs.pairs, counts=counts)


# ---------------------------------------------------------------------------------------------------
# WDC pair files (Ditto's serialized form).


def parse_pair_file_offer(text: str) -> Attributes:
  """The (name, value) attributes of `COL a VAL x COL b VAL y`; raises ValueError when malformed."""
  pieces = _DITTO_ATTRIBUTE.split(text)
  if len(pieces) < 3 or pieces[0].strip():
    raise ValueError(f"expected 'COL <name> VAL <value> ...', found {text[:100]!r}")
  return tuple((name, " ".join(value.split())) for name, value in zip(pieces[1::2], pieces[2::2]))


class _OfferTable:
  """Offers deduplicated by content, in order of first appearance."""

  def __init__(self):
    self.index: dict[Any, int] = {}
    self.ids: list[str] = []
    self.texts: list[str] = []
    self.products: list[str] = []
    self.occurrences = 0

  def add(self, key: Any, identifier: str, text: str, product: str = "") -> int:
    self.occurrences += 1
    if key not in self.index:
      self.index[key] = len(self.ids)
      self.ids.append(identifier)
      self.texts.append(text)
      self.products.append(product)
    return self.index[key]

  def dataset(self, pairs: dict[str, list[tuple[int, int, int]]], counts: dict[str, int]) -> OfferDataset:
    counts["offer occurrences"] = self.occurrences
    counts["distinct offers"] = len(self.ids)
    return OfferDataset(source_names=("offers",), offer_source=[0] * len(self.ids), offer_ids=self.ids,
                        offer_texts=self.texts, offer_products=self.products, pairs=pairs, counts=counts)


def read_wdc_pair_files(paths: Mapping[str, epath.PathLike], attributes: Sequence[str] | None = None,
                        max_words: Mapping[str, int] | None = None) -> OfferDataset:
  """Reads pair-per-line files; identical offers (after attribute selection) become one offer.

  Args:
    paths: 'train', 'validation', 'test' -> file of lines `<offer><TAB><offer><TAB><0|1>`.
    attributes: the attributes to keep, in order (None: all, in line order); each
      offer must have them.
    max_words: attribute -> words kept.

  Returns:
    The offers (one source, no products) and pairs.
  """
  table = _OfferTable()
  pairs: dict[str, list[tuple[int, int, int]]] = {}
  last_lines = {}
  for split in PAIR_SPLITS:
    path = epath.Path(paths[split])
    pairs[split] = []
    number = 0
    for number, line in io.row_lines(path):
      fields = line.split("\t")
      if len(fields) != 3:
        raise io.DataFormatError(f"{path}:{number}: expected 3 tab-separated fields (offer, offer, label), "
                                 f"found {len(fields)}: {line[:100]!r}")
      sides = []
      for side, text in zip(("left", "right"), fields[:2]):
        try:
          offer = parse_pair_file_offer(text)
        except ValueError as error:
          raise io.DataFormatError(f"{path}:{number}: {side} offer: {error}") from None
        if attributes is not None:
          values = dict(offer)
          missing = [name for name in attributes if name not in values]
          if missing:
            raise io.DataFormatError(f"{path}:{number}: {side} offer lacks attributes {missing}.")
          offer = tuple((name, values[name]) for name in attributes)
        sides.append(table.add(offer, f"{path.name}:{number}:{side}", serialize(offer, max_words)))
      pairs[split].append((sides[0], sides[1], _label(path, number, fields[2])))
    last_lines[split] = number
  counts: dict[str, int] = {}
  _check_pairs(paths, pairs, last_lines, counts)
  dataset = table.dataset(pairs, counts)
  logging.info("WDC pair files: %d distinct offers in %d offer occurrences.", len(dataset.offer_ids),
               counts["offer occurrences"])
  return dataset


# ---------------------------------------------------------------------------------------------------
# WDC LSPC json (the original training sets, validation pair ids and gold standard).


def _wdc_offer(path: epath.Path, number: int, record: dict[str, Any], side: str,
               attributes: Sequence[str]) -> tuple[str, Attributes, str]:
  """(id, cleaned attributes, cluster id) of one side of a WDC json pair."""
  required = [f"id_{side}", f"cluster_id_{side}"]
  missing = [key for key in required if record.get(key) is None]
  if missing:
    raise io.DataFormatError(f"{path}:{number}: no {missing}.")
  values = []
  for name in attributes:
    if f"{name}_{side}" not in record:  # An empty value is null; a missing key is a damaged record.
      raise io.DataFormatError(f"{path}:{number}: no {name}_{side} (null when the offer has no {name}).")
    value = record[f"{name}_{side}"]
    if value is not None and not isinstance(value, str):
      raise io.DataFormatError(f"{path}:{number}: {name}_{side} is a {type(value).__name__}, not a string.")
    value = value or ""
    # Peeters & Bizer only collapse whitespace in spec tables; other values are schema.org-quoted.
    values.append((name, " ".join(value.split()) if name == "specTableContent" else clean_wdc_value(value)))
  return str(record[f"id_{side}"]), tuple(values), str(record[f"cluster_id_{side}"])


def read_wdc_json(train_path: epath.PathLike, validation_path: epath.PathLike, test_path: epath.PathLike,
                  attributes: Sequence[str] = ("title",),
                  max_words: Mapping[str, int] | None = None) -> OfferDataset:
  """Reads WDC LSPC training pairs, validation pair ids and the gold standard.

  Args:
    train_path: a training set (`computers_train_<size>.json.gz`).
    validation_path: its validation set, a CSV with a `pair_id` column
      (`computers_valid_<size>.csv`); those pairs move from train to validation.
    test_path: the gold standard (`computers_gs.json.gz`).
    attributes: the offer attributes to serialize, in order (of `WDC_ATTRIBUTES`).
    max_words: attribute -> words kept (default `WDC_MAX_WORDS`).

  Returns:
    The offers (one source, keyed by WDC id; product = cluster id) and pairs.
  """
  unknown = [name for name in attributes if name not in WDC_ATTRIBUTES]
  if unknown or not attributes:
    raise ValueError(f"WDC attributes must be a non-empty subset of {WDC_ATTRIBUTES}; got {tuple(attributes)}.")
  max_words = WDC_MAX_WORDS if max_words is None else max_words
  train_path, validation_path, test_path = map(epath.Path, (train_path, validation_path, test_path))
  header, rows = io.csv_rows(validation_path, ("pair_id",))
  rows = list(rows)
  validation_ids: dict[str, int] = {}
  for line, row in rows:
    pair_id = row[header.index("pair_id")].strip()
    if not pair_id:
      raise io.DataFormatError(f"{validation_path}:{line}: empty pair_id.")
    validation_ids.setdefault(pair_id, line)
  table = _OfferTable()
  first_seen: dict[str, tuple[Attributes, str, str]] = {}
  pairs = _KeyedPairs()
  last_lines = {}
  found_validation = set()
  for file_split, path in (("train", train_path), ("test", test_path)):
    number = 0
    for number, record in io.json_lines(path):
      sides = []
      for side in ("left", "right"):
        identifier, offer, cluster = _wdc_offer(path, number, record, side, attributes)
        where = f"{path.name}:{number}"
        previous = first_seen.setdefault(identifier, (offer, cluster, where))
        if previous[:2] != (offer, cluster):
          raise io.DataFormatError(f"{path}:{number}: offer {identifier} differs from its copy at {previous[2]}.")
        sides.append(table.add(identifier, identifier, serialize(offer, max_words), cluster))
      pair_id = str(record.get("pair_id", ""))
      split = file_split
      if file_split == "train" and pair_id in validation_ids:
        split = "validation"
        found_validation.add(pair_id)
      pairs.add(split, path, number, sides[0], sides[1], _label(path, number, record.get("label")))
    last_lines[file_split] = number
  absent = [(line, pair_id) for pair_id, line in validation_ids.items() if pair_id not in found_validation]
  if absent:
    raise io.DataFormatError(f"{validation_path}:{absent[0][0]}: pair_id {absent[0][1]!r} is not a pair of "
                             f"{train_path.name} ({len(absent)} such ids).")
  last_lines["validation"] = rows[-1][0] if rows else 1
  counts: dict[str, int] = {}
  pairs.log_repeated(str(train_path.parent), counts)
  _check_pairs({"train": train_path, "validation": validation_path, "test": test_path}, pairs.pairs, last_lines,
               counts)
  return table.dataset(pairs.pairs, counts)
