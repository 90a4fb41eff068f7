"""Training batches that mix the pair tasks of universal representations in a fixed ratio.

Every global batch holds the same number of rows of each task (`rows_per_task`, from the configured ratio),
task after task. A task's rows are consecutive slices of its own stream, a new seeded permutation of its
pairs each time the stream has used them all, so a small task repeats more often than a large one. Batch i is
a pure function of (seed, i): every process computes the indices of the whole global batch (cheap) and reads
only its rows, so N hosts see exactly the batches of one, and a resumed run continues the same stream.
"""
from collections.abc import Mapping, Sequence

import grain
import numpy as np

from docent_jax.data import pipeline


def rows_per_task(ratio: Mapping[str, float], global_batch_size: int) -> dict[str, int]:
  """Rows of each task with a positive share in a global batch, by largest remainder; each gets at least one.

  Raises:
    ValueError: a negative share, no positive share, or more tasks than rows.
  """
  if any(share < 0 for share in ratio.values()):
    raise ValueError(f"Task ratio shares must be >= 0; got {dict(ratio)}.")
  tasks = [task for task, share in ratio.items() if share > 0]
  if not tasks:
    raise ValueError(f"No task has a positive share in the ratio {dict(ratio)}.")
  if len(tasks) > global_batch_size:
    raise ValueError(f"{len(tasks)} tasks cannot share a batch of {global_batch_size} rows.")
  total = sum(ratio[task] for task in tasks)
  exact = np.array([ratio[task] / total * global_batch_size for task in tasks])
  rows = np.maximum(np.floor(exact).astype(int), 1)
  while rows.sum() < global_batch_size:
    rows[np.argmax(exact - rows)] += 1
  while rows.sum() > global_batch_size:
    rows[np.argmax(np.where(rows > 1, rows - exact, -np.inf))] -= 1
  return dict(zip(tasks, rows.tolist()))


class TaskMixSampler:
  """The (task, pair) rows of every global batch; see the module docstring."""

  def __init__(self, task_sizes: Mapping[str, int], rows: Mapping[str, int], seed: int):
    self.tasks = list(rows)
    missing = [task for task in self.tasks if task_sizes.get(task, 0) < 1]
    if missing:
      raise ValueError(f"Tasks {missing} have no training pairs.")
    self.sizes = {task: int(task_sizes[task]) for task in self.tasks}
    self.rows = dict(rows)
    self.seed = seed

  def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
    """int32 task numbers and int64 pair indices [global batch] of batch `index`, task after task."""
    tasks, pairs = [], []
    for number, task in enumerate(self.tasks):
      positions = index * self.rows[task] + np.arange(self.rows[task])
      epochs, offsets = np.divmod(positions, self.sizes[task])
      chosen = np.empty(len(positions), np.int64)
      for epoch in np.unique(epochs):  # At most two: a batch's slice can cross the end of a permutation.
        permutation = np.random.default_rng((self.seed, number, int(epoch))).permutation(self.sizes[task])
        chosen[epochs == epoch] = permutation[offsets[epochs == epoch]]
      pairs.append(chosen)
      tasks.append(np.full(self.rows[task], number, np.int32))
    return np.concatenate(tasks), np.concatenate(pairs)


def mixed_task_batches(tokens: Mapping[str, np.ndarray], labels: Mapping[str, np.ndarray],
                       ratio: Mapping[str, float], *, global_batch_size: int, seed: int) -> grain.IterDataset:
  """Batches of this process's rows: 'tokens' int32 [rows, 2, L], 'task' int32 [rows] (the task's position
  in `ratio`'s order of tasks with a positive share), 'label' int32 [rows].

  Args:
    tokens: task -> int32 [n, 2, L] token ids of its training pairs (every task the same L).
    labels: task -> int [n] labels of those pairs.
    ratio: task -> its share of each batch (0 leaves the task out).
    global_batch_size: rows per step over all processes.
    seed: seeds the streams.
  """
  rows = rows_per_task(ratio, global_batch_size)
  sampler = TaskMixSampler({task: len(labels[task]) for task in rows}, rows, seed)
  local = pipeline.process_rows(global_batch_size)
  task_tokens: Sequence[np.ndarray] = [np.asarray(tokens[task], np.int32) for task in sampler.tasks]
  task_labels: Sequence[np.ndarray] = [np.asarray(labels[task], np.int32) for task in sampler.tasks]

  def read(index: int) -> dict[str, np.ndarray]:
    task, pair = (part[local] for part in sampler(index))
    return {"tokens": np.stack([task_tokens[t][p] for t, p in zip(task, pair)]),
            "task": task, "label": np.array([task_labels[t][p] for t, p in zip(task, pair)], np.int32)}

  return (grain.MapDataset.range(1).repeat(None).map_with_index(lambda index, _: read(index))
          .to_iter_dataset(pipeline.IN_ORDER))
