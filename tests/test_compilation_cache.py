"""JAX's persistent compilation cache: on by default, in a directory per CPU kind, moved or turned off by
DOCENT_JAX_COMPILATION_CACHE, and used by a second process for what the first compiled."""
import os
import pathlib
import subprocess
import sys

import jax
import pytest

from docent_jax import compilation_cache
from docent_jax import cpu_flags
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
AVX512 = cpu_flags.Cpu("AuthenticAMD", "AMD EPYC", frozenset({"avx2", "avx512f"}))
AVX2 = cpu_flags.Cpu("AuthenticAMD", "AMD EPYC", frozenset({"avx2"}))


def test_the_cache_is_per_user_and_per_cpu_kind_and_can_move_or_be_off():
  default = compilation_cache.cache_dir({"XDG_CACHE_HOME": "/home/u/.cache"}, AVX512)
  assert default.startswith("/home/u/.cache/docent_jax/jax_compilation/")
  # Executables of one instruction set never reach a CPU of another, even when the cache moves with a home directory.
  assert compilation_cache.cache_dir({"XDG_CACHE_HOME": "/home/u/.cache"}, AVX2) != default
  moved = compilation_cache.cache_dir({compilation_cache.OVERRIDE_VARIABLE: "gs://bucket/cache/"}, AVX512)
  assert moved.startswith("gs://bucket/cache/") and moved.rsplit("/", 1)[1] == default.rsplit("/", 1)[1]
  assert compilation_cache.cache_dir({compilation_cache.OVERRIDE_VARIABLE: "OFF"}, AVX512) is None


@pytest.mark.parametrize("forced", [{"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
                                    {"JAX_NUM_CPU_DEVICES": "2"}])
def test_the_cache_is_off_where_several_cpu_devices_are_forced(forced):
  # Cached XLA:CPU executables can deadlock in their collectives (the module's docstring), even in a named cache.
  environ = {compilation_cache.OVERRIDE_VARIABLE: "/tmp/c", "JAX_COMPILATION_CACHE_DIR": "/inherited", **forced}
  assert compilation_cache.enable(environ) is None and "JAX_COMPILATION_CACHE_DIR" not in environ
  one = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_NUM_CPU_DEVICES": "1"}
  assert compilation_cache.cache_dir({compilation_cache.OVERRIDE_VARIABLE: "/tmp/c", **one}, AVX512)


def test_cpu_processes_with_devices_to_share_turn_the_cache_off():
  # This worker's 8 forced devices stand in for the devices of several processes.
  assert jax.default_backend() == "cpu" and jax.device_count() > 1
  try:
    jax.config.update("jax_enable_compilation_cache", True)
    compilation_cache.off_for_cpu_collectives()
    assert not jax.config.jax_enable_compilation_cache
  finally:
    jax.config.update("jax_enable_compilation_cache", True)


def test_enable_sets_jaxs_settings_unless_jaxs_own_are_given():
  environ = {compilation_cache.OVERRIDE_VARIABLE: "/tmp/c", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "1.5"}
  directory = compilation_cache.enable(environ)
  assert environ["JAX_COMPILATION_CACHE_DIR"] == directory and directory.startswith("/tmp/c/")
  assert environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "1.5"  # The user's own setting wins.
  default = {compilation_cache.OVERRIDE_VARIABLE: "/tmp/c"}
  compilation_cache.enable(default)
  assert default["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0.0"  # Every compile is written.
  assert environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == "-1"  # JAX's per-write cap is off: `trim` caps it.
  off = {compilation_cache.OVERRIDE_VARIABLE: "off", "JAX_COMPILATION_CACHE_DIR": "/inherited"}
  assert compilation_cache.enable(off) is None and "JAX_COMPILATION_CACHE_DIR" not in off


_COMPILE = """
import logging, sys
import docent_jax
import jax, jax.numpy as jnp
logging.basicConfig(stream=sys.stdout, level=logging.WARNING)
logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
print("directory:", jax.config.jax_compilation_cache_dir)
def tanh_gram(x):
  return jnp.tanh(x @ x.T).sum()
jax.jit(tanh_gram)(jnp.ones((8, 8))).block_until_ready()
"""


def test_a_second_process_reads_what_the_first_compiled(tmp_path):
  env = {**tiny_training.subprocess_env(1), compilation_cache.OVERRIDE_VARIABLE: str(tmp_path),
         "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  runs = [subprocess.run([sys.executable, "-c", _COMPILE], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         check=True).stdout for _ in range(2)]
  assert f"directory: {tmp_path}/" in runs[0]
  hit = "Persistent compilation cache hit for 'jit_tanh_gram'"
  assert hit not in runs[0] and hit in runs[1], runs[1][-3000:]


def test_trim_removes_the_least_recently_used_entries_down_to_the_cap(tmp_path):
  for age, name in enumerate(["newest", "used_yesterday", "written_last_week", "oldest"]):
    (tmp_path / name).write_bytes(b"x" * 100)
    seconds = 1_000_000 - 86_400 * age
    os.utime(tmp_path / name, (seconds, seconds))
  os.utime(tmp_path / "written_last_week", (1_000_000 - 43_200, 1_000_000 - 7 * 86_400))  # Read 12 hours ago.
  assert compilation_cache.trim(str(tmp_path), max_bytes=250) == ["oldest", "used_yesterday"]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["newest", "written_last_week"]
  assert compilation_cache.trim(str(tmp_path), max_bytes=250) == []
  assert compilation_cache.trim("gs://bucket/cache", max_bytes=0) == []  # A bucket's lifecycle rules cap it.
