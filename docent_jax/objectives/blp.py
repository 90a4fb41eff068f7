"""BLP (Daza, Cochez & Groth, WWW 2021): entity encoders over descriptions trained by link prediction.

An entity is its description, encoded to a vector; a triple (h, r, t) is scored by a KG scoring
function of the two encodings and a relation embedding. Negatives corrupt the head or the tail with
other entities of the same batch. Evaluation is inductive: entities of the dev and test triples were
never seen in training.
"""
import functools
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import losses
from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.inference import link_prediction
from docent_jax.modules import blp_model
from docent_jax.modules import pretrained
from docent_jax.modules import text_encoders
from docent_jax.objectives import base


def sample_negatives(rng: jax.Array, batch_size: int, num_negatives: int) -> tuple[jax.Array, jax.Array]:
  """In-batch corruption: for each triple, entity indices into [heads; tails] and a corrupt-head mask.

  Index i is a head and B + i its tail; as in BLP, neither entity of triple i is drawn as its negative
  (uniformly over the other 2B - 2 slots).
  """
  index_rng, side_rng = jax.random.split(rng)
  corrupt_head = jax.random.bernoulli(side_rng, 0.5, (batch_size, num_negatives))
  head = jnp.arange(batch_size)[:, None]
  drawn = jax.random.randint(index_rng, (batch_size, num_negatives), 0, 2 * batch_size - 2)
  drawn = drawn + (drawn >= head)  # Skip the head, then the tail (B + i > i).
  return drawn + (drawn >= batch_size + head), corrupt_head


