"""Learning curves from runs' TensorBoard events: one PNG, every plotted value as Markdown tables, and the same
values as a JSON file beside the PNG (its name, `.json`), so that a curve's numbers outlive the runs' events.

  python tools/plot_curves.py --output docs/curves/wn18rr_bebow.png \
      --run "BE-BOW=runs/curves/wn18rr_bebow/blp_transe" --metric validation/mrr \
      --reference "validation/mrr,0.180,BE-BOW in BLP (test MRR)"

Each --run is LABEL=DIR, a model's directory of a workdir (it holds config.json and the events); each
--metric gets a row of plots, one per --x: against training steps, examples seen (steps x the run's
`train.global_batch_size`) or training wall-clock (`wall_clock`, in minutes; compare runs made on one machine). A --reference is METRIC,VALUE,LABEL: a horizontal line, and the first
evaluated step of each run at or above it. A run resumed after a stop has several event files; a step
logged twice keeps its last value, and the wall-clock column adds up each file's span, so the gaps
between runs do not count. DIR may be a gs:// path.
"""
import dataclasses
import json

from absl import app
from absl import flags
from etils import epath
import matplotlib

matplotlib.use("Agg")  # Files only: no display on a training host.
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from docent_jax import outputs  # pylint: disable=g-import-not-at-top
from docent_jax import run_dir as run_dirs  # pylint: disable=g-import-not-at-top

# --x choice -> (its label, its value of a point).
X_AXES = {
    "step": ("training steps", lambda point: point.step),
    "examples": ("examples seen", lambda point: point.examples),
    "wall_clock": ("training wall-clock (min)", lambda point: point.wall_s / 60),
}

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  flags.DEFINE_multi_string("run", None, "LABEL=DIR: a model directory of a workdir.")
  flags.DEFINE_multi_string("metric", None, "A scalar tag, e.g. validation/mrr; one row of plots each.")
  flags.DEFINE_multi_string("reference", [], "METRIC,VALUE,LABEL: a horizontal line, e.g. a paper's number.")
  flags.DEFINE_string("output", None, "The PNG to write.")
  flags.DEFINE_string("title", "", "A title above the plots.")
  flags.DEFINE_list("x", ["step", "examples"], f"What each row's plots are against, of {list(X_AXES)}.")
  flags.mark_flags_as_required(["run", "metric", "output"])


@dataclasses.dataclass
class Point:
  step: int
  examples: int
  wall_s: float  # Training wall-clock time up to this value, summed over restarts.
  value: float


@dataclasses.dataclass(frozen=True)
class Reference:
  metric: str
  value: float
  label: str


def parse_reference(text: str) -> Reference:
  parts = text.split(",", 2)
  if len(parts) != 3:
    raise ValueError(f"--reference {text!r}: expected METRIC,VALUE,LABEL.")
  try:
    value = float(parts[1])
  except ValueError:
    raise ValueError(f"--reference {text!r}: VALUE {parts[1]!r} is not a number.") from None
  return Reference(parts[0], value, parts[2])


def parse_run(text: str) -> tuple[str, epath.Path]:
  label, separator, directory = text.partition("=")
  if not separator or not label or not directory:
    raise ValueError(f"--run {text!r}: expected LABEL=DIR.")
  return label, epath.Path(directory)


def read_curves(run_dir: epath.Path, metrics: list[str]) -> dict[str, list[Point]]:
  """Each metric's values by step from the run's event files, taken in the order they were written."""
  batch_size = run_dirs.RunDir(run_dir).recorded_config().train.global_batch_size
  event_files = list(run_dir.glob("events.out.tfevents.*"))
  if not event_files:
    raise FileNotFoundError(f"{run_dir}: no TensorBoard event files.")
  sessions = []  # Each file's events; a restart writes a new file.
  for event_file in event_files:
    events = [tf.compat.v1.Event.FromString(record.numpy()) for record in tf.data.TFRecordDataset(str(event_file))]
    if events:
      sessions.append(events)
  values: dict[str, dict[int, tuple[float, float]]] = {metric: {} for metric in metrics}
  earlier_sessions_s = 0.0
  for events in sorted(sessions, key=lambda events: events[-1].wall_time):  # The first is whole seconds.
    start = events[0].wall_time
    for event in events:
      for value in event.summary.value:
        if value.tag in values:
          scalar = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
          values[value.tag][event.step] = (earlier_sessions_s + event.wall_time - start, scalar)
    earlier_sessions_s += events[-1].wall_time - start
  missing = [metric for metric, by_step in values.items() if not by_step]
  if missing:
    raise ValueError(f"{run_dir}: no values of {missing} in its event files.")
  return {metric: [Point(step, step * batch_size, wall_s, value) for step, (wall_s, value) in sorted(by_step.items())]
          for metric, by_step in values.items()}


