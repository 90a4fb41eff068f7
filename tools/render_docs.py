"""Renders the results in README.md and docs/*.md from their results files, by key.

A rendered part of a page sits between two markers and comes from a template of its own under docs/templates/:

  <!-- rendered from docs/templates/NAME.md by tools/render_docs.py -->
  ...
  <!-- end of docs/templates/NAME.md -->

In a template every result is a placeholder naming its results file (under docs/results/ or tools/results/), its
key (a '/'-joined path into the JSON) and its format:

  {{docs/results/default.json: results/blp_transe/test/mrr | .3f}}
  {{docs/results/default_seeds.json: results/blp_transe@seeds/test/mrr | .3f ±}}   mean ± the key's `_std`
  {{docs/results/cloud_tpu/default_v5e_2x4.json: functions/train_step/hbm_bytes_per_device | .2f /1073741824}}
                                                                   a value scaled (here bytes to GiB) before formatting
  {{docs/results/docent_full_3000_evaluations.jsonl: step=500/metrics/test/search_mrr | .3f}}
                                                                   a run's log (JSON lines): the first part of the key
                                                                   picks the one line whose fields have these values
                                                                   ('evaluator=validation,step=1088')

  {{docs/results/x.json: a/test/mrr - docs/results/x.json: b/test/mrr | .3f}}
                                                                   a difference (or sum '+', ratio '/') of results

A number in prose carries its key in a comment right after it, and is rendered from it like a placeholder:

  reaches test MRR 0.189<!-- docs/results/blp_wn18rr_transe_8_epochs.json: results/blp_transe/test/mrr | .3f -->

A number that is not a result says where it comes from in the same place: `81.5<!-- paper: BLP, Table 4 -->` (also
`config:` or `not a result:`). A version number ('Python 3.11') needs neither.

A number in a table that is not a result (a paper's, a budget) is written as text and says where it comes from. The table of
TPU compile reports is rendered whole, a row per report (`tpu_table.py`):

  <!-- rendered from docs/results/cloud_tpu/*.json by tools/render_docs.py -->

  python tools/render_docs.py            # rewrites the rendered parts
  python tools/render_docs.py --check    # exit 1 naming each page whose rendered part differs
  python tools/render_docs.py --unkeyed docs/blp.md   # the numbers of a page's prose with no key or source
"""
import argparse
import json
import pathlib
import re
import sys

import tpu_table

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = "docs/templates"
PAGES = ("README.md", "docs/*.md")
BLOCK = re.compile(r"(<!-- rendered from (?P<template>docs/templates/[\w.-]+\.md|docs/results/cloud_tpu/\*\.json) "
                   r"by tools/render_docs\.py -->\n)"
                   r"(?P<body>.*?)"
                   r"(?P<end><!-- end of (?P=template) -->)", re.DOTALL)
PLACEHOLDER = re.compile(r"\{\{\s*(?P<file>[\w./-]+\.jsonl?)\s*:\s*(?P<key>[^|}]+?)\s*\|\s*(?P<format>[^}±*/\s]+)"
                         r"\s*(?:(?P<op>[*/])\s*(?P<scale>[\d.e+]+))?\s*(?P<spread>±)?\s*\}\}")


# A number in prose and the comment after it: its key (rendered like a placeholder) or where it comes from.
SHOWN = r"(?:(?<![\w>])-)?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"  # A "-" after a number or comment is a range's.
KEYED_NUMBER = re.compile(rf"(?P<shown>{SHOWN}(?: ± {SHOWN})?)<!-- (?P<placeholder>[\w./-]+\.jsonl?\s*:[^>]*?) -->")
SOURCED_NUMBER = re.compile(rf"{SHOWN}<!-- (?:paper|config|not a result): [^>]+ -->")
TERM_SEPARATOR = re.compile(r"\s+([-+/])\s+(?=[\w./-]+\.jsonl?\s*:)")  # ' - file.json:', not a '-' inside a key


DECIMAL = re.compile(r"(?<![\w.])\d[\d,]*\.\d+(?!\.?\d)")  # Results print with decimals; counts and versions do not.
VERSION = re.compile(r"(?<![/\w])(?:Python|PyTorch|jaxlib|JAX|Flax|transformers|WordNet|Orbax|version|Cloud TPU|CUDA|==)[ -]?$")


