"""FAQ retrieval by query-question similarity (Li & Zhao), fine-tuning an encoder on the training queries.

Each training query is scored against its FAQ item's question and `loss.num_negatives` other questions
by the scaled cosine of mean-pooled encoder vectors; the loss is the cross-entropy of the right item
among them. The negatives of a query are fixed before training: `loss.negatives = 'retrieved'` takes the
questions the pretrained encoder (`model.pretrained`, as shipped) ranks highest besides the right one,
Li & Zhao's retrieval-based negatives, less those that `loss.mining`'s rules drop as likely false negatives
(`faq_negatives.mine`: an item with the right one's answer, a rank window, a margin to the right one's score),
its first `loss.num_retrieved` only where that is set (the rest drawn at random);
'random' draws them uniformly with the run's seed. The encoder
starts from the pretrained one, or from another run's (`model_init`: e.g. the multi-task model, or an NLI-only
one, the paper's best recipe: NLI fine-tuning, then FAQ, with XLNet; with BERT, NLI first hurt).

The `faq_retrieval` evaluator (`evaluation/`) ranks every FAQ question for each query of a split: `<split>/top1`
and `<split>/mrr`, by the encoder, or by the lexical baselines (`scorer='tfidf'` or `'bm25'`).
"""
from collections.abc import Callable
import functools
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax import parallel
from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.inference import search
from docent_jax.modules import bert
from docent_jax.modules import pretrained
from docent_jax.objectives import base
from docent_jax.objectives import faq_negatives

NEGATIVES = ("retrieved", "random")


