"""Random damage to valid dataset files, fed to every reader (hypothesis).

Each outcome must be one of: the clean parse (damage the format defines away: a byte-order mark, other line
ends, blank lines at the end, gzip), an error naming the damaged file and a line, or a counted skip (a
warning logged, and what was read is a part of the clean dataset). Never a silently different dataset.

The damage is structural: a field separator removed, a line broken in two, a line repeated, an id no other
file knows, bytes that are not UTF-8, a NUL byte, a gzip stream cut short, for JSON a structural character
or a key removed. Damage that makes another valid file is left out, since no reader can see it: a letter
changed inside a text, a file cut at a line end, a repeated row where the format says rows add up (reviews,
tag votes).
"""
import collections
from collections.abc import Callable
import dataclasses
import gzip
import json
import logging
import pathlib
import re
import tempfile
from typing import Any

import hypothesis
from hypothesis import strategies as st
import pytest

from docent_jax.data import io
from docent_jax.data.kg import files as kg_files
from docent_jax.data.offers import files as offer_files
from docent_jax.data.reviews import files as review_files
import kg_fixtures
import review_fixtures
import test_offer_files

_HARMLESS = ("byte_order_mark", "crlf", "cr", "blank_lines_at_end", "no_final_line_end", "gzip")
_UNKNOWN_ID = "zz_unknown"


@dataclasses.dataclass(frozen=True)
class Format:
  """A reader, a valid fixture for it, and the damage that applies to each of its files."""
  write: Callable[[pathlib.Path], None]
  read: Callable[[pathlib.Path], Any]
  records: Callable[[Any], collections.Counter]  # What was read, as a multiset of comparable records.
  damage: dict[str, tuple[str, ...]]  # File name -> the kinds of damage it gets.
  separator: str  # Between fields: "\t", "," or "json".


def _kg_records(graph: kg_files.ParsedGraph) -> collections.Counter:
  return collections.Counter(
      [("text", e, t) for e, t in zip(graph.entity_ids, graph.entity_texts)]
      + [("label", e, label) for e, label in graph.entity_labels.items()]
      + [("split", e, s) for e, s in graph.entity_split.items()]
      + [("triple", split, *t) for split, triples in graph.triples.items() for t in triples]
      + [("relation", r, t) for r, t in zip(graph.relation_ids, graph.relation_texts)])


def _write_reviews(directory: pathlib.Path) -> None:
  review_fixtures.write_tiny_reviews(directory)
  movies = range(review_fixtures.NUM_ENTITIES)
  (directory / "entities.tsv").write_text("".join(f"m{m}\tFilm {m}\n" for m in movies))
  (directory / "genres.tsv").write_text("".join(f"m{m}\t{('drama', 'comedy')[m % 2]}\n" for m in movies))


def _review_records(raw: review_files.RawReviews) -> collections.Counter:
  return collections.Counter(
      [("review", e, text) for e, texts in raw.reviews.items() for text in texts]
      + [("title", e, t) for e, t in raw.titles.items() if t]
      + [("tag", e, tag, votes) for e, tags in raw.tags.items() for tag, votes in tags.items()]
      + [("genre", e, g) for e, genres in raw.genres.items() for g in genres])


def _offer_records(dataset: offer_files.OfferDataset) -> collections.Counter:
  def offer(i):
    return dataset.offer_ids[i], dataset.offer_texts[i], dataset.offer_products[i], dataset.offer_source[i]
  return collections.Counter(
      [("offer", *offer(i)) for i in range(len(dataset.offer_ids))]
      + [("pair", split, offer(left), offer(right), label)
         for split, pairs in dataset.pairs.items() for left, right, label in pairs])


_WDC_JSON_FILES = {"train": "computers_train_small.json.gz", "validation": "computers_valid_small.csv",
                   "test": "computers_gs.json.gz"}


def _read_wdc_json(directory: pathlib.Path) -> offer_files.OfferDataset:
  paths = [io.find_file(directory, _WDC_JSON_FILES[split].removesuffix(".gz")) for split in offer_files.PAIR_SPLITS]
  return offer_files.read_wdc_json(*paths, attributes=offer_files.WDC_ATTRIBUTES)


