"""Product matching's offer-pair classifiers (bi-encoder, cross-encoder). SupCon's offer encoder is a
`text_encoder.TextEncoderModel` whose tokenizer has the offer markers (`OFFER_TOKENS`)."""
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
from docent_jax.models import pair_classifier

# The serialisation's markers, special tokens of every offer model's tokenizer.
OFFER_TOKENS = (offer_files.COL_TOKEN, offer_files.VAL_TOKEN)


class PairMatchingModel(text_encoder.TextEncoderModel):
  """An offer-pair classifier: `match_logits` / `match` of offer pairs. The bi-encoder (objective `pair_matching`)
  also encodes single offers; a cross-encoder (`cross_encoder`) reads the two offers of a pair together only."""

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.cross_encoder = self.config.objective == "cross_encoder"
    classifier = pair_classifier.CrossEncoder if self.cross_encoder else pair_classifier.PairClassifier
    self.module = classifier(self.bert_config, dtype=jnp.dtype(self.config.model.dtype),
                             pad_token_id=self.tokenizer.pad_token_id)
    self._pair_logits_fn = self._pair_logits  # Bound once: copies (`with_params`) share its compilations.

  def _encode(self, texts: list[str]) -> np.ndarray:
    if self.cross_encoder:
      raise TypeError(f"{self.name}: a cross-encoder reads the two offers of a pair together; it has no vector of "
                      "one offer (use match).")
    return super()._encode(texts)

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    layout = super().text_encoder_layout()
    if self.cross_encoder:  # The first token's output of the pair read together, then the head.
      return dataclasses.replace(layout, pooling="cls", head="cross_encoder", head_path=("head", "output"))
    return dataclasses.replace(layout, head="pair_features", head_path=("head", "output"))

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
    if not self.cross_encoder:
      vectors = np.stack([self.encode(left), self.encode(right)], axis=1)
      return np.asarray(self.module.apply({"params": self.params}, jnp.asarray(vectors),
                                          method=pair_classifier.PairClassifier.classify))
    inputs = tokenization.tokenize_pairs(self.tokenizer, list(left), list(right), self.config.data.max_len)
    return parallel.map_batches(self._pair_logits_fn, self.params, inputs,
                                batch_size=self.config.model.inference_batch_size, mesh=self.mesh, what="pairs")

  def match(self, left: str | Sequence[str], right: str | Sequence[str]) -> np.ndarray:
    """[n] probabilities that left[i] and right[i] are offers of one product (one pair of `str`s: its one)."""
    return np.asarray(jax.nn.sigmoid(self.match_logits(left, right)))

  def _pair_logits(self, params: Any, inputs: jax.Array) -> jax.Array:
    return self.module.apply({"params": params}, inputs)
