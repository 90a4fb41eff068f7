"""Writes the entity vectors of every run of a trained workdir: DIR/<model>/embeddings.npy and entity_ids.txt.

  python tools/export_embeddings.py --workdir=workdir/default

Loads each run directory (`docent_jax.load`: the reported params, the best checkpoint where kept, onto whatever
devices this machine has) and writes its `entities()`; nothing is trained and no data is read. Runs without an
entity set (e.g. a pair classifier) are skipped. WORKDIR may be a gs:// path.
"""
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import docent_jax  # pylint: disable=g-import-not-at-top
from docent_jax import outputs  # pylint: disable=g-import-not-at-top
from docent_jax import run_dir as run_dirs  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  flags.DEFINE_string("workdir", None, "A trained workdir (its run directories are exported).")
  flags.mark_flags_as_required(["workdir"])


def main(argv: list[str]) -> None:
  del argv
  runs = run_dirs.loadable_runs(run_dirs.Workdir(FLAGS.workdir))
  if not runs:
    raise app.UsageError(f"{FLAGS.workdir} holds no trained run directory.")
  for run in runs:
    try:
      entity_ids, embeddings = docent_jax.load(run).entities()
    except (TypeError, ValueError) as error:
      logging.info("Skipping %s: %s", run.name, error)
      continue
    with outputs.atomic_writer(run.exported_vectors_file, "wb") as file:
      np.save(file, embeddings)
    outputs.write_atomically(run.exported_ids_file, "\n".join(entity_ids) + "\n")
    logging.info("Wrote %s embeddings of shape %s to %s.", run.name, embeddings.shape, run)


if __name__ == "__main__":
  define_flags()
  app.run(main)
