"""Writes tiny_roberta/ and tiny_roberta_golden.npz: a tiny random RoBERTa and PyTorch transformers' outputs for it.

The model (2 layers of width 32) reads the byte-level BPE vocabulary of a tokenizer trained on `TEXTS`; its
weights come from `SEED`, every tensor moved off its initial value (zero biases, unit LayerNorm scales) so that
each one shows in the outputs. Lets tests check the Flax RoBERTa, its loader and tokenizer on machines without
torch. Rerun (from the repository root) only when what is made here changes:
  python tests/golden/make_roberta_golden.py
"""
import pathlib
import sys

import numpy as np
import tokenizers
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from docent_jax.modules import pretrained  # pylint: disable=g-import-not-at-top

GOLDEN_DIR = pathlib.Path(__file__).resolve().parent
MODEL_DIR = GOLDEN_DIR / "tiny_roberta"
GOLDEN_PATH = GOLDEN_DIR / "tiny_roberta_golden.npz"
SEED = 0
# RoBERTa-base's special tokens and ids: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4.
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
VOCAB_SIZE = 320  # The 256 bytes, the special tokens and about 60 merges.
TEXTS = [
    "acme camera model x100 black", "x101 globex digital camera 16 megapixel", "initech 55 inch tv with remote",
    "umbrella wireless headphones, noise cancelling", "hooli laptop 15.6 inch 8gb ram", "vandelay usb cable 2m",
    "The quick brown fox jumps over the lazy dog.", "Sony TV 55 inch", "Entity representations from text",
]
MODEL_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                    max_position_embeddings=64, type_vocab_size=1)
# Offer pairs of different lengths, so that the batch has padding.
FIRST = ["acme camera model x100", "Sony TV", "hooli laptop 15.6 inch 8gb ram, silver"]
SECOND = ["x100 acme digital camera black", "initech 55 inch tv", "laptop"]


def save_tiny_roberta(directory: pathlib.Path, seed: int = SEED, masked_lm: bool = False) -> torch.nn.Module:
  """Saves a tiny random RoBERTa (a `RobertaModel`, or `RobertaForMaskedLM`) with its vocab.json and merges.txt."""
  directory.mkdir(parents=True, exist_ok=True)
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(TEXTS, vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                          show_progress=False)
  bpe.save_model(str(directory))
  torch.manual_seed(seed)
  config = transformers.RobertaConfig(vocab_size=bpe.get_vocab_size(), **MODEL_CONFIG)
  model = transformers.RobertaForMaskedLM(config) if masked_lm else transformers.RobertaModel(config)
  with torch.no_grad():
    for param in model.parameters():  # Tied tensors (the MLM decoder's) are listed once.
      param.add_(0.05 * torch.randn_like(param))
  model.save_pretrained(str(directory))
  return model.eval()


def golden_arrays(model_dir: pathlib.Path = MODEL_DIR) -> dict[str, np.ndarray]:
  """The texts, their token ids from the project's tokenizer loader and torch's outputs for them."""
  tokens = pretrained.load_tokenizer(str(model_dir))(FIRST, SECOND, padding=True, return_tensors="np")
  model = transformers.RobertaModel.from_pretrained(str(model_dir)).eval()
  with torch.no_grad():
    out = model(**{name: torch.from_numpy(value) for name, value in tokens.items()})
  return {
      "first_texts": np.array(FIRST),
      "second_texts": np.array(SECOND),
      "input_ids": tokens["input_ids"].astype(np.int32),
      "attention_mask": tokens["attention_mask"].astype(np.int32),
      "last_hidden_state": out.last_hidden_state.numpy(),
      "pooler_output": out.pooler_output.numpy(),
  }


if __name__ == "__main__":
  save_tiny_roberta(MODEL_DIR)
  np.savez_compressed(GOLDEN_PATH, **golden_arrays())
  print(f"Wrote {MODEL_DIR} and {GOLDEN_PATH}")