_TEXT = ("invalid_utf8", "nul_byte", "split_line", "drop_separator")
FORMATS = {
    "kg_directory": Format(
        write=kg_fixtures.write_tiny_kg, read=kg_files.read_kg_directory, records=_kg_records, separator="\t",
        damage={
            "entity2text.txt": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
            "ind-train.tsv": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
            "ind-dev.tsv": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
            "ind-test.tsv": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
            "train-ents-class.txt": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
            "test-ents-class.txt": _HARMLESS + _TEXT + ("repeat_line",),
        }),
    "review_tsv": Format(
        write=_write_reviews, read=review_files.read_review_tsv, records=_review_records, separator="\t",
        damage={
            "reviews.tsv": _HARMLESS + _TEXT,
            "tags.tsv": _HARMLESS + _TEXT + ("unknown_id",),
            "entities.tsv": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
            "genres.tsv": _HARMLESS + _TEXT + ("repeat_line", "unknown_id"),
        }),
    "deepmatcher_csv": Format(
        write=test_offer_files.write_deepmatcher, separator=",",
        read=lambda directory: offer_files.read_deepmatcher(offer_files.deepmatcher_paths(directory)),
        records=_offer_records,
        damage={**{name: _HARMLESS + _TEXT + ("repeat_line", "drop_quote") for name in ("tableA.csv", "tableB.csv")},
                **{name: _HARMLESS + _TEXT + ("repeat_line", "unknown_id") for name in ("train.csv", "valid.csv",
                                                                                         "test.csv")}}),
    "wdc_json": Format(
        write=test_offer_files.write_wdc_json, read=_read_wdc_json, records=_offer_records, separator="json",
        damage={
            "computers_train_small.json.gz": ("byte_order_mark", "crlf", "cut_gzip", "invalid_utf8", "nul_byte",
                                              "split_line", "drop_separator", "repeat_line", "drop_key"),
            "computers_gs.json.gz": ("crlf", "cut_gzip", "invalid_utf8", "split_line", "drop_separator",
                                     "repeat_line", "drop_key"),
            "computers_valid_small.csv": _HARMLESS + ("invalid_utf8", "nul_byte", "split_line", "repeat_line"),
        }),
}


def _outside_quotes(text: str, separator: str) -> list[bool]:
  """For each character: whether it is outside a quoted CSV field or a JSON string (and no quote itself)."""
  outside, quoted, escaped = [], False, False
  for char in text:
    if quoted and separator == "json" and escaped:
      escaped = False
      outside.append(False)
      continue
    if char == '"':
      quoted = not quoted
      outside.append(False)
      continue
    escaped = quoted and char == "\\"
    outside.append(not quoted)
  return outside


@st.composite
def damage(draw, format_name: str) -> tuple[str, str, int]:
  """(file name, kind of damage, a seed choosing where)."""
  files = FORMATS[format_name].damage
  name = draw(st.sampled_from(sorted(files)))
  return name, draw(st.sampled_from(files[name])), draw(st.integers(0, 2**16))


def _line_starts(text: str) -> list[int]:
  return [0] + [m.end() for m in re.finditer("\n", text) if m.end() < len(text)]


def _line_of(text: str, position: int) -> int:
  return text.count("\n", 0, position) + 1


