import numpy as np
import pytest

from docent_jax import losses


def test_margin_loss_matches_hand_computed_hinge():
  positive = np.array([2.0, 0.0])
  negative = np.array([[0.5, 1.5], [-2.0, 0.5]])
  # max(0, 1 - 2 + 0.5)=0, max(0, 1 - 2 + 1.5)=0.5, max(0, 1 - 0 - 2)=0, max(0, 1 - 0 + 0.5)=1.5
  assert float(losses.margin_loss(positive, negative, margin=1.0)) == pytest.approx(2.0 / 4)


def test_negative_log_likelihood_balances_positives_and_negatives():
  positive = np.array([0.0])
  negative = np.array([[0.0, 0.0, 0.0]])
  assert float(losses.negative_log_likelihood(positive, negative)) == pytest.approx(np.log(2.0))
  confident = losses.negative_log_likelihood(np.array([10.0]), np.array([[-10.0, -10.0]]))
  assert float(confident) < 1e-4


def test_unknown_loss_lists_valid_names():
  with pytest.raises(ValueError, match="margin.*nll"):
    losses.get_link_prediction_loss("hinge")
