"""The results rendered into README.md and docs/ (tools/render_docs.py) are their results files' values by key:
the committed pages equal a fresh render, and a template whose key is swapped renders another page."""
import pathlib
import shutil
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tools"))
import render_docs  # pylint: disable=g-import-not-at-top,g-bad-import-order


def test_every_rendered_part_of_the_pages_equals_its_render():
  rendered = [path for path in render_docs.pages() if render_docs.BLOCK.search(path.read_text())]
  assert {REPO_ROOT / "README.md", REPO_ROOT / "docs" / "cloud_tpu.md"} <= set(rendered)
  for path in rendered:
    assert render_docs.render_page(path.read_text()) == path.read_text(), f"{path}: python tools/render_docs.py"
  assert render_docs.main(["--check"]) == 0


def test_a_swapped_key_renders_another_page(tmp_path):
  shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs")
  shutil.copytree(REPO_ROOT / "tools" / "results", tmp_path / "tools" / "results")
  template = tmp_path / "docs" / "templates" / "readme_blp.md"
  text = template.read_text()
  mean, baseline = "blp_transe@seeds/test/mrr", "be_bow@seeds/test/mrr"
  assert mean in text and baseline in text
  template.write_text(text.replace(mean, "SWAP").replace(baseline, mean).replace("SWAP", baseline))
  readme = (REPO_ROOT / "README.md").read_text()
  assert render_docs.render_page(readme, tmp_path) != readme


def test_placeholders_take_nested_keys_list_items_and_spreads(tmp_path):
  (tmp_path / "r.json").write_text('{"results": {"m/test/mrr": 0.41234, "m/test/mrr_std": 0.0161}, '
                                   '"points": [{"mrr": 0.2}, {"mrr": 0.3}]}')
  assert render_docs.render_template("{{r.json: results/m/test/mrr | .3f ±}} and {{r.json: points/1/mrr | .2f}} "
                                     "and {{r.json: points/1/mrr | .0f *1000}}",
                                     tmp_path) == "0.412 ± 0.016 and 0.30 and 300"
  with pytest.raises(KeyError, match=r"r.json: no key 'results/m/test/map' \(found results of it\)"):
    render_docs.render_template("{{r.json: results/m/test/map | .3f}}", tmp_path)
  with pytest.raises(KeyError, match=r"r.json: 'points' is not a number"):
    render_docs.render_template("{{r.json: points | .3f}}", tmp_path)


def test_a_logs_key_picks_its_one_line(tmp_path):
  (tmp_path / "log.jsonl").write_text('{"evaluator": "validation", "step": 500, "metrics": {"mrr": 0.11}}\n'
                                      '{"evaluator": "classification", "step": 500, "metrics": {"mrr": 0.5}}\n'
                                      '{"evaluator": "validation", "step": 1000, "metrics": {"mrr": 0.14}}\n')
  assert render_docs.render_template("{{log.jsonl: step=1000/metrics/mrr | .2f}}, "
                                     "{{log.jsonl: evaluator=validation,step=500/metrics/mrr | .2f}}",
                                     tmp_path) == "0.14, 0.11"
  with pytest.raises(KeyError, match=r"log.jsonl: 2 lines have 'step=500'; a key picks exactly one"):
    render_docs.render_template("{{log.jsonl: step=500/metrics/mrr | .2f}}", tmp_path)


def test_prose_numbers_are_rendered_from_the_key_after_them(tmp_path):
  (tmp_path / "r.json").write_text('{"a": {"mrr": 0.4123, "hits": 0.25}, "b": {"mrr": 0.2}, "fraction": 0.039}')
  page = ("MRR 0.000<!-- r.json: a/mrr | .3f --> against 0.2<!-- r.json: b/mrr | .1f -->, a gain of "
          "0.21<!-- r.json: a/mrr - r.json: b/mrr | .2f -->, 1.0<!-- r.json: a/hits | .2f -->-9.9<!-- r.json: a/mrr | .1f -->"
          " over 3.9<!-- r.json: fraction | .1f *100 -->% of them; 81.5<!-- paper: BLP, Table 4 --> on Python 3.11.")
  rendered = render_docs.render_page(page, tmp_path)
  assert rendered == page.replace("0.000<", "0.412<").replace("1.0<", "0.25<").replace("9.9<", "0.4<")
  assert render_docs.unkeyed_numbers(rendered) == []
  example = "`0.1<!-- r.json: a/mrr | .3f -->`\n```\n0.2<!-- FILE.json: KEY | .3f -->\n```\n"
  assert render_docs.render_page(example, tmp_path) == example
  assert render_docs.unkeyed_numbers("MRR 0.412 and 1.8x, `lr=0.1`\n| 0.5 |\n```\n0.7\n```\n") == [
      "line 1: 0.412", "line 1: 1.8", "line 2: 0.5"]


def test_a_bold_result_must_stand_apart_by_more_than_the_spread():
  def table(rows: str, note: str = "") -> str:
    return (f"<!-- rendered from docs/templates/t.md by tools/render_docs.py -->\n{note}\n| m | MRR |\n|---|---|\n"
            f"{rows}\n<!-- end of docs/templates/t.md -->\n")
  assert render_docs.unjustified_bold(table("| a | **0.40 ± 0.01** |\n| b | 0.30 ± 0.02 |")) == []
  assert render_docs.unjustified_bold(table("| a | **0.40 ± 0.01** |\n| b | 0.39 ± 0.02 |")) == [
      "line 5: 0.40 against 0.39 (spread 0.02)"]
  assert render_docs.unjustified_bold(table("| a | **0.40** |\n| b | 0.30 |")) == [
      "line 5: 0.40 against 0.30 (no measured spread)"]
  assert render_docs.unjustified_bold(table("| a | **0.40** |\n| b | 0.30 |", "<!-- spread 0.05 (seeds) -->")) == []
  assert render_docs.unjustified_bold(table("| a | **0.40** / 0.2 |\n| b | 0.30 / **0.9** |",
                                            "<!-- spread 0.05 (seeds) -->")) == []


def test_every_prose_number_carries_its_key_or_source_and_no_bold_rests_on_noise():
  for path in render_docs.pages():
    text = path.read_text()
    assert render_docs.unkeyed_numbers(text) == [], (path.name, "python tools/render_docs.py --unkeyed PAGE")
    assert render_docs.unjustified_bold(text) == [], path.name
