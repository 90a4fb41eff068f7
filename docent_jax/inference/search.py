"""Top-k search over entity vectors: exact on any mesh, or approximate on a CPU.

* `ExactSearch`: the k largest inner products (cosine with `normalize=True`) of each query, equal to
  brute force with ties going to the lower index. The vectors are split by rows over every device of
  the mesh, as a trainer splits its entity table (`parallel.shard_rows`); each device scores the
  queries against its rows block by block, keeping a running top-k (`jax.lax.top_k` per block, then a
  merge), so no device holds more than [query_batch, block_size] scores or another device's rows. Only
  the devices' [query_batch, k] candidates are gathered and merged. `approx_recall` swaps the per-block
  top-k for `jax.lax.approx_max_k`, which is built for TPU (untimed: `tools/bench_search.py` runs on CPU);
  elsewhere XLA computes it exactly.
* `AnnIndex`: a faiss inverted-file index (IVF, flat or 8-bit codes) for a CPU without accelerators.
  faiss was chosen by measurement against HNSW graphs (faiss's, usearch's) and ScaNN's tree
  (`tools/bench_search.py --compare_libraries`, in `tools/results/bench_search.json`): on 40k clustered
  vectors its IVF index built in 3-4 s against 25-62 s for the graphs, and reached recall@10 >= 0.99 at
  5-13x their queries/s; ScaNN built in 5-20 s but stayed below 0.99, and `import scann` fails beside this
  project's TensorFlow. Vectors without cluster structure defeat every index: there, use `ExactSearch`.
  The index is saved as a directory (`index.faiss`, `index.json`) through `etils.epath`, so a run
  directory on gs:// holds it too (`RunDir.search_index_dir`, next to the run).
* `cosine_scores`: every query against every item on the host, for sets small enough to score whole (a FAQ's
  questions, both when its evaluation ranks them and when its training mines negatives).
"""
import dataclasses
import functools
import hashlib
import json
import math
from typing import Any

from etils import epath
import jax
from jax import lax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

from docent_jax import outputs
from docent_jax import parallel
from docent_jax.modules import entity_table

Array = jax.Array | np.ndarray
# The files of a saved `AnnIndex` in its directory.
_INDEX_FILE = "index.faiss"
_META_FILE = "index.json"
_NO_INDEX = np.iinfo(np.int32).max


def _check_matrix(array: Any, name: str, dim: int | None = None) -> None:
  if np.ndim(array) != 2 or (dim is not None and np.shape(array)[1] != dim):
    want = f"[n, {dim}]" if dim is not None else "[n, d]"
    raise ValueError(f"{name} must be a matrix {want}; got shape {np.shape(array)}.")


def _normalize_rows(rows: np.ndarray) -> np.ndarray:
  """Unit rows as in `entity_table.l2_normalize` (a zero row stays zero), on host."""
  rows = np.asarray(rows, np.float32)
  return rows / np.sqrt(np.maximum(np.sum(rows * rows, axis=-1, keepdims=True), 1e-24))


def cosine_scores(query_vectors: np.ndarray, item_vectors: np.ndarray) -> np.ndarray:
  """[Q, N] float64 cosine of each query vector [Q, d] with each item vector [N, d]; 0 for a zero vector."""
  query_vectors, item_vectors = np.asarray(query_vectors, np.float64), np.asarray(item_vectors, np.float64)
  if query_vectors.ndim != 2 or item_vectors.ndim != 2 or query_vectors.shape[1] != item_vectors.shape[1]:
    raise ValueError(f"Expected query vectors [Q, d] and item vectors [N, d]; got {query_vectors.shape} and "
                     f"{item_vectors.shape}.")

  def normalize(x: np.ndarray) -> np.ndarray:
    # A zero vector has no direction; it gets cosine 0 with everything rather than NaN.
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

  return normalize(query_vectors) @ normalize(item_vectors).T


