"""The frozen encoder's pair classifier: a logistic regression on the pair features [u, v, |u - v|, u * v] of its
offer vectors (`logistic_probe`, fit to its optimum), fit on the training pairs, C chosen by validation F1.

Peeters and Bizer's classification head has no hidden layer, so with a frozen encoder their fine-tuning is this
logistic regression. The `pair_probe` evaluator reports it; a fine-tuned pair classifier can start its head from
it (`model.head_init = 'probe'`, `objectives.pair_matching`).
"""
from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

from absl import logging
import numpy as np
from sklearn import metrics as sklearn_metrics

from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.data.offers import labels as offer_labels
from docent_jax.modules import logistic_probe
from docent_jax.modules import pair_classifier

# Inverse regularisation strengths tried by the probe, chosen by validation F1.
PROBE_C_VALUES = (0.01, 0.1, 1.0, 10.0, 100.0)


@dataclasses.dataclass(frozen=True)
class LinearProbe:
  """A logistic regression on pair features: weights [f], bias, its C, and the logits of each split's pairs."""
  weights: np.ndarray
  bias: float
  c: float
  logits: dict[str, np.ndarray]


def pair_features(offer_vectors: np.ndarray, pairs: np.ndarray) -> np.ndarray:
  """[m, 4d] features of the pairs [m, 3] of offer vectors [num_offers, d], as the bi-encoder's head sees them."""
  return np.asarray(pair_classifier.pair_features(offer_vectors[pairs[:, 0]], offer_vectors[pairs[:, 1]]))


def fit_linear_probe(offer_vectors: np.ndarray, pairs: Mapping[str, np.ndarray], *,
                     c_values: Sequence[float] = PROBE_C_VALUES, max_iter: int = logistic_probe.MAX_ITER) -> LinearProbe:
  """Fits on pairs['train'], picks C by F1 on pairs['validation'] (the first best), scores every split.

  Args:
    offer_vectors: [num_offers, d] frozen offer vectors; pairs index into them.
    pairs: per split int [m, 3] (left, right, label); 'train' and 'validation' are required.
    c_values: inverse L2 regularisation strengths to try.
    max_iter: L-BFGS iterations per fit.
  """
  for split in ("train", "validation"):
    if split not in pairs:
      raise ValueError(f"The linear probe needs a {split!r} split; got {sorted(pairs)}.")
  if not c_values:
    raise ValueError("c_values is empty.")
  checked = {split: offer_labels.check_pairs(p, len(offer_vectors), split,
                                             "the probe's C" if split == "validation" else "")
             for split, p in pairs.items()}
  features = {split: pair_features(offer_vectors, p) for split, p in checked.items()}
  labels = {split: p[:, 2] for split, p in checked.items()}
  if len(np.unique(labels["train"])) < 2:
    raise ValueError("The training pairs need matches and non-matches.")
  best = None
  models = logistic_probe.fit_each(features["train"], labels["train"], c_values, task="Linear probe", max_iter=max_iter)
  for c, model in zip(c_values, models):
    # A match is predicted at sigmoid(logit) > 0.5, i.e. logit > 0.
    f1 = sklearn_metrics.f1_score(labels["validation"], model.decision_function(features["validation"]) > 0,
                                  zero_division=0.0)
    logging.info("Linear probe C=%g: validation F1 %.4f.", c, f1)
    if best is None or f1 > best[0]:
      best = (f1, c, model)
  _, c, model = best
  regression = model[-1]
  return LinearProbe(weights=regression.coef_[0].astype(np.float32), bias=float(regression.intercept_[0]), c=c,
                     logits={split: model.decision_function(x) for split, x in features.items()})


def offer_vectors(model: Any, corpus: offer_corpus.OfferCorpus) -> np.ndarray:
  """[num_offers, d] the model's vectors of the corpus's offers (zeros for offers in no labelled pair)."""
  used = np.unique(np.concatenate([p[:, :2].ravel() for p in corpus.pairs.values()]))
  vectors = model.encode_set([corpus.texts[i] for i in used])
  table = np.zeros((corpus.num_offers, vectors.shape[1]), np.float32)
  table[used] = vectors
  return table


def linear_probe(model: Any, corpus: offer_corpus.OfferCorpus,
                 c_values: Sequence[float] = PROBE_C_VALUES) -> LinearProbe:
  """`fit_linear_probe` on the model's offer vectors, fit once per params (the evaluator and a fine-tuning run whose
  head starts from it share it)."""
  return model.computed(("linear_probe", corpus.name, tuple(c_values)),
                        lambda: fit_linear_probe(offer_vectors(model, corpus), corpus.pairs, c_values=c_values))
