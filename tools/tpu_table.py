"""The Markdown table of `python -m docent_jax.compile_for_tpu` reports (docs/cloud_tpu.md), one row per report.

  python tools/tpu_table.py docs/results/cloud_tpu/*.json
"""
import json
import pathlib
import sys

GIB = 1 << 30


def _seconds(value: float | None) -> str:
  if value is None:
    return "-"
  if value >= 3600:
    return f"{value / 3600:.1f} h"
  return f"{value / 60:.1f} min" if value >= 60 else f"{value:.3g} s"


def row(path: pathlib.Path) -> str:
  report = json.loads(path.read_text())
  step = report["functions"]["train_step"]
  evaluation = " / ".join(
      f"{report['functions'][name]['hbm_bytes_per_device'] / GIB:.2f}" if name in report["functions"] else "-"
      for name in ("encode", "search_top_k", "block_ranking"))
  gathered = sum(c["count"] for c in step["collectives"] if c["op"] == "all-gather")
  reduced = sum(c["count"] for c in step["collectives"] if c["op"] in ("all-reduce", "reduce-scatter"))
  fits = "yes" if step["fits"] else f"no (largest: {step.get('largest_fitting_global_batch')})"
  cells = [path.stem.rsplit("_v", 1)[0], f"{report['topology']}" + (f" x {report['num_slices']}" if report["num_slices"] > 1
                                                               else ""),
           str(report["hosts"]), "x".join(str(v) for v in report["mesh"].values()),
           str(step["global_batch_size"]),
           # Reports from before `model.matmul_dtype` multiplied in float32.
           report.get("matmul_dtype", "float32"), f"{step['hbm_bytes_per_device'] / GIB:.2f} / "
           f"{step['hbm_capacity_bytes'] // GIB}", fits,
           "-" if step["flops"] is None else f"{step['flops'] / 1e9:.1f}",
           _seconds(step["step_seconds_lower_bound"]), f"{report['train_steps']:,}",
           _seconds(step.get("projected_seconds")), f"{gathered} / {reduced}",
           evaluation,
           f"[json](results/cloud_tpu/{path.name})"]
  return "| " + " | ".join(cells) + " |"


def table(paths: list[pathlib.Path]) -> str:
  """The Markdown table of the reports, one row each in the order given."""
  header = ("| report | topology | hosts | mesh (data x model) | batch | matmuls | train step GiB per chip / HBM | fits | "
            "GFLOP per chip and step | step (estimate) | steps | steps x estimate | all-gathers / all-reduces | "
            "encode / search / ranking GiB per chip | report |")
  return "\n".join([header, "|" + "---|" * 15, *(row(path) for path in paths)])


def main(paths: list[str]) -> None:
  print(table(sorted(pathlib.Path(path) for path in paths)))


if __name__ == "__main__":
  main(sys.argv[1:])
