"""Top-k search over N vectors on this machine's CPU: exact (`ExactSearch`) against the ANN index (`AnnIndex`).

For each size and dimension: queries/s of both paths and recall@10 of the ANN index against exact search,
at several `nprobe`; the ANN index's build time; and, with --compare_libraries, the measurement that chose
faiss (IVF) over faiss HNSW, usearch (HNSW) and ScaNN (tree + asymmetric hashing). Writes a JSON document
and a markdown table of it (`.md` beside it), and prints the table.

The vectors are synthetic unit vectors, generated in chunks from a seed: 'clustered' (default) draws each
around one of 1000 random centres, as learned embeddings cluster; 'uniform' has no structure at all,
which is the worst case for any ANN index (its recall there is a floor, its speed is representative).
Peak memory is one copy of the vectors (4.6M x 384 float32 is 7.1 GB): the ANN index is built from
regenerated chunks and dropped before exact search loads the whole array. A size that does not fit in
the available memory is recorded as skipped, with the reason.

  python tools/bench_search.py --sizes=40000 --dims=128 --num_queries=200   # a quick run
  python tools/bench_search.py --compare_libraries --data=clustered,uniform  # as committed
"""
import gc
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any, Callable

# A CPU benchmark, also on a machine with an accelerator.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import app  # pylint: disable=g-import-not-at-top,g-bad-import-order
from absl import flags  # pylint: disable=g-import-not-at-top
import jax  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from docent_jax import outputs  # pylint: disable=g-import-not-at-top
from docent_jax.inference import search  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
K = 10
NUM_CENTRES = 1000
CHUNK_ROWS = 262_144
RECALL_TARGETS = (0.9, 0.99)
# Query timings are the fastest of this many runs; exact search over the largest sets runs once.
REPEATS = 3
DATA_NOTES = {"clustered": "synthetic unit vectors: each one of 1000 random centres plus noise 0.7 per dimension",
              "uniform": "uniform random unit vectors (no structure: the worst case for an ANN index)"}
DEFAULT_OUTPUT = pathlib.Path(__file__).resolve().parent / "results" / "bench_search.json"


def define_flags() -> None:
  """Flags exist only when this file runs as a script, so every tool imports beside the others."""
  flags.DEFINE_list("sizes", ["40000", "1000000", "4600000"], "Numbers of vectors.")
  flags.DEFINE_list("dims", ["128", "384"], "Vector dimensions.")
  flags.DEFINE_integer("num_queries", 1000, "Queries per measurement (from the same distribution as the vectors).")
  flags.DEFINE_list("nprobe", ["8", "32", "128"], "Lists the ANN index scans per query, one measurement each.")
  flags.DEFINE_list("data", ["clustered"], "Synthetic sets, of 'clustered' and 'uniform' (see the module docstring).")
  flags.DEFINE_bool("compare_libraries", False, "Also measure the ANN libraries against each other.")
  flags.DEFINE_integer("compare_size", 40000, "Vectors for --compare_libraries (HNSW builds are slow on few cores).")
  flags.DEFINE_list("compare_data", ["clustered", "uniform"], "Synthetic sets for --compare_libraries.")
  flags.DEFINE_string("output", str(DEFAULT_OUTPUT), "The JSON file to write.")


def chunk(data: str, dim: int, seed: int, index: int, rows: int) -> np.ndarray:
  """Chunk `index` of a synthetic set: the same rows whenever it is generated again."""
  centres = np.random.default_rng([seed, dim]).standard_normal((NUM_CENTRES, dim), dtype=np.float32)
  rng = np.random.default_rng([seed, dim, index])
  vectors = rng.standard_normal((rows, dim), dtype=np.float32)
  if data == "clustered":
    vectors *= 0.7
    vectors += centres[rng.integers(0, NUM_CENTRES, rows)]
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  return vectors


def chunks(data: str, num_vectors: int, dim: int, seed: int = 0):
  for index, start in enumerate(range(0, num_vectors, CHUNK_ROWS)):
    yield chunk(data, dim, seed, index, min(CHUNK_ROWS, num_vectors - start))


