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

A number that is not a result (a paper's, a budget) is written as text and says where it comes from. The table of
TPU compile reports is rendered whole, a row per report (`tpu_table.py`):

  <!-- rendered from docs/results/cloud_tpu/*.json by tools/render_docs.py -->

  python tools/render_docs.py            # rewrites the rendered parts
  python tools/render_docs.py --check    # exit 1 naming each page whose rendered part differs
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
PLACEHOLDER = re.compile(r"\{\{\s*(?P<file>[\w./-]+\.json)\s*:\s*(?P<key>[^|}]+?)\s*\|\s*(?P<format>[^}±*/\s]+)"
                         r"\s*(?:(?P<op>[*/])\s*(?P<scale>[\d.e+]+))?\s*(?P<spread>±)?\s*\}\}")


def value(file: str, key: str, root: pathlib.Path = REPO_ROOT) -> float:
  """The number at `key` of a results file; a missing file or key is an error naming both."""
  tree = json.loads((root / file).read_text())
  node, walked = tree, []
  # Keys hold '/' themselves ('blp_transe/test/mrr'): at each level take the longest prefix that is a key.
  parts = key.split("/")
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


def render_template(text: str, root: pathlib.Path = REPO_ROOT) -> str:
  """The template with each placeholder replaced by its formatted value (mean ± std with '±')."""

  def replace(match: re.Match) -> str:
    file, key, spec = match["file"], match["key"].strip(), match["format"].strip()
    scale = float(match["scale"]) if match["scale"] else 1.0
    scaled = lambda number: number * scale if match["op"] == "*" else number / scale
    rendered = format(scaled(value(file, key, root)), spec)
    if match["spread"]:
      rendered += " ± " + format(scaled(value(file, f"{key}_std", root)), spec)
    return rendered

  return PLACEHOLDER.sub(replace, text)


def render_page(page: str, root: pathlib.Path = REPO_ROOT) -> str:
  """The page with every rendered part rendered anew from its template."""

  def replace(match: re.Match) -> str:
    if match["template"].endswith(".json"):  # Compile reports: one row each (`tpu_table`), whatever reports there are.
      body = "\n" + tpu_table.table(sorted(root.glob(match["template"]))) + "\n\n"
    else:
      body = render_template((root / match["template"]).read_text(), root)
    return match.group(1) + body + match["end"]

  return BLOCK.sub(replace, page)


def pages(root: pathlib.Path = REPO_ROOT) -> list[pathlib.Path]:
  return sorted({path for pattern in PAGES for path in root.glob(pattern)})


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a rendered part differs")
  args = parser.parse_args(argv)
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
