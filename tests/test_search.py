"""Search over entity vectors: exact top-k equals brute force on any mesh; the ANN index finds most of it and
comes back from disk (local or gs://) answering the same."""
import jax
import ml_collections
import numpy as np
import pytest

from docent_jax import parallel
from docent_jax import run_dir as run_dirs
from docent_jax.inference import search


def _brute_force(queries: np.ndarray, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """Scores and indices of the k best rows, ties to the lower index (a stable sort of the negated scores)."""
  scores = queries.astype(np.float64) @ vectors.astype(np.float64).T
  indices = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(scores, indices, axis=1).astype(np.float32), indices


def _small_integers(rows: int, dim: int, seed: int) -> np.ndarray:
  """Integer-valued float32 rows: every inner product is exact, and many tie."""
  return np.random.default_rng(seed).integers(-2, 3, (rows, dim)).astype(np.float32)


def _clustered(rows: int, dim: int, seed: int) -> np.ndarray:
  """Unit vectors around 50 random centres, as learned embeddings cluster (uniform random vectors do not)."""
  rng = np.random.default_rng(seed)
  centres = rng.standard_normal((50, dim)).astype(np.float32)
  vectors = centres[rng.integers(0, 50, rows)] + 0.7 * rng.standard_normal((rows, dim)).astype(np.float32)
  return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize("rows, block_size, query_batch", [(1000, 128, 64), (1003, 300, 37), (7, 16384, 256)])
def test_exact_search_equals_brute_force_with_ties_to_the_lower_index(rows, block_size, query_batch):
  vectors, queries = _small_integers(rows, 12, 0), _small_integers(100, 12, 1)
  k = min(10, rows)
  scores, indices = search.ExactSearch(vectors, block_size=block_size, query_batch=query_batch).search(queries, k)
  want_scores, want_indices = _brute_force(queries, vectors, k)
  np.testing.assert_array_equal(indices, want_indices)
  np.testing.assert_array_equal(scores, want_scores)
  assert indices.dtype == np.int64 and scores.dtype == np.float32


@pytest.mark.parametrize("shape, rows", [((8, 1), 1000), ((4, 2), 1003), ((2, 4), 5)])
def test_exact_search_on_a_mesh_of_8_devices_equals_brute_force(shape, rows):
  mesh = parallel.create_mesh(ml_collections.ConfigDict({"shape": shape}))
  vectors, queries = _small_integers(rows, 12, 2), _small_integers(50, 12, 3)
  k = min(10, rows)
  want = _brute_force(queries, vectors, k)
  # A host array, and a table already on the mesh split like a trainer's (replicated when uneven).
  for table in (vectors, parallel.shard_rows(vectors, mesh)):
    found = search.ExactSearch(table, mesh, block_size=64, query_batch=16)
    assert found.vectors.sharding.shard_shape(found.vectors.shape)[0] == -(-rows // 8)
    np.testing.assert_array_equal(found.search(queries, k)[1], want[1])
    np.testing.assert_array_equal(found.search(queries, k)[0], want[0])
  # A table split over every device, as the trainer's rules split an entity table, is searched in place.
  if rows % 8 == 0:
    table = parallel.shard_rows(vectors, mesh)
    assert search.ExactSearch(table, mesh).vectors is table


def test_cosine_search_normalises_vectors_and_queries():
  rng = np.random.default_rng(4)
  vectors, queries = rng.standard_normal((500, 16)).astype(np.float32), rng.standard_normal((20, 16)).astype(np.float32)
  vectors[3] = 0  # A zero vector scores 0, not NaN.
  unit = lambda x: x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  scores, indices = search.ExactSearch(vectors, normalize=True, block_size=128).search(queries, 5)
  want_scores, want_indices = _brute_force(unit(queries), unit(vectors), 5)
  np.testing.assert_array_equal(indices, want_indices)
  np.testing.assert_allclose(scores, want_scores, atol=1e-5)
  # The same from a device array (e.g. `EntityTable.table()`), normalised on device.
  on_device = search.ExactSearch(jax.numpy.asarray(vectors), normalize=True, block_size=128).search(queries, 5)
  np.testing.assert_array_equal(on_device[1], want_indices)
  np.testing.assert_allclose(on_device[0], want_scores, atol=1e-5)


def test_approx_max_k_option_finds_the_same_scores_off_tpu():
  # XLA computes approx_max_k exactly on CPU; on TPU the option trades recall for speed.
  vectors, queries = _small_integers(2000, 12, 10), _small_integers(30, 12, 11)
  scores, indices = search.ExactSearch(vectors, block_size=512, approx_recall=0.95).search(queries, 10)
  np.testing.assert_array_equal(scores, _brute_force(queries, vectors, 10)[0])
  np.testing.assert_array_equal(scores, np.einsum("qd,qkd->qk", queries, vectors[indices]))


def test_exact_search_rejects_bad_shapes_and_k():
  exact = search.ExactSearch(np.ones((4, 3), np.float32))
  with pytest.raises(ValueError, match=r"k must be in \[1, 4\]"):
    exact.search(np.ones((1, 3), np.float32), 5)
  with pytest.raises(ValueError, match=r"queries must be a matrix \[n, 3\]"):
    exact.search(np.ones((1, 2), np.float32), 1)
  with pytest.raises(ValueError, match="vectors is empty"):
    search.ExactSearch(np.ones((0, 3), np.float32))


@pytest.fixture(scope="module")
def clustered_index() -> tuple[np.ndarray, np.ndarray, search.AnnIndex]:
  vectors, queries = _clustered(4000, 32, 5), _clustered(200, 32, 6)
  return vectors, queries, search.AnnIndex.build(vectors, num_lists=64, nprobe=8)


def test_ann_recall_at_10_against_exact_search(clustered_index):
  vectors, queries, index = clustered_index
  truth = search.ExactSearch(vectors).search(queries, 10)[1]
  scores, indices = index.search(queries, 10)
  assert search.neighbour_recall(indices, truth) > 0.9
  # Flat lists: the scores are the exact inner products of the vectors found, best first.
  np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, vectors[indices]), atol=1e-5)
  assert (np.diff(scores, axis=1) <= 0).all()
  # Scanning every list is exact.
  assert search.neighbour_recall(index.search(queries, 10, nprobe=64)[1], truth) == 1.0


