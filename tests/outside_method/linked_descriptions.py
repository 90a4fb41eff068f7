"""A method defined outside docent_jax, as a user's package would define one: entity descriptions encoded by a
mean-pooled BERT, the descriptions of the two entities of a training triple pulled together by an in-batch softmax
(the other tails of the batch are the negatives). A run names it by its import path:

  config.objective = "linked_descriptions:LinkedDescriptionsObjective"

It reads a knowledge graph as BLP does, and is evaluated and loaded through what docent_jax already has: the
`entity_classification` evaluator and `inference.text_encoder.TextEncoderModel`.
"""
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import losses
from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.inference import text_encoder
from docent_jax.modules import pretrained
from docent_jax.objectives import base

SCALE = 20.0  # Of the cosine logits.


class LinkedDescriptionsObjective(base.MeanPooledBertObjective):
  """Linked entities' descriptions close together; see the module docstring."""

  model_class = text_encoder.TextEncoderModel
  paper = "docent_jax's outside-method example: linked entities' descriptions pulled together"

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    super().__init__(config, mesh, inputs)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(config.model, len(self.tokenizer))

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> knowledge_graph.KnowledgeGraph:
    return knowledge_graph.load_knowledge_graph(config.data.dataset, data_dir=config.data.tfds_data_dir,
                                                manual_dir=config.data.manual_dir)

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    rows, tokens = (global_batch_size,), (global_batch_size, self.config.data.max_len)
    return {"head": jax.ShapeDtypeStruct(rows, jnp.int32), "relation": jax.ShapeDtypeStruct(rows, jnp.int32),
            "tail": jax.ShapeDtypeStruct(rows, jnp.int32), "head_tokens": jax.ShapeDtypeStruct(tokens, jnp.int32),
            "tail_tokens": jax.ShapeDtypeStruct(tokens, jnp.int32)}

  def train_batches(self, seed: int) -> Any:
    graph = self.data
    tokens = tokenization.tokenize_texts(self.tokenizer, graph.entity_texts, self.config.data.max_len)
    return pipeline.triple_batches(graph.triples["train"], tokens, seed=seed, pad_id=self.tokenizer.pad_token_id,
                                   global_batch_size=self.config.train.global_batch_size)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    head_rng, tail_rng = jax.random.split(rng)
    unit = lambda x: x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-9)
    heads = unit(self.encode(params, batch["head_tokens"], deterministic=False, rng=head_rng))
    tails = unit(self.encode(params, batch["tail_tokens"], deterministic=False, rng=tail_rng))
    loss, metrics = losses.in_batch_softmax_loss(heads, tails, batch["tail"], SCALE)
    return loss, {**metrics, "loss": loss}

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.data.fingerprint()

  def inference_record(self) -> dict[str, Any]:
    return {"entity_ids": list(self.data.entity_ids), "entity_texts": list(self.data.entity_texts)}

  def record_from_shapes(self) -> dict[str, Any]:
    entities = [str(entity) for entity in np.arange(self.shapes.get("num_entities", 0))]
    return {"entity_ids": entities, "entity_texts": entities}

  def evaluation_data(self) -> knowledge_graph.KnowledgeGraph:
    return self.data
