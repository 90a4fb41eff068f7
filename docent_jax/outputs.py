"""The one writer of every file the project produces (results, TREC runs, JSON lines, indexes, caches), local or
gs://, and the checks that protect a user's files before anything is written.

A file is written whole or not at all: locally into a temporary file beside it, renamed over it once complete, so
that a bad input, a full disk or a signal mid-write leaves the earlier file as it was; on gs:// the bytes are
gathered first and uploaded in one piece (an object store replaces an object only when its upload completes). A
failure is one `OutputError` naming the file and the OS cause.
"""
from collections.abc import Callable, Iterator
import contextlib
import io
import json
import os
import stat
import tempfile
from typing import Any, IO

from etils import epath


class OutputError(OSError):
  """A file could not be written; the message names it and the cause, and the earlier file is left whole."""


class DamagedFileError(ValueError):
  """A file the project writes whole cannot be read back; it is left as it is."""


def as_path(path: str | epath.PathLike) -> epath.Path:
  """An epath.Path; local relative paths become absolute (Orbax needs absolute paths), URLs stay as they are."""
  path = epath.Path(path)
  return path if _is_remote(path) or path.is_absolute() else epath.Path(path.absolute())


def _is_remote(path: epath.PathLike) -> bool:
  return "://" in str(path)


def cause(error: BaseException) -> str:
  """The OS reason of `error` on one line ('No space left on device'), else its message."""
  if isinstance(error, OSError) and error.strerror:
    return error.strerror
  return " ".join(str(error).split())[:300] or type(error).__name__


@contextlib.contextmanager
def atomic_writer(path: str | epath.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
  """A file to write `path` through (`mode` 'w' or 'wb'): it replaces `path` when the block ends without an
  error, and leaves `path` untouched when the block raises (the error passes on) or the write fails
  (`OutputError`)."""
  if mode not in ("w", "wb"):
    raise ValueError(f"mode must be 'w' or 'wb'; got {mode!r}.")
  path = as_path(path)
  if _is_remote(path):
    buffer = io.StringIO() if mode == "w" else io.BytesIO()
    yield buffer
    try:
      path.parent.mkdir(parents=True, exist_ok=True)
      (path.write_text if mode == "w" else path.write_bytes)(buffer.getvalue())
    except OSError as error:
      raise OutputError(f"{path}: not written ({cause(error)}).") from error
    return
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
  except OSError as error:
    raise OutputError(f"{path}: not written ({cause(error)}).") from error
  file = os.fdopen(descriptor, mode, **({"encoding": "utf-8"} if mode == "w" else {}))
  try:
    try:
      yield file
      file.flush()
      os.fsync(file.fileno())
    finally:
      file.close()
    # A replaced file keeps its mode; a new one gets the umask's (mkstemp's own is private).
    os.chmod(partial, stat.S_IMODE(os.stat(path).st_mode) if path.exists() else 0o666 & ~_umask())
    os.replace(partial, path)
  except OSError as error:
    _remove(partial)
    raise OutputError(f"{path}: not written ({cause(error)}); the earlier file, if any, is unchanged.") from error
  except BaseException:
    _remove(partial)
    raise


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def _remove(path: str) -> None:
  with contextlib.suppress(OSError):
    os.unlink(path)


def write_atomically(path: str | epath.PathLike, data: str | bytes) -> None:
  """Writes `data` (text or bytes) to `path` whole, or leaves `path` as it was (see `atomic_writer`)."""
  with atomic_writer(path, "wb" if isinstance(data, bytes) else "w") as file:
    file.write(data)


def read_json(path: str | epath.PathLike) -> Any:
  """The JSON in `path`; a damaged file is a `DamagedFileError` naming it."""
  path = as_path(path)
  text = path.read_text()
  try:
    return json.loads(text)
  except ValueError as error:
    raise DamagedFileError(f"{path} is damaged ({error}; {len(text)} bytes). It is left as it is: restore it, or "
                           "move it away to start it anew.") from error


def read_results(path: str | epath.PathLike) -> dict[str, float]:
  """A results JSON ({} when there is none); one that is no JSON object of numbers is a `DamagedFileError`."""
  path = as_path(path)
  if not path.exists():
    return {}
  results = read_json(path)
  if not isinstance(results, dict):
    raise DamagedFileError(f"{path} is not a results file: it holds a JSON {type(results).__name__}, not an "
                           "object of `<model>/<split>/<metric>` -> number. It is left as it is.")
  return results


def merge_results(path: str | epath.PathLike, results: dict[str, float],
                  replaces: Callable[[str], bool] = lambda key: False) -> dict[str, float]:
  """Writes `results` into the results JSON `path` whole, keeping its other keys except those `replaces`
  names (a model's earlier results that this evaluation supersedes); returns the keys kept."""
  kept = {key: value for key, value in read_results(path).items() if key not in results and not replaces(key)}
  write_atomically(path, json.dumps(dict(sorted({**kept, **results}.items())), indent=2) + "\n")
  return kept


def same_file(first: str | epath.PathLike, second: str | epath.PathLike) -> bool:
  """Whether two paths name one file (after resolving links and relative parts)."""
  first, second = epath.Path(first), epath.Path(second)
  if _is_remote(first) or _is_remote(second):
    return str(first).rstrip("/") == str(second).rstrip("/")
  if first.exists() and second.exists():
    return os.path.samefile(first, second)
  return os.path.realpath(first) == os.path.realpath(second)


def check_writable(path: str | epath.PathLike, flag: str) -> epath.Path:
  """`path` as a path, refused (`OutputError` naming `flag`) when it cannot become a file: its folder is missing
  or not writable, or it is a folder itself. Checked before the work whose result it will hold."""
  path = as_path(path)
  if _is_remote(path):
    return path
  if path.is_dir():
    raise OutputError(f"{flag}={path}: is a folder, not a file.")
  folder = path.parent
  while not folder.exists() and folder != folder.parent:
    folder = folder.parent
  try:  # A file made and removed: permission bits say too little (root, read-only mounts, /proc).
    descriptor, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
  except OSError as error:
    raise OutputError(f"{flag}={path}: cannot write in {folder} ({cause(error)}).") from error
  os.close(descriptor)
  _remove(probe)
  return path
