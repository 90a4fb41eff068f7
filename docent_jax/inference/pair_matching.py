"""Product matching's offer-pair classifiers: the bi-encoder (`PairMatchingModel`, objective `pair_matching`), which
also encodes single offers, and the cross-encoder (`CrossEncoderModel`, objective `cross_encoder`), which reads the
two offers of a pair together only. SupCon's offer encoder is a `text_encoder.TextEncoderModel` whose tokenizer has
the offer markers (`OFFER_TOKENS`)."""
import abc
from collections.abc import Sequence
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.data.offers import files as offer_files
from docent_jax.inference import protocol
from docent_jax.inference import text_encoder
from docent_jax.modules import pair_classifier
from docent_jax.modules import pretrained

# The serialisation's markers, special tokens of every offer model's tokenizer.
OFFER_TOKENS = (offer_files.COL_TOKEN, offer_files.VAL_TOKEN)
# Where both classifiers keep their logit head (a Dense of one output) in their params.
HEAD_PATH = ("head", "output")


class OfferPairModel(abc.ABC):
  """What an offer-pair classifier answers: `match_logits` / `match` of offer pairs."""

  def match_logits(self, left: str | Sequence[str], right: str | Sequence[str]) -> np.ndarray:
    """[n] logits that left[i] and right[i] are offers of one product (a match when > 0); one pair of offers
    (two `str`s) gives its one logit."""
    if isinstance(left, str) and isinstance(right, str):
      return self.match_logits([left], [right])[0]
    if isinstance(left, str) or isinstance(right, str):
      raise TypeError("match: left and right are both one offer (str) or both lists of offers.")
    left, right = list(left), list(right)
    if len(left) != len(right):
      raise ValueError(f"match: {len(left)} left offers but {len(right)} right ones.")
    if not left:
      return np.zeros((0,), np.float32)
    return self._logits(left, right)

  def match(self, left: str | Sequence[str], right: str | Sequence[str]) -> np.ndarray:
    """[n] probabilities that left[i] and right[i] are offers of one product (one pair of `str`s: its one)."""
    return np.asarray(jax.nn.sigmoid(self.match_logits(left, right)))

  @abc.abstractmethod
  def _logits(self, left: list[str], right: list[str]) -> np.ndarray:
    """[n] logits of n > 0 pairs."""


class PairMatchingModel(text_encoder.TextEncoderModel, OfferPairModel):
  """The bi-encoder: each offer's mean-pooled vector, a logistic head on the pair's [u, v, |u - v|, u * v]."""

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.module = pair_classifier.PairClassifier(self.bert_config, dtype=jnp.dtype(self.config.model.dtype),
                                                 pad_token_id=self.tokenizer.pad_token_id)

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    return dataclasses.replace(super().text_encoder_layout(), head="pair_features", head_path=HEAD_PATH)

  def _logits(self, left: list[str], right: list[str]) -> np.ndarray:
    vectors = np.stack([self.encode(left), self.encode(right)], axis=1)
    return np.asarray(self.module.apply({"params": self.params}, jnp.asarray(vectors),
                                        method=pair_classifier.PairClassifier.classify))


class CrossEncoderModel(protocol.Model, OfferPairModel):
  """The cross-encoder: BERT over `[CLS] a [SEP] b [SEP]`, a logistic head on the first token's output."""

  def __init__(self, *args: Any, tokenizer: Any = None, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.tokenizer = tokenizer or pretrained.load_tokenizer(
        self.config.model.tokenizer, extra_special_tokens=tuple(self.record.get("special_tokens", ())))
    self.bert_config = pretrained.model_bert_config(self.config.model, len(self.tokenizer))
    self.module = pair_classifier.CrossEncoder(self.bert_config, dtype=jnp.dtype(self.config.model.dtype),
                                               pad_token_id=self.tokenizer.pad_token_id)
    self._pair_logits_fn = self._pair_logits  # Bound once: copies (`with_params`) share its compilations.

  def _encode(self, texts: list[str]) -> np.ndarray:
    raise TypeError(f"{self.name}: a cross-encoder reads the two offers of a pair together; it has no vector of "
                    "one offer (use match).")

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    # The first token's output of the pair read together, then the head.
    return protocol.TextEncoderLayout(bert_config=self.bert_config, bert_path=("bert",), pooling="cls",
                                      max_len=self.config.data.max_len, head="cross_encoder", head_path=HEAD_PATH)

  def _logits(self, left: list[str], right: list[str]) -> np.ndarray:
    inputs = tokenization.tokenize_pairs(self.tokenizer, left, right, self.config.data.max_len)
    return parallel.map_batches(self._pair_logits_fn, self.params, inputs,
                                batch_size=self.config.model.inference_batch_size, mesh=self.mesh, what="pairs")

  def _pair_logits(self, params: Any, inputs: jax.Array) -> jax.Array:
    return self.module.apply({"params": params}, inputs)
