"""`python -m docent_jax.sweep`: the command line of a sweep (see `docent_jax.sweep`)."""
import shlex
import sys

from absl import app
from absl import flags
from absl import logging
import jax
from ml_collections import config_flags
import optuna

from docent_jax import cli
from docent_jax import config_schema
from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax import trainer as trainers
from docent_jax.sweep import study

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Experiment config (a configs/*.py file, optionally :arg).",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "The sweep's directory (local or gs://): its study, trials and summary.")
flags.DEFINE_multi_string("sweep", [], "KEY=V1,V2,... (values) or KEY=LOW:HIGH[:log] (a range, with --trials); "
                          "repeat for more axes. Default: the config's own grid, config.sweep (the same strings).")
flags.DEFINE_integer("trials", 0, "0: every combination of the axes (a grid); N: an Optuna TPE search of N trials.")
flags.DEFINE_string("metric", "", "The '<split>/<metric>' compared (default: config.train.best_metric).")
flags.DEFINE_enum("direction", "", ["", "max", "min"], "Whether higher is better (default: config.train.best_mode).")
flags.DEFINE_string("run", "", "Which run of the config the metric is of (default: the main model).")
flags.DEFINE_bool("prune", True, "Stop a trial whose periodic evaluation is below the median of earlier trials' "
                  "(from the third trial on).")
flags.DEFINE_integer("prune_warmup_steps", 0, "Prune no trial at evaluations before this step.")
flags.DEFINE_bool("multihost", False, "As launch/tpu.py starts it: join the TPU VM's runtime (one host only).")
flags.DEFINE_bool("resume_preempted", False, "The job that ran the sweep is gone with its hosts (a preempted TPU "
                  "VM): take over the training lock its running trial left.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if FLAGS.multihost:
    parallel.initialize_distributed(None, None, None)
    if jax.process_count() > 1:  # Every process would append to the study's journal.
      raise config_schema.ConfigError(f"docent_jax.sweep runs its trials in one process; this slice has "
                                      f"{jax.process_count()} hosts. Run one launch/tpu.py run per setting instead.")
  run_dirs.Workdir(FLAGS.workdir).record_command(shlex.join(["python", "-m", "docent_jax.sweep", *sys.argv[1:]]))
  optuna.logging.set_verbosity(optuna.logging.WARNING)  # The sweep logs its own line per trial.
  try:
    axes = [study.parse_axis(spec) for spec in FLAGS.sweep or FLAGS.config.get("sweep", ())]
    summary = study.run(FLAGS.config, FLAGS.workdir, axes, trials=FLAGS.trials, metric=FLAGS.metric,
                        mode=FLAGS.direction, run_name=FLAGS.run, prune=FLAGS.prune,
                        prune_warmup_steps=FLAGS.prune_warmup_steps, take_over_other_hosts=FLAGS.resume_preempted)
  except trainers.Preempted as stop:
    logging.error("%s", stop)
    sys.exit(cli.EXIT_TERMINATED)
  print(study.table(summary), flush=True)


if __name__ == "__main__":
  cli.run(main, "docent_jax.sweep", flags_parser=cli.parse_config_flags)
