"""BLP (Daza, Cochez & Groth, WWW 2021): entity encoders over descriptions trained by link prediction.

An entity is its description, encoded to a vector; a triple (h, r, t) is scored by a KG scoring
function of the two encodings and a relation embedding. Negatives corrupt the head or the tail with
other entities of the same batch. Evaluation is inductive: entities of the dev and test triples were
never seen in training.
"""
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np

from docent_jax import evaluators
from docent_jax import losses
from docent_jax import parallel
from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.evaluation import entity_classification
from docent_jax.evaluation import link_prediction
from docent_jax.models import blp_model
from docent_jax.models import pretrained
from docent_jax.models import text_encoders
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

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh):
    super().__init__(config, mesh)
    self.graph = knowledge_graph.load_knowledge_graph(
        config.data.dataset, data_dir=config.data.tfds_data_dir, manual_dir=config.data.manual_dir)
    tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    texts = self.graph.entity_texts
    if config.data.get("drop_stopwords", False):
      texts = tokenization.without_stopwords(texts)
    self.entity_tokens = tokenization.tokenize_texts(tokenizer, texts, config.data.max_len)
    self.pad_id = tokenizer.pad_token_id  # Of `entity_tokens`, which are padded after the text.
    self.loss_fn = losses.get_link_prediction_loss(config.loss.name)
    self.model, self.scoring, self._bert_params = blp_model.create(config, tokenizer.vocab_size,
                                                                    self.graph.num_relations)
    logging.info("%s: %d entities, %d relations, triples %s.", self.graph.name, self.graph.num_entities,
                 self.graph.num_relations, {k: len(v) for k, v in self.graph.triples.items()})
    self._embeddings = None  # (params, their entity vectors): evaluators of one params share them.
    self.encoder_path = blp_model.encoder_path(config)
    self.relation_ids = self.graph.relation_ids

  @classmethod
  def config_rules(cls) -> tuple[tuple[str, Any, str], ...]:
    return (("train.global_batch_size", lambda v: v >= 2,
             "must be at least 2: a triple's negatives are the entities of the batch's other triples"),)

  def params_from_parent(self) -> Any:
    """The parent's params, with a link prediction parent's relation embeddings reordered to this graph's
    relations by name. When the parent lacks one of them, they start fresh for training, and evaluating the
    parent's params on this graph (`evaluate_only`) is an error naming them."""
    parent, params = self.parent
    parent_relations = getattr(parent, "relation_ids", None)
    if parent_relations is None or "relations" not in params:
      return params
    rows = {name: row for row, name in enumerate(parent_relations)}
    missing = [name for name in self.graph.relation_ids if name not in rows]
    params = {key: value for key, value in params.items() if key != "relations"}
    if missing and self.evaluate_only:
      raise KeyError(f"config.model_init: the trained run has no relation {', '.join(map(repr, missing[:5]))} of "
                     f"{self.graph.name} ({len(missing)} missing), so it cannot rank this graph's triples.")
    if missing:
      logging.warning("model_init: the parent run has no relation %s; the relation embeddings start fresh.",
                      ", ".join(missing[:5]))
      return params
    table = parallel.fetch(self.parent[1]["relations"]["embedding"])
    params["relations"] = {"embedding": table[[rows[name] for name in self.graph.relation_ids]]}
    return params

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.graph.fingerprint()

  def init_variables(self, rng: jax.Array) -> Any:
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    return self.model.init(rng, tokens, jnp.zeros((1,), jnp.int32))["params"]

  def pretrained_params(self) -> dict[str, Any]:
    if self._bert_params is None:
      return {}
    return {"encoder": text_encoders.pretrained_subtree(self.config.model.encoder, self._bert_params)}

  def train_batches(self, seed: int) -> Any:
    return pipeline.triple_batches(
        self.graph.triples["train"], self.entity_tokens,
        global_batch_size=self.config.train.global_batch_size, seed=seed)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    dropout_rng, negatives_rng = jax.random.split(rng)
    batch_size = batch["head"].shape[0]
    tokens = jnp.concatenate([batch["head_tokens"], batch["tail_tokens"]])
    entities, relation = self.model.apply({"params": params}, tokens, batch["relation"], deterministic=False,
                                          rngs={"dropout": dropout_rng})
    heads, tails = entities[:batch_size], entities[batch_size:]
    positive = self.scoring.score(heads, relation, tails)
    negative_index, corrupt_head = sample_negatives(negatives_rng, batch_size, self.config.loss.num_negatives)
    corrupted = entities[negative_index]
    negative = jnp.where(corrupt_head,
                         self.scoring.score(corrupted, relation[:, None], tails[:, None]),
                         self.scoring.score(heads[:, None], relation[:, None], corrupted))
    loss = self.loss_fn(positive, negative, margin=self.config.loss.margin)
    return loss, {"loss": loss, "positive_score": positive.mean(), "negative_score": negative.mean()}

  def entity_embeddings(self, params: Any) -> np.ndarray:
    """Every entity's vector, computed once per params in batches split over the data axis, each description in
    the shortest row that holds it."""
    if self._embeddings is None or self._embeddings[0] is not params:
      self._embeddings = (params, parallel.map_token_batches(self.encode_entities, params, self.entity_tokens,
                                                             pad_id=self.pad_id, batch_size=self.config.eval.batch_size,
                                                             mesh=self.mesh, what="entities"))
    return self._embeddings[1]

  def encode_entities(self, params: Any, tokens: jax.Array) -> jax.Array:
    """Entity vectors [N, d] of description token ids [N, L] (any L: trailing padding changes nothing)."""
    return self.model.apply({"params": params}, tokens, method=blp_model.BlpModel.encode)

  def export_embeddings(self, params: Any) -> tuple[list[str], np.ndarray]:
    return self.graph.entity_ids, self.entity_embeddings(params)

  def inference_record(self) -> dict[str, Any]:
    """The entities (ids and descriptions) and relation names, so that a run loads without its data."""
    return {"entity_ids": list(self.graph.entity_ids), "entity_texts": list(self.graph.entity_texts),
            "relation_ids": list(self.graph.relation_ids)}



