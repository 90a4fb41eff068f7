"""Keeps freed host memory in the process where JAX computes on the CPU, so that no step pays for fresh pages.

XLA's CPU runtime allocates each execution's temporary buffer (759 MB for a MiniLM-L6 training step at
32 x 64 word pieces) in one block from a worker thread. glibc serves a block that large with a fresh mmap
and unmaps it when freed, so every step page-faults all of it again: 190,000 faults and a third of a
core-second in the kernel per step (docs/scaling.md#host-memory). Three glibc settings (mallopt) make freed
blocks reusable: one arena (a thread's own arena hands huge blocks to mmap whatever the settings), no mmap,
and freed memory kept at the top of the heap up to 2 GiB. The cost: the process keeps its peak heap.

`reuse_freed_memory()` runs when the package is imported (`docent_jax/__init__.py`), before JAX starts its
threads. It does nothing off glibc, where JAX computes on an accelerator, or with DOCENT_JAX_MALLOC=default.
"""
from collections.abc import Mapping
import ctypes
import glob
import os

OVERRIDE_VARIABLE = "DOCENT_JAX_MALLOC"
# Device files of the accelerators JAX looks for: TPU (accel, vfio) and NVIDIA GPU.
ACCELERATOR_DEVICES = ("/dev/accel[0-9]*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*")
# glibc's malloc.h parameter numbers, and their values here.
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
SETTINGS = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))
_applied = False


def computes_on_cpu(environ: Mapping[str, str] | None = None, devices: tuple[str, ...] = ACCELERATOR_DEVICES) -> bool:
  """Whether JAX's default backend will be the CPU: JAX_PLATFORMS names it first, or no accelerator is attached."""
  environ = os.environ if environ is None else environ
  platforms = environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  return not any(glob.glob(pattern) for pattern in devices)


def reuse_freed_memory(environ: Mapping[str, str] | None = None) -> bool:
  """Applies `SETTINGS` with glibc's mallopt where JAX computes on the CPU; returns whether they were applied."""
  environ = os.environ if environ is None else environ
  if environ.get(OVERRIDE_VARIABLE, "").strip() == "default" or not computes_on_cpu(environ) or not _on_glibc():
    return False
  global _applied
  mallopt = ctypes.CDLL(None).mallopt
  # mallopt returns 1 on success; all settings are attempted either way.
  _applied = all([mallopt(parameter, value) == 1 for parameter, value in SETTINGS])
  return _applied


def _on_glibc() -> bool:
  # A constant lookup, unlike platform.libc_ver(), which scans the Python binary at every import of the package.
  try:
    return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
  except (ValueError, OSError):  # Not a GNU system.
    return False


def description() -> str:
  """This process's heap settings in words, for logs and benchmark reports."""
  return "freed memory reused" if _applied else "glibc default"
