"""Entry point: python -m docent_jax.main --config=configs/X.py[:arg] --workdir=DIR [--config.key=value ...]."""
import logging as python_logging
import os

# TensorFlow (the TFDS and CLU writers' backend) logs its C++ start-up at INFO; keep it for --library_logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags
import tensorflow_datasets as tfds

from docent_jax import parallel
from docent_jax import train

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config (a configs/*.py file, optionally :arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Directory (local or gs://) for checkpoints, summaries and results.json.")
flags.DEFINE_enum("mode", "train", ["train", "evaluate"],
                  "train: train (or resume) and evaluate; evaluate: evaluate the checkpoints only, training nothing.")
flags.DEFINE_bool("multihost", False, "Join a multi-process runtime detected from the environment (TPU pods).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0, to join a runtime explicitly.")
flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator_address).")
flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator_address).")
flags.DEFINE_bool("library_logs", False, "Also show the INFO logs of libraries (Orbax, JAX, TFDS, grain, ...); "
                  "by default the console shows this project's INFO logs and everyone's warnings.")
flags.mark_flags_as_required(["config", "workdir"])

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class ProjectInfoFilter(python_logging.Filter):
  """Passes warnings and errors from anywhere, INFO and below only from this package's own modules."""

  def filter(self, record: python_logging.LogRecord) -> bool:
    return record.levelno >= python_logging.WARNING or record.pathname.startswith(_PACKAGE_DIR)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not FLAGS.library_logs:
    logging.get_absl_handler().addFilter(ProjectInfoFilter())
    tfds.disable_progress_bar()
  if FLAGS.coordinator_address or FLAGS.multihost:
    parallel.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  logging.info("Config %s on %d %s device(s); workdir %s.", FLAGS.config.name, jax.device_count(),
               jax.devices()[0].platform, FLAGS.workdir)
  run = train.train_and_evaluate if FLAGS.mode == "train" else train.evaluate
  run(FLAGS.config, FLAGS.workdir)


if __name__ == "__main__":
  app.run(main)
