"""Grain input pipeline of training triples with their entities' token ids."""
from typing import Any

import grain
import jax
import numpy as np


class _SelectTriple(grain.transforms.Map):
  """Keeps a triple record's indices (TFDS records also carry the unused entity fields)."""

  def map(self, record: dict[str, Any]) -> dict[str, np.ndarray]:
    return {key: np.int32(record[key]) for key in ("head", "relation", "tail")}


class _AddTokens(grain.transforms.Map):
  """Looks up the head and tail token ids of a batch."""

  def __init__(self, entity_tokens: np.ndarray):
    self._entity_tokens = entity_tokens

  def map(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "head_tokens": self._entity_tokens[batch["head"]],
            "tail_tokens": self._entity_tokens[batch["tail"]]}


def triple_batches(source: Any, entity_tokens: np.ndarray, *, global_batch_size: int, seed: int,
                   shuffle: bool = True, num_epochs: int | None = None, worker_count: int = 0) -> grain.DataLoader:
  """Batches of training triples for this process.

  Each process reads its own shard of `source` and gets batches of
  global_batch_size // jax.process_count() triples (an incomplete last batch is
  dropped). Iterate the loader; its iterator's get_state() / set_state()
  resume exactly where the state was taken.

  Args:
    source: a random-access source of records with 'head', 'relation' and
      'tail' (e.g. `KnowledgeGraph.triple_sources['train']`).
    entity_tokens: int32 [num_entities, max_len] token ids of each entity.
    global_batch_size: triples per step over all processes.
    seed: shuffling seed.
    shuffle: shuffle every epoch.
    num_epochs: epochs to run; None repeats forever.
    worker_count: grain worker processes (0: in the main process).

  Returns:
    A grain DataLoader yielding dicts of numpy arrays: 'head', 'relation',
    'tail' int32 [b] and 'head_tokens', 'tail_tokens' int32 [b, max_len].
  """
  process_count = jax.process_count()
  if global_batch_size % process_count:
    raise ValueError(f"global_batch_size {global_batch_size} is not divisible by {process_count} processes.")
  local_batch_size = global_batch_size // process_count
  shard_options = grain.sharding.ShardByJaxProcess(drop_remainder=True)
  if len(source) // process_count < local_batch_size:
    raise ValueError(f"Each process's shard of {len(source)} triples is smaller than one batch of {local_batch_size}.")
  sampler = grain.samplers.IndexSampler(
      num_records=len(source), shard_options=shard_options, shuffle=shuffle, num_epochs=num_epochs, seed=seed)
  return grain.DataLoader(
      data_source=source,
      sampler=sampler,
      operations=[_SelectTriple(), grain.transforms.Batch(local_batch_size, drop_remainder=True),
                  _AddTokens(np.asarray(entity_tokens, np.int32))],
      worker_count=worker_count)
