"""Comparing freshly computed golden arrays with the committed ones."""
import numpy as np


def assert_match_committed(fresh: dict[str, np.ndarray], committed: dict[str, np.ndarray]) -> None:
  """The same names; integers and strings equal, floats within 1e-5."""
  assert sorted(fresh) == sorted(committed)
  for name, value in fresh.items():
    if value.dtype.kind in "iuU":
      np.testing.assert_array_equal(value, committed[name], err_msg=name)
    else:
      np.testing.assert_allclose(value, committed[name], atol=1e-5, rtol=0, err_msg=name)
