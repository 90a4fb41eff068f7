"""Entity classification with a linear probe on frozen entity embeddings (BLP protocol).

L2-regularised multinomial logistic regression (scikit-learn). C is chosen by dev-set accuracy
(the first best C on ties, in the order given), the model is refit on train + dev with that C, and
test accuracy and balanced accuracy are reported. BLP used raw features and C in
{1e4, 1e3, 1e2, 10, 1, 0.1}; standardising features is optional.

Each fit runs L-BFGS to its optimum (`logistic_probe`), so that C and the result do not depend on the CPU.

Test labels never seen in training cannot be predicted. Their examples stay in the test set (they
count as errors, as in BLP), and their number is logged and returned.
"""
from collections.abc import Sequence
from typing import Any

from absl import logging
import numpy as np
from sklearn import metrics as sklearn_metrics

from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.modules import logistic_probe
from docent_jax.evaluation import registry

BLP_C_VALUES = (1e4, 1e3, 1e2, 10.0, 1.0, 0.1)


def _check_split(x: np.ndarray, y: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
  x, y = np.asarray(x), np.asarray(y)
  if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or not len(y):
    raise ValueError(f"{name}: expected features [n, d] and labels [n] with n > 0; got {x.shape} and {y.shape}.")
  if not np.isfinite(x).all():
    raise ValueError(f"{name}: features hold NaN or infinite values.")
  return x, y


def _count_unseen(y: np.ndarray, seen: np.ndarray, name: str) -> int:
  unseen = ~np.isin(y, seen)
  if unseen.any():
    logging.warning("%s: %d of %d examples have a label absent from training (%s); they count as errors.",
                    name, int(unseen.sum()), len(y), sorted(set(y[unseen].tolist())))
  return int(unseen.sum())


def evaluate_entity_classification(train_x: np.ndarray, train_y: np.ndarray, dev_x: np.ndarray, dev_y: np.ndarray,
                                   test_x: np.ndarray, test_y: np.ndarray,
                                   c_values: Sequence[float] = BLP_C_VALUES, standardize: bool = False,
                                   max_iter: int = logistic_probe.MAX_ITER,
                                   tol: float = logistic_probe.LBFGS_TOLERANCE) -> dict[str, float | int]:
  """Selects C on dev accuracy, refits on train + dev, and scores the test split.

  Returns:
    'accuracy' and 'balanced_accuracy' on test, the chosen 'c', its 'dev_accuracy', and
    'dev_unseen_labels' / 'test_unseen_labels': examples whose label the classifier never saw.
  """
  train_x, train_y = _check_split(train_x, train_y, "train")
  dev_x, dev_y = _check_split(dev_x, dev_y, "dev")
  test_x, test_y = _check_split(test_x, test_y, "test")
  if not (train_x.shape[1] == dev_x.shape[1] == test_x.shape[1]):
    raise ValueError(f"Feature sizes differ: train {train_x.shape[1]}, dev {dev_x.shape[1]}, test {test_x.shape[1]}.")
  if len(np.unique(train_y)) < 2:
    raise ValueError("train: needs at least two classes.")
  if not c_values:
    raise ValueError("c_values is empty.")
  dev_unseen = _count_unseen(dev_y, train_y, "dev")
  fit_options = dict(task="Entity classification", standardize=standardize, max_iter=max_iter, tol=tol)

  best_c, best_dev_accuracy = None, -1.0
  for c, model in zip(c_values, logistic_probe.fit_each(train_x, train_y, c_values, **fit_options)):
    dev_accuracy = float(sklearn_metrics.accuracy_score(dev_y, model.predict(dev_x)))
    logging.debug("Entity classification: C=%g, dev accuracy %.4f.", c, dev_accuracy)
    if dev_accuracy > best_dev_accuracy:
      best_c, best_dev_accuracy = c, dev_accuracy

  train_dev_x = np.concatenate([train_x, dev_x])
  train_dev_y = np.concatenate([train_y, dev_y])
  test_unseen = _count_unseen(test_y, train_dev_y, "test")
  (refit,) = logistic_probe.fit_each(train_dev_x, train_dev_y, (best_c,), **fit_options)
  test_predictions = refit.predict(test_x)
  return {
      "accuracy": float(sklearn_metrics.accuracy_score(test_y, test_predictions)),
      "balanced_accuracy": float(sklearn_metrics.balanced_accuracy_score(test_y, test_predictions)),
      "c": float(best_c),
      "dev_accuracy": best_dev_accuracy,
      "dev_unseen_labels": dev_unseen,
      "test_unseen_labels": test_unseen,
  }


@registry.register("entity_classification")
def classify_entities(model: Any, graph: knowledge_graph.KnowledgeGraph,
                      c_values: Sequence[float] = BLP_C_VALUES) -> dict[str, float]:
  """A text encoder's frozen vectors of `graph`'s entity descriptions, classified by a linear probe (see the module
  docstring): `test/classification_<metric>` of the unseen test entities. A graph without classes reports nothing."""
  labels = graph.entity_labels
  if (labels < 0).all():
    logging.info("%s has no entity classes; skipping entity classification.", graph.name)
    return {}
  embeddings = model.encode_set(graph.entity_texts)
  parts = []
  for split in ("train", "validation", "test"):
    entities = graph.entity_split[split]
    entities = entities[labels[entities] >= 0]
    parts += [embeddings[entities], labels[entities]]
  found = evaluate_entity_classification(*parts, c_values=tuple(c_values))
  return {f"test/classification_{name}": value for name, value in found.items()}