def unkeyed_numbers(page: str) -> list[str]:
  """'line N: number' for each decimal of the page's prose that carries neither a key nor its source.

  Rendered parts (a table's results come from its template), code and `inline code` are left out.
  """
  found, in_code, in_rendered = [], False, False
  for number, line in enumerate(page.splitlines(), 1):
    if line.startswith("<!-- rendered from "):
      in_rendered = True
    elif line.startswith("<!-- end of "):
      in_rendered = False
    elif line.startswith("```"):
      in_code = not in_code
    if in_code or in_rendered or line.startswith("```"):
      continue
    spans = [match.span() for pattern in (KEYED_NUMBER, SOURCED_NUMBER, re.compile(r"`[^`]*`"))
             for match in pattern.finditer(line)]
    for match in DECIMAL.finditer(line):
      if not any(start <= match.start() < end for start, end in spans) and not VERSION.search(line[:match.start()]):
        found.append(f"line {number}: {match[0]}")
  return found


SPREAD_NOTE = re.compile(r"<!-- spread (?P<spread>\d[\d.]*) ")  # A rendered table's nearest measured spread.
CELL_NUMBER = re.compile(r"(?P<bold>\*\*)?(?P<number>\d[\d,]*\.\d+)(?: ± (?P<std>\d[\d,]*\.\d+))?")


def unjustified_bold(page: str) -> list[str]:
  """'line N: number' for each bold result of a rendered table that is not apart from the column's other results
  by more than the spread: the larger of their two `±` (seed spreads), or else the table's `<!-- spread X -->`.

  Numbers are compared within a column, by their place in the cell ('0.436 / 0.336': first with first).
  """
  found = []
  for block in BLOCK.finditer(page):
    first_line = page.count("\n", 0, block.start("body")) + 1
    note = SPREAD_NOTE.search(block["body"])
    columns: dict[tuple[int, int], list[tuple[int, re.Match]]] = {}
    for offset, line in enumerate(block["body"].splitlines()):
      if not line.startswith("|") or set(line) <= set("|-: "):
        continue
      for column, cell in enumerate(line.strip().strip("|").split("|")):
        for place, match in enumerate(CELL_NUMBER.finditer(cell)):
          columns.setdefault((column, place), []).append((first_line + offset, match))
    for numbers in columns.values():
      for line, bold in numbers:
        if not bold["bold"]:
          continue
        for _, other in numbers:
          if other["bold"]:
            continue
          stds = [float(match["std"]) for match in (bold, other) if match["std"]]
          spread = max(stds) if stds else float(note["spread"]) if note else None
          difference = abs(float(bold["number"].replace(",", "")) - float(other["number"].replace(",", "")))
          if spread is None or difference <= spread:
            found.append(f"line {line}: {bold['number']} against {other['number']} "
                         f"({'no measured spread' if spread is None else f'spread {spread}'})")
            break
  return found


def value(file: str, key: str, root: pathlib.Path = REPO_ROOT) -> float:
  """The number at `key` of a results file; a missing file or key is an error naming both."""
  parts = key.split("/")
  if file.endswith(".jsonl"):
    node, parts = _logged_line(file, parts[0], root), parts[1:]
  else:
    node = json.loads((root / file).read_text())
  walked = []
  # Keys hold '/' themselves ('blp_transe/test/mrr'): at each level take the longest prefix that is a key.
  while parts:
    if isinstance(node, list) and parts[0].isdigit() and int(parts[0]) < len(node):
      node, parts = node[int(parts[0])], parts[1:]
      walked.append(str(len(walked)))
      continue
    for end in range(len(parts), 0, -1):
      candidate = "/".join(parts[:end])
      if isinstance(node, dict) and candidate in node:
        node, parts = node[candidate], parts[end:]
        walked.append(candidate)
        break
    else:
      raise KeyError(f"{file}: no key {key!r} (found {'/'.join(walked) or 'nothing'} of it).")
  if isinstance(node, bool) or not isinstance(node, (int, float)):
    raise KeyError(f"{file}: {key!r} is not a number.")
  return float(node)


