"""Scoring of offer-pair classifiers for product matching (Peeters & Bizer's protocol), arrays in, metrics out.

  * A pair is predicted a match when sigmoid(logit) > 0.5, i.e. logit > 0; reported are precision,
    recall and F1 of the match class, and the mean binary cross-entropy (`match_metrics`).
  * A frozen encoder's classifier is the logistic regression on its offer vectors' pair features that
    `modules.pair_probe` fits (`pair_probe`: its scores on validation and test, and the C it chose).
Classifiers whose encoder is trained run through the trainer (`objectives.pair_matching`).
"""
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn import metrics as sklearn_metrics

from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.evaluation import registry
from docent_jax.modules import pair_probe


def pair_loss(logits: np.ndarray, labels: np.ndarray) -> float:
  """Mean binary cross-entropy of logits against 0/1 labels."""
  logits, labels = np.asarray(logits, np.float64), np.asarray(labels, np.float64)
  return float(np.mean(np.logaddexp(0.0, logits) - labels * logits))


def match_metrics(logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
  """{'precision', 'recall', 'f1', 'loss'} of pair logits [m] against 0/1 labels [m]."""
  logits = np.asarray(logits)
  if not np.isfinite(logits).all():
    raise FloatingPointError(f"{int((~np.isfinite(logits)).sum())} of {len(logits)} pair logits are not finite.")
  precision, recall, f1, _ = sklearn_metrics.precision_recall_fscore_support(
      np.asarray(labels, bool), logits > 0.0, average="binary", zero_division=0.0)
  return {"precision": float(precision), "recall": float(recall), "f1": float(f1), "loss": pair_loss(logits, labels)}


@registry.register("pair_probe")
def probe_frozen_encoder(model: Any, corpus: offer_corpus.OfferCorpus,
                         c_values: Sequence[float] = pair_probe.PROBE_C_VALUES) -> dict[str, float]:
  """The frozen encoder's pair classifier (a logistic regression on its offer vectors): `<split>/{precision, recall,
  f1, loss}` on validation and test, and the C it chose on validation (`validation/probe_c`)."""
  probe = pair_probe.linear_probe(model, corpus, c_values)
  results = {"validation/probe_c": probe.c}
  for split in ("validation", "test"):
    found = match_metrics(probe.logits[split], corpus.pairs[split][:, 2])
    results.update({f"{split}/{k}": v for k, v in found.items()})
  return results


@registry.register("pair_matching")
def classify_pairs(model: Any, corpus: offer_corpus.OfferCorpus, split: str = "test") -> dict[str, float]:
  """`<split>/{precision, recall, f1, loss}` of a pair classifier (`inference.pair_matching`) on the split's
  labelled pairs."""
  pairs = corpus.pairs[split]
  logits = model.match_logits([corpus.texts[i] for i in pairs[:, 0]], [corpus.texts[i] for i in pairs[:, 1]])
  return {f"{split}/{k}": v for k, v in match_metrics(logits, pairs[:, 2]).items()}
