"""Every results table of docs/ links its results file in its section (its values are checked by key in
tests/test_rendered_docs.py)."""
import json
import pathlib
import re
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


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


def test_a_table_is_found_with_its_section():
  tables = _tables_with_their_section("# a\nsee (results/x.json)\n\n| m | v |\n|---|---|\n| a | 0.5 |\n\n"
                                      "# b\n```\n# not a heading\n```\n| m | v |\n|---|---|\n| a | 0.5 |\n\n| n |\n|---|\n| 3 |\n")
  assert [bool(DOCS_RESULTS_LINK.search(prose + table)) for prose, table in tables] == [True, False]


def test_every_docs_table_names_its_results_file():
  for page in sorted((REPO_ROOT / "docs").glob("*.md")):
    for prose, table in _tables_with_their_section(page.read_text()):
      assert DOCS_RESULTS_LINK.search(prose + table), (page.name, table.splitlines()[2][:120])


def test_a_compile_report_row_says_its_matmul_dtype_and_older_reports_read_float32(tmp_path):
  sys.path.insert(0, str(REPO_ROOT / "tools"))
  import tpu_table  # pylint: disable=g-import-not-at-top
  step = {"collectives": [], "fits": True, "global_batch_size": 32, "hbm_bytes_per_device": 1 << 30,
          "hbm_capacity_bytes": 16 << 30, "flops": 1e9, "step_seconds_lower_bound": 0.01}
  report = {"topology": "v5e:2x4", "num_slices": 1, "hosts": 2, "mesh": {"data": 8, "model": 1}, "train_steps": 10,
            "functions": {"train_step": step}}
  (tmp_path / "old_v5e_2x4.json").write_text(json.dumps(report))
  (tmp_path / "new_v5e_2x4.json").write_text(json.dumps({**report, "matmul_dtype": "bfloat16"}))
  rows = tpu_table.table([tmp_path / "old_v5e_2x4.json", tmp_path / "new_v5e_2x4.json"]).splitlines()
  assert rows[0].split(" | ")[5] == "matmuls"
  assert [row.split(" | ")[5] for row in rows[2:]] == ["float32", "bfloat16"]