def generate(data: str, num_vectors: int, dim: int, seed: int = 0) -> np.ndarray:
  vectors = np.empty((num_vectors, dim), np.float32)
  for index, part in enumerate(chunks(data, num_vectors, dim, seed)):
    vectors[index * CHUNK_ROWS:index * CHUNK_ROWS + len(part)] = part
  return vectors


def queries_for(data: str, num_queries: int, dim: int) -> np.ndarray:
  return chunk(data, dim, seed=0, index=-1 % 2**32, rows=num_queries)  # A chunk no vector set reaches.


def available_bytes() -> int:
  for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
    if line.startswith("MemAvailable:"):
      return int(line.split()[1]) * 1024
  return 0


def timed(fn: Callable[[], Any], repeats: int = 1) -> tuple[Any, float]:
  """fn()'s result and its fastest time of `repeats` calls (other processes' load only ever adds time)."""
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    best = min(best, time.perf_counter() - start)
  return result, best


def machine() -> dict[str, Any]:
  """The CPU as lscpu names it, the cores this process may use, and the load from other processes."""
  try:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
  except OSError:
    lscpu = ""
  fields = dict(line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
  fields = {key.strip(): value.strip() for key, value in fields.items()}
  return {"cpu": fields.get("Model name") or platform.processor(), "cpu_family": fields.get("CPU family"),
          "cpu_model": fields.get("Model"), "hypervisor": fields.get("Hypervisor vendor"),
          "cores": len(os.sched_getaffinity(0)), "memory_gib": round(os.sysconf("SC_PAGE_SIZE") *
                                                                   os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
          "load_average_at_start": list(os.getloadavg()), "jax": jax.__version__,
          "faiss": __import__("faiss").__version__}


def bench_size(data: str, num_vectors: int, dim: int, num_queries: int, nprobes: list[int]) -> dict[str, Any]:
  """One row: the ANN index built from chunks and measured, then exact search over the whole array."""
  row: dict[str, Any] = {"num_vectors": num_vectors, "dim": dim, "data": data, "k": K, "num_queries": num_queries}
  vector_bytes = num_vectors * dim * 4
  need = int(1.05 * vector_bytes) + 2**30  # The vectors or the index, a chunk, and the rest of the process.
  if available_bytes() < need:
    row.update(status="skipped", reason=f"needs about {need / 2**30:.1f} GiB of memory for one copy of the vectors; "
                                        f"{available_bytes() / 2**30:.1f} GiB available")
    return row
  queries = queries_for(data, num_queries, dim)

  # ANN: lists trained on the first chunk's rows (random draws: as good as a random sample), then every chunk.
  num_lists = search.default_num_lists(num_vectors)
  sample = next(chunks(data, min(num_vectors, 100_000), dim))
  index, train_s = timed(lambda: search.AnnIndex.train(sample, num_lists=num_lists))
  add_s = 0.0
  for part in chunks(data, num_vectors, dim):
    add_s += timed(lambda part=part: index.add(part))[1]
  del sample, part
  ann_results = []
  index.search(queries[:100], K)  # Warm-up.
  for nprobe in nprobes:
    (_, found), seconds = timed(lambda nprobe=nprobe: index.search(queries, K, nprobe=nprobe), REPEATS)
    ann_results.append({"nprobe": nprobe, "found": found, "queries_per_s": round(num_queries / seconds, 1)})
  ann = {"library": "faiss", "index": f"IVF{num_lists},Flat", "num_lists": num_lists,
         "memory_gib": round(vector_bytes / 2**30, 3), "train_s": round(train_s, 1), "add_s": round(add_s, 1),
         "build_s": round(train_s + add_s, 1)}
  del index
  gc.collect()

  vectors = generate(data, num_vectors, dim)
  exact = search.ExactSearch(vectors)
  exact.search(queries[:exact.query_batch], K)  # Compilation.
  (_, truth), seconds = timed(lambda: exact.search(queries, K), REPEATS if num_vectors * dim <= 2**27 else 1)
  row["exact"] = {"device": str(jax.devices()[0].platform), "queries_per_s": round(num_queries / seconds, 1),
                  "gflop_per_s": round(2 * num_vectors * dim * num_queries / seconds / 1e9, 1), "recall_at_10": 1.0}
  del exact, vectors
  gc.collect()
  ann["by_nprobe"] = [{"nprobe": r["nprobe"], "recall_at_10": round(search.neighbour_recall(r["found"], truth), 4),
                       "queries_per_s": r["queries_per_s"]} for r in ann_results]
  row.update(status="ok", ann=ann)
  return row


def _scann_module() -> Any:
  """ScaNN's pybind module. `import scann` also loads ScaNN's TensorFlow ops, built for TensorFlow 2.20; with
  this project's TensorFlow 2.21 that fails after the pybind module has loaded, which needs no TensorFlow."""
  try:
    import scann  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return None
  except Exception:  # pylint: disable=broad-except  # TensorFlow's NotFoundError, see above.
    pass
  return sys.modules.get("scann.scann_ops.py.scann_ops_pybind")


def compare_libraries(data: str, num_vectors: int, dim: int, num_queries: int) -> list[dict[str, Any]]:
  """Build time, and recall@10 and queries/s along each library's search-effort knob, of each installed ANN
  library's usual CPU index: IVF/tree indexes with 4 sqrt(N) lists (`nprobe` / leaves searched), graph
  indexes with the beam width (`efSearch` / `expansion_search`)."""
  import faiss  # pylint: disable=g-import-not-at-top
  vectors, queries = generate(data, num_vectors, dim), queries_for(data, num_queries, dim)
  truth = search.ExactSearch(vectors).search(queries, K)[1]
  num_lists, cores = search.default_num_lists(num_vectors), len(os.sched_getaffinity(0))
  probes = [p for p in (4, 8, 16, 32, 64, 128, 256) if p <= num_lists]
  beams = [16, 32, 64, 128, 256, 512]

  def faiss_ivf():
    index = search.AnnIndex.build(vectors, num_lists=num_lists)
    return lambda q, p: index.search(q, K, nprobe=p)[1]

  def faiss_hnsw():
    index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 128
    index.add(vectors)

    def find(q, beam):
      index.hnsw.efSearch = beam
      return index.search(q, K)[1]
    return find

  candidates = [("faiss", f"IVF{num_lists},Flat", "nprobe", probes, faiss_ivf),
                ("faiss", "HNSW32,Flat efConstruction=128", "efSearch", beams, faiss_hnsw)]
  try:
    from usearch import index as usearch_index  # pylint: disable=g-import-not-at-top

    def usearch_hnsw():
      index = usearch_index.Index(ndim=dim, metric="ip", dtype="f32", connectivity=16, expansion_add=128)
      index.add(np.arange(num_vectors), vectors, threads=cores)

      def find(q, beam):
        index.expansion_search = beam
        return index.search(q, K, threads=cores).keys
      return find
    candidates.append(("usearch", "HNSW f32 connectivity=16 expansion_add=128", "expansion_search", beams,
                       usearch_hnsw))
  except ImportError:
    candidates.append(("usearch", "not installed", "", [], None))
  scann_pybind = _scann_module()
  if scann_pybind is not None:
    def scann_tree():
      searcher = (scann_pybind.builder(vectors, K, "dot_product")
                  .tree(num_leaves=num_lists, num_leaves_to_search=32, training_sample_size=min(num_vectors, 100_000))
                  .score_ah(2, anisotropic_quantization_threshold=0.2).reorder(100).build())
      return lambda q, p: searcher.search_batched(q, K, leaves_to_search=p)[0]
    candidates.append(("scann", f"tree {num_lists} leaves, AH(2), reorder 100", "leaves_to_search", probes,
                       scann_tree))
  else:
    candidates.append(("scann", "not installed", "", [], None))

  results = []
  for library, setting, knob, values, build in candidates:
    if build is None:
      results.append({"library": library, "index": setting, "status": "skipped"})
      continue
    find, build_s = timed(build)
    find(queries[:100], values[0])  # Warm-up.
    points = []
    for value in values:
      found, seconds = timed(lambda find=find, value=value: find(queries, value), REPEATS)
      points.append({knob: value, "recall_at_10": round(search.neighbour_recall(np.asarray(found), truth), 4),
                     "queries_per_s": round(num_queries / seconds, 1)})
    results.append({"library": library, "index": setting, "num_vectors": num_vectors, "dim": dim, "data": data,
                    "build_s": round(build_s, 2), "knob": knob, "points": points,
                    **{f"best_queries_per_s_at_recall_{target}": max(
                        (p["queries_per_s"] for p in points if p["recall_at_10"] >= target), default=None)
                       for target in RECALL_TARGETS}})
    print(json.dumps(results[-1]), flush=True)
    del find
    gc.collect()
  return results


def markdown(document: dict[str, Any]) -> str:
  lines = ["| data | vectors | dim | exact q/s | ANN build s | " + " | ".join(
      f"nprobe {n}: recall@10, q/s" for n in document["nprobe"]) + " |",
           "|---|---:|---:|---:|---:|" + "---:|" * len(document["nprobe"])]
  for row in document["results"]:
    if row["status"] != "ok":
      lines.append(f"| {row['data']} | {row['num_vectors']:,} | {row['dim']} | {row['status']}: {row['reason']} |")
      continue
    cells = [f"{r['recall_at_10']:.3f}, {r['queries_per_s']:,.0f}" for r in row["ann"]["by_nprobe"]]
    lines.append(f"| {row['data']} | {row['num_vectors']:,} | {row['dim']} | {row['exact']['queries_per_s']:,.0f} | "
                 f"{row['ann']['build_s']:,.1f} | " + " | ".join(cells) + " |")
  if document.get("library_comparison"):
    lines += ["", "| library | index | data | vectors | dim | build s | " + " | ".join(
        f"best q/s at recall@10 >= {t}" for t in RECALL_TARGETS) + " |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in document["library_comparison"]:
      if r.get("status") == "skipped":
        lines.append(f"| {r['library']} | {r['index']} | | | | | | |")
        continue
      best = ["not reached" if b is None else f"{b:,.0f}"
              for b in (r[f"best_queries_per_s_at_recall_{t}"] for t in RECALL_TARGETS)]
      lines.append(f"| {r['library']} | {r['index']} | {r['data']} | {r['num_vectors']:,} | {r['dim']} | "
                   f"{r['build_s']:.1f} | " + " | ".join(best) + " |")
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  del argv
  sizes, dims, nprobes = ([int(x) for x in values] for values in (FLAGS.sizes, FLAGS.dims, FLAGS.nprobe))
  unknown = sorted(set(FLAGS.data + FLAGS.compare_data) - set(DATA_NOTES))
  if unknown:
    raise app.UsageError(f"Unknown data {unknown}; known: {sorted(DATA_NOTES)}.")
  document: dict[str, Any] = {
      "what": "top-10 inner-product search on CPU: ExactSearch against AnnIndex (faiss IVF, flat lists)",
      "data": {name: DATA_NOTES[name] for name in FLAGS.data}, "k": K, "nprobe": nprobes, "machine": machine(),
      "complete": False, "results": []}
  output = pathlib.Path(FLAGS.output)

  def write() -> None:  # After every row, so that an interrupted run keeps what it measured.
    outputs.write_atomically(output, json.dumps(document, indent=1) + "\n")

  if FLAGS.compare_libraries:
    document["library_comparison"] = [r for data in FLAGS.compare_data for dim in dims
                                      for r in compare_libraries(data, FLAGS.compare_size, dim, FLAGS.num_queries)]
    write()
  for data in FLAGS.data:
    for num_vectors in sizes:
      for dim in dims:
        row = bench_size(data, num_vectors, dim, FLAGS.num_queries, nprobes)
        print(json.dumps(row), flush=True)
        document["results"].append(row)
        write()
  document["machine"]["load_average_at_end"] = list(os.getloadavg())
  document["complete"] = True
  write()
  table = markdown(document)
  outputs.write_atomically(output.with_suffix(".md"), table + "\n")
  print(table)
  print(f"\nWrote {output} and {output.with_suffix('.md')}.")


if __name__ == "__main__":
  define_flags()
  app.run(main)
