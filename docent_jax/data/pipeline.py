"""Grain input pipelines: global batches of record indices, each process reading only its slice."""
from collections.abc import Callable
from typing import Any

import grain
import jax
import numpy as np


def process_rows(global_rows: int, name: str = "global_batch_size") -> slice:
  """This process's rows of a global batch of `global_rows`, which must split evenly over the processes."""
  process_count = jax.process_count()
  if global_rows % process_count:
    raise ValueError(f"{name} {global_rows} is not divisible by {process_count} processes.")
  local_rows = global_rows // process_count
  return slice(jax.process_index() * local_rows, (jax.process_index() + 1) * local_rows)


def process_batches(num_records: int, read: Callable[[np.ndarray], dict[str, np.ndarray]], *,
                    global_batch_size: int, seed: int, shuffle: bool = True,
                    num_epochs: int | None = None) -> grain.IterDataset:
  """Batches of records for this process; `read` turns this process's record indices into a batch.

  The order of the global batches depends only on the seed, not on the number of processes: all
  processes draw the same permutation of record indices (cheap), cut it into global batches, and
  `read` only the indices of their own slice. So a run on N hosts sees exactly the batches of a run
  on one. Each epoch is a new permutation; an incomplete last batch is dropped. The iterator's
  get_state() / set_state() resume exactly where the state was taken.
  """
  rows = process_rows(global_batch_size)
  if num_records < global_batch_size:
    raise ValueError(f"{num_records} records are fewer than one batch of {global_batch_size}.")
  indices = grain.MapDataset.range(num_records)
  if shuffle:
    indices = indices.shuffle(seed=seed)
  return (indices.repeat(num_epochs)
          .batch(global_batch_size, drop_remainder=True)
          .map(lambda global_indices: read(global_indices[rows]))
          .to_iter_dataset())


def triple_batches(source: Any, entity_tokens: np.ndarray, *, global_batch_size: int, seed: int,
                   shuffle: bool = True, num_epochs: int | None = None) -> grain.IterDataset:
  """Batches of training triples with their entities' token ids (see `process_batches`).

  Args:
    source: a random-access source of records with 'head', 'relation' and 'tail' (e.g.
      `KnowledgeGraph.triple_sources['train']`).
    entity_tokens: int32 [num_entities, max_len] token ids of each entity.
    global_batch_size: triples per step over all processes.
    seed: shuffling seed.
    shuffle: a new permutation every epoch (else file order).
    num_epochs: epochs to run; None repeats forever.

  Returns:
    A grain dataset yielding dicts of numpy arrays 'head', 'relation', 'tail' int32 [b] and
    'head_tokens', 'tail_tokens' int32 [b, max_len], with b = global_batch_size / processes.
  """
  entity_tokens = np.asarray(entity_tokens, np.int32)

  def read(indices: np.ndarray) -> dict[str, np.ndarray]:
    records = [source[int(i)] for i in indices]
    batch = {key: np.array([r[key] for r in records], np.int32) for key in ("head", "relation", "tail")}
    return {**batch, "head_tokens": entity_tokens[batch["head"]], "tail_tokens": entity_tokens[batch["tail"]]}

  return process_batches(len(source), read, global_batch_size=global_batch_size, seed=seed, shuffle=shuffle,
                         num_epochs=num_epochs)
