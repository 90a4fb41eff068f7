"""Where JAX computes on the CPU, an XLA execution reuses the memory the previous one freed."""
import os
import platform
import subprocess
import sys

import pytest

from docent_jax import host_memory

# A jitted function whose temporary buffer (two 16 MiB matrices) reaches glibc's largest mmap threshold
# (32 MiB); prints the fewest MiB first touched by one of three warm calls. The heap takes a few calls to reach
# its size (a block freed under a newer small one does not fit the next call's layout), hence the warm-up.
FAULTED_MIB = """
import resource
import docent_jax, jax, jax.numpy as jnp
def chain(x, w):
  a = jnp.sin(x) @ w
  b = jnp.cos(a) @ w
  return (a * b * (jnp.tanh(b) @ w)).sum()
f = jax.jit(chain)
x, w = jnp.full((8192, 512), 1e-3), jnp.full((512, 512), 1e-3)
assert f.lower(x, w).compile().memory_analysis().temp_size_in_bytes >= 32 * 2**20
for _ in range(10):
  f(x, w).block_until_ready()
faulted = []
for _ in range(3):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x, w).block_until_ready()
  faulted.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * resource.getpagesize() / 2**20)
print(min(faulted))
"""


def faulted_mib(**env: str) -> float:
  environ = {**os.environ, "JAX_PLATFORMS": "cpu", **env}
  out = subprocess.run([sys.executable, "-c", FAULTED_MIB], env=environ, check=True, capture_output=True, text=True)
  return float(out.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="The settings are glibc's.")
def test_a_warm_execution_touches_no_fresh_memory():
  assert faulted_mib() < 4
  # glibc's defaults, for contrast: the temporary buffers are mapped afresh on every call.
  assert faulted_mib(**{host_memory.OVERRIDE_VARIABLE: "default"}) > 16


@pytest.mark.parametrize("environ, devices, expected", [
    ({"JAX_PLATFORMS": "cpu"}, ("/",), True),
    ({"JAX_PLATFORMS": "tpu,cpu"}, (), False),
    ({}, (), True),
    ({}, ("/",), False),  # An accelerator's device file exists.
])
def test_computes_on_cpu(environ, devices, expected):
  assert host_memory.computes_on_cpu(environ, devices) is expected


def test_nothing_changes_where_an_accelerator_computes_or_the_user_says_default():
  assert not host_memory.reuse_freed_memory({"JAX_PLATFORMS": "tpu"})
  assert not host_memory.reuse_freed_memory({"JAX_PLATFORMS": "cpu", host_memory.OVERRIDE_VARIABLE: "default"})
