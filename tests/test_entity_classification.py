"""Linear-probe entity classification on synthetic data with a known outcome."""
import numpy as np
import pytest

from docent_jax.evaluation import entity_classification

CLASSES = np.array(["NN", "VB", "JJ"])


def _blobs(rng, counts, scale=1.0, dim=8):
  """Well-separated Gaussian blobs, one per class, `scale` times the unit spacing."""
  centers = 10.0 * np.eye(len(CLASSES), dim)
  labels = np.repeat(np.arange(len(CLASSES)), counts)
  x = scale * (centers[labels] + rng.normal(size=(len(labels), dim)))
  return x, CLASSES[labels]


def test_separable_classes_are_classified_perfectly():
  rng = np.random.default_rng(0)
  splits = [_blobs(rng, counts) for counts in ([40, 20, 10], [10, 5, 5], [10, 5, 5])]
  result = entity_classification.evaluate_entity_classification(*splits[0], *splits[1], *splits[2])
  assert result["accuracy"] == 1.0
  assert result["balanced_accuracy"] == 1.0
  assert result["c"] in entity_classification.BLP_C_VALUES
  assert result["dev_unseen_labels"] == result["test_unseen_labels"] == 0


def test_dev_accuracy_picks_the_weaker_regularisation():
  # Small features: C = 1e-4 shrinks the weights to ~0 and predicts the majority class; C = 1e2 separates them.
  rng = np.random.default_rng(1)
  splits = [_blobs(rng, counts, scale=1e-2) for counts in ([60, 20, 20], [20, 10, 10], [20, 10, 10])]
  result = entity_classification.evaluate_entity_classification(*splits[0], *splits[1], *splits[2],
                                                                c_values=(1e-4, 1e2))
  assert result["c"] == 1e2
  assert result["dev_accuracy"] == 1.0
  majority_only = entity_classification.evaluate_entity_classification(*splits[0], *splits[1], *splits[2],
                                                                       c_values=(1e-4,))
  assert majority_only["accuracy"] == pytest.approx(0.5)
  assert majority_only["balanced_accuracy"] == pytest.approx(1 / 3)


def test_standardised_features_also_separate():
  rng = np.random.default_rng(2)
  splits = [_blobs(rng, counts, scale=1e-3) for counts in ([60, 20, 20], [20, 10, 10], [20, 10, 10])]
  result = entity_classification.evaluate_entity_classification(*splits[0], *splits[1], *splits[2],
                                                                c_values=(1.0,), standardize=True)
  assert result["accuracy"] == 1.0


def test_test_labels_absent_from_training_count_as_errors():
  rng = np.random.default_rng(3)
  train, dev, (test_x, test_y) = [_blobs(rng, counts) for counts in ([40, 20, 10], [10, 5, 5], [10, 5, 5])]
  test_y = test_y.copy()
  test_y[:4] = "BR"  # a class the classifier never saw
  result = entity_classification.evaluate_entity_classification(*train, *dev, test_x, test_y)
  assert result["test_unseen_labels"] == 4
  assert result["accuracy"] == pytest.approx(16 / 20)
  # Recalls: BR 0, NN 6/6, VB 1, JJ 1.
  assert result["balanced_accuracy"] == pytest.approx(3 / 4)


def test_bad_input_is_named():
  rng = np.random.default_rng(4)
  train, dev, test = [_blobs(rng, counts) for counts in ([4, 4, 4], [2, 2, 2], [2, 2, 2])]
  with pytest.raises(ValueError, match=r"dev: expected features \[n, d\] and labels \[n\]"):
    entity_classification.evaluate_entity_classification(*train, dev[0], dev[1][:-1], *test)
  broken = test[0].copy()
  broken[0, 0] = np.inf
  with pytest.raises(ValueError, match="test: features hold NaN or infinite"):
    entity_classification.evaluate_entity_classification(*train, *dev, broken, test[1])
  with pytest.raises(ValueError, match="at least two classes"):
    entity_classification.evaluate_entity_classification(train[0], np.full(12, "NN"), *dev, *test)


def test_a_fit_out_of_iterations_is_logged(caplog):
  rng = np.random.default_rng(4)
  splits = [_blobs(rng, counts, scale=0.15) for counts in ([60, 40, 20], [20, 10, 10], [20, 10, 10])]
  with caplog.at_level("WARNING"):
    entity_classification.evaluate_entity_classification(*splits[0], *splits[1], *splits[2], c_values=(1e4,),
                                                         max_iter=2)
  assert "stopped at max_iter=2" in caplog.text

