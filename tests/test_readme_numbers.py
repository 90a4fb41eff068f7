"""Every result a README table prints is in a results file its row links (docs/results/*.json,
tools/results/*.json), as printed; every results table of docs/ links its results file."""
import json
import pathlib
import re

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS_LINK = re.compile(r"\(((?:docs|tools)/results/[\w./-]+\.json)\)")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")  # Metrics print with decimals; counts and times do not.
# Headers of the columns that hold this project's measurements.
MEASURED_COLUMN = re.compile(r"\bhere\b|\bbaseline\b|GiB per chip|\(estimate\)|Flax/PyTorch")
GIB = 1 << 30


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


def _tpu_report_values(report: dict) -> list[float]:
  """A compile report's figures in the units the TPU table prints: GiB, ms per step, the budget in s and min."""
  values = []
  for function in report["functions"].values():
    values += [function.get("hbm_bytes_per_device", 0) / GIB, function.get("hbm_capacity_bytes", 0) / GIB,
               function.get("step_seconds_lower_bound", 0) * 1e3]
    if "projected_seconds" in function:
      values += [function["projected_seconds"], function["projected_seconds"] / 60]
  return values


def linked_values(link: str) -> list[float]:
  results = json.loads((REPO_ROOT / link).read_text())
  return _numbers(results) + (_tpu_report_values(results) if "/cloud_tpu/" in link else [])


def unmatched(printed: list[str], values: list[float]) -> list[str]:
  """The printed decimals that no value rounds to at the printed precision."""
  return [number for number in printed
          if not any(round(value, len(number.split(".")[1])) == float(number) for value in values)]


def measured(header: list[str], cells: list[str]) -> list[str]:
  """The decimals a row prints in the columns of this project's measurements."""
  return [number for column, cell in zip(header, cells) if MEASURED_COLUMN.search(column)
          for number in DECIMAL.findall(cell)]


def test_every_measured_number_of_the_readmes_tables_is_in_the_results_its_row_links():
  checked = 0
  for header, cells in table_rows((REPO_ROOT / "README.md").read_text()):
    printed = measured(header, cells)
    if not printed:
      continue
    links = RESULTS_LINK.findall(" ".join(cells))
    assert links, (cells, "prints results but links no results file")
    values = [n for link in links for n in linked_values(link)]
    assert not unmatched(printed, values), (cells, unmatched(printed, values), links)
    checked += len(printed)
  assert checked >= 40  # The README's tables print at least this many results.


def test_a_number_that_its_results_do_not_hold_is_caught():
  values = [0.7346370508639968, 0.03632566048003802]
  assert unmatched(["0.735", "0.036", "0.73"], values) == []
  assert unmatched(["0.736", "0.0363", "0.74"], values) == ["0.736", "0.74"]
  rows = table_rows("| model | best here |\n|---|---|\n| a | 0.5 |\n\ntext\n| x |\n|---|\n| 1 |\n")
  assert rows == [(["model", "best here"], ["a", "0.5"]), (["x"], ["1"])]
  assert measured(["model", "best here", "paper"], ["a (0.3)", "0.5 ± 0.1", "0.9"]) == ["0.5", "0.1"]
  report = {"functions": {"train_step": {"hbm_bytes_per_device": 2136746229, "hbm_capacity_bytes": 34359738368,
                                         "step_seconds_lower_bound": 0.0205, "projected_seconds": 892.2}}}
  assert unmatched(["1.99", "20.5", "14.9"], _tpu_report_values(report)) == []
  tables = _tables_with_their_section("# a\nsee (results/x.json)\n\n| m | v |\n|---|---|\n| a | 0.5 |\n\n"
                                      "# b\n```\n# not a heading\n```\n| m | v |\n|---|---|\n| a | 0.5 |\n\n| n |\n|---|\n| 3 |\n")
  assert [bool(DOCS_RESULTS_LINK.search(prose + table)) for prose, table in tables] == [True, False]


def _tables_with_their_section(markdown: str) -> list[tuple[str, str]]:
  """(the prose from the table's heading down to the table and the paragraph after it, the table) for every table
  that prints a decimal."""
  lines, tables = markdown.splitlines(), []
  section_start, in_code, i = 0, False, 0
  while i < len(lines):
    line = lines[i]
    in_code ^= line.startswith("```")
    if not in_code and line.startswith("#"):
      section_start = i
    if not in_code and line.startswith("|"):
      start = i
      while i < len(lines) and lines[i].startswith("|"):
        i += 1
      table = "\n".join(lines[start:i])
      if DECIMAL.search("\n".join(lines[start + 2:i])):
        after = i + 1
        while after < len(lines) and (not lines[after].strip() or lines[after].startswith("<!-- end of ")):
          after += 1  # Past a rendered table's end marker (tools/render_docs.py) to the paragraph after it.
        while after < len(lines) and lines[after].strip() and not lines[after].startswith(("#", "|")):
          after += 1
        tables.append(("\n".join(lines[section_start:start] + lines[i:after]), table))
      continue
    i += 1
  return tables


DOCS_RESULTS_LINK = re.compile(r"\((?:\.\./)?(?:docs/|tools/)?results/[\w./-]+\.json\)")


def test_every_docs_table_names_its_results_file():
  for page in sorted((REPO_ROOT / "docs").glob("*.md")):
    for prose, table in _tables_with_their_section(page.read_text()):
      assert DOCS_RESULTS_LINK.search(prose + table), (page.name, table.splitlines()[2][:120])
