"""The probes' logistic regression reaches the optimum that a second-order solver finds."""
import numpy as np
import pytest
from sklearn import linear_model
import threadpoolctl

from docent_jax.modules import logistic_probe


@pytest.mark.parametrize("num_classes", [2, 3])
def test_fit_reaches_the_optimum_at_large_c(num_classes):
  # Near-separable classes at C = 1e4: scikit-learn's default tolerance stops ~30% away from these weights.
  rng = np.random.default_rng(5)
  y = np.repeat(np.arange(num_classes), [300, 200, 100][:num_classes])
  x = 4.0 * np.eye(num_classes, 32)[y] + rng.normal(size=(len(y), 32))
  optimum = linear_model.LogisticRegression(C=1e4, solver="newton-cg", tol=1e-12, max_iter=10_000).fit(x, y).coef_
  fitted = logistic_probe.fit(x, y, c=1e4, task="test")[-1].coef_
  assert np.abs(fitted - optimum).max() < 0.02 * np.abs(optimum).max()


def test_a_fit_out_of_iterations_names_its_task_and_c(caplog):
  rng = np.random.default_rng(6)
  y = np.repeat([0, 1], 50)
  x = 3.0 * np.eye(2, 8)[y] + rng.normal(size=(100, 8))
  with caplog.at_level("WARNING"):
    logistic_probe.fit(x, y, c=1e4, task="Linear probe", max_iter=2)
  assert "Linear probe: C=10000 stopped at max_iter=2" in caplog.text


def test_fit_each_gives_each_c_its_own_fit_in_order():
  rng = np.random.default_rng(7)
  y = np.repeat([0, 1, 2], [60, 50, 40])
  x = 2.0 * np.eye(3, 16)[y] + rng.normal(size=(len(y), 16))
  c_values = (1e4, 0.01, 1.0)
  fitted = logistic_probe.fit_each(x, y, c_values, task="test")
  assert [model[-1].C for model in fitted] == list(c_values)
  for c, model in zip(c_values, fitted):
    # One BLAS thread in both, so the same arithmetic: the same weights, whichever thread ran the fit.
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
      alone = logistic_probe.fit(x, y, c, task="test")[-1].coef_
    np.testing.assert_array_equal(model[-1].coef_, alone)
  # Stronger regularisation, smaller weights: the Cs were not mixed up.
  norms = [np.abs(model[-1].coef_).sum() for model in fitted]
  assert norms[1] < norms[2] < norms[0]
