"""Entry point: python -m docent_jax.main --config=configs/X.py[:arg] --workdir=DIR [--config.key=value ...]."""
import logging as python_logging
import os
import sys
import threading

# TensorFlow (the TFDS and CLU writers' backend) logs its C++ start-up at INFO; keep it for --library_logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags
import tensorflow_datasets as tfds

from docent_jax import checkpoints
from docent_jax import config_schema
from docent_jax import cpu_flags
from docent_jax import host_memory
from docent_jax import parallel
from docent_jax import train

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config (a configs/*.py file, optionally :arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Directory (local or gs://) for checkpoints, summaries and results.json.")
flags.DEFINE_enum("mode", "train", ["train", "evaluate"],
                  "train: train (or resume) and evaluate; evaluate: evaluate the checkpoints only, training nothing.")
flags.DEFINE_bool("force", False, "--mode=evaluate: evaluate a run that never finished, or whose best params are "
                  "missing, on the params it has; its results carry <model>/forced/step.")
flags.DEFINE_bool("resume_preempted", False, "The job that trained in this workdir is gone with its hosts (a "
                  "preempted TPU VM): take over the training locks it left on other hosts.")
flags.DEFINE_list("runs", [], "Only these runs of the config (e.g. supcon,supcon_trained: a model and the stage it "
                  "starts; their seeds come with them); default: every run.")
flags.DEFINE_bool("multihost", False, "Join a multi-process runtime detected from the environment (TPU pods).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0, to join a runtime explicitly.")
flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator_address).")
flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator_address).")
flags.DEFINE_bool("library_logs", False, "Also show the INFO logs of libraries (Orbax, JAX, TFDS, grain, ...); "
                  "by default the console shows this project's INFO logs and everyone's warnings.")
flags.mark_flags_as_required(["config", "workdir"])

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class ProjectInfoFilter(python_logging.Filter):
  """Passes warnings and errors from anywhere, INFO and below only from this package's own modules.

  Orbax's background save threads log their failure with a traceback per thread; Orbax raises the same failure
  at the next save or wait, which the trainer reports as one `CheckpointWriteError`, so those logs are left out.
  """

  def filter(self, record: python_logging.LogRecord) -> bool:
    if record.levelno >= python_logging.ERROR and "orbax" in record.pathname:
      return "thread" not in record.getMessage() and "background" not in record.getMessage()
    return record.levelno >= python_logging.WARNING or record.pathname.startswith(_PACKAGE_DIR)


def _quiet_closed_event_loops(exc_type, exc, tb, default=sys.excepthook) -> None:
  """After a failed checkpoint write, TensorStore's callbacks reach Orbax's closed event loop from their own
  threads, one traceback each; the write failure itself is reported once (`CheckpointWriteError`)."""
  if (exc_type is RuntimeError and str(exc) == "Event loop is closed"
      and threading.current_thread() is not threading.main_thread()):
    return
  default(exc_type, exc, tb)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not FLAGS.library_logs:
    logging.get_absl_handler().addFilter(ProjectInfoFilter())
    sys.excepthook = _quiet_closed_event_loops
    tfds.disable_progress_bar()
  if FLAGS.coordinator_address or FLAGS.multihost:
    parallel.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  logging.info("Config %s on %d %s device(s); workdir %s.", FLAGS.config.name, jax.device_count(),
               jax.devices()[0].platform, FLAGS.workdir)
  if jax.devices()[0].platform == "cpu":
    logging.info("CPU settings: XLA_FLAGS %r (%s overrides the family's); heap: %s (%s=default: glibc's).",
                 os.environ.get("XLA_FLAGS", ""), cpu_flags.OVERRIDE_VARIABLE,
                 host_memory.description(), host_memory.OVERRIDE_VARIABLE)
  try:
    if FLAGS.mode == "train":
      train.train_and_evaluate(FLAGS.config, FLAGS.workdir, take_over_other_hosts=FLAGS.resume_preempted,
                               runs=FLAGS.runs)
    else:
      train.evaluate(FLAGS.config, FLAGS.workdir, force=FLAGS.force, runs=FLAGS.runs)
  except train.Preempted as stop:
    logging.error("%s", stop)
    sys.exit(EXIT_PREEMPTED)
  except checkpoints.CheckpointWriteError as error:
    logging.error("%s", error)
    # Orbax's failed save threads would fail again, loudly, while the interpreter shuts down around them.
    logging.flush()
    sys.stderr.flush()
    os._exit(1)
  except (checkpoints.DamagedFileError, checkpoints.WorkdirLockedError,
          train.IncompleteRunError) as error:  # The message says what to do; a traceback would bury it.
    logging.error("%s", error)
    sys.exit(1)


# 128 + SIGTERM, what a shell reports for a process ended by SIGTERM, with the checkpoint saved first.
EXIT_PREEMPTED = 143


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; an override of a key the config lacks is one line naming the nearest valid keys."""
  try:
    return FLAGS(argv)
  except (AttributeError, KeyError):
    spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
    problems = spec and config_schema.unknown_override_keys(config_schema.load_config_file(spec), argv)
    if not problems:
      raise
    sys.exit("\n".join(problems))


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
