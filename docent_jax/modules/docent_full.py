"""DOCENT-FULL's model: BERT whose vocabulary is extended by one token per entity.

The entity rows live in their own row-sharded table beside the word-piece embeddings. An example is
`[CLS] e [SEP] sentence [SEP]` with token type 0 for the entity segment and 1 for the sentence; the
entity position's input embedding is row e of the table, or [MASK]'s word embedding when the
entity is to be predicted. Outputs go through the MLM head's transform and are scored against the
word embeddings (plus the head's bias) and the entity rows together.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from docent_jax.modules import bert
from docent_jax.modules import entity_table

ENTITY_POSITION = 1  # The entity token's position: [CLS] e [SEP] ...
SENTENCE_START = 3  # The first position of the sentence segment.


def two_segment_inputs(sentence_tokens: jax.Array, *, slot_id: int, sep_id: int,
                       pad_id: int) -> tuple[jax.Array, jax.Array]:
  """`[CLS] slot [SEP] sentence [SEP]` and its token types, from padded `[CLS] sentence [SEP]` rows.

  The sentence is shifted right by two positions and truncated to the same length; a truncated
  sentence still ends with [SEP]. Token types: 0 for the entity segment and padding, 1 for the
  sentence and its [SEP].

  Args:
    sentence_tokens: int [b, L], each row [CLS] w_1 ... w_n [SEP] followed by `pad_id`.
    slot_id: the word-piece id put at `ENTITY_POSITION` (e.g. [MASK]; the model may replace its
      embedding by an entity row).
    sep_id: [SEP]'s id.
    pad_id: the padding id.

  Returns:
    (tokens, token_types), both int [b, L].
  """
  batch, length = sentence_tokens.shape
  if length < SENTENCE_START + 2:
    raise ValueError(f"Sequences of length {length} leave no room for a sentence after [CLS] e [SEP].")
  prefix = jnp.stack([sentence_tokens[:, 0], jnp.full((batch,), slot_id, sentence_tokens.dtype),
                      jnp.full((batch,), sep_id, sentence_tokens.dtype)], axis=1)
  tokens = jnp.concatenate([prefix, sentence_tokens[:, 1:length - 2]], axis=1)
  # A sentence that filled the row lost its [SEP] to the shift.
  tokens = tokens.at[:, -1].set(jnp.where(tokens[:, -1] == pad_id, pad_id, sep_id))
  positions = jnp.arange(length)
  token_types = ((positions >= SENTENCE_START) & (tokens != pad_id)).astype(tokens.dtype)
  return tokens, token_types


class DocentFull(nn.Module):
  """BERT + an entity table used as extra vocabulary rows in the input and in the output softmax.

  Params: 'bert' (a `BertModel` without pooler), 'entities' (an `EntityTable`, rows sharded over
  the mesh) and 'mlm_head' (a `BertMLMHead`: its transform and word-piece bias; the decoder is
  the word embeddings, tied).
  """
  config: bert.BertConfig
  num_entities: int
  dtype: jnp.dtype = jnp.float32
  entity_rows_multiple: int = 1  # The table's rows padded to a multiple of this (`EntityTable`).

  def setup(self):
    self.bert = bert.BertModel(self.config, dtype=self.dtype, add_pooler=False, name="bert")
    self.entities = entity_table.EntityTable(self.num_entities, self.config.hidden_size,
                                             stddev=self.config.initializer_range,
                                             rows_multiple=self.entity_rows_multiple, name="entities")
    self.mlm_head = bert.BertMLMHead(self.config, dtype=self.dtype, name="mlm_head")

  def __call__(self, tokens: jax.Array, token_types: jax.Array, attention_mask: jax.Array, entity_ids: jax.Array,
               entity_visible: jax.Array, positions: jax.Array, *, deterministic: bool = True) -> jax.Array:
    """Transformed outputs at `positions`, ready to be scored against word and entity rows.

    Args:
      tokens: int [b, L] in the two-segment layout (see `two_segment_inputs`).
      token_types: int [b, L].
      attention_mask: [b, L], 1 at real tokens (taken before corruption: a random replacement may
        be the padding id).
      entity_ids: int [b], each example's entity.
      entity_visible: bool [b]; where False, the entity position keeps the word-piece embedding of
        its token (the [MASK] of a masked entity).
      positions: int [b, k], the positions to predict.
      deterministic: no dropout when True.

    Returns:
      [b, k, hidden].
    """
    output = self.bert(tokens, attention_mask, token_types, deterministic=deterministic,
                       input_embeddings=self.embed_inputs(tokens, entity_ids, entity_visible))
    hidden = jnp.take_along_axis(output.last_hidden_state, positions[..., None], axis=1)
    return self.mlm_head.predict_states(hidden)

  def embed_inputs(self, tokens: jax.Array, entity_ids: jax.Array, entity_visible: jax.Array) -> jax.Array:
    """Word-piece embeddings of `tokens`, with entity rows at `ENTITY_POSITION` where visible: [b, L, hidden]."""
    # Hidden entities look up row 0 (any valid row) so that no NaN row enters the computation.
    return self.embed_rows(tokens, self.entities(jnp.where(entity_visible, entity_ids, 0)), entity_visible)

  def embed_rows(self, tokens: jax.Array, entity_rows: jax.Array, entity_visible: jax.Array) -> jax.Array:
    """Word-piece embeddings of `tokens` [b, L], with `entity_rows` [b, hidden] at `ENTITY_POSITION` where visible."""
    words = jnp.take(self.bert.word_embedding_matrix(), tokens, axis=0).astype(self.dtype)
    at_entity = (jnp.arange(tokens.shape[1]) == ENTITY_POSITION)[None, :, None] & entity_visible[:, None, None]
    return jnp.where(at_entity, entity_rows.astype(self.dtype)[:, None, :], words)

  def cls_states(self, tokens: jax.Array, token_types: jax.Array, attention_mask: jax.Array,
                 entity_rows: jax.Array) -> jax.Array:
    """[CLS]'s last hidden state [b, hidden] of two-segment inputs with `entity_rows` [b, hidden] visible.

    The rows are inputs rather than looked up, so a caller may hold them fixed: only the 'bert'
    params are read, never the entity table.
    """
    embeddings = self.embed_rows(tokens, entity_rows, jnp.ones(tokens.shape[:1], bool))
    return self.bert(tokens, attention_mask, token_types, input_embeddings=embeddings).last_hidden_state[:, 0]

  def output_tables(self) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(word table [V, hidden], word bias [V], entity table [N, hidden]) of the extended output softmax."""
    return self.bert.word_embedding_matrix(), self.mlm_head.output_bias(), self.entities.table()
