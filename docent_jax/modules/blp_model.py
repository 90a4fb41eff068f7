"""BLP's model: a text encoder for entity descriptions and a table of relation embeddings, scored by a KG
scoring function. Built from a config alone, so that training and a loaded run build the same model."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from docent_jax.modules import pretrained
from docent_jax.modules import relations
from docent_jax.modules import text_encoders


class BlpModel(nn.Module):
  """A text encoder for entities and a table of relation embeddings."""
  encoder: nn.Module
  num_relations: int
  relation_dim: int

  def setup(self):
    self.relations = nn.Embed(
        self.num_relations, self.relation_dim, name="relations",
        embedding_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(), ("relation", "features")))

  def __call__(self, tokens: jax.Array, relation_ids: jax.Array, *, deterministic: bool = True):
    return self.encode(tokens, deterministic=deterministic), self.relations(relation_ids)

  def encode(self, tokens: jax.Array, *, deterministic: bool = True) -> jax.Array:
    return self.encoder(tokens, deterministic=deterministic)


def encoder_path(config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """Where the text encoder's params sit in the model's params: BERT's under encoder/bert, others' under encoder."""
  return ("encoder", "bert") if config.model.encoder in ("bert", "bert_mean") else ("encoder",)


def create(config: ml_collections.ConfigDict, vocab_size: int,
           num_relations: int) -> tuple[BlpModel, relations.ScoringFunction]:
  """The model of a BLP config over `num_relations` relations and its scoring function (no weights are read:
  the pretrained encoder's are `pretrained.load_model_bert`'s)."""
  scoring = relations.get_scoring_function(config.model.scoring)
  bert_config = pretrained.model_bert_config(config.model, vocab_size)
  model = BlpModel(
      encoder=text_encoders.create_encoder(config.model.encoder, bert_config, config.model.dim,
                                           jnp.dtype(config.model.dtype)),
      num_relations=num_relations,
      relation_dim=scoring.relation_dim(text_encoders.output_dim(config.model.dim, bert_config)))
  return model, scoring
