"""RELIC's dual encoder: a sentence's BERT [CLS] (or mean output) against a learned entity table, by scaled
cosine."""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from docent_jax.modules import bert
from docent_jax.modules import entity_table


class DualEncoder(nn.Module):
  """f(s) = normalised [CLS] of BERT(s) (RELIC's; `sentence_pooling="mean"`: its mean output over the tokens);
  g(e) = normalised row e of the entity table; s(e, s) = scale * cos.

  The scale is learned (as a log, starting at `initial_scale`) or fixed at `initial_scale`.
  """
  config: bert.BertConfig
  num_entities: int
  initial_scale: float = 20.0
  learn_scale: bool = True
  dtype: jnp.dtype = jnp.float32
  entity_rows_multiple: int = 1  # The table's rows padded to a multiple of this (`EntityTable`).
  sentence_pooling: str = "cls"  # "cls" or "mean" (`config_schema.SENTENCE_POOLINGS`).

  def setup(self):
    self.bert = bert.BertModel(self.config, dtype=self.dtype, add_pooler=False, name="bert")
    self.entities = entity_table.EntityTable(self.num_entities, self.config.hidden_size, normalize=True,
                                             rows_multiple=self.entity_rows_multiple, name="entities")
    if self.learn_scale:
      self.log_scale = self.param("log_scale", nn.with_logical_partitioning(
          nn.initializers.constant(math.log(self.initial_scale)), ()), ())

  def __call__(self, tokens: jax.Array, entity_ids: jax.Array, *, deterministic: bool = True):
    return self.encode_sentences(tokens, deterministic=deterministic), self.entities(entity_ids), self.scale()

  def encode_sentences(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    mask = bert.attention_mask(tokens, self.config)
    hidden = self.bert(tokens, attention_mask=mask, deterministic=deterministic).last_hidden_state
    return entity_table.l2_normalize(hidden[:, 0] if self.sentence_pooling == "cls" else bert.mean_pool(hidden, mask))

  def entity_table(self) -> jax.Array:
    """The normalised rows [num_rows, d]: the entities', then the padding's."""
    return self.entities.table()

  def scale(self) -> jax.Array:
    return jnp.exp(self.log_scale) if self.learn_scale else jnp.asarray(self.initial_scale, jnp.float32)
