"""Every result a README table prints from a run it links (docs/results/*.json) is in that JSON, as printed."""
import json
import pathlib
import re

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_LINK = re.compile(r"\((docs/results/[\w./-]+\.json)\)")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")  # Metrics print with decimals; counts and times do not.
MEASURED_COLUMN = re.compile(r"\bhere\b|\bbaseline\b")  # Headers of the columns that hold this project's results.


def _cells(line: str) -> list[str]:
  return [cell.strip() for cell in line.strip().strip("|").split("|")]


def table_rows(markdown: str) -> list[tuple[list[str], list[str]]]:
  """(header, cells) of every row of every table."""
  rows, header = [], None
  for line in markdown.splitlines():
    if not line.startswith("|"):
      header = None
    elif header is None:
      header = _cells(line)
    elif not set(line) <= set("|-: "):
      rows.append((header, _cells(line)))
  return rows


def _numbers(tree: object) -> list[float]:
  if isinstance(tree, dict):
    return [n for value in tree.values() for n in _numbers(value)]
  if isinstance(tree, list):
    return [n for value in tree for n in _numbers(value)]
  return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def unmatched(printed: list[str], values: list[float]) -> list[str]:
  """The printed decimals that no value rounds to at the printed precision."""
  return [number for number in printed
          if not any(round(value, len(number.split(".")[1])) == float(number) for value in values)]


def test_every_measured_number_of_a_row_that_links_its_results_is_in_them():
  checked = 0
  for header, cells in table_rows((REPO_ROOT / "README.md").read_text()):
    links = RESULTS_LINK.findall(" ".join(cells))
    if not links:
      continue
    values = [n for link in links for n in _numbers(json.loads((REPO_ROOT / link).read_text()))]
    printed = [number for column, cell in zip(header, cells) if MEASURED_COLUMN.search(column)
               for number in DECIMAL.findall(cell)]
    assert printed, (cells, "links results but prints none of them")
    assert not unmatched(printed, values), (cells, unmatched(printed, values), links)
    checked += len(printed)
  assert checked >= 10  # The README's linked rows print at least this many results.


def test_a_number_that_its_results_do_not_hold_is_caught():
  values = [0.7346370508639968, 0.03632566048003802]
  assert unmatched(["0.735", "0.036", "0.73"], values) == []
  assert unmatched(["0.736", "0.0363", "0.74"], values) == ["0.736", "0.74"]
  rows = table_rows("| model | best here |\n|---|---|\n| a | 0.5 |\n\ntext\n| x |\n|---|\n| 1 |\n")
  assert rows == [(["model", "best here"], ["a", "0.5"]), (["x"], ["1"])]
