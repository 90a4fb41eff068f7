"""Tokenizes texts (and text pairs) into fixed-length token-id arrays."""
import re
import threading
from typing import Any, Sequence

from absl import logging
import numpy as np

_CHUNK = 4096  # Texts per tokenizer call: batched for speed, bounded for memory.
# A Hugging Face fast tokenizer sets its truncation and padding as state at every call, so two threads
# tokenizing to different lengths (grain's prefetch threads beside an evaluation) get each other's
# lengths. Every call goes through `encode`, under this lock.
_TOKENIZER_LOCK = threading.Lock()


def encode(tokenizer: Any, *texts: Sequence[str], **options: Any) -> Any:
  """`tokenizer(*texts, **options)`, one call at a time across threads."""
  with _TOKENIZER_LOCK:
    return tokenizer(*texts, **options)


_WORDS = re.compile(r"\w+")


def without_stopwords(texts: Sequence[str]) -> list[str]:
  """The texts' words, stop words and punctuation left out, joined by spaces (BLP's input to its word-embedding
  baselines). The stop words are scikit-learn's English list (BLP uses NLTK's, which needs a download)."""
  # Imported here: scikit-learn takes a third of a second to import, and only BE-BOW and DKRL runs use this.
  from sklearn.feature_extraction import text as sklearn_text  # pylint: disable=g-import-not-at-top
  kept = [" ".join(w for w in _WORDS.findall(text) if w.lower() not in sklearn_text.ENGLISH_STOP_WORDS)
          for text in texts]
  emptied = sum(1 for text, words in zip(texts, kept) if text.strip() and not words)
  if emptied:
    logging.warning("%d of %d texts hold only stop words and punctuation; they become empty.", emptied, len(texts))
  return kept


def _check_room(tokenizer: Any, max_len: int, pair: bool) -> None:
  """Raises unless `max_len` holds the tokenizer's special tokens (of a pair if `pair`) and it has a pad token."""
  special = tokenizer.num_special_tokens_to_add(pair=pair)
  if max_len < special:
    raise ValueError(f"max_len must leave room for the tokenizer's {special} special tokens; got {max_len}.")
  if tokenizer.pad_token_id is None:
    raise ValueError(f"Tokenizer {tokenizer.name_or_path!r} has no pad token.")


def tokenize_texts(tokenizer: Any, texts: Sequence[str], max_len: int) -> np.ndarray:
  """Token ids `[CLS] text [SEP]` (RoBERTa: `<s> text </s>`), truncated and padded with the tokenizer's pad id.

  Args:
    tokenizer: a Hugging Face fast tokenizer.
    texts: the texts.
    max_len: the length of every row, special tokens included.

  Returns:
    int32 [len(texts), max_len].
  """
  _check_room(tokenizer, max_len, pair=False)
  rows = [np.zeros((0, max_len), np.int32)]
  for start in range(0, len(texts), _CHUNK):
    encoded = encode(tokenizer, list(texts[start:start + _CHUNK]), max_length=max_len, padding="max_length",
                        truncation=True, return_attention_mask=False, return_token_type_ids=False)
    rows.append(np.asarray(encoded["input_ids"], np.int32))
  return np.concatenate(rows)


def entity_token_table(kg: Any, tokenizer: Any, max_len: int) -> np.ndarray:
  """Token ids of every entity description of a `KnowledgeGraph`, int32 [num_entities, max_len]."""
  return tokenize_texts(tokenizer, kg.entity_texts, max_len)


def tokenize_pairs(tokenizer: Any, left: Sequence[str], right: Sequence[str], max_len: int) -> np.ndarray:
  """Token ids and token types of `[CLS] left [SEP] right [SEP]`, int32 [m, 2, max_len].

  The tokenizer joins the texts: BERT's as above with token types 0 then 1, RoBERTa's as
  `<s> left </s></s> right </s>`, all type 0. Padded with the tokenizer's pad id; too long pairs lose
  tokens from the longer text first (Hugging Face's 'longest_first'), so that neither offer is cut away
  entirely.
  """
  if len(left) != len(right):
    raise ValueError(f"{len(left)} left texts but {len(right)} right texts.")
  _check_room(tokenizer, max_len, pair=True)
  rows = [np.zeros((0, 2, max_len), np.int32)]
  for start in range(0, len(left), _CHUNK):
    end = start + _CHUNK
    encoded = encode(tokenizer, list(left[start:end]), list(right[start:end]), max_length=max_len,
                     padding="max_length", truncation="longest_first", return_attention_mask=False,
                     return_token_type_ids=True)
    rows.append(np.stack([np.asarray(encoded["input_ids"], np.int32),
                          np.asarray(encoded["token_type_ids"], np.int32)], axis=1))
  return np.concatenate(rows)
