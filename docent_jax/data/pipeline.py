"""Grain input pipelines: global batches of record indices, each process reading only its slice.

The trainer iterates every objective's batches through `batch_iterator`, which reads them ahead in worker
processes (`data.num_workers`) or in a background thread (`data.prefetch`).
"""
from collections.abc import Callable
import multiprocessing
from multiprocessing import connection
import os
import threading
from typing import Any

from absl import flags
from absl import logging
import cloudpickle
import grain
import jax
import numpy as np

# Batches are read one at a time, in order, by whoever iterates: read-ahead is `batch_iterator`'s job. (grain's
# default, 16 threads reading up to 500 batches ahead, would run in every worker and behind every test's `next`.)
IN_ORDER = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
# Worker outputs smaller than this travel pickled through grain's queue: batches of ids are KBs, for which a
# shared-memory segment per array costs more than the copy (and leaves segments to clean up at exit).
_MIN_SHARED_MEMORY_BYTES = 1 << 20


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
          .to_iter_dataset(IN_ORDER))


def shorter_half_first(head_tokens: np.ndarray, tail_tokens: np.ndarray, short_width: int,
                       pad_id: int) -> dict[str, np.ndarray]:
  """A batch's entity rows [heads; tails] split by length for an encoder whose time goes per token.

  Returns 'short_tokens' [b, short_width] (the b shorter rows, cut to `short_width` word pieces; at full width when
  one of them does not fit), 'long_tokens' [b, max_len] (the b longer rows) and 'entity_order' [2b]: row i of
  [heads; tails] is row entity_order[i] of [short; long]. Cutting padding changes no vector (it is masked).
  """
  rows = np.concatenate([head_tokens, tail_tokens])
  half = len(head_tokens)
  lengths = np.count_nonzero(rows != pad_id, axis=1)
  order = np.argsort(lengths, kind="stable")
  width = short_width if lengths[order[half - 1]] <= short_width else rows.shape[1]
  entity_order = np.empty(len(rows), np.int32)
  entity_order[order] = np.arange(len(rows), dtype=np.int32)
  return {"short_tokens": rows[order[:half], :width], "long_tokens": rows[order[half:]], "entity_order": entity_order}


def triple_batches(triples: np.ndarray, entity_tokens: np.ndarray, *, global_batch_size: int, seed: int,
                   shuffle: bool = True, num_epochs: int | None = None, short_half_width: int = 0,
                   pad_id: int = 0) -> grain.IterDataset:
  """Batches of training triples with their entities' token ids (see `process_batches`).

  Args:
    triples: int32 [n, 3] (head, relation, tail), e.g. `KnowledgeGraph.triples['train']`; held in memory, so
      that a batch is two array gathers (a TFDS record source decodes each record in Python, ~1 ms).
    entity_tokens: int32 [num_entities, max_len] token ids of each entity.
    global_batch_size: triples per step over all processes.
    seed: shuffling seed.
    shuffle: a new permutation every epoch (else file order).
    num_epochs: epochs to run; None repeats forever.
    short_half_width: when below max_len, each batch also holds `shorter_half_first`'s arrays, so that the
      step encodes the shorter half of its descriptions at this width. One process only: processes would
      need to agree on the width, the shape of a global array.
    pad_id: the tokenizer's padding id, after each description's word pieces.

  Returns:
    A grain dataset yielding dicts of numpy arrays 'head', 'relation', 'tail' int32 [b] and
    'head_tokens', 'tail_tokens' int32 [b, max_len], with b = global_batch_size / processes.
  """
  triples = np.asarray(triples, np.int32)
  entity_tokens = np.asarray(entity_tokens, np.int32)
  split = 0 < short_half_width < entity_tokens.shape[1] and jax.process_count() == 1

  def read(indices: np.ndarray) -> dict[str, np.ndarray]:
    head, relation, tail = triples[indices].T
    batch = {"head": head, "relation": relation, "tail": tail,
             "head_tokens": entity_tokens[head], "tail_tokens": entity_tokens[tail]}
    if split:
      batch.update(shorter_half_first(batch["head_tokens"], batch["tail_tokens"], short_half_width, pad_id))
    return batch

  return process_batches(len(triples), read, global_batch_size=global_batch_size, seed=seed, shuffle=shuffle,
                         num_epochs=num_epochs)


