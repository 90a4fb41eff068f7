"""Supervised contrastive product matching (Peeters & Bizer, WWW 2022 companion).

Two steps over the offers of a matching dataset:
  1. Pre-training (this objective's loss): an offer encoder (BERT, mean-pooled) learns by the
     supervised contrastive loss over batches of offers and their matching partners. Labels are the
     offers' product ids where the data has them, else the connected components of a seeded
     fraction of the training and validation matches; `loss.labels = 'self'` gives every offer its
     own label (the self-supervised variant: a partner is the offer itself, seen through dropout
     and augmentation). Batches come from one source-aware sampled dataset each, or from all
     offers (`data.source_aware = False`, the paper's ablation).
  2. Fine-tuning (`evaluate`): a pair classifier over [u, v, |u - v|, u * v] on the labelled
     pairs, with the pre-trained encoder frozen and / or trained (`classifier.encoder_modes`),
     early-stopped on the validation loss; precision, recall and F1 of the matches on test.
`CrossEncoderObjective` is the baseline without contrastive pre-training: a cross-encoder over the
concatenated pair, fine-tuned by the same protocol and budget as a trained encoder.
"""
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import losses
from docent_jax import parallel
from docent_jax.data import offer_corpus
from docent_jax.data import offer_files
from docent_jax.data import offer_labels
from docent_jax.data import offer_sampling
from docent_jax.evaluation import pair_matching
from docent_jax.models import bert
from docent_jax.models import pretrained
from docent_jax.objectives import base

LABELS = ("supervised", "self")
ENCODER_MODES = ("frozen", "trained")


def offer_labels_of(corpus: offer_corpus.OfferCorpus, kind: str, *, fraction: float, seed: int) -> np.ndarray:
  """int32 [num_offers]: each offer's pre-training label (see the module docstring)."""
  if kind not in LABELS:
    raise ValueError(f"Unknown loss.labels {kind!r}; valid: {list(LABELS)}.")
  if kind == "self":
    return np.arange(corpus.num_offers, dtype=np.int32)
  if any(corpus.product_ids):
    return offer_labels.product_labels(corpus.product_ids)
  matches = np.concatenate([corpus.pairs["train"], corpus.pairs["validation"]])
  labels, num_edges = offer_labels.correspondence_labels(corpus.num_offers, matches, fraction=fraction, seed=seed)
  logging.info("%s: %d labels from %d correspondence edges over %d offers.", corpus.name, len(np.unique(labels)),
               num_edges, corpus.num_offers)
  return labels


