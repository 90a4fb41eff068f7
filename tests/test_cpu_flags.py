"""The XLA CPU flags come from one place, per CPU family, and the user's choice wins."""
import os
import subprocess
import sys

import pytest

from docent_jax import cpu_flags

AMD = "vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16\n\n"
INTEL_AMX = ("vendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: avx2 avx512f amx_bf16 amx_tile\n\n"
             "vendor_id\t: GenuineIntel\nmodel name\t: another\n")


@pytest.mark.parametrize("cpuinfo, family", [
    (AMD, "amd-avx512"),
    (INTEL_AMX, "intel-amx"),
    (INTEL_AMX.replace(" amx_bf16 amx_tile", ""), "intel-avx512"),
    ("vendor_id\t: GenuineIntel\nflags\t\t: avx2\n", "other"),
    ("", "other"),
])
def test_the_family_follows_vendor_and_features(cpuinfo, family):
  assert cpu_flags.read_cpu(cpuinfo).family == family


def test_the_first_processor_describes_the_cpu():
  assert cpu_flags.read_cpu(INTEL_AMX).model == "Intel(R) Xeon(R)"


def test_apply_adds_the_family_flags_and_keeps_the_users(monkeypatch):
  monkeypatch.setitem(cpu_flags.FLAGS_BY_FAMILY, "amd-avx512", ("--xla_a=1", "--xla_b=2"))
  cpu = cpu_flags.read_cpu(AMD)
  environ = {"XLA_FLAGS": "--xla_b=7 --xla_force_host_platform_device_count=8"}
  assert cpu_flags.apply(cpu, environ) == ("--xla_a=1",)
  assert environ["XLA_FLAGS"] == "--xla_b=7 --xla_force_host_platform_device_count=8 --xla_a=1"
  # Applying twice adds nothing.
  assert cpu_flags.apply(cpu, environ) == ()


@pytest.mark.parametrize("override, expected", [("none", ""), ("", ""), ("--xla_c=3 --xla_d", "--xla_c=3 --xla_d")])
def test_the_override_variable_replaces_the_choice(monkeypatch, override, expected):
  monkeypatch.setitem(cpu_flags.FLAGS_BY_FAMILY, "amd-avx512", ("--xla_a=1",))
  environ = {cpu_flags.OVERRIDE_VARIABLE: override}
  cpu_flags.apply(cpu_flags.read_cpu(AMD), environ)
  assert environ.get("XLA_FLAGS", "") == expected


def test_every_family_has_an_entry_and_real_flags():
  assert {cpu_flags.Cpu(v, "", frozenset(f)).family for v, f in [
      ("GenuineIntel", {"amx_bf16", "avx512f"}), ("GenuineIntel", {"avx512f"}), ("AuthenticAMD", {"avx512f"}),
      ("", set())]} == set(cpu_flags.FLAGS_BY_FAMILY)
  for flags in cpu_flags.FLAGS_BY_FAMILY.values():
    assert all(flag.startswith("--xla_cpu_") for flag in flags)


def test_importing_the_package_sets_the_flags_before_jax_starts():
  code = ("import os; import docent_jax, jax; jax.numpy.ones(1).block_until_ready(); "
          "print(os.environ.get('XLA_FLAGS', ''))")
  env = {**os.environ, cpu_flags.OVERRIDE_VARIABLE: "--xla_cpu_enable_fast_min_max=true", "XLA_FLAGS": ""}
  out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
  assert out.split() == ["--xla_cpu_enable_fast_min_max=true"]
  # XLA rejects an unknown flag at start-up, so a flag the package passes reaches XLA.
  env[cpu_flags.OVERRIDE_VARIABLE] = "--xla_cpu_no_such_flag=1"
  failed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
  assert failed.returncode != 0 and "xla_cpu_no_such_flag" in failed.stderr


def test_a_machine_without_accelerators_computes_on_the_cpu_without_probing_for_a_tpu():
  machine = {}
  cpu_flags.only_cpu(machine, exists=lambda path: False)
  assert machine == {"JAX_PLATFORMS": "cpu"}
  chosen = {"JAX_PLATFORMS": "tpu"}
  cpu_flags.only_cpu(chosen, exists=lambda path: False)
  assert chosen == {"JAX_PLATFORMS": "tpu"}  # The user's choice stands.
  on_a_tpu_vm = {}
  cpu_flags.only_cpu(on_a_tpu_vm, exists=lambda path: path == "/dev/vfio")
  assert on_a_tpu_vm == {}


@pytest.mark.parametrize("environ, cores, threads", [
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=8"}, 2, "16"),
    ({"XLA_FLAGS": "--xla_a=1 --xla_force_host_platform_device_count=2"}, 2, "4"),
    ({"JAX_NUM_CPU_DEVICES": "4"}, 2, "8"),
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}, 64, "64"),  # Never fewer threads than cores.
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "PJRT_NPROC": "3"}, 2, "3"),  # The user's wins.
    ({"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "NPROC": "5"}, 2, None),
    ({}, 2, None),  # One device: XLA's own pool.
])
def test_forced_devices_get_two_pool_threads_each_unless_the_pool_is_set(environ, cores, threads):
  before = environ.get("PJRT_NPROC")
  returned = cpu_flags.size_thread_pool(environ, cores=cores)
  assert environ.get("PJRT_NPROC") == (threads or before)
  assert returned == (int(threads) if threads and before is None else None)


@pytest.mark.parametrize("setting, platform, cpuinfo, expected", [
    ("auto", "cpu", INTEL_AMX, "bfloat16"),
    ("auto", "cpu", INTEL_AMX.replace(" amx_bf16 amx_tile", ""), "float32"),  # No bf16 instructions.
    ("auto", "cpu", AMD.replace("avx512f", "avx512f avx512_bf16"), "bfloat16"),
    ("auto", "tpu", AMD, "bfloat16"),
    ("float32", "tpu", INTEL_AMX, "float32"),
    ("bfloat16", "cpu", AMD, "bfloat16"),
])
def test_auto_matmuls_multiply_bf16_where_the_hardware_does(setting, platform, cpuinfo, expected):
  assert cpu_flags.matmul_dtype(setting, platform, cpu_flags.read_cpu(cpuinfo)) == expected


def test_an_unknown_matmul_dtype_names_the_key():
  with pytest.raises(ValueError, match=r"model.matmul_dtype='float16': valid: \['auto', 'float32', 'bfloat16'\]"):
    cpu_flags.matmul_dtype("float16", "cpu")
