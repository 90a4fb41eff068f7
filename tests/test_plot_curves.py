"""tools/plot_curves.py: curves read from a run's TensorBoard events across restarts, tables and the PNG."""
import json
import pathlib
import subprocess
import sys

from clu import metric_writers
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import plot_curves  # pylint: disable=g-import-not-at-top,g-bad-import-order

TOOL = pathlib.Path(__file__).resolve().parent.parent / "tools" / "plot_curves.py"


def _write_run(directory: pathlib.Path, batch_size: int, sessions: list[dict[int, float]]) -> pathlib.Path:
  """A model directory as the trainer leaves it: config.json and one event file per session (a restart)."""
  directory.mkdir(parents=True)
  (directory / "config.json").write_text(json.dumps({"train": {"global_batch_size": batch_size}}))
  for session in sessions:
    writer = metric_writers.create_default_writer(str(directory))
    for step, value in session.items():
      writer.write_scalars(step, {"validation/mrr": value, "loss": 1.0 / step})
    writer.close()
  return directory


def test_a_restarted_run_keeps_the_last_value_of_each_step(tmp_path):
  # The first session evaluated step 300, then was killed; the restart from step 200 evaluated it again.
  run = _write_run(tmp_path / "run", 64, [{100: 0.1, 200: 0.2, 300: 0.25}, {300: 0.3, 400: 0.35}])
  curves = plot_curves.read_curves(plot_curves.epath.Path(run), ["validation/mrr"])
  points = curves["validation/mrr"]
  assert [(p.step, p.examples, p.value) for p in points] == [
      (100, 6_400, pytest.approx(0.1)), (200, 12_800, pytest.approx(0.2)), (300, 19_200, pytest.approx(0.3)),
      (400, 25_600, pytest.approx(0.35))]
  assert [p.wall_s for p in points] == sorted(p.wall_s for p in points)


def test_tables_name_the_first_step_at_a_reference(tmp_path):
  run = _write_run(tmp_path / "run", 32, [{1000: 0.1, 2000: 0.19, 3000: 0.21}])
  curves = {"BE-BOW": plot_curves.read_curves(plot_curves.epath.Path(run), ["validation/mrr"])}
  text = plot_curves.markdown_tables(curves, [plot_curves.parse_reference("validation/mrr,0.180,paper"),
                                              plot_curves.parse_reference("validation/mrr,0.5,far")])
  assert "| 2,000 | 64,000 |" in text and "0.1900" in text
  assert "BE-BOW: validation/mrr >= 0.18 (paper): step 2,000 (64,000 examples" in text
  assert "validation/mrr >= 0.5 (far): not reached (best 0.2100)" in text


@pytest.mark.parametrize("text, message", [("validation/mrr,high,paper", "not a number"), ("mrr,0.1", "METRIC")])
def test_bad_references_are_refused(text, message):
  with pytest.raises(ValueError, match=message):
    plot_curves.parse_reference(text)


def test_missing_metric_and_directory_are_named(tmp_path):
  run = _write_run(tmp_path / "run", 8, [{1: 0.5}])
  with pytest.raises(ValueError, match="no values of \\['test/f1'\\]"):
    plot_curves.read_curves(plot_curves.epath.Path(run), ["test/f1"])
  with pytest.raises(FileNotFoundError, match="config.json"):
    plot_curves.read_curves(plot_curves.epath.Path(tmp_path), ["validation/mrr"])


def test_the_tool_writes_a_png_and_prints_the_tables(tmp_path):
  first = _write_run(tmp_path / "a", 64, [{100: 0.1, 200: 0.2}])
  second = _write_run(tmp_path / "b", 256, [{25: 0.15, 50: 0.22}])
  output = tmp_path / "docs" / "curves.png"
  result = subprocess.run(
      [sys.executable, str(TOOL), f"--run=batch 64={first}", f"--run=batch 256={second}", "--metric=validation/mrr",
       "--reference=validation/mrr,0.18,paper", f"--output={output}"], capture_output=True, text=True, check=True)
  assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert "batch 256: validation/mrr >= 0.18 (paper): step 50 (12,800 examples" in result.stdout
  values = json.loads(output.with_suffix(".json").read_text())  # The plotted numbers, kept beside the picture.
  assert [(p["step"], p["examples"], p["value"]) for p in values["runs"]["batch 256"]["validation/mrr"]] == [
      (25, 6_400, pytest.approx(0.15)), (50, 12_800, pytest.approx(0.22))]
  assert values["references"] == [{"metric": "validation/mrr", "value": 0.18, "label": "paper",
                                   "first_step_reaching": {"batch 64": 200, "batch 256": 50}}]


def test_plots_against_wall_clock_and_refuses_unknown_axes(tmp_path):
  run = _write_run(tmp_path / "run", 8, [{1: 0.5, 2: 0.6}])
  curves = {"run": plot_curves.read_curves(plot_curves.epath.Path(run), ["validation/mrr"])}
  output = plot_curves.epath.Path(tmp_path / "curves.png")
  plot_curves.plot(curves, ["validation/mrr"], [], output, x_axes=("step", "examples", "wall_clock"))
  assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  with pytest.raises(ValueError, match="expected some of"):
    plot_curves.plot(curves, ["validation/mrr"], [], output, x_axes=("seconds",))
