"""Writes minilm_l6_golden.npz: PyTorch transformers' MiniLM-L6 outputs on a small padded batch.

Lets tests check the Flax BERT on machines without torch. Rerun (from the repository root) only when
the inputs below change:  python tests/golden/make_bert_golden.py
"""
import pathlib
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from docent_jax.modules import pretrained  # pylint: disable=g-import-not-at-top

GOLDEN_PATH = pathlib.Path(__file__).resolve().parent / "minilm_l6_golden.npz"
# Sentence pairs of different lengths, so the batch has padding and both token types.
FIRST = ["The quick brown fox jumps over the lazy dog.", "Paris", "Entity representations from text"]
SECOND = ["It was not amused.", "capital of France", "learned with a pretrained encoder"]
HIDDEN_SLICE = 16  # Leading hidden units stored in full; every unit enters the per-position sums.


def golden_arrays() -> dict[str, np.ndarray]:
  """The texts, their token ids from the shipped tokenizer and torch's hidden states for them."""
  model_dir = pretrained.resolve_model_dir("minilm-l6")
  tokens = pretrained.load_tokenizer("minilm-l6")(FIRST, SECOND, padding=True, return_tensors="np")
  model = transformers.BertModel.from_pretrained(str(model_dir)).eval()
  with torch.no_grad():
    out = model(**{name: torch.from_numpy(value) for name, value in tokens.items()})
  hidden = out.last_hidden_state.numpy()
  return {
      "first_texts": np.array(FIRST),
      "second_texts": np.array(SECOND),
      "input_ids": tokens["input_ids"].astype(np.int32),
      "attention_mask": tokens["attention_mask"].astype(np.int32),
      "token_type_ids": tokens["token_type_ids"].astype(np.int32),
      "hidden_slice": hidden[..., :HIDDEN_SLICE],
      "hidden_sum": hidden.sum(-1),
      "hidden_abs_sum": np.abs(hidden).sum(-1),
      "pooler_slice": out.pooler_output.numpy()[:, :HIDDEN_SLICE],
  }


if __name__ == "__main__":
  np.savez_compressed(GOLDEN_PATH, **golden_arrays())
  print(f"Wrote {GOLDEN_PATH}")
