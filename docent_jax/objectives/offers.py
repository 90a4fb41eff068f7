"""What product matching's objectives share (SupCon pre-training, the pair classifiers): the offers of a matching
dataset, a tokenizer with the offers' markers (`inference.pair_matching.OFFER_TOKENS`), and a model record of those
markers alone (no count of the data sizes the model)."""
from typing import Any

from jax.sharding import Mesh
import ml_collections

from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.inference import pair_matching as pair_matching_model
from docent_jax.modules import pretrained
from docent_jax.objectives import base


class OfferObjective(base.Objective):
  """An objective over the offers of a matching dataset (`data.dataset`)."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    super().__init__(config, mesh, inputs)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer,
                                               extra_special_tokens=pair_matching_model.OFFER_TOKENS)
    self.bert_config = pretrained.model_bert_config(config.model, len(self.tokenizer))

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> offer_corpus.OfferCorpus:
    return offer_corpus.load_offer_corpus(config.data.dataset, data_dir=config.data.tfds_data_dir,
                                          manual_dir=config.data.manual_dir)

  @property
  def corpus(self) -> offer_corpus.OfferCorpus:
    return self.data

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.corpus.fingerprint()

  def inference_record(self) -> dict[str, Any]:
    return {"special_tokens": list(pair_matching_model.OFFER_TOKENS)}

  def record_from_shapes(self) -> dict[str, Any]:
    return self.inference_record()
