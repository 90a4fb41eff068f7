"""Does XLA:CPU hang when many sharded steps are queued on forced host devices? It does when its thread pool has
fewer than two threads per device, which `docent_jax.cpu_flags.size_thread_pool` prevents (docs/scaling.md, "The
cache and the test suite").

A jitted step with a gradient all-reduce over `--devices` forced host CPU devices runs `--steps` times, waiting for
the step `--in_flight` steps back before dispatching the next, on XLA's CPU thread pool of `--threads` threads
(default: docent_jax's choice). Each setting runs in a child process of its own: XLA ends a process whose
collective rendezvous passes its time limit. Prints one JSON object: per in-flight count, the seconds the steps
took, or "hung" with the child's exit status.

  python tools/cpu_collective_hang.py [--in_flight 1,8,30,199 --steps 200 --devices 8 --threads 2]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

from docent_jax import cpu_flags

_ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_ARGS.add_argument("--in_flight", default="1,8,30,199", help="Steps allowed in flight, one child per value.")
_ARGS.add_argument("--steps", type=int, default=200)
_ARGS.add_argument("--devices", type=int, default=8, help="Forced host CPU devices the step is sharded over.")
_ARGS.add_argument("--threads", type=int, default=0,
                   help="XLA's CPU thread pool (PJRT_NPROC); 0: docent_jax's choice for the device count.")
_ARGS.add_argument("--timeout", type=float, default=120.0, help="Seconds before a child counts as hung.")
_ARGS.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)


def _run_steps(in_flight: int, steps: int) -> float:
  """Seconds for `steps` sharded steps with at most `in_flight` not yet waited for."""
  import jax  # pylint: disable=g-import-not-at-top  # After the child's XLA_FLAGS are set.
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax.sharding import Mesh, NamedSharding, PartitionSpec  # pylint: disable=g-import-not-at-top
  mesh = Mesh(jax.devices(), ("data",))
  inputs = jax.device_put(jnp.ones((len(jax.devices()), 1024, 256)), NamedSharding(mesh, PartitionSpec("data")))
  weights = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, PartitionSpec()))

  @jax.jit
  def step(inputs, weights):
    gradient = jax.grad(lambda w: jnp.mean(jnp.tanh(inputs @ w) ** 2))(weights)  # Summed over the devices.
    return weights - 0.01 * gradient, jnp.sum(gradient)

  pending = []
  started = time.perf_counter()
  for _ in range(steps):
    weights, total = step(inputs, weights)
    pending.append(total)
    if len(pending) > in_flight:
      pending.pop(0).block_until_ready()
  jax.block_until_ready(weights)
  return time.perf_counter() - started


def main() -> None:
  args = _ARGS.parse_args()
  if args.child:
    print(json.dumps(_run_steps(args.child, args.steps)))
    return
  env = {name: value for name, value in os.environ.items() if name not in cpu_flags.THREAD_POOL_VARIABLES}
  env.update(JAX_PLATFORMS="cpu", DOCENT_JAX_COMPILATION_CACHE="off",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}")
  if args.threads:
    env[cpu_flags.THREAD_POOL_VARIABLES[0]] = str(args.threads)
  else:
    cpu_flags.size_thread_pool(env)
  results = {}
  for in_flight in (int(n) for n in args.in_flight.split(",")):
    command = [sys.executable, __file__, f"--child={in_flight}", f"--steps={args.steps}"]
    try:
      child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
      results[in_flight] = f"hung (no exit within {args.timeout:.0f} s)"
      continue
    if child.returncode == 0:
      results[in_flight] = round(float(child.stdout.split()[-1]), 3)
    elif child.returncode == -signal.SIGABRT:  # XLA's end of a rendezvous past its time limit.
      results[in_flight] = f"hung (exit status {child.returncode})"
    else:  # Anything else is no answer to the question: say so, with the child's last words.
      raise RuntimeError(f"{' '.join(command)} failed ({child.returncode}): {child.stderr[-2000:]}")
  print(json.dumps({"devices": args.devices, "threads": int(env.get(cpu_flags.THREAD_POOL_VARIABLES[0], 0)) or None,
                    "steps": args.steps, "seconds_or_hung_by_in_flight": results}))


if __name__ == "__main__":
  main()
