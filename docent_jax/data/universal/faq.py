"""Reads FAQ retrieval sets: FAQ items (a question and its answer) and user queries, each asking for one item.

A FAQ directory holds one of two layouts (any file may be gzipped):

  TSV        faq.tsv, `faq_id<TAB>question<TAB>answer`, and queries.tsv, `query_id<TAB>query<TAB>faq_id`
             with an optional fourth column, the query's split `train` or `test` (on every row or on none).
             A first row that holds the column names is a header.
  StackFAQ   stackExchange-FAQ.xml (Karan & Snajder 2018): a <qapair> a thread, holding <rephr> paraphrases
             of the thread's information need (the queries; a `*` separates two groups of them and is no
             query), one <question> and one or more <answer>: the FAQ item, its answers joined by a space.
             Text is HTML-unescaped and its whitespace collapsed. Item ids count threads from 1; query ids
             are '<item id>-<paraphrase number>'. An empty <rephr> is skipped, counted and logged.

Queries without a split column are drawn into train and test with a seed (`test_fraction` of them test).
Both splits retrieve from all FAQ items. Every format error (`io.DataFormatError`) names the file and line.
"""
import collections
import dataclasses
import html
import re
import unicodedata
from typing import Sequence
from xml.etree import ElementTree

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import io

FAQ_FILE = "faq.tsv"
QUERY_FILE = "queries.tsv"
STACKFAQ_FILE = "stackExchange-FAQ.xml"
FAQ_COLUMNS = ("faq_id", "question", "answer")
QUERY_COLUMNS = ("query_id", "query", "faq_id", "split")
QUERY_SPLITS = ("train", "test")
DEFAULT_TEST_FRACTION = 0.5
# A <rephr> with this text separates two groups of paraphrases.
STACKFAQ_SEPARATOR = "*"


@dataclasses.dataclass(frozen=True)
class FaqItem:
  id: str
  question: str
  answer: str


@dataclasses.dataclass(frozen=True)
class FaqQuery:
  """A query and the index of the FAQ item it asks for."""
  id: str
  text: str
  faq_index: int


@dataclasses.dataclass(frozen=True)
class FaqDataset:
  """FAQ items, the queries of each split ('train', 'test') in file order, and the counts of what was read."""
  items: list[FaqItem]
  queries: dict[str, list[FaqQuery]]
  counts: dict[str, int]


def read_faq_directory(directory: epath.PathLike, test_fraction: float = DEFAULT_TEST_FRACTION,
                       seed: int = 0) -> FaqDataset:
  """Reads a FAQ directory in either layout (see the module docstring).

  Args:
    directory: the directory.
    test_fraction: the share of test queries, where the queries have no split column.
    seed: seeds that split.

  Raises:
    FileNotFoundError: the directory holds neither layout, or half of the TSV one.
  """
  directory = epath.Path(directory)
  faq_path, query_path = io.find_file(directory, FAQ_FILE), io.find_file(directory, QUERY_FILE)
  xml_path = io.find_file(directory, STACKFAQ_FILE)
  if faq_path and query_path and not xml_path:
    return read_faq_tsv(faq_path, query_path, test_fraction, seed)
  if xml_path and not faq_path and not query_path:
    return read_stackfaq_xml(xml_path, test_fraction, seed)
  raise FileNotFoundError(f"{directory}: a FAQ directory holds either {FAQ_FILE} and {QUERY_FILE}, or "
                          f"{STACKFAQ_FILE} (each may be gzipped); found "
                          f"{[path.name for path in (faq_path, query_path, xml_path) if path] or 'none'}.")