class FaqRetrievalObjective(base.MeanPooledBertObjective):
  """Fine-tuning of a text encoder for FAQ retrieval; see the module docstring."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    if config.loss.negatives not in NEGATIVES:
      raise ValueError(f"config.loss.negatives = {config.loss.negatives!r}; valid: {list(NEGATIVES)}.")
    if config.loss.get("num_retrieved", 0) > config.loss.num_negatives:
      raise ValueError(f"config.loss.num_retrieved = {config.loss.num_retrieved}: at most loss.num_negatives "
                       f"({config.loss.num_negatives}).")
    super().__init__(config, mesh, inputs)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(config.model, len(self.tokenizer))
    self._negatives = None

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> universal_corpus.FaqSet:
    data = config.data
    return universal_corpus.load_faq(data.faq, data_dir=data.tfds_data_dir, manual_dir=data.manual_dir,
                                     test_fraction=data.test_fraction, seed=data.split_seed,
                                     validation_fraction=data.validation_query_fraction)

  @property
  def faq(self) -> universal_corpus.FaqSet:
    return self.data

  @functools.cached_property
  def question_tokens(self) -> np.ndarray:
    return self.tokenize(self.faq.questions)

  @functools.cached_property
  def query_tokens(self) -> dict[str, np.ndarray]:
    return {split: self.tokenize(queries) for split, queries in self.faq.queries.items()}

  def record_from_shapes(self) -> dict[str, Any]:
    """Numbered FAQ items standing in for the questions (`num_entities` of them, the search's candidates)."""
    items = [str(item) for item in range(self.shapes.get("num_entities", 0))]
    return {"entity_ids": items, "entity_texts": items, "answers": items}

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays: each query's tokens, and its FAQ item's question's and its negatives'."""
    length = self.config.data.max_len
    return {"query": jax.ShapeDtypeStruct((global_batch_size, length), jnp.int32),
            "items": jax.ShapeDtypeStruct((global_batch_size, 1 + self.config.loss.num_negatives, length), jnp.int32)}

  def tokenize(self, texts: list[str]) -> np.ndarray:
    return tokenization.tokenize_texts(self.tokenizer, texts, self.config.data.max_len)

  def data_fingerprint(self) -> dict[str, int | str]:
    return self.faq.fingerprint()

  def vectors(self, params: Any, tokens: np.ndarray, encode: Callable[[Any, jax.Array], jax.Array] | None = None
              ) -> np.ndarray:
    """[N, d] vectors of token ids [N, L] by this run's `encode` (or another one), batched over the mesh."""
    return parallel.map_batches(encode or self.encode, params, tokens,
                                batch_size=self.config.model.inference_batch_size, mesh=self.mesh, what="texts")

  @functools.cached_property
  def _retriever(self) -> tuple[Callable[[Any, jax.Array], jax.Array], Any]:
    """(encode, params) of the encoder as shipped, mean-pooled; loaded once for queries and questions."""
    shipped_config, shipped = pretrained.load_or_create_bert(self.config.model.pretrained or "minilm-l6", {},
                                                             len(self.tokenizer))
    shipped_encoder = bert.BertModel(shipped_config, add_pooler=False)
    encode = lambda p, x: bert.mean_pooled(shipped_encoder, p["bert"], x, pad_token_id=self.tokenizer.pad_token_id)
    return encode, {"bert": shipped}

  def retriever_vectors(self, tokens: np.ndarray) -> np.ndarray:
    """[N, d] vectors of token ids by the retriever of the negatives: the encoder as shipped, mean-pooled."""
    encode, params = self._retriever
    return self.vectors(params, tokens, encode)

  def mining_rules(self) -> faq_negatives.MiningRules:
    return faq_negatives.MiningRules(**self.config.loss.get("mining", {}))

  def negatives(self) -> np.ndarray:
    """int [train queries, num_negatives] the FAQ items each training query is contrasted with."""
    if self._negatives is None:
      relevant, k = self.faq.relevant["train"], self.config.loss.num_negatives
      rng = np.random.default_rng(self.config.seed)
      if self.config.loss.negatives == "random":
        self._negatives = faq_negatives.random_negatives(len(self.faq.questions), relevant, k, rng)
      else:
        scores = search.cosine_scores(self.retriever_vectors(self.query_tokens["train"]),
                                      self.retriever_vectors(self.question_tokens))
        rules = self.mining_rules()
        retrieved = self.config.loss.get("num_retrieved", 0) or k
        self._negatives, counts = faq_negatives.mine(scores, relevant, self.faq.answers, retrieved, rules, rng)
        logging.info("%s: %d retrieved negatives for each of %d training queries (%s); candidates dropped: %s; "
                     "%d negatives of %d queries drawn at random, too few passing.", self.faq.name, retrieved,
                     len(relevant), rules, ", ".join(f"{rule} {counts[rule]}" for rule in faq_negatives.RULES),
                     counts["filled_at_random"], counts["queries_filled"])
        if retrieved < k:  # The rest drawn at random (`loss.num_retrieved`).
          self._negatives = faq_negatives.with_random(self._negatives, relevant, len(self.faq.questions), k, rng)
    return self._negatives

  def train_batches(self, seed: int) -> Any:
    relevant = self.faq.relevant["train"]
    # A run without steps (zero-shot) needs no negatives: they are not mined for it.
    negatives = self.negatives() if self.config.train.num_steps else np.zeros((len(relevant), 0), np.int64)
    items = np.concatenate([relevant[:, None], negatives], axis=1)
    queries, questions = self.query_tokens["train"], self.question_tokens
    read = lambda rows: {"query": queries[rows], "items": questions[items[rows]]}
    return pipeline.process_batches(len(items), read, global_batch_size=self.config.train.global_batch_size,
                                    seed=seed)

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    query_rng, item_rng = jax.random.split(rng)
    queries = self.encode(params, batch["query"], deterministic=False, rng=query_rng)
    rows, num_items, length = batch["items"].shape
    items = self.encode(params, batch["items"].reshape(rows * num_items, length), deterministic=False, rng=item_rng)
    items = items.reshape(rows, num_items, -1)
    unit = lambda x: x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-9)
    logits = self.config.loss.scale * jnp.einsum("bd,bkd->bk", unit(queries), unit(items))
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.zeros(rows, jnp.int32)).mean()
    return loss, {"loss": loss, "accuracy": jnp.mean(logits.argmax(-1) == 0)}

  def inference_record(self) -> dict[str, Any]:
    return {"entity_ids": [str(i) for i in range(len(self.faq.questions))], "entity_texts": list(self.faq.questions),
            "answers": list(self.faq.answers)}

  def evaluation_data(self) -> universal_corpus.FaqSet:
    return self.faq
