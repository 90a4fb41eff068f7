"""DOCENT-HYBRID (Zemlyanskiy et al., EACL 2021): RELIC's loss plus a masked LM conditioned on the entity.

Loss = L_E + loss.mlm_weight * L_MLM|e. L_E is DOCENT-DUAL's -log P(e | s) on the clean sentence
(in-batch or full softmax). L_MLM|e predicts the masked word pieces of the same sentence from each
position's output concatenated with g(e), so words that the sentence alone does not determine push
information about the entity into its row.

BERT runs twice per example, on the clean and on the masked sentence: [CLS] then learns from the
kind of input it gets at search time (unmasked queries), and the entity score never sees the
corruption. This costs a second encoder pass per step. Data, search evaluation, baselines and export are DOCENT-DUAL's.
"""
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import losses
from docent_jax.modules import hybrid_encoder
from docent_jax.modules import masking
from docent_jax.objectives import docent_dual


class DocentHybridObjective(docent_dual.DocentDualObjective):
  """DOCENT-DUAL plus an entity-conditioned masked LM; BERT pretrained, MLM head fresh."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    if not 0.0 < config.loss.mlm_rate <= 1.0:
      raise ValueError(f"loss.mlm_rate must be in (0, 1]; got {config.loss.mlm_rate}.")
    super().__init__(config, mesh, inputs)

  @property
  def _special_ids(self) -> np.ndarray:
    """The tokenizer's special tokens: never masked."""
    return np.array(sorted(self.tokenizer.all_special_ids), np.int32)

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return self.module.init(rng, tokens, jnp.zeros((1,), jnp.int32),
                           method=hybrid_encoder.HybridEncoder.init_all)["params"]

  def mask_batch(self, tokens: jax.Array, rng: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """BERT's corruption of `loss.mlm_rate` of the word pieces; special tokens and padding stay intact.

    Returns (corrupted tokens, positions [b, k] to predict, their labels, predicted [b, k]: which of
    the positions were chosen), with k = `masking.max_predictions`.
    """
    mask_rng, cap_rng = jax.random.split(rng)
    maskable = ~jnp.isin(tokens, jnp.asarray(self._special_ids))
    corrupted, labels, chosen = masking.mask_tokens(
        mask_rng, tokens, maskable, rate=self.config.loss.mlm_rate, mask_id=self.tokenizer.mask_token_id,
        vocab_size=self.module.config.vocab_size)
    length = tokens.shape[1]
    num_predictions = masking.max_predictions(length, self.config.loss.mlm_rate, max_maskable=length - 2)
    corrupted, positions, predicted = masking.cap_predictions(cap_rng, tokens, corrupted, chosen, num_predictions)
    return corrupted, positions, jnp.take_along_axis(labels, positions, axis=1), predicted

  def masked_lm_loss(self, params: Any, batch: dict[str, jax.Array],
                     rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    """L_MLM|e: cross-entropy of the masked word pieces given the corrupted sentence and g(e)."""
    mask_rng, dropout_rng = jax.random.split(rng)
    tokens, positions, labels, predicted = self.mask_batch(batch["tokens"], mask_rng)
    logits = self.module.apply({"params": params}, tokens, batch["entity"], positions, deterministic=False,
                              rngs={"dropout": dropout_rng}, method=hybrid_encoder.HybridEncoder.masked_lm_logits)
    return losses.masked_lm_loss(logits, labels, predicted)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    entity_rng, mlm_rng = jax.random.split(rng)
    entity_loss, metrics = super().loss(params, batch, entity_rng)
    mlm_loss, mlm_metrics = self.masked_lm_loss(params, batch, mlm_rng)
    loss = entity_loss + self.config.loss.mlm_weight * mlm_loss
    return loss, {**metrics, **{f"mlm_{k}": v for k, v in mlm_metrics.items()}, "entity_loss": entity_loss,
                  "mlm_loss": mlm_loss, "loss": loss}
