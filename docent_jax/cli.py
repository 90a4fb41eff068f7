"""What every command line of the project shares: one line for every fault a user can cause or meet, a
signal that ends a command with a line saying so, and a console with this project's logs only.

`run(main)` is `absl.app.run(main)` with these: the faults named in `USER_FAULTS` (a bad file, a damaged
checkpoint, a full disk, an unwritable path, a locked or mismatched run) end in one `logging.error` line and
exit 1; a bad flag or a config value out of range is one line naming it and exit 2; and SIGTERM ends with exit 143
and a line naming what was running. Anything else is a bug and keeps its traceback.
"""
from collections.abc import Callable
import logging as python_logging
import os
import signal
import sys
from typing import Any

from absl import app
from absl import flags
from absl import logging

from docent_jax import checkpoints
from docent_jax import config_schema
from docent_jax import outputs
from docent_jax import run_dir as run_dirs
from docent_jax.data import io

# 128 + SIGTERM: what a shell reports for a process ended by SIGTERM.
EXIT_TERMINATED = 143
# Faults whose message says what happened and what to do; a traceback would bury it.
USER_FAULTS: tuple[type[BaseException], ...] = (
    outputs.OutputError, outputs.DamagedFileError, io.DataFormatError, checkpoints.CheckpointError,
    run_dirs.WorkdirLockedError, run_dirs.ConfigMismatchError, run_dirs.DataMismatchError,
    FileNotFoundError, NotADirectoryError, PermissionError)

flags.DEFINE_bool("library_logs", False, "Also show the INFO logs of libraries (Orbax, JAX, TFDS, grain, ...); "
                  "by default the console shows this project's INFO logs and everyone's warnings.")

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class Terminated(BaseException):
  """SIGTERM arrived; raised in the main thread where it was running (a BaseException, like KeyboardInterrupt, so
  that no `except Exception` takes it for a fault of its own)."""


class ProjectInfoFilter(python_logging.Filter):
  """Passes warnings and errors from anywhere, INFO and below only from this package's own modules (the trainer's
  progress line carries what CLU's work-unit notes say); of Orbax, errors only.

  Orbax warns of its own housekeeping (a metadata file it does without, a save it waited for) on every load and
  save; what matters of a checkpoint reaches the user as this project's own line. Orbax's background save
  threads log their failure with a traceback per thread; Orbax raises the same failure at the next save or
  wait, which the trainer reports as one `CheckpointWriteError`, so those logs are left out too.
  """

  def filter(self, record: python_logging.LogRecord) -> bool:
    if "orbax" in record.pathname:
      return (record.levelno >= python_logging.ERROR and "thread" not in record.getMessage()
              and "background" not in record.getMessage())
    return record.levelno >= python_logging.WARNING or record.pathname.startswith(_PACKAGE_DIR)


def _raise_terminated(number: int, frame: Any) -> None:
  del frame
  raise Terminated(signal.Signals(number).name)


def run(main: Callable[[list[str]], None], what: str, **run_kwargs: Any) -> None:
  """`app.run(main)` with the project's console and fault handling; `what` names the command in the line that a
  signal ends it with (e.g. 'predict')."""

  def wrapped(argv: list[str]) -> None:
    if not flags.FLAGS.library_logs and flags.FLAGS.verbosity <= 0:
      logging.get_absl_handler().addFilter(ProjectInfoFilter())
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
      main(argv)
    except Terminated as stop:
      logging.error("%s stopped by %s. Every file is written whole or not at all, so none is cut short; run the same "
                    "command again to finish.", what, stop)
      logging.flush()
      sys.exit(EXIT_TERMINATED)
    except (app.UsageError, config_schema.ConfigError) as error:  # absl would print the whole usage around it.
      print(f"{what}: {one_line(error)} (--help lists the flags)", file=sys.stderr, flush=True)
      sys.exit(2)
    except USER_FAULTS as error:
      logging.error("%s", one_line(error))
      sys.exit(1)

  app.run(wrapped, **run_kwargs)


def parse_config_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing for a command with `--config`: an override of a key the config lacks is one line naming the
  nearest valid keys, and one of a value the key's type refuses (ml_collections keeps each field's type) is one
  line naming flag and value."""
  try:
    return flags.FLAGS(argv)
  except flags.IllegalFlagValueError as error:
    sys.exit(str(error))
  except (AttributeError, KeyError):
    spec = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
    problems = spec and config_schema.unknown_override_keys(config_schema.load_config_file(spec), argv)
    if not problems:
      raise
    sys.exit("\n".join(problems))


def one_line(error: BaseException) -> str:
  """The message of `error` on one line; an OS error names its file and cause."""
  if isinstance(error, OSError) and error.filename and error.strerror:
    return f"{error.filename}: {error.strerror}."
  return " ".join(str(error).split())