def _logged_line(file: str, selector: str, root: pathlib.Path) -> dict:
  """The one line of a JSON-lines log whose fields match `selector` ('step=500' or 'evaluator=validation,step=1088')."""
  wanted = dict(field.split("=", 1) for field in selector.split(","))
  lines = [json.loads(line) for line in (root / file).read_text().splitlines() if line.strip()]
  chosen = [line for line in lines if all(str(line.get(name)) == text for name, text in wanted.items())]
  if len(chosen) != 1:
    raise KeyError(f"{file}: {len(chosen)} lines have {selector!r}; a key picks exactly one.")
  return chosen[0]


def render_template(text: str, root: pathlib.Path = REPO_ROOT) -> str:
  """The template with each placeholder replaced by its formatted value (mean ± std with '±')."""

  def replace(match: re.Match) -> str:
    terms = TERM_SEPARATOR.split(f"{match['file']}:{match['key']}")
    spec = match["format"].strip()
    scale = float(match["scale"]) if match["scale"] else 1.0
    scaled = lambda number: number * scale if match["op"] == "*" else number / scale
    if match["spread"]:
      if len(terms) > 1:
        raise ValueError(f"{match[0]}: '±' takes one key, not an expression.")
      file, key = (part.strip() for part in terms[0].split(":", 1))
      return f"{format(scaled(value(file, key, root)), spec)} ± {format(scaled(value(file, f'{key}_std', root)), spec)}"
    return format(scaled(_evaluate(terms, root)), spec)

  return PLACEHOLDER.sub(replace, text)


def _evaluate(terms: list[str], root: pathlib.Path) -> float:
  """'file: key' terms and the operators between them ([term, op, term, ...]), left to right."""
  operations = {"-": float.__sub__, "+": float.__add__, "/": float.__truediv__}
  file, key = (part.strip() for part in terms[0].split(":", 1))
  result = value(file, key, root)
  for operator, term in zip(terms[1::2], terms[2::2]):
    file, key = (part.strip() for part in term.split(":", 1))
    result = operations[operator](result, value(file, key, root))
  return result


def render_prose(text: str, root: pathlib.Path = REPO_ROOT) -> str:
  """The text with each keyed number rendered anew from the key in the comment after it (code is left as it is)."""
  render = lambda match: render_template("{{" + match["placeholder"] + "}}", root) + f"<!-- {match['placeholder']} -->"
  pieces = re.split(r"(```.*?```|`[^`\n]*`)", text, flags=re.DOTALL)
  return "".join(piece if index % 2 else KEYED_NUMBER.sub(render, piece) for index, piece in enumerate(pieces))


def render_page(page: str, root: pathlib.Path = REPO_ROOT) -> str:
  """The page with every rendered part rendered anew from its template, and every keyed number from its key."""

  def replace(match: re.Match) -> str:
    if match["template"].endswith(".json"):  # Compile reports: one row each (`tpu_table`), whatever reports there are.
      body = "\n" + tpu_table.table(sorted(root.glob(match["template"]))) + "\n\n"
    else:
      body = render_template((root / match["template"]).read_text(), root)
    return match.group(1) + body + match["end"]

  rendered = BLOCK.sub(replace, page)
  # Prose outside the rendered parts (whose numbers are rendered from their templates).
  pieces = re.split(r"(<!-- rendered from .*?<!-- end of [^>]*-->)", rendered, flags=re.DOTALL)
  return "".join(piece if index % 2 else render_prose(piece, root) for index, piece in enumerate(pieces))


def pages(root: pathlib.Path = REPO_ROOT) -> list[pathlib.Path]:
  return sorted({path for pattern in PAGES for path in root.glob(pattern)})


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a rendered part differs")
  parser.add_argument("--unkeyed", metavar="PAGE", help="list the numbers of PAGE's prose that carry no key or source")
  args = parser.parse_args(argv)
  if args.unkeyed:
    print("\n".join(unkeyed_numbers((REPO_ROOT / args.unkeyed).read_text())))
    return 0
  stale = []
  for path in pages():
    text = path.read_text()
    rendered = render_page(text)
    if rendered != text:
      stale.append(str(path.relative_to(REPO_ROOT)))
      if not args.check:
        path.write_text(rendered)
  if args.check and stale:
    print("Rendered results differ from their templates in: " + ", ".join(stale) + " (python tools/render_docs.py)")
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
