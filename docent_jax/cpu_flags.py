"""XLA's CPU flags, chosen in this one place from the CPU's features, per CPU family.

Every entry point (`docent_jax.main`, the tests, the tools) calls `apply()` before JAX creates its CPU backend,
which reads XLA_FLAGS once per process. The choice per family comes from `tools/bench_encoder.py --compare`
(docs/scaling.md#cpu-flags has the measurements); a family with no measured gain gets no flags.

A user overrides the choice with DOCENT_JAX_CPU_FLAGS (a flag list, or "none"), and any flag already in
XLA_FLAGS wins over the chosen value of the same flag.

`size_thread_pool()` gives XLA's CPU thread pool enough threads for several devices forced onto one CPU.
"""
from collections.abc import Callable, MutableMapping
import dataclasses
import os
import pathlib
import re

OVERRIDE_VARIABLE = "DOCENT_JAX_CPU_FLAGS"
# XLA's CPU client sizes its thread pool from these (the first set), else from the cores it may use.
THREAD_POOL_VARIABLES = ("PJRT_NPROC", "NPROC")
# With fewer threads per forced device, sharded steps queued by async dispatch deadlock in a collective's
# rendezvous: 8 devices on 2 cores hang at 15 threads and run at 16, 2 devices at 3 and 4
# (tools/cpu_collective_hang.py, docs/scaling.md "The cache and the test suite").
THREADS_PER_FORCED_DEVICE = 2

# Family -> flags, measured by tools/bench_encoder.py --compare (docs/scaling.md#cpu-flags). Empty: on amd-avx512
# no flag set beat the default beyond the noise, nor did YNNPACK's dot fusion on intel-amx; intel-avx512 is not
# measured yet.
FLAGS_BY_FAMILY: dict[str, tuple[str, ...]] = {
    "intel-amx": (),
    "intel-avx512": (),
    "amd-avx512": (),
    "other": (),
}


@dataclasses.dataclass(frozen=True)
class Cpu:
  """What the flag choice depends on: the vendor and the instruction-set features /proc/cpuinfo lists."""

  vendor: str
  model: str
  features: frozenset[str]

  @property
  def multiplies_bf16(self) -> bool:
    """Whether the CPU has bf16 matmul instructions (AVX512_BF16 or AMX), at about twice its float32 rate."""
    return bool({"avx512_bf16", "amx_bf16"} & self.features)

  @property
  def family(self) -> str:
    if self.vendor == "GenuineIntel" and "amx_bf16" in self.features:
      return "intel-amx"
    if self.vendor == "GenuineIntel" and "avx512f" in self.features:
      return "intel-avx512"
    if self.vendor == "AuthenticAMD" and "avx512f" in self.features:
      return "amd-avx512"
    return "other"


def read_cpu(cpuinfo: str | None = None) -> Cpu:
  """The first processor of `cpuinfo` (by default /proc/cpuinfo; an empty description where there is none)."""
  if cpuinfo is None:
    path = pathlib.Path("/proc/cpuinfo")
    cpuinfo = path.read_text() if path.exists() else ""
  fields: dict[str, str] = {}
  for line in cpuinfo.splitlines():
    if not line.strip():
      if fields:
        break  # One processor is enough: the rest are the same kind.
      continue
    key, _, value = line.partition(":")
    fields.setdefault(key.strip(), value.strip())
  return Cpu(vendor=fields.get("vendor_id", ""), model=fields.get("model name", ""),
             features=frozenset(fields.get("flags", "").split()))


def _flag_name(flag: str) -> str:
  return flag.split("=", 1)[0]


def chosen_flags(cpu: Cpu | None = None, environ: MutableMapping[str, str] | None = None) -> tuple[str, ...]:
  """The flags for this CPU: DOCENT_JAX_CPU_FLAGS if set ("none": no flags), else its family's."""
  environ = os.environ if environ is None else environ
  override = environ.get(OVERRIDE_VARIABLE)
  if override is not None:
    return () if override.strip() in ("", "none") else tuple(override.split())
  return FLAGS_BY_FAMILY[(cpu or read_cpu()).family]


