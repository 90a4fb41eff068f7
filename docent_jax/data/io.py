"""The one text reader of every dataset file, and the one error it raises.

Files are UTF-8, gzipped when their name ends in `.gz`, at any `etils.epath` path (so `gs://`
works). A byte-order mark at the start is dropped and LF, CRLF and CR all end a line, so a file
saved by a spreadsheet or an old editor parses like any other. Every error names the file and line.
"""
from collections.abc import Iterator, Sequence
import csv
import gzip
import json
from typing import BinaryIO
import zlib

from etils import epath

_BYTE_ORDER_MARK = b"\xef\xbb\xbf"
# What bytes.strip() removes within a line: a file of nothing else is empty.
_BLANK = " \t\x0b\x0c"


class DataFormatError(ValueError):
  """A dataset file is malformed; the message names the file and line."""


def find_file(directory: epath.PathLike, name: str) -> epath.Path | None:
  """Returns `directory/name` or `directory/name.gz`, None when neither exists."""
  directory = epath.Path(directory)
  plain, zipped = directory / name, directory / (name + ".gz")
  if plain.exists() and zipped.exists():
    raise DataFormatError(f"{directory}: both {name} and {name}.gz exist; keep one.")
  if plain.exists():
    return plain
  return zipped if zipped.exists() else None


def numbered_lines(path: epath.PathLike) -> Iterator[tuple[int, str]]:
  """Yields (line number from 1, line without its line end) of a text file, streaming.

  A last line without a line end counts; a line end at the very end adds no empty line.

  Raises:
    DataFormatError: the file is empty (nothing but blanks), holds bytes that are not UTF-8 or a NUL byte,
      or its gzip data is damaged or cut short.
  """
  path = epath.Path(path)
  with path.open("rb") as file:
    if path.suffix == ".gz":
      with gzip.GzipFile(fileobj=file) as unzipped:
        yield from _decode(path, unzipped, damaged=(EOFError, gzip.BadGzipFile, zlib.error))
    else:
      yield from _decode(path, file, damaged=())


def check_new_id(path: epath.PathLike, number: int, identifier: str, first_line: dict[str, int]) -> None:
  """Records `identifier` as first seen on line `number`; an empty or repeated id is an error naming both lines."""
  if not identifier:
    raise DataFormatError(f"{path}:{number}: empty id.")
  if identifier in first_line:
    raise DataFormatError(f"{path}:{number}: duplicate id {identifier!r} (first on line {first_line[identifier]}).")
  first_line[identifier] = number


def row_lines(path: epath.PathLike) -> Iterator[tuple[int, str]]:
  """(line number, line) of the lines that hold a row, in a file of one row per line: a blank line (an
  editor's last line, the gap between two files appended) holds none."""
  for number, line in numbered_lines(path):
    if line.strip():
      yield number, line


def json_lines(path: epath.PathLike) -> Iterator[tuple[int, dict]]:
  """(line number, object) of each non-blank line of a JSON-lines file; a line that is no JSON object is an error."""
  for number, line in row_lines(path):
    try:
      record = json.loads(line)
    except json.JSONDecodeError as error:
      raise DataFormatError(f"{path}:{number}: not a JSON object ({error.msg}).") from None
    if not isinstance(record, dict):
      raise DataFormatError(f"{path}:{number}: expected a JSON object, found {type(record).__name__}.")
    yield number, record


def read_lines(path: epath.PathLike) -> list[str]:
  """All lines of a text file (see `numbered_lines`), for readers that index or count them."""
  return [line for _, line in numbered_lines(path)]


def csv_rows(path: epath.PathLike, required: Sequence[str] = ()) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
  """The header of a CSV file, which must hold the `required` columns, and its rows as (line number, fields), read
  as they are consumed. Every row has the header's width; a quoted field may span lines (the row's number is then
  its last line); a blank line holds no row."""
  lines = read_lines(path)
  # Line ends restored, so that a quoted field of several lines keeps its line breaks.
  reader = csv.reader((line + "\n" for line in lines), strict=True)
  try:
    header = [name.strip() for name in next(reader)]  # `read_lines` refused an empty file.
  except csv.Error as error:
    raise DataFormatError(f"{path}:1: malformed CSV header ({error}).") from None
  missing = [name for name in required if name not in header]
  if missing:
    raise DataFormatError(f"{path}:1: header {header} lacks columns {missing}.")

  def rows() -> Iterator[tuple[int, list[str]]]:
    while True:
      try:
        row = next(reader)
      except StopIteration:
        return
      except csv.Error as error:
        raise DataFormatError(f"{path}:{reader.line_num}: malformed CSV row ({error}).") from None
      if not "".join(row).strip():
        continue
      if len(row) != len(header):
        raise DataFormatError(f"{path}:{reader.line_num}: expected {len(header)} fields, found {len(row)} (header: "
                              f"{','.join(header)}): {lines[reader.line_num - 1][:100]!r}")
      yield reader.line_num, row

  return header, rows()


def _decode(path: epath.Path, file: BinaryIO, damaged: tuple[type[Exception], ...]) -> Iterator[tuple[int, str]]:
  """The lines of `numbered_lines`; blank lines before the first text wait until the file proves non-empty.

  `damaged`: what reading `file` raises when its (compressed) data is damaged.
  """
  number = 0
  held_back: list[tuple[int, str]] = []
  has_text = False
  raw_lines = iter(file)
  while True:
    try:
      raw = next(raw_lines, None)
    except damaged as error:
      raise DataFormatError(f"{path}:{number + 1}: damaged or cut-short compressed data ({error}).") from None
    if raw is None:
      break
    if number == 0:
      raw = raw.removeprefix(_BYTE_ORDER_MARK)
    # `raw` ends at LF (or the end of the file); a CR before it is part of the line end, any other CR ends a line.
    body = raw.removesuffix(b"\n").removesuffix(b"\r")
    try:
      text = body.decode("utf-8")
    except UnicodeDecodeError as error:
      line = number + body[:error.start].count(b"\r") + 1
      raise DataFormatError(f"{path}:{line}: bytes that are not valid UTF-8 ({error.reason}).") from None
    if "\0" in text:  # Never in a text dataset; a block of zeros is what a crash can leave in a file.
      line = number + text[:text.index("\0")].count("\r") + 1
      raise DataFormatError(f"{path}:{line}: a NUL byte (the file is damaged or not text).")
    for line in text.split("\r"):
      number += 1
      if has_text:
        yield number, line
      elif line.strip(_BLANK):
        has_text = True
        yield from held_back
        yield number, line
      else:
        held_back.append((number, line))
  if not has_text:
    raise DataFormatError(f"{path}: file is empty.")