def read_faq_tsv(faq_path: epath.PathLike, query_path: epath.PathLike,
                 test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0) -> FaqDataset:
  """Reads faq.tsv and queries.tsv (see the module docstring).

  Raises:
    io.DataFormatError: a row with the wrong number of fields, an empty id, question or query, an id listed
      twice, a query for an unknown FAQ id, a split other than train or test, or a split without queries.
  """
  items: list[FaqItem] = []
  item_lines: dict[str, int] = {}
  for number, (identifier, question, answer) in _faq_tsv_rows(faq_path, FAQ_COLUMNS, optional_last=False):
    io.check_new_id(faq_path, number, identifier, item_lines)
    if not question:
      raise io.DataFormatError(f"{faq_path}:{number}: FAQ item {identifier!r} has an empty question.")
    items.append(FaqItem(identifier, question, answer))
  item_index = {item.id: i for i, item in enumerate(items)}
  queries, splits = [], []
  query_lines: dict[str, int] = {}
  for number, (identifier, text, faq_id, *split_column) in _faq_tsv_rows(query_path, QUERY_COLUMNS, optional_last=True):
    io.check_new_id(query_path, number, identifier, query_lines)
    if not text:
      raise io.DataFormatError(f"{query_path}:{number}: query {identifier!r} is empty.")
    if faq_id not in item_index:
      raise io.DataFormatError(f"{query_path}:{number}: query {identifier!r} asks for FAQ id {faq_id!r}, which "
                               f"{faq_path} does not hold.")
    if split_column and split_column[0] not in QUERY_SPLITS:
      raise io.DataFormatError(f"{query_path}:{number}: split {split_column[0]!r} is not one of "
                               f"{list(QUERY_SPLITS)}.")
    queries.append(FaqQuery(identifier, text, item_index[faq_id]))
    splits += split_column
  if splits:
    by_split = {split: [q for q, q_split in zip(queries, splits) if q_split == split] for split in QUERY_SPLITS}
  else:
    by_split = split_queries(queries, test_fraction, seed)
  return _dataset(query_path, items, by_split, collections.Counter())


@dataclasses.dataclass(frozen=True)
class StackFaqThread:
  """One <qapair>: its question, its answers joined by a space, and its paraphrase groups (`*` separates them),
  each a list of (paraphrase number from 1, text)."""
  question: str
  answer: str
  paraphrase_groups: list[list[tuple[int, str]]]


def read_stackfaq_xml(path: epath.PathLike, test_fraction: float = DEFAULT_TEST_FRACTION,
                      seed: int = 0) -> FaqDataset:
  """Reads StackFAQ's stackExchange-FAQ.xml (see the module docstring); errors as `read_stackfaq_threads`."""
  items, queries = [], []
  threads, skipped = read_stackfaq_threads(path)
  for thread in threads:
    identifier = str(len(items) + 1)
    items.append(FaqItem(identifier, thread.question, thread.answer))
    queries.extend(FaqQuery(f"{identifier}-{number}", text, len(items) - 1)
                   for group in thread.paraphrase_groups for number, text in group)
  return _dataset(path, items, split_queries(queries, test_fraction, seed), skipped)


def read_stackfaq_threads(path: epath.PathLike) -> tuple[list[StackFaqThread], collections.Counter]:
  """The threads of StackFAQ's stackExchange-FAQ.xml, and the counts of what was skipped (logged).

  Raises:
    io.DataFormatError: malformed XML (at the line ElementTree names), an element other than <qapair> in the
      root or than <rephr>, <question>, <answer> in a <qapair>, a <qapair> without exactly one non-empty
      <question> or without an <answer>.
  """
  root, lines = _parse_xml(path)
  threads = []
  skipped: collections.Counter = collections.Counter()
  for pair in root:
    where = f"{path}:{lines[pair]}"
    if pair.tag != "qapair":
      raise io.DataFormatError(f"{where}: <{pair.tag}> in <{root.tag}>; expected <qapair>.")
    texts: dict[str, list[str]] = {"rephr": [], "question": [], "answer": []}
    for element in pair:
      if element.tag not in texts:
        raise io.DataFormatError(f"{path}:{lines[element]}: <{element.tag}> in <qapair>; expected "
                                 f"{', '.join(f'<{tag}>' for tag in texts)}.")
      texts[element.tag].append(_clean("".join(element.itertext())))
    if len(texts["question"]) != 1 or not texts["question"][0]:
      raise io.DataFormatError(f"{where}: a <qapair> needs one non-empty <question>, found {texts['question']}.")
    if not any(texts["answer"]):
      raise io.DataFormatError(f"{where}: a <qapair> without an <answer>.")
    groups: list[list[tuple[int, str]]] = [[]]
    for number, text in enumerate(texts["rephr"], 1):
      if text == STACKFAQ_SEPARATOR:
        groups.append([])
      elif not text:
        skipped["empty <rephr> skipped"] += 1
      else:
        groups[-1].append((number, text))
    threads.append(StackFaqThread(texts["question"][0], " ".join(filter(None, texts["answer"])),
                                  [group for group in groups if group]))
  for reason, count in skipped.items():
    logging.warning("%s: %d %s.", path, count, reason)
  return threads, skipped


