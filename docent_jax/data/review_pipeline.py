"""Grain input pipeline of review sentences with their entity and token ids."""
from typing import Any

import grain
import jax
import numpy as np

from docent_jax.data import tokenization


def sentence_batches(source: Any, tokenizer: Any, *, global_batch_size: int, seed: int, max_len: int,
                     shuffle: bool = True, num_epochs: int | None = None) -> grain.IterDataset:
  """Batches of (entity, sentence tokens); each process gets its slice of every global batch.

  Same scheme as `pipeline.triple_batches`: all processes draw the same permutation of record
  indices, cut it into global batches and read only their own slice, so N hosts see exactly the
  batches of one. Each epoch is a new permutation; an incomplete last batch is dropped. In-batch
  negatives come from a plain permutation of all sentences, so a batch occasionally holds two
  sentences of one entity; objectives that need distinct entities must mask those pairs.

  Sentences are tokenized per batch rather than once up front: it costs about 2 ms per 32
  sentences on one CPU core, and a token table of a large corpus (millions of sentences) would not
  fit in host memory.

  Args:
    source: a random-access source of records with 'entity' and 'text' (e.g.
      `ReviewCorpus.sentence_source`).
    tokenizer: a Hugging Face fast tokenizer.
    global_batch_size: sentences per step over all processes.
    seed: shuffling seed.
    max_len: token ids per sentence, [CLS] and [SEP] included (longer sentences are truncated).
    shuffle: a new permutation every epoch (else file order).
    num_epochs: epochs to run; None repeats forever.

  Returns:
    A grain dataset; its iterator yields dicts of numpy arrays 'entity' int32 [b] and 'tokens'
    int32 [b, max_len], with b = global_batch_size / processes, and its get_state() / set_state()
    resume exactly where the state was taken.
  """
  process_count, process_index = jax.process_count(), jax.process_index()
  if global_batch_size % process_count:
    raise ValueError(f"global_batch_size {global_batch_size} is not divisible by {process_count} processes.")
  if len(source) < global_batch_size:
    raise ValueError(f"{len(source)} sentences are fewer than one batch of {global_batch_size}.")
  if max_len < 2:
    raise ValueError(f"max_len must leave room for [CLS] and [SEP]; got {max_len}.")
  local_batch_size = global_batch_size // process_count

  def read_local_slice(global_indices: np.ndarray) -> dict[str, np.ndarray]:
    start = process_index * local_batch_size
    records = [source[int(i)] for i in global_indices[start:start + local_batch_size]]
    texts = [r["text"].decode("utf-8") if isinstance(r["text"], bytes) else r["text"] for r in records]
    return {"entity": np.array([r["entity"] for r in records], np.int32),
            "tokens": tokenization.tokenize_texts(tokenizer, texts, max_len)}

  indices = grain.MapDataset.range(len(source))
  if shuffle:
    indices = indices.shuffle(seed=seed)
  return (indices.repeat(num_epochs)
          .batch(global_batch_size, drop_remainder=True)
          .map(read_local_slice)
          .to_iter_dataset())
