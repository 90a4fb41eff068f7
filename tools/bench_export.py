"""Exports a trained run as sentence-transformers and ONNX, and measures, in one process on this CPU: each export's
time and directory size, and the encoding throughput of sentence-transformers (PyTorch) and onnxruntime as a ratio
to the run's own `encode` (JAX), on the same texts, with the cosine of each text's vectors against JAX's.

Each backend encodes the texts once to warm up (compilation, thread pools), then the three take turns for
`--repeats` rounds, so that the machine's load falls on all of them alike; the medians are compared.

  python tools/bench_export.py --run=workdir/default/blp_transe --texts=../shared/data/wn18rr/entity2text.txt \
      --output=tools/results/bench_export_<cpu>.json
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # A CPU comparison, also on a machine with an accelerator.
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import bench_encode  # pylint: disable=g-import-not-at-top  # A tool beside this one.
import docent_jax  # pylint: disable=g-import-not-at-top


def cpu_name() -> str:
  """The CPU's model name as the kernel reports it."""
  for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
    if line.startswith("model name"):
      return line.split(":", 1)[1].strip()
  return platform.processor()


def directory_bytes(path: pathlib.Path) -> int:
  return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def onnx_encoder(directory: pathlib.Path, batch_size: int):
  """texts -> vectors through onnxruntime and the tokenizer exported beside the graph, `batch_size` texts a call."""
  import onnxruntime  # pylint: disable=g-import-not-at-top
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = AutoTokenizer.from_pretrained(str(directory))
  session = onnxruntime.InferenceSession(str(directory / "model.onnx"), providers=["CPUExecutionProvider"])

  def encode(texts: list[str]) -> np.ndarray:
    out = []
    for start in range(0, len(texts), batch_size):
      batch = tokenizer(texts[start:start + batch_size], truncation=True, padding=True, return_tensors="np",
                        return_token_type_ids=True)
      out.append(session.run(None, {name: batch[name].astype(np.int64)
                                    for name in ("input_ids", "attention_mask", "token_type_ids")})[0])
    return np.concatenate(out)

  return encode


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--run", type=pathlib.Path, required=True, help="A trained run's directory.")
  parser.add_argument("--texts", type=pathlib.Path, required=True, help="A text file, one text per line.")
  parser.add_argument("--count", type=int, default=1024, help="Texts encoded per pass.")
  parser.add_argument("--batch_size", type=int, default=64, help="Texts per call of every backend.")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--output", type=pathlib.Path, help="Write the JSON here too.")
  args = parser.parse_args()
  texts = bench_encode.read_texts(args.texts, args.count)
  model = docent_jax.load(args.run)
  model.config.model.inference_batch_size = args.batch_size
  report = {"cpu": cpu_name(), "cores": os.cpu_count(), "run": str(args.run), "texts": len(texts),
            "batch_size": args.batch_size, "max_len": model.config.data.max_len,
            "command": "python " + " ".join(sys.argv)}
  with tempfile.TemporaryDirectory() as scratch:
    exports = {}
    for format in ("sentence-transformers", "onnx"):  # pylint: disable=redefined-builtin
      started = time.perf_counter()
      exports[format] = pathlib.Path(str(model.save_pretrained(pathlib.Path(scratch) / format, format=format)))
      report[f"{format}/export_seconds"] = round(time.perf_counter() - started, 2)
      report[f"{format}/directory_mb"] = round(directory_bytes(exports[format]) / 2**20, 1)
    import sentence_transformers  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_grad_enabled(False)
    st_model = sentence_transformers.SentenceTransformer(str(exports["sentence-transformers"]), device="cpu")
    backends = {
        "jax": lambda: model.encode(texts),
        "sentence-transformers": lambda: st_model.encode(texts, batch_size=args.batch_size, show_progress_bar=False),
        "onnx": lambda encode=onnx_encoder(exports["onnx"], args.batch_size): encode(texts),
    }
    vectors = {name: np.asarray(encode()) for name, encode in backends.items()}  # Warm-up.
    seconds = {name: [] for name in backends}
    for _ in range(args.repeats):
      for name, encode in backends.items():
        started = time.perf_counter()
        encode()
        seconds[name].append(time.perf_counter() - started)
  unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)
  for name in backends:
    rate = len(texts) / statistics.median(seconds[name])
    report[f"{name}/texts_per_second"] = round(rate, 1)
    report[f"{name}/seconds"] = [round(s, 3) for s in seconds[name]]
    if name != "jax":
      report[f"{name}/throughput_over_jax"] = round(rate / report["jax/texts_per_second"], 3)
      report[f"{name}/min_cosine_to_jax"] = float(np.min((unit(vectors[name]) * unit(vectors["jax"])).sum(axis=1)))
  text = json.dumps(report, indent=2)
  print(text)
  if args.output:
    args.output.write_text(text + "\n")


if __name__ == "__main__":
  main()