class BlpObjective(base.Objective):
  """Link prediction over entity descriptions, evaluated by inductive ranking and entity classification."""

  shapes_needed = ("num_relations",)

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    super().__init__(config, mesh, inputs)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(config.model, self.tokenizer.vocab_size)
    self.loss_fn = losses.get_link_prediction_loss(config.loss.name)

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> knowledge_graph.KnowledgeGraph:
    return knowledge_graph.load_knowledge_graph(
        config.data.dataset, data_dir=config.data.tfds_data_dir, manual_dir=config.data.manual_dir,
        setting=config.data.get("setting", "inductive"))

  @classmethod
  def dataset_shapes(cls, config: ml_collections.ConfigDict) -> dict[str, int]:
    return dict(knowledge_graph.BUILDERS.known_shapes.get(config.data.dataset, {}))

  @property
  def graph(self) -> knowledge_graph.KnowledgeGraph:
    return self.data

  @functools.cached_property
  def entity_tokens(self) -> np.ndarray:
    """Token ids [entities, max_len] of the entities' descriptions."""
    texts = self.graph.entity_texts
    if self.config.data.get("drop_stopwords", False):
      texts = tokenization.without_stopwords(texts)
    return tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len)

  @functools.cached_property
  def train_triples(self) -> np.ndarray:
    """The training triples among `data.train_entity_fraction` of the training entities."""
    graph, fraction = self.graph, self.config.data.get("train_entity_fraction", 1.0)
    triples = knowledge_graph.triples_among_training_entities(graph, fraction, self.config.seed)
    if not len(triples):
      raise ValueError(f"config.data.train_entity_fraction={fraction}: no training triple of {graph.name} has "
                       "both entities among that fraction of its training entities.")
    if fraction < 1.0:
      logging.info("Training on the %d triples among %.0f%% of the %d training entities (of %d triples).",
                   len(triples), 100 * fraction, len(graph.entity_split["train"]), len(graph.triples["train"]))
    return triples

  @property
  def module(self) -> blp_model.BlpModel:
    """The Flax module the loss applies: its model's (`model()`), the one evaluation and `load()` use."""
    return self.model().module

  @property
  def scoring(self) -> Any:
    """The scoring function of the triples: its model's."""
    return self.model().scoring

  @property
  def encoder_path(self) -> tuple[str, ...]:
    return self.model().encoder_path

  def vector_width(self) -> int:
    """The width of an entity's vector (what search ranks), from the params' shapes."""
    params = nn.unbox(jax.eval_shape(self.init_variables, jax.random.key(0)))
    tokens = jax.ShapeDtypeStruct((1, self.config.data.max_len), jnp.int32)
    encode = lambda p, t: self.module.apply({"params": p}, t, method=blp_model.BlpModel.encode)
    return int(jax.eval_shape(encode, params, tokens).shape[-1])

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays (at full width: cutting short rows is the host's choice per batch)."""
    rows, tokens = (global_batch_size,), (global_batch_size, self.config.data.max_len)
    return {"head": jax.ShapeDtypeStruct(rows, jnp.int32), "relation": jax.ShapeDtypeStruct(rows, jnp.int32),
            "tail": jax.ShapeDtypeStruct(rows, jnp.int32), "head_tokens": jax.ShapeDtypeStruct(tokens, jnp.int32),
            "tail_tokens": jax.ShapeDtypeStruct(tokens, jnp.int32)}

  @classmethod
  def config_rules(cls) -> tuple[tuple[str, Any, str], ...]:
    return (("train.global_batch_size", lambda v: v >= 2,
             "must be at least 2: a triple's negatives are the entities of the batch's other triples"),)

  def params_from_parent(self) -> Any:
    """The parent's params, with a link prediction parent's relation embeddings reordered to this graph's
    relations by name; when the parent lacks one of them, the relation embeddings start fresh."""
    params = self.parent.params
    if not isinstance(self.parent, link_prediction.LinkPredictionModel):
      return params
    params = {key: value for key, value in params.items() if key != "relations"}
    try:
      params["relations"] = {"embedding": self.parent.relation_vectors(self.graph.relation_ids)}
    except KeyError as missing:
      logging.warning("model_init: %s; the relation embeddings start fresh.", missing.args[0])
    return params

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.graph.fingerprint()

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return self.module.init(rng, tokens, jnp.zeros((1,), jnp.int32))["params"]

  def pretrained_params(self) -> dict[str, Any]:
    if self.pretrained_bert is None:
      return {}
    model = self.config.model
    return {"encoder": text_encoders.pretrained_subtree(
        model.encoder, self.pretrained_bert, pretrained.sentence_transformer_modules(model.pretrained), model.dim)}

  def train_batches(self, seed: int) -> Any:
    return pipeline.triple_batches(
        self.train_triples, self.entity_tokens,
        global_batch_size=self.config.train.global_batch_size, seed=seed,
        short_half_width=self.config.model.get("short_half_width", 0) if self.config.model.encoder == "bert" else 0,
        pad_id=self.tokenizer.pad_token_id)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    module, scoring = self.module, self.scoring
    dropout_rng, negatives_rng = jax.random.split(rng)
    batch_size = batch["head"].shape[0]
    if "short_tokens" in batch:  # The shorter half of the rows cut short (`pipeline.shorter_half_first`).
      short_rng, dropout_rng = jax.random.split(dropout_rng)
      short = module.apply({"params": params}, batch["short_tokens"], deterministic=False,
                           rngs={"dropout": short_rng}, method=blp_model.BlpModel.encode)
      entities, relation = module.apply({"params": params}, batch["long_tokens"], batch["relation"],
                                        deterministic=False, rngs={"dropout": dropout_rng})
      entities = jnp.concatenate([short, entities])[batch["entity_order"]]
    else:
      tokens = jnp.concatenate([batch["head_tokens"], batch["tail_tokens"]])
      entities, relation = module.apply({"params": params}, tokens, batch["relation"], deterministic=False,
                                        rngs={"dropout": dropout_rng})
    heads, tails = entities[:batch_size], entities[batch_size:]
    positive = scoring.score(heads, relation, tails)
    negative_index, corrupt_head = sample_negatives(negatives_rng, batch_size, self.config.loss.num_negatives)
    corrupted = entities[negative_index]
    negative = jnp.where(corrupt_head,
                         scoring.score(corrupted, relation[:, None], tails[:, None]),
                         scoring.score(heads[:, None], relation[:, None], corrupted))
    loss = self.loss_fn(positive, negative, margin=self.config.loss.margin)
    return loss, {"loss": loss, "positive_score": positive.mean(), "negative_score": negative.mean()}

  def evaluation_data(self) -> knowledge_graph.KnowledgeGraph:
    return self.graph

  def inference_record(self) -> dict[str, Any]:
    """The entities (ids and descriptions) and relation names, so that a run loads without its data."""
    return {"entity_ids": list(self.graph.entity_ids), "entity_texts": list(self.graph.entity_texts),
            "relation_ids": list(self.graph.relation_ids)}