def first_reaching(points: list[Point], value: float) -> Point | None:
  return next((point for point in points if point.value >= value), None)


def markdown_tables(curves: dict[str, dict[str, list[Point]]], references: list[Reference]) -> str:
  """One table per run (step, examples, wall-clock, each metric), then where each reference was first reached."""
  lines = []
  for label, by_metric in curves.items():
    metrics = list(by_metric)
    rows: dict[int, dict] = {}
    for metric, points in by_metric.items():
      for point in points:
        row = rows.setdefault(point.step, {"examples": point.examples, "wall_s": point.wall_s})
        row[metric] = point.value
    lines += [f"{label}:", "", "| step | examples | wall-clock | " + " | ".join(metrics) + " |",
              "|---" * (3 + len(metrics)) + "|"]
    for step, row in sorted(rows.items()):
      cells = [f"{row[metric]:.4f}" if metric in row else "" for metric in metrics]
      lines.append(f"| {step:,} | {row['examples']:,} | {row['wall_s'] / 60:.1f} min | " + " | ".join(cells) + " |")
    lines.append("")
  for reference in references:
    for label, by_metric in curves.items():
      point = first_reaching(by_metric[reference.metric], reference.value)
      reached = (f"step {point.step:,} ({point.examples:,} examples, {point.wall_s / 60:.1f} min)" if point
                 else f"not reached (best {max(p.value for p in by_metric[reference.metric]):.4f})")
      lines.append(f"{label}: {reference.metric} >= {reference.value} ({reference.label}): {reached}")
  return "\n".join(lines)


def curves_record(curves: dict[str, dict[str, list[Point]]], references: list[Reference]) -> dict:
  """Every plotted value, per run label and metric, and the first step of each run at each reference."""
  def first_step(points: list[Point], value: float) -> int | None:
    point = first_reaching(points, value)
    return point.step if point else None

  return {
      "runs": {label: {metric: [dataclasses.asdict(point) for point in points] for metric, points in by_metric.items()}
               for label, by_metric in curves.items()},
      "references": [{**dataclasses.asdict(reference),
                      "first_step_reaching": {label: first_step(by_metric[reference.metric], reference.value)
                                              for label, by_metric in curves.items()}}
                     for reference in references]}


def plot(curves: dict[str, dict[str, list[Point]]], metrics: list[str], references: list[Reference],
         output: epath.Path, title: str = "", x_axes: tuple[str, ...] = ("step", "examples")) -> None:
  unknown = [x for x in x_axes if x not in X_AXES]
  if unknown or not x_axes:
    raise ValueError(f"--x {list(x_axes)}: expected some of {list(X_AXES)}.")
  # One legend under all plots: inside a plot it hides the curves once there are several runs.
  size = (5.5 * len(x_axes), 3.6 * len(metrics) + 0.25 * len(curves))
  figure, axes = plt.subplots(len(metrics), len(x_axes), figsize=size, squeeze=False, layout="constrained")
  for row, metric in enumerate(metrics):
    for column, x_name in enumerate(x_axes):
      ax = axes[row][column]
      x_label, x_of = X_AXES[x_name]
      for label, by_metric in curves.items():
        points = by_metric[metric]
        ax.plot([x_of(p) for p in points], [p.value for p in points], marker=".", label=label)
      for reference in references:
        if reference.metric == metric:
          ax.axhline(reference.value, linestyle="--", color="gray")
          ax.annotate(reference.label, (0.01, reference.value), xycoords=("axes fraction", "data"),
                      textcoords="offset points", xytext=(0, 3), fontsize=8, color="dimgray")
      ax.set_xlabel(x_label)
      ax.set_ylabel(metric)
      ax.grid(alpha=0.3)
  handles, labels = axes[0][0].get_legend_handles_labels()
  figure.legend(handles, labels, loc="outside lower center", fontsize=8)
  if title:
    figure.suptitle(title)
  with outputs.atomic_writer(output, "wb") as file:
    figure.savefig(file, format="png", dpi=110)
  plt.close(figure)


def main(argv: list[str]) -> None:
  del argv
  references = [parse_reference(text) for text in FLAGS.reference]
  unknown = sorted({reference.metric for reference in references} - set(FLAGS.metric))
  if unknown:
    raise ValueError(f"--reference names metrics {unknown} that no --metric plots.")
  runs = [parse_run(text) for text in FLAGS.run]
  curves = {label: read_curves(directory, FLAGS.metric) for label, directory in runs}
  output = epath.Path(FLAGS.output)
  plot(curves, FLAGS.metric, references, output, FLAGS.title, tuple(FLAGS.x))
  values = output.with_suffix(".json")
  with outputs.atomic_writer(values) as file:
    json.dump(curves_record(curves, references), file, indent=1)
  print(markdown_tables(curves, references))
  print(f"\nWrote {output} and {values}.")


if __name__ == "__main__":
  define_flags()
  app.run(main)
