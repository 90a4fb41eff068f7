"""Scoring of offer-pair classifiers for product matching (Peeters & Bizer's protocol), arrays in, metrics out.

  * A pair is predicted a match when sigmoid(logit) > 0.5, i.e. logit > 0; reported are precision,
    recall and F1 of the match class, and the mean binary cross-entropy (`match_metrics`).
  * A frozen encoder is probed by a logistic regression on the pair features [u, v, |u - v|, u * v]
    of its offer vectors (`logistic_probe`, fit to its optimum; `fit_linear_probe`): fit on the
    training pairs, C chosen by validation F1. Peeters and Bizer's classification head has no hidden layer, so with a frozen
    encoder their fine-tuning is this logistic regression.
Classifiers whose encoder is trained run through the trainer (`objectives.pair_matching`).
"""
from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

from absl import logging
import numpy as np
from sklearn import metrics as sklearn_metrics

from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.evaluation import logistic_probe
from docent_jax.evaluation import registry

# Inverse regularisation strengths tried by the probe, chosen by validation F1.
PROBE_C_VALUES = (0.01, 0.1, 1.0, 10.0, 100.0)


def check_pairs(pairs: np.ndarray, num_offers: int, split: str, selects: str = "") -> np.ndarray:
  """`pairs` as int64 [m, 3] (left, right, label), m > 0, after checking offer indices and 0/1 labels.

  `selects`: what the split's F1 chooses (e.g. "the probe's C"); then it needs a match, else F1 is 0 for
  every model and the choice is made on nothing.
  """
  pairs = np.asarray(pairs)
  if pairs.ndim != 2 or pairs.shape[1] != 3 or not len(pairs) or not np.issubdtype(pairs.dtype, np.integer):
    raise ValueError(f"{split} pairs: expected a non-empty int array [m, 3] (left, right, label); got "
                     f"{pairs.dtype} {pairs.shape}.")
  bad_offer = ((pairs[:, :2] < 0) | (pairs[:, :2] >= num_offers)).any(axis=1)
  if bad_offer.any():
    row = int(np.flatnonzero(bad_offer)[0])
    raise ValueError(f"{split} pairs row {row}: offer indices {pairs[row, :2].tolist()} are outside "
                     f"[0, {num_offers}) ({int(bad_offer.sum())} such rows).")
  bad_label = ~np.isin(pairs[:, 2], (0, 1))
  if bad_label.any():
    row = int(np.flatnonzero(bad_label)[0])
    raise ValueError(f"{split} pairs row {row}: label {pairs[row, 2]} is not 0 or 1 "
                     f"({int(bad_label.sum())} such rows).")
  if selects and not pairs[:, 2].any():
    raise ValueError(f"{split} pairs: none of the {len(pairs)} is a match, so F1 is 0 for every model and "
                     f"{selects} would be chosen on nothing. Add matching pairs to that split.")
  return pairs.astype(np.int64)


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
  """[N, 4d] features [u, v, |u - v|, u * v] of offer vectors u, v [N, d] (as in Sentence-BERT)."""
  return np.concatenate([u, v, np.abs(u - v), u * v], axis=-1)


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


@dataclasses.dataclass(frozen=True)
class LinearProbe:
  """A logistic regression on pair features: weights [f], bias, its C and its metrics per split."""
  weights: np.ndarray
  bias: float
  c: float
  metrics: dict[str, dict[str, float]]


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
  checked = {split: check_pairs(p, len(offer_vectors), split, "the probe's C" if split == "validation" else "")
             for split, p in pairs.items()}
  features = {split: pair_features(offer_vectors[p[:, 0]], offer_vectors[p[:, 1]]) for split, p in checked.items()}
  labels = {split: p[:, 2] for split, p in checked.items()}
  if len(np.unique(labels["train"])) < 2:
    raise ValueError("The training pairs need matches and non-matches.")
  best = None
  models = logistic_probe.fit_each(features["train"], labels["train"], c_values, task="Linear probe", max_iter=max_iter)
  for c, model in zip(c_values, models):
    f1 = match_metrics(model.decision_function(features["validation"]), labels["validation"])["f1"]
    logging.info("Linear probe C=%g: validation F1 %.4f.", c, f1)
    if best is None or f1 > best[0]:
      best = (f1, c, model)
  _, c, model = best
  scores = {split: match_metrics(model.decision_function(x), labels[split]) for split, x in features.items()}
  regression = model[-1]
  return LinearProbe(weights=regression.coef_[0].astype(np.float32), bias=float(regression.intercept_[0]), c=c,
                     metrics=scores)


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


@registry.register("pair_probe")
def probe_frozen_encoder(model: Any, corpus: offer_corpus.OfferCorpus,
                         c_values: Sequence[float] = PROBE_C_VALUES) -> dict[str, float]:
  """The frozen encoder's pair classifier (a logistic regression on its offer vectors): `<split>/{precision, recall,
  f1, loss}` on validation and test, and the C it chose on validation (`validation/probe_c`)."""
  probe = linear_probe(model, corpus, c_values)
  results = {"validation/probe_c": probe.c}
  for split in ("validation", "test"):
    results.update({f"{split}/{k}": v for k, v in probe.metrics[split].items()})
  return results


@registry.register("pair_matching")
def classify_pairs(model: Any, corpus: offer_corpus.OfferCorpus, split: str = "test") -> dict[str, float]:
  """`<split>/{precision, recall, f1, loss}` of a pair classifier (`inference.pair_matching`) on the split's
  labelled pairs."""
  pairs = corpus.pairs[split]
  logits = model.match_logits([corpus.texts[i] for i in pairs[:, 0]], [corpus.texts[i] for i in pairs[:, 1]])
  return {f"{split}/{k}": v for k, v in match_metrics(logits, pairs[:, 2]).items()}