def normalize_answer(text: str) -> str:
  """The text that decides whether two answers are the same: Unicode-compatible, case-folded, punctuation as
  space, whitespace collapsed."""
  text = unicodedata.normalize("NFKC", text).casefold()
  return " ".join(re.sub(r"[^\w\s]|_", " ", text).split())


def answer_groups(answers: Sequence[str]) -> np.ndarray:
  """int [N]: the same number for items whose answers are the same (`normalize_answer`)."""
  return np.unique([normalize_answer(answer) for answer in answers], return_inverse=True)[1].reshape(-1)


def split_queries(queries: Sequence[FaqQuery], test_fraction: float, seed: int) -> dict[str, list[FaqQuery]]:
  """A seeded draw of `test_fraction` of the queries as 'test', the others 'train'; each in the queries' order."""
  if not 0 < test_fraction < 1:
    raise ValueError(f"test_fraction must lie between 0 and 1, not {test_fraction}.")
  kept, held = seeded_holdout(len(queries), test_fraction, seed)
  return {"train": [queries[row] for row in kept], "test": [queries[row] for row in held]}


def seeded_holdout(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Row numbers (kept, held out) of `count` rows, round(fraction * count) of them held out by a seeded draw;
  each in row order. The test queries and the validation queries are drawn by this one rule."""
  order = np.random.default_rng(seed).permutation(count)
  held = round(fraction * count)
  return np.sort(order[held:]), np.sort(order[:held])


def _faq_tsv_rows(path: epath.PathLike, columns: Sequence[str], optional_last: bool) -> list[tuple[int, list[str]]]:
  """(line number, stripped fields) of the rows after an optional header; every row has all `columns` or,
  when the last is optional, every row has as many fields as the first."""
  rows: list[tuple[int, list[str]]] = []
  widths = {len(columns) - 1, len(columns)} if optional_last else {len(columns)}
  for number, line in io.row_lines(path):
    fields = [field.strip() for field in line.split("\t")]
    if not rows and len(fields) in widths and fields == list(columns[:len(fields)]):
      continue
    if len(fields) not in widths or (rows and len(fields) != len(rows[0][1])):
      expected = len(rows[0][1]) if rows else " or ".join(map(str, sorted(widths)))
      raise io.DataFormatError(f"{path}:{number}: expected {expected} tab-separated fields "
                               f"({', '.join(columns)}), found {len(fields)}.")
    rows.append((number, fields))
  return rows


def _parse_xml(path: epath.PathLike) -> tuple[ElementTree.Element, dict[ElementTree.Element, int]]:
  """The root element, and the line where each element starts."""
  parser = ElementTree.XMLPullParser(events=("start",))
  lines: dict[ElementTree.Element, int] = {}
  try:
    for number, line in io.numbered_lines(path):
      parser.feed(line + "\n")
      lines.update((element, number) for _, element in parser.read_events())
    parser.close()
  except ElementTree.ParseError as error:
    raise io.DataFormatError(f"{path}:{error.position[0]}: malformed XML ({error}).") from None
  return next(iter(lines)), lines


def _clean(text: str) -> str:
  """Element text with HTML entities unescaped and whitespace collapsed."""
  return " ".join(html.unescape(text).split())


def _dataset(where: epath.PathLike, items: list[FaqItem], queries: dict[str, list[FaqQuery]],
             skipped: collections.Counter) -> FaqDataset:
  """The dataset with its counts; a split without queries is an error."""
  for split in QUERY_SPLITS:
    if not queries[split]:
      raise io.DataFormatError(f"{where}: no {split} queries.")
  counts = {"faq items": len(items), **{f"{split} queries": len(queries[split]) for split in QUERY_SPLITS},
            **skipped}
  return FaqDataset(items, queries, counts)
