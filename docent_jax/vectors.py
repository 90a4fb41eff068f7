"""Vector maths shared by the evaluation data and the evaluators: unit rows, blocks of rows that bound memory, and
the analogy query b - a + c."""
from collections.abc import Iterator

import numpy as np


def unit_rows(vectors: np.ndarray) -> np.ndarray:
  """[N, d] float64 rows scaled to length 1; a zero row stays zero, so that its cosine with anything is 0, not NaN."""
  vectors = np.asarray(vectors, np.float64)
  if vectors.ndim != 2:
    raise ValueError(f"Expected vectors [N, d]; got shape {vectors.shape}.")
  if not np.isfinite(vectors).all():
    raise ValueError("Vectors hold NaN or infinite values.")
  norms = np.linalg.norm(vectors, axis=1, keepdims=True)
  return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def row_blocks(num_rows: int, row_size: int, block_size: int) -> Iterator[slice]:
  """Consecutive slices of rows, each of at most `block_size` floats at `row_size` a row but at least one row."""
  if block_size < 1:
    raise ValueError(f"block_size must be at least 1, not {block_size}.")
  rows = max(1, block_size // max(row_size, 1))
  return (slice(start, start + rows) for start in range(0, num_rows, rows))


def analogy_queries(unit_vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
  """b - a + c of each question, from the rows of its a, b and c (its first three columns)."""
  return unit_vectors[rows[:, 1]] - unit_vectors[rows[:, 0]] + unit_vectors[rows[:, 2]]