@evaluators.register("link_prediction")
def evaluate_link_prediction(objective: BlpObjective, params: Any, split: str = "test") -> dict[str, float]:
  """Filtered ranking of the split's triples among the entities known by then (validation: training and
  validation entities; test: all; 'dynamic', `<split>/mrr`, ...) and, where the split has its own unseen
  entities, among those only ('transfer', `<split>/transfer_mrr`, ...)."""
  graph = objective.graph
  # Laid out like the trainer's tables, so that each device ranks against its own rows.
  embeddings = parallel.shard_rows(objective.entity_embeddings(params), objective.mesh)
  relation_embeddings = parallel.fetch(params["relations"]["embedding"])
  # As in BLP, validation triples are ranked among the entities known by then (training and validation
  # entities), test triples among all.
  known = np.sort(np.concatenate([graph.entity_split["train"], graph.entity_split["validation"]]))
  settings = {"": known if split == "validation" else np.arange(graph.num_entities),
              "transfer_": graph.entity_split[split]}
  if not len(settings["transfer_"]):
    logging.log_first_n(logging.INFO, "%s: no %s entity is unseen in training (a transductive split); the transfer "
                        "setting does not apply and is not reported.", 2, graph.name, split)
    del settings["transfer_"]
  results = {}
  for prefix, candidates in settings.items():
    metrics = link_prediction.evaluate_link_prediction(
        objective.scoring, embeddings, relation_embeddings, graph.triples[split], candidates, graph.all_triples(),
        batch_size=objective.config.eval.link_prediction_batch_size, mesh=objective.mesh)
    results.update({f"{split}/{prefix}{name}": value for name, value in metrics.items()})
  return results


@evaluators.register("entity_classification")
def evaluate_entity_classification(objective: BlpObjective, params: Any,
                                   c_values: tuple[float, ...] = entity_classification.BLP_C_VALUES
                                   ) -> dict[str, float]:
  """Logistic regression on frozen vectors: fit on train entities, pick C on dev, score unseen test entities."""
  graph = objective.graph
  labels = graph.entity_labels
  if (labels < 0).all():
    logging.info("%s has no entity classes; skipping entity classification.", graph.name)
    return {}
  embeddings = objective.entity_embeddings(params)
  parts = []
  for split in ("train", "validation", "test"):
    entities = graph.entity_split[split]
    entities = entities[labels[entities] >= 0]
    parts += [embeddings[entities], labels[entities]]
  metrics = entity_classification.evaluate_entity_classification(*parts, c_values=tuple(c_values))
  return {f"test/classification_{name}": value for name, value in metrics.items()}
