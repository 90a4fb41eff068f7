"""Encoding throughput of a model's `encode` (texts/s) against sentence-transformers on PyTorch, on CPU.

The same MiniLM-L6 (all-MiniLM-L6-v2, mean-pooled) encodes the same texts in batches of `--batch_size` at most
`--max_len` word pieces: this project's `TextEncoderModel` (Flax, jitted, texts in length buckets) or
sentence-transformers (`--backend=sentence_transformers`, which sorts texts by length). One process encodes
the texts once to warm up (compilation), then `--repeats` times; it prints one JSON object with the texts/s of
the timed passes and the largest difference from the other backend's unit vectors when `--check` names a file
of them. Compare two backends as whole processes (startup included) with a process timer, or read the in-process
rates it prints.

  python tools/bench_encode.py --texts=/path/to/wn18rr/entity2text.txt --backend=jax
  python tools/bench_encode.py --texts=/path/to/wn18rr/entity2text.txt --backend=sentence_transformers
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # A CPU comparison, also on a machine with an accelerator.

import ml_collections  # pylint: disable=g-import-not-at-top,g-bad-import-order
import numpy as np  # pylint: disable=g-import-not-at-top

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import bench_input_pipeline  # pylint: disable=g-import-not-at-top  # A tool beside this one.
from docent_jax.inference import text_encoder  # pylint: disable=g-import-not-at-top
from docent_jax.modules import pretrained  # pylint: disable=g-import-not-at-top

BACKENDS = ("jax", "sentence_transformers")


def read_texts(path: pathlib.Path, count: int) -> list[str]:
  """The first `count` texts of a file: one per line, the text after the first tab when there is one."""
  texts = [line.rstrip("\n").split("\t", 1)[-1] for line in path.open(encoding="utf-8") if line.strip()]
  if len(texts) < count:
    raise ValueError(f"{path} has {len(texts)} texts; --count asks for {count}.")
  return texts[:count]


def jax_encoder(max_len: int, batch_size: int) -> text_encoder.TextEncoderModel:
  """The project's mean-pooled MiniLM-L6 over its pretrained params."""
  config = ml_collections.ConfigDict({
      "name": "minilm-l6", "objective": "universal",
      "model": {"pretrained": "minilm-l6", "tokenizer": "minilm-l6", "dtype": "float32", "bert": {},
                "inference_batch_size": batch_size},
      "data": {"max_len": max_len}})
  _, params = pretrained.load_model_bert(config.model, len(pretrained.load_tokenizer("minilm-l6")))
  return text_encoder.TextEncoderModel(config, {}, {"bert": params})


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--texts", type=pathlib.Path, required=True, help="A text file, one text per line.")
  parser.add_argument("--count", type=int, default=4096, help="Texts encoded per pass.")
  parser.add_argument("--backend", choices=BACKENDS, default="jax")
  parser.add_argument("--batch_size", type=int, default=64)
  parser.add_argument("--max_len", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--save", type=pathlib.Path, help="Write the vectors here (.npy).")
  parser.add_argument("--check", type=pathlib.Path, help="Vectors (.npy) of the other backend to compare with.")
  args = parser.parse_args()
  texts = read_texts(args.texts, args.count)
  if args.backend == "jax":
    model = jax_encoder(args.max_len, args.batch_size)
    encode = lambda: model.encode(texts)
  else:
    import sentence_transformers  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_grad_enabled(False)
    st_model = sentence_transformers.SentenceTransformer(str(pretrained.resolve_model_dir("minilm-l6")), device="cpu")
    st_model.max_seq_length = args.max_len
    encode = lambda: st_model.encode(texts, batch_size=args.batch_size, convert_to_numpy=True,
                                     show_progress_bar=False)
  vectors = encode()  # Warm-up: compilation (JAX), allocator and thread pools (both).
  seconds = []
  for _ in range(args.repeats):
    started = time.perf_counter()
    encode()
    seconds.append(time.perf_counter() - started)
  result = {"backend": args.backend, "texts": len(texts), "batch_size": args.batch_size, "max_len": args.max_len,
            "texts_per_s": round(len(texts) / statistics.median(seconds), 1), "cpu": bench_input_pipeline.cpu_model(),
            "cpus": os.cpu_count()}
  # all-MiniLM-L6-v2 ends in a normalisation (its sentence-transformers pipeline); the project's encoder returns
  # the mean-pooled vectors: compared as unit vectors.
  vectors = np.asarray(vectors, np.float32)
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  if args.save:
    np.save(args.save, vectors)
  if args.check:
    result["max_abs_difference"] = float(np.abs(vectors - np.load(args.check)).max())
  print(json.dumps(result))


if __name__ == "__main__":
  main()
