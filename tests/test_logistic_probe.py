"""The probes' logistic regression reaches the optimum that a second-order solver finds."""
import numpy as np
import pytest
from sklearn import linear_model

from docent_jax.evaluation import logistic_probe


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