def _exit_with_parent(worker_index: int, worker_count: int) -> None:
  """Ends a grain worker process when the process that started it is gone.

  grain stops its workers when the iterator is closed or its process exits, but not when that process is
  killed (SIGKILL, OOM): the workers would wait forever for their buffers to drain.
  """
  del worker_index, worker_count
  parent = multiprocessing.parent_process()

  def exit_when_parent_ends() -> None:
    connection.wait([parent.sentinel])  # Readable once the parent's end of the pipe is closed: it has ended.
    os._exit(1)

  if parent is not None:
    threading.Thread(target=exit_when_parent_ends, daemon=True).start()


class BatchIterator(grain.DatasetIterator):
  """Iterates a `grain.MapDataset` of batches in order, reading `prefetch` batches ahead.

  With `num_workers` > 0, worker processes read the batches: worker w reads batches w, w + num_workers, ...,
  keeping max(prefetch, 1) ready, and grain interleaves them back in order. Without workers a background thread
  reads them, or with prefetch 0 each `next` does. The state is the index of the next batch, {'next_index': i},
  as in the state of grain's own iterator of the batches: it does not depend on the workers or the read-ahead,
  so a run may resume with other settings, or from a state saved before this class. `set_state` stops the
  reading; the next batch starts it again from that index (the batches before it are never read).
  """

  def __init__(self, batches: grain.MapDataset, *, num_workers: int = 0, prefetch: int = 0):
    super().__init__()
    if num_workers < 0 or prefetch < 0:
      raise ValueError(f"num_workers and prefetch must be >= 0; got {num_workers} and {prefetch}.")
    self._batches, self._num_workers, self._prefetch = batches, num_workers, prefetch
    self._next_index = 0
    self._reader: grain.DatasetIterator | None = None

  def __next__(self) -> Any:
    self._assert_not_closed()
    if self._reader is None:
      self._reader = iter(self._read_ahead(self._batches[self._next_index:].to_iter_dataset(IN_ORDER)))
    batch = next(self._reader)
    self._next_index += 1
    return batch

  def _read_ahead(self, batches: grain.IterDataset) -> grain.IterDataset:
    if self._num_workers:
      # grain's multiprocessing reads absl flags: their defaults where no program parsed them (tests, notebooks).
      if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
      # Workers are spawned: each unpickles (cloudpickle) the dataset, `read` closures and what they hold.
      options = grain.MultiprocessingOptions(num_workers=self._num_workers,
                                             per_worker_buffer_size=max(self._prefetch, 1))
      batches = grain.experimental.WithOptionsIterDataset(
          batches, grain.experimental.DatasetOptions(min_shm_size=_MIN_SHARED_MEMORY_BYTES))
      return batches.mp_prefetch(options, worker_init_fn=_exit_with_parent)
    if self._prefetch:
      return grain.experimental.ThreadPrefetchIterDataset(batches, prefetch_buffer_size=self._prefetch)
    return batches

  def get_state(self) -> dict[str, int]:
    return {"next_index": self._next_index}

  def set_state(self, state: dict[str, int]) -> None:
    self._stop_reading()
    self._next_index = int(state["next_index"])

  def _stop_reading(self) -> None:
    if self._reader is not None:
      self._reader.close()
      self._reader = None

  def close(self) -> None:
    """Stops the reading thread or worker processes."""
    self._stop_reading()
    super().close()


def batch_iterator(batches: grain.MapDataset | grain.IterDataset, *, num_workers: int = 0,
                   prefetch: int = 0) -> BatchIterator:
  """A `BatchIterator` of an objective's `train_batches`: a MapDataset of batches, or its `to_iter_dataset`.

  Batch i must be a function of i alone (no filtering, no state carried from batch to batch), which every
  pipeline here is: that is what makes the batches the same with any number of workers.
  """
  if isinstance(batches, grain.IterDataset):
    # `to_iter_dataset` keeps the MapDataset it reads in order as its only parent; its read options are
    # replaced by the read-ahead here.
    parents = batches.parents
    if len(parents) != 1 or not isinstance(parents[0], grain.MapDataset):
      raise TypeError(f"Expected the batches as a grain MapDataset or its to_iter_dataset(); got {batches}.")
    batches = parents[0]
  if num_workers:
    try:
      cloudpickle.dumps(batches)  # What grain sends to every worker.
    except Exception as error:  # pylint: disable=broad-except  # Whatever the unpicklable object raises.
      logging.warning("The batches cannot be sent to %d worker processes (%s: %s); a thread reads them instead.",
                      num_workers, type(error).__name__, error)
      num_workers = 0
  return BatchIterator(batches, num_workers=num_workers, prefetch=prefetch)
