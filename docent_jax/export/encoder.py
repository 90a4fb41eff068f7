"""A model's text encoder as host arrays under other libraries' names: the BERT's Hugging Face tensors, and the
pooling, linear map, normalisation and pair head that follow it (a `TextEncoderLayout` of the model's params)."""
import dataclasses
from typing import Any

import numpy as np

from docent_jax import parallel
from docent_jax.modules import pretrained


@dataclasses.dataclass(frozen=True)
class ExportedEncoder:
  """What every export format writes of one model's text encoder."""
  layout: Any  # `inference.protocol.TextEncoderLayout`.
  state_dict: dict[str, np.ndarray]  # The BERT's float32 tensors by Hugging Face name.
  # A linear map after pooling, and a pair classifier's logit head, in torch's `Linear` layout: weight [out, in].
  projection: tuple[np.ndarray, np.ndarray] | None
  head: tuple[np.ndarray, np.ndarray] | None
  similarity: str  # How the model scores two vectors: "cosine" or "dot" (sentence-transformers' names).
  tokenizer: Any

  @property
  def hidden_size(self) -> int:
    return self.layout.bert_config.hidden_size

  @property
  def dim(self) -> int:
    """The width of a text's vector."""
    return self.hidden_size if self.projection is None else int(self.projection[0].shape[0])


def _subtree(params: Any, path: tuple[str, ...]) -> Any:
  for key in path:
    params = params[key]
  return params


def _linear(dense: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
  """A Flax Dense's params (kernel [in, out], bias [out]) as torch's Linear holds them (weight [out, in], bias)."""
  return (np.ascontiguousarray(np.asarray(dense["kernel"], np.float32).T), np.asarray(dense["bias"], np.float32))


def exported_encoder(model: Any) -> ExportedEncoder:
  """The text encoder of `model` (an `inference.protocol.Model` over params); a model without one raises
  `NotExportableError` saying why."""
  layout = model.text_encoder_layout()
  params = parallel.fetch(model.params)
  return ExportedEncoder(
      layout=layout,
      state_dict=pretrained.bert_state_dict(_subtree(params, layout.bert_path), layout.bert_config),
      projection=None if layout.projection_path is None else _linear(_subtree(params, layout.projection_path)),
      head=None if layout.head_path is None else _linear(_subtree(params, layout.head_path)),
      similarity="cosine" if model.cosine_search else "dot",
      tokenizer=model.tokenizer)
