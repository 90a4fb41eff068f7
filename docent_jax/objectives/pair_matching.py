"""Offer-pair classifiers trained end to end (Peeters & Bizer's fine-tuning), as ordinary trainer runs.

  * `pair_matching`: the bi-encoder `PairClassifier` (mean-pooled BERT per offer, a logistic head on
    [u, v, |u - v|, u * v]). It fine-tunes the encoder of the run it starts from (`model_init`, e.g.
    a SupCon pre-training); with `model.head_init = 'probe'` its head starts at that encoder's
    linear probe (linear probing, then fine-tuning), else fresh (see `fresh_head`). With
    `model.freeze_encoder` only the head trains: the paper's frozen setting (F).
  * `cross_encoder`: BERT over `[CLS] a [SEP] b [SEP]` and the same head, from the pretrained BERT:
    the baseline without contrastive pre-training.
Both train on the labelled training pairs with binary cross-entropy (batches reshuffled each epoch)
and are scored by the `pair_matching` evaluator (`evaluation/pair_matching`) on a split's pairs.
"""
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.data.offers import labels as offer_labels
from docent_jax.modules import pair_probe
from docent_jax.objectives import offers

HEAD_INITS = ("fresh", "probe")


class PairMatchingObjective(offers.OfferObjective):
  """A bi-encoder pair classifier, fine-tuned from the encoder of the run it starts from."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    if config.model.get("head_init", "fresh") not in HEAD_INITS:
      raise ValueError(f"Unknown model.head_init {config.model.head_init!r}; valid: {list(HEAD_INITS)}.")
    super().__init__(config, mesh, inputs)

  @functools.cached_property
  def pairs(self) -> dict[str, np.ndarray]:
    """Per split, the labelled pairs [m, 3] (two offers' rows and the label), checked (`check_pairs`)."""
    dataset, best_metric = self.config.data.dataset, self.config.train.best_metric
    return {split: offer_labels.check_pairs(
        p, self.corpus.num_offers, f"{dataset} {split}",
        f"the best step (train.best_metric {best_metric})" if best_metric.startswith(f"{split}/") else "")
        for split, p in self.corpus.pairs.items()}

  @property
  def module(self) -> Any:
    """The Flax module the loss applies: its model's (`model()`), the one evaluation and `load()` use."""
    return self.model().module

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays: each pair's two offers' token ids (a cross-encoder's: the pair's ids
    and token types) and its label."""
    return {"inputs": jax.ShapeDtypeStruct((global_batch_size, 2, self.config.data.max_len), jnp.int32),
            "label": jax.ShapeDtypeStruct((global_batch_size,), jnp.int32)}

  def vector_width(self) -> int | None:
    """The width of an offer's vector."""
    return self.bert_config.hidden_size

  @functools.cached_property
  def pair_tokens(self) -> dict[str, np.ndarray]:
    return self.pair_inputs()

  def pair_inputs(self) -> dict[str, np.ndarray]:
    """Per split, the token ids [m, 2, max_len] of each pair's two offers."""
    tokens = tokenization.tokenize_texts(self.tokenizer, self.corpus.texts, self.config.data.max_len)
    return {split: tokens[pairs[:, :2]] for split, pairs in self.pairs.items()}

  def init_variables(self, rng: jax.Array) -> Any:
    return self.module.init(rng, jnp.zeros((1, 2, self.config.data.max_len), jnp.int32))["params"]

  def pretrained_params(self) -> dict[str, Any]:
    """A fresh head's bias (`fresh_head`); the encoder is the parent run's (`model_init`, taken by the trainer)."""
    if self.parent is None:
      raise ValueError(f"{self.config.name}: objective 'pair_matching' fine-tunes another run's encoder; set "
                       "config.model_init to that run (a workdir, or a model of this config).")
    return {"head": self.fresh_head()}

  def params_from_parent(self) -> Any:
    """The parent's params and, with `head_init = 'probe'`, a head at the linear probe of the parent's offer vectors
    on this run's pairs (the `pair_probe` evaluator's fit, when it evaluated the parent)."""
    if self.config.model.get("head_init", "fresh") != "probe":
      return self.parent.params
    try:
      probe = pair_probe.linear_probe(self.parent, self.corpus)
    except TypeError as error:
      raise ValueError(f"config.model.head_init = 'probe': the model_init run has no offer vectors to probe "
                       f"({error}); use head_init 'fresh'.") from None
    head = {"output": {"kernel": probe.weights[:, None], "bias": np.array([probe.bias], np.float32)}}
    return {**self.parent.params, "head": head}

  def fresh_head(self) -> dict[str, Any]:
    """A fresh head's bias: the log-odds of a match among the training pairs (add-one smoothed); its kernel
    keeps its random initialisation.

    At bias 0 every pair starts at probability 0.5, while matches are a minority (Abt-Buy: 11%). Until the
    logits come down to that prior, most pairs' gradients say "lower the logit", whatever the pair, and the
    encoder under the head follows: the first steps, those at the peak learning rate, go into the class prior
    instead of the pairs (on Abt-Buy, seed 0, the cross-encoder then did not learn within its 350 steps).
    """
    labels = self.pairs["train"][:, 2]
    prior = (labels.sum() + 1.0) / (len(labels) + 2.0)
    return {"output": {"bias": np.array([np.log(prior / (1.0 - prior))], np.float32)}}

  def train_batches(self, seed: int) -> Any:
    inputs, labels = self.pair_tokens["train"], self.pairs["train"][:, 2].astype(np.int32)
    read = lambda rows: {"inputs": inputs[rows], "label": labels[rows]}
    return pipeline.process_batches(len(labels), read, global_batch_size=self.config.train.global_batch_size,
                                    seed=seed)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    if self.config.model.get("freeze_encoder", False):
      # Peeters & Bizer's frozen setting (F): only the head learns, so no gradient is computed for the encoder.
      # Its params stay as they are only if the optimizer does not decay them either (`frozen_head_training`).
      params = {name: value if name == "head" else jax.lax.stop_gradient(value) for name, value in params.items()}
    logits = self.module.apply({"params": params}, batch["inputs"], deterministic=False, rngs={"dropout": rng})
    labels = batch["label"].astype(jnp.float32)
    loss = optax.sigmoid_binary_cross_entropy(logits, labels).mean()
    return loss, {"loss": loss, "accuracy": jnp.mean((logits > 0) == (labels > 0))}

  def evaluation_data(self) -> offer_corpus.OfferCorpus:
    return dataclasses.replace(self.corpus, pairs=self.pairs)


class CrossEncoderObjective(PairMatchingObjective):
  """A cross-encoder pair classifier from the pretrained BERT (no contrastive pre-training)."""

  def vector_width(self) -> None:
    return None  # It reads the two offers of a pair together: no vector of one offer.

  def pair_inputs(self) -> dict[str, np.ndarray]:
    """Per split, the token ids and token types [m, 2, max_len] of each pair as the tokenizer joins them."""
    texts = self.corpus.texts
    return {split: tokenization.tokenize_pairs(self.tokenizer, [texts[i] for i in pairs[:, 0]],
                                               [texts[i] for i in pairs[:, 1]], self.config.data.max_len)
            for split, pairs in self.pairs.items()}

  def pretrained_params(self) -> dict[str, Any]:
    """The pretrained BERT (when the config names one) and a fresh head at the training pairs' prior."""
    params = {"head": self.fresh_head()}
    if self.pretrained_bert is not None:
      params["bert"] = self.pretrained_bert
    return params
