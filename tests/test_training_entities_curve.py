"""tools/training_entities_curve.py: the same epochs at every fraction, and the plot of its points."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import training_entities_curve as curve  # pylint: disable=g-import-not-at-top


def test_steps_scale_with_the_triples_and_never_reach_zero():
  assert curve.scaled_steps(300, 3618, 3618) == 300
  assert curve.scaled_steps(300, 647, 3618) == 54  # 53.6 steps: the subset's epochs are not cut short.
  assert curve.scaled_steps(30, 1, 3618) == 1


def test_the_points_are_written_as_a_png(tmp_path):
  points = [{"training_entities": n, "test_mrr": {"blp_transe/test/mrr": mrr, "be_bow/test/mrr": mrr / 2}}
            for n, mrr in ((960, 0.28), (2400, 0.42))]
  curve.plot(points, "title", tmp_path / "curve.png")
  assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")


def test_a_reference_point_is_parsed_and_drawn_and_a_bad_one_named(tmp_path):
  reference = curve.parse_reference("BLP-TransE (paper, 40 epochs)=32755:0.285")
  assert reference == ("BLP-TransE (paper, 40 epochs)", 32755.0, 0.285)
  points = [{"training_entities": 13102, "test_mrr": {"blp_transe/test/mrr": 0.077}}]
  curve.plot(points, "title", tmp_path / "curve.png", [reference])
  assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
  with pytest.raises(ValueError, match="expected LABEL=ENTITIES:MRR"):
    curve.parse_reference("paper=0.285")
