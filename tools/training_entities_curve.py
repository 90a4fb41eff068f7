"""BLP's Fig. 2: test MRR against the number of entities seen in training, for every model of a BLP config.

  python tools/training_entities_curve.py --config=configs/default.py --fractions=0.4,0.6,0.8,1.0 \
      --workdir=workdir/training_entities --output=docs/results/blp_training_entities.json \
      --plot=docs/curves/blp_training_entities.png

Each fraction is one run of the config (`docent_jax.main`, its models and evaluators as they are) that trains on
the triples among that fraction of the training entities (`config.data.train_entity_fraction`). As the paper
trains every subset for the same number of epochs, `train.num_steps` and `optim.warmup_steps` are the config's
times the subset's share of the training triples. The validation and test triples and their candidate entities
are the same at every fraction. The JSON holds, per fraction, the subset's size, the steps, and every model's
`<model>/test/mrr` from its run's results.json; the PNG plots them against the training entities, beside the
`--reference` points (e.g. the paper's). `--plot_only` draws the PNG again from the JSON.
"""
import json
import math
import os
import pathlib
import subprocess
import sys
from typing import Sequence

from absl import app
from absl import flags
from etils import epath
import matplotlib

matplotlib.use("Agg")  # Files only: no display on a training host.
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # configs/, as docent_jax.main finds it.
from docent_jax import run_dir as run_dirs  # pylint: disable=g-import-not-at-top
from docent_jax.data.kg import graph as knowledge_graph  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
METRIC = "test/mrr"


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  config_flags.DEFINE_config_file("config", None, "A BLP config (configs/blp.py:..., configs/default.py).",
                                  lock_config=False)
  flags.DEFINE_list("fractions", ["0.4", "0.6", "0.8", "1.0"], "Fractions of the training entities, in (0, 1].")
  flags.DEFINE_string("workdir", None, "Each fraction's run goes to WORKDIR/fraction_<f>.")
  flags.DEFINE_string("output", None, "The JSON of the curve.")
  flags.DEFINE_string("plot", None, "The PNG of the curve.")
  flags.DEFINE_multi_string("reference", [], "LABEL=ENTITIES:MRR, a point drawn beside the curve (e.g. the paper's "
                            "MRR trained on every entity).")
  flags.DEFINE_bool("plot_only", False, "Plot the points of the existing --output JSON; train nothing.")
  flags.mark_flags_as_required(["config", "workdir", "output", "plot"])


def scaled_steps(steps: int, triples: int, all_triples: int) -> int:
  """`steps` at the share `triples / all_triples` of an epoch's data: the same number of epochs (at least 1 step)."""
  return max(1, math.ceil(steps * triples / all_triples))


def run_fraction(config_arg: str, overrides: dict[str, object], fraction: float, workdir: epath.Path,
                 num_steps: int, warmup_steps: int) -> dict[str, float]:
  """Trains and evaluates the config (with the command line's `--config.*` overrides) at one fraction in a fresh
  process; its results.json."""
  overrides = {**overrides, "data.train_entity_fraction": fraction, "train.num_steps": num_steps,
               "optim.warmup_steps": warmup_steps}
  command = [sys.executable, "-m", "docent_jax.main", f"--config={config_arg}", f"--workdir={workdir}",
             *[f"--config.{key}={value}" for key, value in overrides.items()]]
  subprocess.run(command, check=True, env=os.environ)
  return run_dirs.Workdir(workdir).read_results()


def parse_reference(text: str) -> tuple[str, float, float]:
  """(label, entities, MRR) of `LABEL=ENTITIES:MRR`."""
  label, _, point = text.rpartition("=")
  entities, _, mrr = point.partition(":")
  try:
    return label, float(entities), float(mrr)
  except ValueError:
    raise ValueError(f"--reference {text!r}: expected LABEL=ENTITIES:MRR, e.g. 'BLP-TransE (paper)=32755:0.285'.")


def plot(points: list[dict], title: str, path: epath.Path,
         references: Sequence[tuple[str, float, float]] = ()) -> None:
  models = sorted({key.removesuffix("/" + METRIC) for point in points for key in point["test_mrr"]})
  figure, axes = plt.subplots(figsize=(6, 4))
  for model in models:
    axes.plot([p["training_entities"] for p in points], [p["test_mrr"][f"{model}/{METRIC}"] for p in points],
              marker="o", label=model)
  for label, entities, mrr in references:
    axes.plot([entities], [mrr], marker="x", linestyle="none", markersize=9, label=label)
  axes.set_xlabel("training entities")
  axes.set_ylabel("test MRR")
  axes.set_title(title)
  axes.grid(alpha=0.3)
  axes.legend()
  figure.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  figure.savefig(os.fspath(path), dpi=120)


def main(argv: list[str]) -> None:
  del argv
  references = [parse_reference(text) for text in FLAGS.reference]
  output = epath.Path(FLAGS.output)
  if FLAGS.plot_only:
    curve = json.loads(output.read_text())
    plot(curve["points"], f"{curve['dataset']}: test MRR against training entities", epath.Path(FLAGS.plot),
         references)
    return
  config = FLAGS.config
  config_arg = config_flags.get_config_filename(FLAGS["config"])
  overrides = config_flags.get_override_values(FLAGS["config"])
  graph = knowledge_graph.load_knowledge_graph(config.data.dataset, data_dir=config.data.tfds_data_dir,
                                               manual_dir=config.data.manual_dir, setting=config.data.setting)
  all_triples = len(graph.triples["train"])
  points = []
  for fraction in sorted(float(f) for f in FLAGS.fractions):
    triples = knowledge_graph.triples_among_training_entities(graph, fraction, config.seed)
    steps = scaled_steps(config.train.num_steps, len(triples), all_triples)
    warmup = scaled_steps(config.optim.warmup_steps, len(triples), all_triples) if config.optim.warmup_steps else 0
    workdir = epath.Path(FLAGS.workdir) / f"fraction_{fraction:g}"
    results = run_fraction(config_arg, overrides, fraction, workdir, steps, warmup)
    points.append({"fraction": fraction, "training_entities": round(fraction * len(graph.entity_split["train"])),
                   "training_triples": len(triples), "num_steps": steps, "warmup_steps": warmup,
                   "test_mrr": {key: value for key, value in results.items() if key.endswith("/" + METRIC)}})
    print(json.dumps(points[-1]), flush=True)
  output.parent.mkdir(parents=True, exist_ok=True)
  output.write_text(json.dumps({"config": config_arg, "dataset": graph.name, "points": points}, indent=1) + "\n")
  plot(points, f"{graph.name}: test MRR against training entities", epath.Path(FLAGS.plot), references)


if __name__ == "__main__":
  define_flags()
  app.run(main)