def _merge(scores: jax.Array, indices: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """The top k of candidate lists laid out in ascending index order, so that ties keep the lower index
  (`lax.top_k` returns the earlier of equal elements first)."""
  top, position = lax.top_k(scores, k)
  return top, jnp.take_along_axis(indices, position, axis=-1)


def _shard_top_k(queries: jax.Array, rows: jax.Array, *, k: int, block_size: int, num_rows: int,
                 axes: tuple[str, ...], approx_recall: float | None) -> tuple[jax.Array, jax.Array]:
  """One device's top k of `queries` [q, d] against its `rows` [n, d], block by block; [1, q, k] each."""
  rows_here = rows.shape[0]
  first_row = lax.axis_index(axes) * rows_here if axes else 0
  block = min(block_size, rows_here)
  per_block = min(k, block)

  def step(b, best):
    # The last block ends at the shard's end; its rows that the previous block already scored are masked.
    start = jnp.minimum(b * block, rows_here - block)
    scores = jnp.dot(queries, lax.dynamic_slice_in_dim(rows, start, block).T,
                     precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    local = start + jnp.arange(block)
    fresh = (local >= b * block) & (first_row + local < num_rows)  # Padding rows are beyond num_rows.
    scores = jnp.where(fresh[None, :], scores, -jnp.inf)
    if approx_recall is None:
      top, position = lax.top_k(scores, per_block)
    else:
      top, position = lax.approx_max_k(scores, per_block, recall_target=approx_recall)
    # Earlier blocks hold lower indices: they go first, so they win ties.
    return _merge(jnp.concatenate([best[0], top], axis=1),
                  jnp.concatenate([best[1], (first_row + start + position).astype(jnp.int32)], axis=1), k)

  empty = (jnp.full((queries.shape[0], k), -jnp.inf, jnp.float32),
           jnp.full((queries.shape[0], k), _NO_INDEX, jnp.int32))
  if axes:  # Each device's running top-k differs: the loop's carry varies over the mesh.
    empty = lax.pcast(empty, axes, to="varying")
  scores, indices = lax.fori_loop(0, -(-rows_here // block), step, empty)
  return scores[None], indices[None]


@functools.partial(jax.jit, static_argnames=("k", "block_size", "num_rows", "mesh", "approx_recall", "normalize"))
def sharded_top_k(queries: jax.Array, vectors: jax.Array, *, k: int, block_size: int, num_rows: int, mesh: Mesh,
                  approx_recall: float | None, normalize: bool) -> tuple[jax.Array, jax.Array]:
  """Top k over `vectors` [rows, d] split by rows over every axis of `mesh`; queries replicated."""
  queries = entity_table.l2_normalize(queries) if normalize else queries.astype(jnp.float32)
  axes = tuple(mesh.axis_names)
  local = functools.partial(_shard_top_k, k=k, block_size=block_size, num_rows=num_rows, axes=axes,
                            approx_recall=approx_recall)
  scores, indices = jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(axes)),
                                  out_specs=(PartitionSpec(axes), PartitionSpec(axes)))(queries, vectors)
  # [devices, q, k] -> [q, devices * k], devices in the order of their rows.
  scores, indices = (jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1) for x in (scores, indices))
  return _merge(scores, indices, k)


class ExactSearch:
  """Exact top-k inner-product search over [N, d] vectors, split by rows over a mesh.

  Args:
    vectors: [N, d] host array, or a jax.Array (e.g. `EntityTable.table()`, sharded or not), which is
      laid out on the mesh without passing through the host.
    mesh: devices to split the rows over (every axis); default: the mesh of a sharded `vectors`, else
      the first device.
    normalize: cosine similarity: vectors and queries are scaled to unit length first.
    block_size: rows scored at once per device; with `query_batch` it bounds the scores held on a device.
    query_batch: queries per compiled call (the last batch is padded, so one shape is compiled per k).
    approx_recall: if set, per-block `jax.lax.approx_max_k` with this recall target instead of the exact
      `lax.top_k`. On TPU it trades exactness (and the tie rule) for speed; on CPU and GPU XLA computes it
      exactly, so it only helps on TPU.
  """

  def __init__(self, vectors: Array, mesh: Mesh | None = None, *, normalize: bool = False,
               block_size: int = 16384, query_batch: int = 256, approx_recall: float | None = None):
    _check_matrix(vectors, "vectors")
    if block_size < 1 or query_batch < 1:
      raise ValueError(f"block_size and query_batch must be positive; got {block_size} and {query_batch}.")
    if approx_recall is not None and not 0 < approx_recall <= 1:
      raise ValueError(f"approx_recall must be in (0, 1]; got {approx_recall}.")
    if mesh is None:
      sharding = getattr(vectors, "sharding", None)
      mesh = sharding.mesh if isinstance(sharding, NamedSharding) else Mesh(np.array(jax.devices()[:1]), ("rows",))
    self.num_vectors, self.dim = (int(n) for n in np.shape(vectors))
    if not self.num_vectors:
      raise ValueError("vectors is empty.")
    self.mesh, self.normalize = mesh, normalize
    self.block_size, self.query_batch, self.approx_recall = block_size, query_batch, approx_recall
    # Rows are padded to a multiple of the device count; the padding is never returned.
    padded = -(-self.num_vectors // mesh.size) * mesh.size
    layout = NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))
    if isinstance(vectors, jax.Array):
      ready = (not normalize and padded == self.num_vectors and vectors.dtype == jnp.float32
               and vectors.sharding.is_equivalent_to(layout, 2))
      # A trainer's entity table is already laid out so: it is used in place, not copied.
      self.vectors = vectors if ready else _lay_out(vectors, padded=padded, normalize=normalize, layout=layout)
    else:
      vectors = np.asarray(vectors)

      def rows(index: tuple[slice, ...]) -> np.ndarray:
        start, stop, _ = index[0].indices(padded)
        part = np.asarray(vectors[start:min(stop, self.num_vectors)], np.float32)
        part = _normalize_rows(part) if normalize else part
        if stop > self.num_vectors:
          part = np.concatenate([part, np.zeros((stop - max(start, self.num_vectors), self.dim), np.float32)])
        return part

      self.vectors = jax.make_array_from_callback((padded, self.dim), layout, rows)

  def search(self, queries: Array, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores [q, k] float32, indices [q, k] int64) of the k best vectors per query, best first."""
    _check_matrix(queries, "queries", self.dim)
    if not 1 <= k <= self.num_vectors:
      raise ValueError(f"k must be in [1, {self.num_vectors}] (the number of vectors); got {k}.")
    queries = np.asarray(queries, np.float32)
    padded, num_queries = parallel.pad_to_multiple(queries, self.query_batch)
    replicated = parallel.replicated(self.mesh)
    results = []
    for start in range(0, len(padded), self.query_batch):
      batch = jax.device_put(padded[start:start + self.query_batch], replicated)
      results.append(sharded_top_k(batch, self.vectors, k=k, block_size=self.block_size, num_rows=self.num_vectors,
                            mesh=self.mesh, approx_recall=self.approx_recall, normalize=self.normalize))
    # Fetched after every batch is dispatched, so that host work overlaps with device work.
    scores, indices = (np.concatenate(parts)[:num_queries] for parts in zip(*parallel.fetch(results)))
    return scores, indices.astype(np.int64)


@functools.partial(jax.jit, static_argnames=("padded", "normalize", "layout"))
def _lay_out(vectors: jax.Array, *, padded: int, normalize: bool, layout: NamedSharding) -> jax.Array:
  vectors = entity_table.l2_normalize(vectors) if normalize else vectors.astype(jnp.float32)
  return jax.lax.with_sharding_constraint(jnp.pad(vectors, ((0, padded - vectors.shape[0]), (0, 0))), layout)


def _faiss() -> Any:
  import faiss  # pylint: disable=g-import-not-at-top  # Only the CPU path needs it.
  return faiss


@dataclasses.dataclass
class AnnIndex:
  """An approximate nearest-neighbour index (faiss IVF) over vectors on the host CPU.

  The vectors are clustered into `num_lists` lists by k-means; a query scans the `nprobe` lists whose
  centroids score highest. `encoding='flat'` keeps float32 vectors, so returned scores are the exact
  inner products of the vectors found; 'sq8' keeps 8-bit codes: 4x less memory, approximate scores.
  Indices are row positions in the order the vectors were added; a query that finds fewer than k
  vectors (tiny `nprobe`) gets index -1 and score -inf for the rest.
  """
  index: Any
  normalize: bool = False
  nprobe: int = 32

  @property
  def num_vectors(self) -> int:
    return int(self.index.ntotal)

  @property
  def dim(self) -> int:
    return int(self.index.d)

  @classmethod
  def train(cls, sample: Array, *, num_lists: int, normalize: bool = False, encoding: str = "flat",
            nprobe: int = 32, seed: int = 0) -> "AnnIndex":
    """An empty index whose lists are trained on `sample` [s, d] (at least `num_lists` rows, ideally 30-250
    per list); add vectors with `add`. For vectors that do not fit in memory twice, added in chunks."""
    _check_matrix(sample, "sample")
    faiss = _faiss()
    if encoding not in ("flat", "sq8"):
      raise ValueError(f"encoding must be 'flat' or 'sq8'; got {encoding!r}.")
    if not 1 <= num_lists <= len(sample):
      raise ValueError(f"num_lists must be in [1, {len(sample)}] (the sample's rows); got {num_lists}.")
    dim = np.shape(sample)[1]
    quantizer = faiss.IndexFlatIP(dim)
    if encoding == "flat":
      index = faiss.IndexIVFFlat(quantizer, dim, num_lists, faiss.METRIC_INNER_PRODUCT)
    else:
      index = faiss.IndexIVFScalarQuantizer(quantizer, dim, num_lists, faiss.ScalarQuantizer.QT_8bit,
                                            faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.train(cls._rows(sample, normalize))
    index.own_fields = True
    quantizer.this.disown()  # The index frees its quantizer.
    return cls(index, normalize, nprobe)

  @classmethod
  def build(cls, vectors: Array, *, num_lists: int | None = None, normalize: bool = False,
            encoding: str = "flat", nprobe: int = 32, sample_size: int = 100_000, seed: int = 0) -> "AnnIndex":
    """An index of `vectors` [N, d]: lists trained on a random sample of up to `sample_size` rows, then
    every row added. `num_lists` defaults to `default_num_lists(N)`."""
    _check_matrix(vectors, "vectors")
    num_vectors = len(vectors)
    num_lists = num_lists or default_num_lists(num_vectors)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(num_vectors, min(num_vectors, max(sample_size, num_lists)), replace=False))
    index = cls.train(np.asarray(vectors[sample]), num_lists=num_lists, normalize=normalize, encoding=encoding,
                      nprobe=nprobe, seed=seed)
    for start in range(0, num_vectors, 262_144):  # Chunks bound the converted (normalised) copy.
      index.add(vectors[start:start + 262_144])
    return index

  def add(self, vectors: Array) -> None:
    """Appends rows; their indices continue from `num_vectors`."""
    _check_matrix(vectors, "vectors", self.dim)
    self.index.add(self._rows(vectors, self.normalize))

  def search(self, queries: Array, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores [q, k] float32, indices [q, k] int64), best first; `nprobe` overrides the index's."""
    _check_matrix(queries, "queries", self.dim)
    if k < 1:
      raise ValueError(f"k must be positive; got {k}.")
    self.index.nprobe = nprobe or self.nprobe
    scores, indices = self.index.search(self._rows(queries, self.normalize), k)
    return np.where(indices < 0, -np.inf, scores).astype(np.float32), indices.astype(np.int64)

  def save(self, path: epath.PathLike, source: dict[str, Any] | None = None) -> None:
    """Writes the directory `path` (local or gs://): the faiss index, then the settings that go with it, with
    `source` (what the vectors came from, see `saved_source`) and the index's digest, each file whole."""
    path = epath.Path(path)
    data = _faiss().serialize_index(self.index).tobytes()
    outputs.write_atomically(path / _INDEX_FILE, data)
    outputs.write_atomically(path / _META_FILE, json.dumps(
        {"library": "faiss", "normalize": self.normalize, "nprobe": self.nprobe, "num_vectors": self.num_vectors,
         "dim": self.dim, "blake2b": hashlib.blake2b(data).hexdigest(), "source": source}, indent=1))

  @staticmethod
  def saved_source(path: epath.PathLike) -> dict[str, Any] | None:
    """The `source` recorded with the index saved in `path`; None when there is no whole index there (none saved,
    a damaged settings file, or an index file that is not the one the settings were written with)."""
    path = epath.Path(path)
    try:
      meta = json.loads((path / _META_FILE).read_text())
      data = (path / _INDEX_FILE).read_bytes()
    except (OSError, ValueError):
      return None
    if not isinstance(meta, dict) or meta.get("blake2b") != hashlib.blake2b(data).hexdigest():
      return None
    return meta.get("source") or None

  @classmethod
  def load(cls, path: epath.PathLike) -> "AnnIndex":
    """The index that `save` wrote to the directory `path`."""
    path = epath.Path(path)
    meta = json.loads((path / _META_FILE).read_text())
    index = _faiss().deserialize_index(np.frombuffer((path / _INDEX_FILE).read_bytes(), np.uint8))
    if index.ntotal != meta["num_vectors"] or index.d != meta["dim"]:
      raise ValueError(f"{path / _INDEX_FILE} holds {index.ntotal} x {index.d} vectors; {path / _META_FILE} "
                       f"says {meta['num_vectors']} x {meta['dim']}.")
    return cls(index, meta["normalize"], meta["nprobe"])

  @staticmethod
  def _rows(rows: Array, normalize: bool) -> np.ndarray:
    rows = np.ascontiguousarray(rows, np.float32)
    return _normalize_rows(rows) if normalize else rows


def default_num_lists(num_vectors: int) -> int:
  """About 4 sqrt(N) lists (faiss's guidance), at most 2048: more lists make adding vectors slower (each is
  compared with every centroid) for little gain in query speed at these sizes."""
  return int(max(1, min(2048, round(4 * math.sqrt(num_vectors)))))


def neighbour_recall(found: np.ndarray, truth: np.ndarray) -> float:
  """How much of the exact search an approximate one finds: the mean fraction of each row of `truth` [q, k] (the
  exact neighbours' indices) found in the same row of `found` [q, k]."""
  found, truth = np.asarray(found), np.asarray(truth)
  hits = (found[:, :, None] == truth[:, None, :]).any(axis=1)
  return float(hits.mean())
