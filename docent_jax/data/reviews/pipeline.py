"""Grain input pipeline of review sentences with their entity and token ids."""
from typing import Any

import grain
import numpy as np

from docent_jax.data import pipeline
from docent_jax.data import tokenization


def sentence_batches(source: Any, tokenizer: Any, *, global_batch_size: int, seed: int, max_len: int,
                     shuffle: bool = True, num_epochs: int | None = None) -> grain.IterDataset:
  """Batches of (entity, sentence tokens); each process gets its slice of every global batch.

  Batching and per-process slicing as in `pipeline.process_batches`. In-batch
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
  if max_len < 2:
    raise ValueError(f"max_len must leave room for [CLS] and [SEP]; got {max_len}.")

  def read(indices: np.ndarray) -> dict[str, np.ndarray]:
    records = [source[int(i)] for i in indices]
    texts = [r["text"].decode("utf-8") if isinstance(r["text"], bytes) else r["text"] for r in records]
    return {"entity": np.array([r["entity"] for r in records], np.int32),
            "tokens": tokenization.tokenize_texts(tokenizer, texts, max_len)}

  return pipeline.process_batches(len(source), read, global_batch_size=global_batch_size, seed=seed,
                                  shuffle=shuffle, num_epochs=num_epochs)
