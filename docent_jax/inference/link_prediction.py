"""BLP's model: an entity encoder over descriptions, relation embeddings and the scoring function."""
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.inference import protocol
from docent_jax.modules import blp_model
from docent_jax.modules import pretrained

# BLP's encoders that are a BERT, a pooling and a linear map; why each of the others has no such form.
BERT_ENCODERS = ("bert", "bert_mean")
NOT_BERT_ENCODERS = {
    "bow": "BE-BOW averages input word-piece vectors with [CLS] and [SEP] (BLP's setting drops stop words first); "
           "sentence-transformers' StaticEmbedding averages without them, so no module of it computes these vectors.",
    "cnn": "DKRL's encoder is two convolutions with a masked max-pool between them; sentence-transformers' CNN module "
           "computes another network, so no module of it computes these vectors.",
}


class LinkPredictionModel(protocol.Model):
  """Encodes entity descriptions; scores triples; completes (description, relation) with the model's entities.

  The record holds the run's entities (`entity_ids`, `entity_texts`) and its relation names (`relation_ids`),
  in the order of the relation table; a record of shapes alone (compiling ahead of time) gives `num_relations`.
  """

  def __init__(self, *args: Any, tokenizer: Any = None, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.tokenizer = tokenizer or pretrained.load_tokenizer(self.config.model.tokenizer)
    self.relation_ids: list[str] = list(self.record.get("relation_ids", ()))
    num_relations = self.record.get("num_relations", len(self.relation_ids))
    self.module, self.scoring = blp_model.create(self.config, self.tokenizer.vocab_size, num_relations)
    self.encoder_path = blp_model.encoder_path(self.config)
    self._encode_tokens_fn = self.encode_tokens  # Bound once: copies (`with_params`) share its compilations.

  def _encode(self, texts: list[str]) -> np.ndarray:
    if self.config.data.get("drop_stopwords", False):
      texts = tokenization.without_stopwords(texts)
    tokens = tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len)
    return parallel.map_token_batches(self._encode_tokens_fn, self.params, tokens, pad_id=self.tokenizer.pad_token_id,
                                      batch_size=self.config.model.inference_batch_size, mesh=self.mesh, what="texts")

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    encoder = self.config.model.encoder
    if encoder not in BERT_ENCODERS:
      raise protocol.NotExportableError(f"{self.name}: {NOT_BERT_ENCODERS[encoder]}")
    return protocol.TextEncoderLayout(
        bert_config=self.module.encoder.config, bert_path=self.encoder_path,
        pooling="mean" if encoder == "bert_mean" else "cls", max_len=self.config.data.max_len,
        projection_path=("encoder", "projection") if self.config.model.dim else None)

  def encode_tokens(self, params: Any, tokens: jax.Array) -> jax.Array:
    return self.module.apply({"params": params}, tokens, method=blp_model.BlpModel.encode)

  def relation_vectors(self, names: Sequence[str]) -> np.ndarray:
    """[n, dr] embeddings of relations by name; an unknown name is an error naming it."""
    rows = {name: row for row, name in enumerate(self.relation_ids)}
    missing = sorted({name for name in names if name not in rows})
    if missing:
      raise KeyError(f"{self.name} has no relation {', '.join(map(repr, missing[:5]))} ({len(missing)} missing; "
                     f"it has {len(self.relation_ids)}, e.g. {self.relation_ids[:3]}).")
    table = parallel.fetch(self.params["relations"]["embedding"])
    return table[[rows[name] for name in names]]

  def score(self, heads: Sequence[str], relations: Sequence[str], tails: Sequence[str]) -> np.ndarray:
    """[n] scores of triples given as (head text, relation name, tail text); higher is more plausible."""
    return np.asarray(self.scoring.score(jnp.asarray(self.encode(heads)), jnp.asarray(self.relation_vectors(relations)),
                                         jnp.asarray(self.encode(tails))))

  def predict(self, texts: str | Sequence[str], relations: str | Sequence[str], k: int = 10,
              tails: bool = True) -> protocol.Ranking:
    """For each (entity description, relation name), the `k` entities of the model's set that best complete the
    triple: its tails (`tails`), else its heads. One description and relation (`str`s) give their one ranking;
    none, no rankings."""
    if isinstance(texts, str) and isinstance(relations, str):
      return self.predict([texts], [relations], k, tails)[0]
    texts, relations = list(texts), list(relations)
    if len(texts) != len(relations):
      raise ValueError(f"predict: {len(texts)} texts but {len(relations)} relations.")
    if k < 1:
      raise ValueError(f"k must be at least 1; got {k}.")
    relation = jnp.asarray(self.relation_vectors(relations))  # An unknown name fails before any encoding.
    if not texts:
      return []
    ids, vectors = self.entities()
    queries, candidates = jnp.asarray(self.encode(texts)), jnp.asarray(vectors)
    scores = (self.scoring.score_tails(queries, relation, candidates) if tails else
              self.scoring.score_heads(relation, queries, candidates))
    top_scores, top_rows = jax.lax.top_k(scores, min(k, len(ids)))
    return [[(ids[j], float(s)) for j, s in zip(row, score)]
            for row, score in zip(np.asarray(top_rows), np.asarray(top_scores))]
