"""JAX's persistent compilation cache, on by default: a run, a tool or a test that compiled a function before loads
it from disk instead of compiling it again.

Set up when the package is imported, before JAX exists in the process (JAX reads these settings from the
environment when it is imported, and child processes inherit them); where JAX was imported first, the same
settings go through `jax.config`. The cache lives in a per-user directory, one per CPU kind: JAX's cache key names
the platform ("cpu") but not the instruction set a CPU executable was compiled for, and a cache that moves to
another machine (a home directory shared between hosts, a machine kept between sessions) must never hand an
AVX-512 executable to a CPU without it.

DOCENT_JAX_COMPILATION_CACHE moves it (a directory, local or gs://, e.g. one bucket for the hosts of a TPU pod) or,
set to "off", turns it off. It stays off for computations over several CPU devices: forced host devices, and CPU
processes joined by `jax.distributed` (`off_for_cpu_collectives`). XLA:CPU executables read back from the cache can
run one device's collectives in another order than the next device's, and both then wait for ever (an all-reduce on
one device, an all-gather on the other, in one execution; XLA ends the process after 40 s). Freshly compiled ones
never did (docs/scaling.md, "The cache and the test suite"). Several processes may share one cache (pytest-xdist
workers, a pod's hosts): JAX writes each entry to a file of its own name. A local cache is capped at `MAX_BYTES`
when a process starts, the least recently used entries going first (a bucket's own lifecycle rules cap a gs:// one);
clearing it is removing its directory (`cache_dir()` names it).

JAX's own cap (jax_compilation_cache_max_size) stays off: it lists and reads every entry's access time under a file
lock before each write, which made the test suite's cold run slower than no cache at all, and an entry whose access
time a killed process never wrote failed every later write.
"""
from collections.abc import MutableMapping
import hashlib
import os
import pathlib
import platform
import sys

from docent_jax import cpu_flags

OVERRIDE_VARIABLE = "DOCENT_JAX_COMPILATION_CACHE"
OFF = "off"
MAX_BYTES = 4 << 30
# Every compile is written, however short (JAX's default skips those under 1 s): writing them cost `make run` nothing
# measurable, and reading them back cut 30% from test modules whose compiles mostly take under 0.2 s (docs/scaling.md,
# "Compilation cache").
MIN_COMPILE_SECONDS = 0.0


def _machine_kind(cpu: cpu_flags.Cpu) -> str:
  """The architecture, and a digest of the CPU's vendor and instruction-set features."""
  digest = hashlib.blake2b(f"{cpu.vendor}:{' '.join(sorted(cpu.features))}".encode(), digest_size=6).hexdigest()
  return f"{platform.machine() or 'unknown'}-{digest}"


def cache_dir(environ: MutableMapping[str, str] | None = None, cpu: cpu_flags.Cpu | None = None) -> str | None:
  """The cache's directory for this CPU, or None when DOCENT_JAX_COMPILATION_CACHE is "off" or several CPU devices
  are forced."""
  environ = os.environ if environ is None else environ
  chosen = environ.get(OVERRIDE_VARIABLE, "").strip()
  if chosen.lower() == OFF or cpu_flags.forced_device_count(environ) > 1:
    return None
  base = chosen or os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(pathlib.Path.home(), ".cache"),
                                "docent_jax", "jax_compilation")
  return f"{base.rstrip('/')}/{_machine_kind(cpu or cpu_flags.read_cpu())}"


def _settings(directory: str) -> dict[str, str | float | int]:
  """JAX's settings of the cache by config name (`JAX_<NAME>` in the environment)."""
  return {"jax_compilation_cache_dir": directory,
          "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
          "jax_persistent_cache_min_entry_size_bytes": -1,  # Every size: a local disk and a bucket alike.
          "jax_compilation_cache_max_size": -1}  # Capped by `trim`, not per write.


def trim(directory: str, max_bytes: int = MAX_BYTES) -> list[str]:
  """Removes the least recently used entries of a local cache until it holds at most `max_bytes`; returns their
  names. Last use: the later of a file's access time (as the file system keeps it) and its write time."""
  if "://" in directory or not os.path.isdir(directory):
    return []
  entries = []
  with os.scandir(directory) as files:
    for entry in files:
      try:
        stat = entry.stat()
      except FileNotFoundError:  # Removed by another process meanwhile.
        continue
      if entry.is_file():
        entries.append((max(stat.st_atime, stat.st_mtime), stat.st_size, entry.name))
  total, removed = sum(size for _, size, _ in entries), []
  for _, size, name in sorted(entries):
    if total <= max_bytes:
      break
    try:
      os.remove(os.path.join(directory, name))
    except FileNotFoundError:
      pass
    total -= size
    removed.append(name)
  return removed


def enable(environ: MutableMapping[str, str] | None = None) -> str | None:
  """Turns the cache on and returns its directory (None when it is off). A setting of JAX's own already in the
  environment (JAX_COMPILATION_CACHE_DIR, ...) wins over this module's."""
  environ = os.environ if environ is None else environ
  directory = cache_dir(environ)
  if directory is None:
    environ.pop("JAX_COMPILATION_CACHE_DIR", None)  # Inherited from a parent process whose cache was on.
    return None
  settings = _settings(directory)
  for name, value in settings.items():
    environ.setdefault(name.upper(), str(value))
  if environ["JAX_COMPILATION_CACHE_DIR"] == directory:  # A directory of the user's own JAX setting is theirs.
    trim(directory)
  if "jax" in sys.modules and environ is os.environ:  # Imported before this package: its config is read already.
    import jax  # pylint: disable=g-import-not-at-top
    for name, value in settings.items():
      jax.config.update(name, type(value)(environ[name.upper()]))
  return environ["JAX_COMPILATION_CACHE_DIR"]


def off_for_cpu_collectives() -> None:
  """Turns the cache off where this process's computations will span CPU devices of several processes. Call it after
  `jax.distributed.initialize` and before the first compile (JAX decides once whether a process uses the cache)."""
  import jax  # pylint: disable=g-import-not-at-top
  if jax.default_backend() == "cpu" and jax.device_count() > 1:
    jax.config.update("jax_enable_compilation_cache", False)