class SupconObjective(base.Objective):
  """Contrastive pre-training of the offer encoder; pair-classifier fine-tuning as the evaluation."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh):
    super().__init__(config, mesh)
    for mode in config.classifier.encoder_modes:
      if mode not in ENCODER_MODES:
        raise ValueError(f"Unknown classifier.encoder_modes entry {mode!r}; valid: {list(ENCODER_MODES)}.")
    self.corpus = offer_corpus.load_offer_corpus(config.data.dataset, data_dir=config.data.tfds_data_dir,
                                                 manual_dir=config.data.manual_dir)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer,
                                               extra_special_tokens=(offer_files.COL_TOKEN, offer_files.VAL_TOKEN))
    self.bert_config, self._bert_params = pretrained.load_or_create_bert(
        config.model.pretrained, config.model.bert.to_dict(), len(self.tokenizer))
    self.encoder = bert.BertModel(self.bert_config, dtype=jnp.dtype(config.model.dtype), add_pooler=False)
    self.labels = offer_labels_of(self.corpus, config.loss.labels, fraction=config.loss.correspondence_fraction,
                                  seed=config.seed)

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return {"bert": self.encoder.init(rng, tokens, tokens)["params"]}

  def pretrained_params(self) -> dict[str, Any]:
    return {} if self._bert_params is None else {"bert": self._bert_params}

  def train_batches(self, seed: int) -> Any:
    data = self.config.data
    return offer_sampling.contrastive_batches(
        self.corpus.texts, self.labels, self.corpus.source, self.tokenizer,
        batch_size=self.config.train.global_batch_size, max_len=data.max_len, seed=seed,
        source_aware=data.source_aware, augmentation=data.augmentation or None,
        augmentation_probability=data.augmentation_probability)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    tokens = batch["tokens"]
    mask = (tokens != self.tokenizer.pad_token_id).astype(jnp.int32)
    hidden = self.encoder.apply({"params": params["bert"]}, tokens, mask, deterministic=False,
                                rngs={"dropout": rng}).last_hidden_state
    loss, metrics = losses.supcon_loss(bert.mean_pool(hidden, mask), batch["label"],
                                       self.config.loss.temperature)
    return loss, {**metrics, "loss": loss}

  def fit_options(self, trained_encoder: bool) -> pair_matching.FitOptions:
    """The fine-tuning budget: a trained encoder (or cross-encoder) gets `classifier.trained_max_steps`."""
    config = self.config.classifier
    return pair_matching.FitOptions(
        max_epochs=config.max_epochs, patience=config.patience, batch_size=config.batch_size,
        learning_rate=config.trained_learning_rate if trained_encoder else config.frozen_learning_rate,
        max_steps=config.trained_max_steps if trained_encoder else None,
        lr_multipliers=tuple(map(tuple, config.trained_lr_multipliers)) if trained_encoder else (),
        eval_batch_size=self.config.eval.batch_size, seed=self.config.seed)

  def fit_and_test(self, matcher: pair_matching.PairMatcher, params: Any,
                   options: pair_matching.FitOptions) -> tuple[dict[str, float], Any]:
    """Fine-tunes `matcher` from `params`: metrics of the best epoch on validation and test, and its params."""
    rules = parallel.rules_from_config(self.config.mesh)
    fit = pair_matching.fit_pair_classifier(matcher, params, self.corpus.texts, self.corpus.pairs, options=options,
                                            mesh=self.mesh, rules=rules)
    results = {f"fit/{k}": v for k, v in fit.summary().items()}
    for split in ("validation", "test"):
      metrics = pair_matching.evaluate_pairs(matcher, fit.params, self.corpus.texts, self.corpus.pairs[split],
                                             mesh=self.mesh, batch_size=self.config.eval.batch_size, split=split,
                                             rules=rules)
      results.update({f"{split}/{k}": v for k, v in metrics.items()})
    return results, fit.params

  def evaluate(self, params: Any) -> dict[str, Any]:
    """Per encoder mode, the pair classifier's metrics; flat when there is one mode.

    With `classifier.trained_from_frozen_head`, a trained encoder's head starts where the frozen
    encoder's fit ended (linear probing, then fine-tuning), when 'frozen' comes first in the modes.
    """
    config = self.config.classifier
    results, frozen_head = {}, None
    for mode in config.encoder_modes:
      matcher = pair_matching.BiEncoderMatcher(self.bert_config, self.tokenizer, max_len=self.config.data.max_len,
                                               freeze_encoder=mode == "frozen")
      initial = matcher.init_params(jax.random.key(self.config.seed), jax.device_get(params["bert"]))
      if mode == "trained" and frozen_head is not None and config.trained_from_frozen_head:
        initial = {**initial, "head": frozen_head}
      results[mode], fitted = self.fit_and_test(matcher, initial, self.fit_options(trained_encoder=mode == "trained"))
      if mode == "frozen":
        frozen_head = fitted["head"]
      logging.info("%s, %s encoder: %s", self.config.name, mode, results[mode])
    return results[config.encoder_modes[0]] if len(config.encoder_modes) == 1 else results


class CrossEncoderObjective(SupconObjective):
  """No contrastive pre-training (train.num_steps = 0): a cross-encoder fine-tuned on the pairs."""

  def evaluate(self, params: Any) -> dict[str, float]:
    matcher = pair_matching.CrossEncoderMatcher(self.bert_config, self.tokenizer,
                                                max_len=self.config.classifier.cross_encoder_max_len)
    initial = matcher.init_params(jax.random.key(self.config.seed), jax.device_get(params["bert"]))
    return self.fit_and_test(matcher, initial, self.fit_options(trained_encoder=True))[0]
