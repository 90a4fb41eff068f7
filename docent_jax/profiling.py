"""`train.profile`: a JAX profiler trace of chosen training steps, for xprof / TensorBoard's profile plugin.

Each process writes its own trace under `<run>/profile/process_<index>`; every traced step is annotated
(`train_step`, with its number), so that xprof's overview and trace viewer show step times.
"""
import contextlib
from typing import Any, ContextManager

from absl import logging
from etils import epath
import jax
import ml_collections


class StepProfile:
  """Starts the trace before the first chosen step and stops it once the last one's results are ready."""

  def __init__(self, profile: ml_collections.ConfigDict | None, directory: epath.Path, start: int):
    """`profile`: `train.profile` (start_step, num_steps); `start`: the step the run resumes from."""
    num_steps = profile.num_steps if profile is not None else 0
    self.first = max(profile.start_step if profile is not None else 1, start + 1)
    self.last = (profile.start_step + num_steps - 1) if num_steps else 0
    self.directory = directory / f"process_{jax.process_index()}"
    self.tracing = False

  def step(self, step: int) -> ContextManager[Any]:
    """Wraps the dispatch of `step`: starts the trace at the first chosen step, annotates each chosen one."""
    if not self.first <= step <= self.last:
      return contextlib.nullcontext()
    if not self.tracing:
      self.directory.mkdir(parents=True, exist_ok=True)
      jax.profiler.start_trace(str(self.directory))
      self.tracing = True
    return jax.profiler.StepTraceAnnotation("train_step", step_num=step)

  def step_done(self, step: int, outputs: Any) -> None:
    """After `step` was dispatched: at the last chosen step, waits for `outputs` and writes the trace."""
    if self.tracing and step >= self.last:
      jax.block_until_ready(outputs)
      self.close()

  def close(self) -> None:
    """Writes the trace now (also where the run ends or fails before the last chosen step)."""
    if self.tracing:
      jax.profiler.stop_trace()
      self.tracing = False
      logging.info("Wrote the profile of steps %d-%d to %s (open it with xprof or TensorBoard's profile plugin).",
                   self.first, self.last, self.directory)