def _apply(directory: pathlib.Path, name: str, kind: str, seed: int, separator: str) -> tuple[str, int | None]:
  """Damages `directory/name`; returns the file's name afterwards and the line an error must name (None: any)."""
  path = directory / name
  zipped = name.endswith(".gz")
  data = gzip.decompress(path.read_bytes()) if zipped else path.read_bytes()
  text = data.decode("utf-8")
  starts = _line_starts(text)
  # The header of a CSV is the one line without data.
  first = 1 if separator == "," or name.endswith(".csv") else 0
  line_start = starts[first + seed % (len(starts) - first)]
  line_end = text.index("\n", line_start) if "\n" in text[line_start:] else len(text)
  line = _line_of(text, line_start)
  outside = _outside_quotes(text, separator)
  expected_line = None
  new_name = name
  if kind == "byte_order_mark":  # Added, or removed where the fixture has one.
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else b"\xef\xbb\xbf" + data
  elif kind in ("crlf", "cr"):
    data = data.replace(b"\n", b"\r\n" if kind == "crlf" else b"\r")
  elif kind == "blank_lines_at_end":
    data += b"\n \n\t\n"
  elif kind == "no_final_line_end":
    data = data.rstrip(b"\n")
  elif kind == "gzip":
    new_name = name + ".gz"
    path.unlink()
  elif kind in ("invalid_utf8", "nul_byte"):
    at = len(text[:line_start + seed % (line_end - line_start + 1)].encode())
    data = data[:at] + (b"\xff" if kind == "invalid_utf8" else b"\x00") + data[at:]
    expected_line = line
  elif kind == "split_line":
    candidates = [i for i in range(line_start + 1, line_end) if outside[i] and outside[i - 1]]
    if not candidates:
      return name, None
    at = candidates[seed % len(candidates)]
    data = (text[:at] + "\n" + text[at:]).encode()
  elif kind == "drop_separator":
    marks = ",:{}[]" if separator == "json" else separator
    candidates = [i for i in range(line_start, line_end) if text[i] in marks and outside[i]]
    if not candidates:
      return name, None
    at = candidates[seed % len(candidates)]
    data = (text[:at] + text[at + 1:]).encode()
  elif kind == "drop_quote":
    candidates = [i for i in range(line_start, line_end) if text[i] == '"']
    if not candidates:
      return name, None
    at = candidates[seed % len(candidates)]
    data = (text[:at] + text[at + 1:]).encode()
  elif kind == "repeat_line":
    data = (text[:line_end] + "\n" + text[line_start:line_end] + text[line_end:]).encode()
  elif kind == "unknown_id":
    sep = "\t" if separator == "json" else separator
    field_end = text.index(sep, line_start) if sep in text[line_start:line_end] else line_end
    column = seed % 2 if name in ("train.csv", "valid.csv", "test.csv") else 0  # Either side of a pair.
    if column:
      field_start, field_end = field_end + 1, text.index(sep, field_end + 1)
    else:
      field_start = line_start
    data = (text[:field_start] + _UNKNOWN_ID + text[field_end:]).encode()
  elif kind == "drop_key":
    lines = text.splitlines(keepends=True)
    record = json.loads(lines[line - 1])
    key = ["id_left", "cluster_id_right", "title_left", "label"][seed % 4]
    del record[key]
    lines[line - 1] = json.dumps(record) + "\n"
    data = "".join(lines).encode()
    expected_line = line
  elif kind == "cut_gzip":
    compressed = gzip.compress(data)
    (directory / name).write_bytes(compressed[:len(compressed) // 2 + seed % (len(compressed) // 2 - 8)])
    return name, None
  else:
    raise ValueError(kind)
  (directory / new_name).write_bytes(gzip.compress(data) if new_name.endswith(".gz") else data)
  return new_name, expected_line


@pytest.fixture(scope="module")
def clean_parses() -> dict[str, collections.Counter]:
  parses = {}
  with tempfile.TemporaryDirectory() as root:
    for format_name, spec in FORMATS.items():
      directory = pathlib.Path(root) / format_name
      directory.mkdir()
      spec.write(directory)
      parses[format_name] = spec.records(spec.read(directory))
  return parses


class _Warnings(logging.Handler):
  def __init__(self):
    super().__init__(logging.WARNING)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


@pytest.mark.parametrize("format_name", sorted(FORMATS))
@hypothesis.settings(max_examples=300, deadline=None, derandomize=True, database=None)
@hypothesis.given(data=st.data())
def test_damaged_files_give_the_clean_parse_an_error_naming_file_and_line_or_a_counted_skip(
    format_name, clean_parses, data):
  spec = FORMATS[format_name]
  name, kind, seed = data.draw(damage(format_name))
  with tempfile.TemporaryDirectory() as root:
    directory = pathlib.Path(root)
    spec.write(directory)
    damaged_name, expected_line = _apply(directory, name, kind, seed, spec.separator)
    warnings = _Warnings()
    logging.getLogger().addHandler(warnings)
    try:
      parsed = spec.records(spec.read(directory))
    except io.DataFormatError as error:
      assert kind not in _HARMLESS, f"{kind} of {name} is no damage, yet: {error}"
      line = rf"{expected_line}\b" if expected_line else r"\d+"
      assert re.search(rf"{re.escape(damaged_name)}:{line}", str(error)), (kind, name, str(error))
      hypothesis.event(f"{kind}: error naming the file and line")
      return
    finally:
      logging.getLogger().removeHandler(warnings)
  clean = clean_parses[format_name]
  if parsed == clean:
    hypothesis.event(f"{kind}: the clean parse")
    return
  assert kind not in _HARMLESS, f"{kind} of {name} changed the parse"
  extra = parsed - clean
  assert not extra, f"{kind} of {name} silently added or changed {list(extra)[:3]}"
  assert warnings.messages, f"{kind} of {name} dropped {list((clean - parsed))[:3]} without a logged count"
  hypothesis.event(f"{kind}: a counted skip")

