"""Entry point: python -m docent_jax.main --config=configs/X.py[:arg] --workdir=DIR [--config.key=value ...]."""
import os
import shlex
import sys
import threading

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags
import tensorflow_datasets as tfds

from docent_jax import checkpoints
from docent_jax import cli
from docent_jax import cpu_flags
from docent_jax import experiment
from docent_jax import host_memory
from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
from docent_jax.sweep import selection

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config (a configs/*.py file, optionally :arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Directory (local or gs://) for checkpoints, summaries and results.json.")
flags.DEFINE_enum("mode", "train", ["train", "evaluate"],
                  "train: train (or resume) and evaluate; evaluate: evaluate the checkpoints only, training nothing.")
flags.DEFINE_bool("force", False, "--mode=evaluate: evaluate a run that never finished, or whose best params are "
                  "missing, on the params it has; its results carry <model>/forced/step.")
flags.DEFINE_string("trained_run", "", "--mode=evaluate: a run directory of any workdir (e.g. workdir/default/"
                    "blp_transe) whose model the config's evaluators score on the config's data, instead of the "
                    "config's own runs; reported as <its workdir>.<its model>.")
flags.DEFINE_bool("resume_preempted", False, "The job that trained in this workdir is gone with its hosts (a "
                  "preempted TPU VM): take over the training locks it left on other hosts.")
flags.DEFINE_list("runs", [], "Only these runs of the config (e.g. supcon,supcon_trained: a model and the stage it "
                  "starts; their seeds come with them); default: every run.")
flags.DEFINE_bool("multihost", False, "Join a multi-process runtime detected from the environment (TPU pods).")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0, to join a runtime explicitly.")
flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator_address).")
flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator_address).")
flags.mark_flags_as_required(["config", "workdir"])

def _is_closed_event_loop_in_thread(exc_type: type, exc: BaseException) -> bool:
  """After a failed checkpoint write, TensorStore's callbacks reach Orbax's closed event loop from their own
  threads, one traceback each; the write failure itself is reported once (`CheckpointWriteError`)."""
  return (exc_type is RuntimeError and str(exc) == "Event loop is closed"
          and threading.current_thread() is not threading.main_thread())


def _quiet_closed_event_loops(exc_type, exc, tb, default=sys.excepthook) -> None:
  if not _is_closed_event_loop_in_thread(exc_type, exc):
    default(exc_type, exc, tb)


def _quiet_closed_event_loops_unraisable(unraisable, default=sys.unraisablehook) -> None:
  # TensorStore reports a callback's exception either way: as uncaught (excepthook) or as unraisable.
  if not _is_closed_event_loop_in_thread(unraisable.exc_type, unraisable.exc_value):
    default(unraisable)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if FLAGS.trained_run and FLAGS.mode != "evaluate":
    raise app.UsageError("--trained_run evaluates a trained run: it needs --mode=evaluate.")
  if not FLAGS.library_logs:
    sys.excepthook = _quiet_closed_event_loops
    sys.unraisablehook = _quiet_closed_event_loops_unraisable
    tfds.disable_progress_bar()
  if FLAGS.coordinator_address or FLAGS.multihost:
    parallel.initialize_distributed(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  logging.info("Config %s on %d %s device(s); workdir %s.", FLAGS.config.name, jax.device_count(),
               jax.devices()[0].platform, FLAGS.workdir)
  if jax.devices()[0].platform == "cpu":
    logging.info("CPU settings: XLA_FLAGS %r (%s overrides the family's); heap: %s (%s=default: glibc's).",
                 os.environ.get("XLA_FLAGS", ""), cpu_flags.OVERRIDE_VARIABLE,
                 host_memory.description(), host_memory.OVERRIDE_VARIABLE)
  run_dirs.Workdir(FLAGS.workdir).record_command(shlex.join(["python", "-m", "docent_jax.main", *sys.argv[1:]]))
  try:
    if FLAGS.mode == "train":
      # A config with `selection` first chooses among its candidates on validation (`sweep.selection`).
      train = selection.train_and_evaluate if FLAGS.config.get("selection") else experiment.train_and_evaluate
      train(FLAGS.config, FLAGS.workdir, take_over_other_hosts=FLAGS.resume_preempted, runs=FLAGS.runs)
    else:
      config = FLAGS.config
      if config.get("selection"):
        config = selection.selected_config(config, selection.read_choice(FLAGS.workdir))
      experiment.evaluate(config, FLAGS.workdir, force=FLAGS.force, runs=FLAGS.runs, trained_run=FLAGS.trained_run)
  except trainers.Preempted as stop:
    logging.error("%s", stop)
    sys.exit(cli.EXIT_TERMINATED)
  except checkpoints.CheckpointWriteError as error:
    logging.error("%s", error)
    # Orbax's failed save threads would fail again, loudly, while the interpreter shuts down around them.
    logging.flush()
    sys.stderr.flush()
    os._exit(1)
  except trainers.IncompleteRunError as error:  # The message says what to do; a traceback would bury it.
    logging.error("%s", error)
    sys.exit(1)


def run() -> None:
  """The command line: `main` with the project's console and one line for every fault (`cli.run`)."""
  cli.run(main, "docent_jax.main", flags_parser=cli.parse_config_flags)


if __name__ == "__main__":
  run()
