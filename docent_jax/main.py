"""Entry point: python -m docent_jax.main --config=configs/X.py[:arg] --workdir=DIR [--config.key=value ...]."""
from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags

from docent_jax import parallel
from docent_jax import train

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config (a configs/*.py file, optionally :arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, summaries and results.json.")
flags.DEFINE_enum("mode", "train", ["train", "evaluate"],
                  "train: train (or resume) and evaluate; evaluate: evaluate the latest checkpoints only.")
flags.DEFINE_bool("multihost", False, "Join a multi-process runtime detected from the environment (TPU pods).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0, to join a runtime explicitly.")
flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator_address).")
flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator_address).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if FLAGS.coordinator_address or FLAGS.multihost:
    parallel.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  logging.info("JAX devices: %s", jax.devices())
  run = train.train_and_evaluate if FLAGS.mode == "train" else train.evaluate
  run(FLAGS.config, FLAGS.workdir)


if __name__ == "__main__":
  app.run(main)
