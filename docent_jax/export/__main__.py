"""python -m docent_jax.export --run=RUN_DIR --format=FORMAT --output=DIR [--overwrite]

Writes the model a trained run reports (its best params where it keeps them, else its last) where other libraries
load it; docs/export.md says what each format holds. A run that is unfinished, damaged or has no encoder to export,
and an existing non-empty --output, are one line each, and nothing is written.
"""
import sys

from absl import flags
from absl import logging

from docent_jax import cli
from docent_jax import run_dir as run_dirs
from docent_jax.export import writer
from docent_jax.inference import model as inference_model
from docent_jax.inference import protocol

flags.DEFINE_string("run", None, "A trained run's directory (WORKDIR/<model>, local or gs://).")
flags.DEFINE_enum("format", "sentence-transformers", list(writer.FORMATS), "What to write.")
flags.DEFINE_string("output", None, "The directory to write (local or gs://); created whole or not at all.")
flags.DEFINE_bool("overwrite", False, "Replace a non-empty --output.")
flags.DEFINE_bool("allow_unfinished", False, "Export a run that stopped before its last step, from the params "
                  "it has.")
flags.mark_flags_as_required(["run", "output"])
FLAGS = flags.FLAGS


def export_run(run_path: str, output: str, format: str = "sentence-transformers",  # pylint: disable=redefined-builtin
               overwrite: bool = False, allow_unfinished: bool = False) -> None:
  """Writes the model of the run at `run_path` to `output` (see `writer.save_pretrained`)."""
  writer.checked_target(output, format, overwrite)
  run = run_dirs.RunDir(run_path)
  try:
    config, _ = inference_model.read_run(run)
  except ValueError as error:  # An objective whose runs do not load on their own (tag scorers).
    raise writer.ExportError(str(error)) from error
  latest = run.latest_step()
  if latest is None:
    raise writer.ExportError(f"{run}: holds no checkpoint; nothing to export.")
  if latest < run.final_step(config.train.num_steps) and not allow_unfinished:
    raise writer.ExportError(f"{run}: an unfinished run (step {latest} of {config.train.num_steps}); finish it, or "
                             "pass --allow_unfinished to export the params it has.")
  target = writer.save_pretrained(inference_model.load(run), output, format=format, overwrite=overwrite)
  logging.info("Wrote %s (%s) from %s.", target, format, run)


def main(argv: list[str]) -> None:
  del argv
  try:
    export_run(FLAGS.run, FLAGS.output, FLAGS.format, FLAGS.overwrite, FLAGS.allow_unfinished)
  except (writer.ExportError, protocol.NotExportableError) as error:
    logging.error("%s", cli.one_line(error))
    sys.exit(1)


if __name__ == "__main__":
  cli.run(main, "export")
