"""DOCENT-HYBRID's model: RELIC's dual encoder plus a masked LM that also sees the sentence's entity."""
import math

import jax
import jax.numpy as jnp

from docent_jax.modules import bert
from docent_jax.modules import dual_encoder


class HybridEncoder(dual_encoder.DualEncoder):
  """`DualEncoder` plus an MLM head over [token output; g(e)] (Zemlyanskiy et al., 2021, DOCENT-HYBRID).

  g(e) is the entity's normalised row, i.e. the vector the dual score and the exported table use, so
  the MLM shapes exactly that representation rather than the free row norm. It is scaled by
  sqrt(dim) to give its elements the unit scale of BERT's LayerNorm outputs beside it. The head is
  `bert.BertMLMHead`: a fresh transform over the [hidden + dim] input, and a decoder tied to BERT's
  word embeddings with its own bias.
  """

  def setup(self):
    super().setup()
    self.mlm_head = bert.BertMLMHead(self.config, dtype=self.dtype, name="mlm_head")

  def masked_lm_logits(self, tokens: jax.Array, entity_ids: jax.Array, positions: jax.Array, *,
                       deterministic: bool = True) -> jax.Array:
    """Vocabulary logits [batch, k, vocab] at `positions` [batch, k] of (masked) `tokens` [batch, length]
    about `entity_ids` [batch]."""
    hidden = self.bert(tokens, attention_mask=bert.attention_mask(tokens, self.config),
                       deterministic=deterministic).last_hidden_state
    hidden = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    entity = (self.entities(entity_ids) * math.sqrt(self.config.hidden_size)).astype(hidden.dtype)
    entity = jnp.broadcast_to(entity[:, None, :], (*hidden.shape[:2], entity.shape[-1]))
    return self.mlm_head(jnp.concatenate([hidden, entity], axis=-1), self.bert.word_embedding_matrix())

  def init_all(self, tokens: jax.Array, entity_ids: jax.Array) -> tuple[jax.Array, ...]:
    """Runs both parts, so that `init` with this method creates every parameter."""
    positions = jnp.zeros((*tokens.shape[:-1], 1), jnp.int32)
    return (*self(tokens, entity_ids), self.masked_lm_logits(tokens, entity_ids, positions))