def apply(cpu: Cpu | None = None, environ: MutableMapping[str, str] | None = None) -> tuple[str, ...]:
  """Adds the chosen flags to XLA_FLAGS, except those XLA_FLAGS already sets; returns the flags added.

  Must run before JAX's CPU backend exists (before the first array or jit call); later, XLA ignores it.
  """
  environ = os.environ if environ is None else environ
  present = {_flag_name(flag) for flag in environ.get("XLA_FLAGS", "").split()}
  added = tuple(flag for flag in chosen_flags(cpu, environ) if _flag_name(flag) not in present)
  if added:
    environ["XLA_FLAGS"] = " ".join([environ.get("XLA_FLAGS", ""), *added]).strip()
  return added


def forced_device_count(environ: MutableMapping[str, str] | None = None) -> int:
  """The CPU devices JAX will make: XLA_FLAGS' --xla_force_host_platform_device_count or JAX_NUM_CPU_DEVICES
  (the larger), else 1."""
  environ = os.environ if environ is None else environ
  counts = [int(n) for n in re.findall(r"--xla_force_host_platform_device_count=(\d+)", environ.get("XLA_FLAGS", ""))]
  if environ.get("JAX_NUM_CPU_DEVICES", "").strip().lstrip("-").isdigit():
    counts.append(int(environ["JAX_NUM_CPU_DEVICES"]))
  return max([1, *counts])


def size_thread_pool(environ: MutableMapping[str, str] | None = None, cores: int | None = None) -> int | None:
  """Where several CPU devices are forced, sets PJRT_NPROC to `THREADS_PER_FORCED_DEVICE` threads per device (at
  least the cores), unless PJRT_NPROC or NPROC is set already; returns the count set, or None. Must run before
  JAX's CPU backend exists."""
  environ = os.environ if environ is None else environ
  devices = forced_device_count(environ)
  if devices < 2 or any(name in environ for name in THREAD_POOL_VARIABLES):
    return None
  threads = max(THREADS_PER_FORCED_DEVICE * devices, cores or os.cpu_count() or 1)
  environ[THREAD_POOL_VARIABLES[0]] = str(threads)
  return threads


# Device files of the accelerators JAX computes on: TPU VMs (/dev/accel* on v4 and v5p, /dev/vfio on v5e and
# v6e) and NVIDIA GPUs.
_ACCELERATOR_DEVICES = ("/dev/accel0", "/dev/vfio", "/dev/nvidia0", "/proc/driver/nvidia")


def only_cpu(machine: MutableMapping[str, str] | None = None,
             exists: Callable[[str], bool] = os.path.exists) -> None:
  """On a machine without accelerators, sets JAX_PLATFORMS=cpu (unless set): libtpu, installed to compile for TPU
  topologies (`compile_for_tpu`), would otherwise look for a TPU at JAX's start and log errors when it finds
  none."""
  machine = os.environ if machine is None else machine
  if "JAX_PLATFORMS" not in machine and not any(exists(path) for path in _ACCELERATOR_DEVICES):
    machine["JAX_PLATFORMS"] = "cpu"


# `model.matmul_dtype` values: "auto" picks bfloat16 where the hardware multiplies it faster than float32.
MATMUL_DTYPE_SETTINGS = ("auto", "float32", "bfloat16")


def matmul_dtype(setting: str, platform: str, cpu: Cpu | None = None) -> str:
  """The matmul operand dtype of `model.matmul_dtype` on `platform` ('cpu', 'tpu', 'gpu'): "auto" is bfloat16 on
  accelerators and on CPUs with bf16 matmul instructions (`Cpu.multiplies_bf16`), float32 on other CPUs."""
  if setting not in MATMUL_DTYPE_SETTINGS:
    raise ValueError(f"model.matmul_dtype={setting!r}: valid: {list(MATMUL_DTYPE_SETTINGS)}.")
  if setting != "auto":
    return setting
  if platform != "cpu":
    return "bfloat16"
  return "bfloat16" if (cpu or read_cpu()).multiplies_bf16 else "float32"
