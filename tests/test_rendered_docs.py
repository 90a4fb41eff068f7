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
