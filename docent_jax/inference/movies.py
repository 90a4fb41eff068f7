"""DOCENT's models: entities (movies) as rows of a trained table, and texts encoded to be scored against them.

  * DUAL and HYBRID: f(text), the normalised [CLS] of the sentence encoder, against g(e), the normalised
    entity rows; P(e | text) ranks by their cosine.
  * FULL: the output state at the masked entity slot of `[CLS] [MASK] [SEP] text [SEP]` against the entity
    rows of the output softmax; P(e | text) ranks by their inner product (the softmax's normaliser is shared).
  * Tag scorers (the tag-prediction fine-tuning runs): every (movie, tag) score, the movies' vectors frozen.
The record holds the movie ids (`entity_ids`), in the order of the table's rows.
"""
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.inference import protocol
from docent_jax.modules import docent_full
from docent_jax.modules import dual_encoder
from docent_jax.modules import entity_table
from docent_jax.modules import hybrid_encoder
from docent_jax.modules import pretrained
from docent_jax.modules import tag_scorers


class MovieModel(protocol.Model):
  """A DOCENT model: `encode` gives query vectors, `entities` the movies' rows they are scored against."""

  def __init__(self, *args: Any, tokenizer: Any = None, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.tokenizer = tokenizer or pretrained.load_tokenizer(self.config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(self.config.model, self.tokenizer.vocab_size)
    # A record of shapes alone (compiling ahead of time) gives the count instead of the ids.
    self.num_entities = self.record.get("num_entities") or len(self.record["entity_ids"])
    self._encode_tokens_fn = self.encode_tokens  # Bound once: copies (`with_params`) share its compilations.

  def _encode(self, texts: list[str]) -> np.ndarray:
    tokens = tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len)
    return parallel.map_batches(self._encode_tokens_fn, self.params, tokens,
                                batch_size=self.config.model.inference_batch_size, mesh=self.mesh, what="texts")

  def entities(self) -> tuple[list[str], np.ndarray]:
    # The table's rows past the entities are its padding (`EntityTable`).
    return list(self.record["entity_ids"]), self.computed(
        "entities", lambda: parallel.fetch(self._entity_table())[:self.num_entities])

  def _entity_table(self) -> jax.Array:
    raise NotImplementedError


class DualMovieModel(MovieModel):
  """DUAL (RELIC) and HYBRID: normalised f(text) against normalised g(e)."""

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    encoder = hybrid_encoder.HybridEncoder if self.config.objective == "docent_hybrid" else dual_encoder.DualEncoder
    model = self.config.model
    self.module = encoder(self.bert_config, num_entities=self.num_entities, initial_scale=model.scale,
                          learn_scale=model.learn_scale, dtype=jnp.dtype(model.dtype),
                          entity_rows_multiple=entity_table.configured_rows_multiple(model),
                          sentence_pooling=model.get("sentence_pooling", "cls"))

  def encode_tokens(self, params: Any, tokens: jax.Array) -> jax.Array:
    return self.module.apply({"params": params}, tokens, method=dual_encoder.DualEncoder.encode_sentences)

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    # f(s) is a unit vector: the exported encoder normalises as the model does.
    return protocol.TextEncoderLayout(bert_config=self.bert_config, bert_path=("bert",),
                                      pooling=self.config.model.get("sentence_pooling", "cls"),
                                      max_len=self.config.data.max_len, normalize=True)

  def _entity_table(self) -> jax.Array:
    return self.module.apply({"params": self.params}, method=dual_encoder.DualEncoder.entity_table)


class FullMovieModel(MovieModel):
  """FULL: the masked entity slot's output state against the entity rows of the output softmax."""

  cosine_search = False  # P(e | text) ranks by the logits, inner products with the entity rows.

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.module = docent_full.DocentFull(
        self.bert_config, num_entities=self.num_entities, dtype=jnp.dtype(self.config.model.dtype),
        entity_rows_multiple=entity_table.configured_rows_multiple(self.config.model))

  def encode_tokens(self, params: Any, tokens: jax.Array) -> jax.Array:
    pad = self.tokenizer.pad_token_id
    tokens, token_types = docent_full.two_segment_inputs(tokens, slot_id=self.tokenizer.mask_token_id,
                                                         sep_id=self.tokenizer.sep_token_id, pad_id=pad)
    batch = len(tokens)
    hidden = self.module.apply(
        {"params": params}, tokens, token_types, (tokens != pad).astype(jnp.int32), jnp.zeros((batch,), jnp.int32),
        jnp.zeros((batch,), bool), jnp.full((batch, 1), docent_full.ENTITY_POSITION, jnp.int32))
    return hidden[:, 0].astype(jnp.float32)

  def _entity_table(self) -> jax.Array:
    return self.module.apply({"params": self.params}, method=docent_full.DocentFull.output_tables)[2]

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    raise protocol.NotExportableError(
        f"{self.name}: DOCENT-FULL's text vector is the output at the entity slot of `[CLS] [MASK] [SEP] text [SEP]` "
        "(position 1), which no sentence-transformers pooling selects; export its entity table with "
        "--format=projector.")


class TagModel(protocol.Model):
  """A tag scorer fine-tuned against frozen item vectors (a DOCENT model's movie rows, or review sentences'
  pretrained vectors for BoS-BERT). The record holds the items' movie ids (`entity_ids`, one per item); the item
  vectors are passed in (`item_vectors`)."""

  def __init__(self, *args: Any, scorer: tag_scorers.TagScorer, item_vectors: np.ndarray, tokenizer: Any = None,
               **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.scorer, self.item_vectors = scorer, np.asarray(item_vectors, np.float32)
    self.tokenizer = tokenizer or pretrained.load_tokenizer(self.config.model.tokenizer)

  def _encode(self, texts: list[str]) -> np.ndarray:
    if not isinstance(self.scorer, tag_scorers.DualScorer):
      raise TypeError(f"{self.name}: a pair-classifier tag scorer reads a movie and a tag together; it has no vector "
                      "of one text (use tag_scores).")
    return self.scorer.tag_vectors(self.params, self._tag_tokens(texts))

  def _tag_tokens(self, tags: Sequence[str]) -> np.ndarray:
    return tag_scorers.label_tokens(self.tokenizer, list(tags), self.config.data.max_len)

  def entities(self) -> tuple[list[str], np.ndarray]:
    return list(self.record["entity_ids"]), self.item_vectors

  def tag_scores(self, items: np.ndarray, tags: Sequence[str]) -> np.ndarray:
    """[len(items), len(tags)] scores (higher: more likely) of items (rows of the item vectors) and tag texts."""
    return self.scorer.scores(self.params, self.item_vectors[items], self._tag_tokens(tags))