def test_ann_index_round_trips_through_a_directory(clustered_index, tmp_path):
  _, queries, index = clustered_index
  index.save(tmp_path / "run" / run_dirs.SEARCH_INDEX_DIR)
  loaded = search.AnnIndex.load(tmp_path / "run" / run_dirs.SEARCH_INDEX_DIR)
  assert (loaded.num_vectors, loaded.dim, loaded.nprobe, loaded.normalize) == (4000, 32, 8, False)
  for got, want in zip(loaded.search(queries, 10), index.search(queries, 10)):
    np.testing.assert_array_equal(got, want)


def test_ann_index_saves_to_gs_paths_and_keeps_cosine(gcs_bucket):
  bucket, opened = gcs_bucket
  vectors, queries = 3 * _clustered(1000, 16, 7), _clustered(20, 16, 8)
  index = search.AnnIndex.build(vectors, num_lists=16, nprobe=4, normalize=True, encoding="sq8")
  index.save(f"gs://bucket/run/{run_dirs.SEARCH_INDEX_DIR}")
  assert {f"gs://bucket/run/{run_dirs.SEARCH_INDEX_DIR}/{name}" for name in ("index.faiss", "index.json")} <= set(opened)
  assert (bucket / "run" / run_dirs.SEARCH_INDEX_DIR / "index.faiss").stat().st_size > 0
  loaded = search.AnnIndex.load(f"gs://bucket/run/{run_dirs.SEARCH_INDEX_DIR}")
  assert loaded.normalize
  for got, want in zip(loaded.search(queries, 5), index.search(queries, 5)):
    np.testing.assert_array_equal(got, want)
  truth = search.ExactSearch(vectors, normalize=True).search(queries, 5)[1]
  assert search.neighbour_recall(loaded.search(queries, 5, nprobe=16)[1], truth) >= 0.9


def test_ann_index_adds_in_chunks_like_a_whole_build():
  vectors = _clustered(2000, 16, 9)
  index = search.AnnIndex.train(vectors[:1000], num_lists=16, nprobe=4)
  for start in range(0, 2000, 300):
    index.add(vectors[start:start + 300])
  whole = search.AnnIndex.train(vectors[:1000], num_lists=16, nprobe=4)
  whole.add(vectors)
  assert index.num_vectors == 2000
  for got, want in zip(index.search(vectors[:50], 10), whole.search(vectors[:50], 10)):
    np.testing.assert_array_equal(got, want)
  with pytest.raises(ValueError, match="encoding must be"):
    search.AnnIndex.train(vectors, num_lists=4, encoding="pq")
