"""DOCENT-FULL (Zemlyanskiy et al., EACL 2021): entities as extra tokens of BERT's vocabulary.

Each review sentence s of entity e becomes `[CLS] e [SEP] s [SEP]`. Word pieces of s are masked at
`loss.mlm_rate` (BERT's 80/10/10) and the entity token is replaced by [MASK] in
`loss.entity_mask_rate` of the examples; both are predicted by one softmax over word pieces and
entities (the entity part computed shard by shard over the row-sharded entity table).
Loss = L_E (masked entities) + `loss.mlm_weight` * L_MLM (masked word pieces). Evaluation:
movie search by P(e | query) from `[CLS] [MASK] [SEP] query [SEP]` (queries never trained on; every movie's
reviews are pre-trained on), and tag prediction on the test movies (tags held out from the scorer's training, not
reviews from pre-training) by a binary classifier on [CLS] of `[CLS] e [SEP] tag [SEP]`, fine-tuned with the
entity rows fixed (`modules.tag_scorers`).
"""
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import scipy.sparse

from docent_jax import losses
from docent_jax.modules import bert
from docent_jax.modules import docent_full
from docent_jax.modules import entity_table
from docent_jax.modules import masking
from docent_jax.modules import pretrained
from docent_jax.objectives import docent_dual

def max_predictions(length: int, rate: float) -> int:
  """Static number of word-piece predictions per example for sequences of `length`."""
  return masking.max_predictions(length, rate, max_maskable=length - docent_full.SENTENCE_START - 1)


class DocentFullObjective(docent_dual.MovieObjective):
  """Masked prediction of word pieces and entity tokens; evaluated by tag-query search and tag prediction."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    for name in ("mlm_rate", "entity_mask_rate"):
      if not 0.0 <= config.loss[name] <= 1.0:
        raise ValueError(f"loss.{name} must be in [0, 1]; got {config.loss[name]}.")
    super().__init__(config, mesh, inputs)
    tokenizer = self.tokenizer
    self.special_ids = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id,
                        "mask": tokenizer.mask_token_id, "pad": tokenizer.pad_token_id}

  def init_variables(self, rng: jax.Array) -> Any:
    length = self.config.data.max_len
    tokens = jnp.zeros((1, length), jnp.int32)
    ids = jnp.zeros((1,), jnp.int32)
    return self.module.init(rng, tokens, tokens, tokens, ids, jnp.ones((1,), bool), jnp.zeros((1, 1), jnp.int32)
                           )["params"]

  def pretrained_params(self) -> dict[str, Any]:
    params = {}
    if self.pretrained_bert is not None:
      params["bert"] = dict(self.pretrained_bert)
      # A checkpoint's MLM head (MiniLM ships none) initialises ours; otherwise it starts fresh.
      head = params["bert"].pop(pretrained.MLM_HEAD_KEY, None)
      if head is not None:
        params["mlm_head"] = head
    if self.config.model.entity_init == "sentence_mean":
      # Without a pretrained BERT the model starts from the fixed random one whose words place the rows.
      params.setdefault("bert", pretrained.pretrained_or_fixed_bert(None, self.bert_config, self.config.seed))
      rows = self.sentence_mean_entities(np.asarray(bert.word_embedding_matrix(params["bert"])))
      params["entities"] = {"embedding": entity_table.pad_rows(rows, self.module.entity_rows_multiple)}
    return params

  def sentence_mean_entities(self, word_table: np.ndarray) -> np.ndarray:
    """[N, d]: each entity's IDF-weighted mean word-piece embedding over some of its sentences.

    FULL's entity rows are extra word pieces, scored against the MLM head's output like words, so
    each starts at the words of up to `model.entity_init_sentences` of its sentences (weighted by
    inverse sentence frequency, so that the words every review uses do not make all rows alike),
    at the mean norm of the word-piece rows: an input embedding of the usual size, and an output
    row that the head ranks by how well its predicted words fit the entity's reviews.
    """
    corpus = self.corpus
    sampled, tokens = docent_dual.entity_init_sentences(corpus, self.tokenizer, self.config)
    sentence, position = np.nonzero(~np.isin(tokens, list(self.special_ids.values())))
    words = tokens[sentence, position]
    vocab_size = len(word_table)
    in_sentences = np.bincount(np.unique(sentence * vocab_size + words) % vocab_size, minlength=vocab_size)
    idf = np.log(len(sampled) / np.maximum(in_sentences, 1))
    weights = scipy.sparse.csr_matrix((idf[words], (corpus.sentence_entity[sampled][sentence], words)),
                                      shape=(corpus.num_entities, vocab_size))
    rows = np.asarray(weights @ word_table, np.float32)
    rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
    logging.info("Entity rows initialised from the word pieces of %d sentences.", len(sampled))
    return rows * np.linalg.norm(word_table, axis=1).mean()

  def layout(self, sentence_tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`[CLS] [MASK] [SEP] sentence [SEP]` and its token types (see `docent_full.two_segment_inputs`)."""
    ids = self.special_ids
    return docent_full.two_segment_inputs(sentence_tokens, slot_id=ids["mask"], sep_id=ids["sep"],
                                          pad_id=ids["pad"])

  def corrupt(self, sentence_tokens: jax.Array, rng: jax.Array) -> dict[str, jax.Array]:
    """The masked two-segment inputs of a batch of sentences and what to predict.

    Returns a dict of 'tokens' (corrupted), 'token_types', 'attention_mask' [b, L];
    'entity_visible' [b] (False where the entity token is masked); 'word_positions',
    'word_labels', 'word_mask' [b, k]: the positions to predict (the chosen ones where
    'word_mask'), their original word pieces.
    """
    ids = self.special_ids
    tokens, token_types = self.layout(sentence_tokens)
    batch, length = tokens.shape
    word_rng, cap_rng, entity_rng = jax.random.split(rng, 3)
    # Only the sentence's own word pieces: never [CLS], [SEP], padding or the entity position.
    maskable = ((jnp.arange(length) >= docent_full.SENTENCE_START) & (tokens != ids["pad"])
                & (tokens != ids["sep"]) & (tokens != ids["cls"]))
    corrupted, labels, chosen = masking.mask_tokens(
        word_rng, tokens, maskable, rate=self.config.loss.mlm_rate, mask_id=ids["mask"],
        vocab_size=self.bert_config.vocab_size)
    corrupted, positions, predicted = masking.cap_predictions(
        cap_rng, tokens, corrupted, chosen, max_predictions(length, self.config.loss.mlm_rate))
    entity_masked = jax.random.bernoulli(entity_rng, self.config.loss.entity_mask_rate, (batch,))
    return {
        "tokens": corrupted,
        "token_types": token_types,
        "attention_mask": (tokens != ids["pad"]).astype(jnp.int32),
        "entity_visible": ~entity_masked,
        "word_positions": positions,
        "word_labels": jnp.take_along_axis(labels, positions, axis=1),
        "word_mask": predicted,
    }

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    mask_rng, dropout_rng = jax.random.split(rng)
    inputs = self.corrupt(batch["tokens"], mask_rng)
    entity_positions = jnp.full((len(batch["entity"]), 1), docent_full.ENTITY_POSITION, jnp.int32)
    positions = jnp.concatenate([entity_positions, inputs["word_positions"]], axis=1)
    outputs = self.module.apply(
        {"params": params}, inputs["tokens"], inputs["token_types"], inputs["attention_mask"], batch["entity"],
        inputs["entity_visible"], positions, deterministic=False, rngs={"dropout": dropout_rng})
    word_table, word_bias, entity_rows = self.module.apply(
        {"params": params}, method=docent_full.DocentFull.output_tables)
    vocab_size, dim = word_table.shape
    split_softmax = lambda hidden, labels, mask: losses.split_softmax_loss(
        hidden, word_table, word_bias, entity_rows, labels, mask, mesh=self.mesh,
        num_entities=self.module.num_entities)
    entity_loss, entity_metrics = split_softmax(outputs[:, 0], vocab_size + batch["entity"],
                                                ~inputs["entity_visible"])
    mlm_loss, mlm_metrics = split_softmax(outputs[:, 1:].reshape(-1, dim), inputs["word_labels"].reshape(-1),
                                          inputs["word_mask"].reshape(-1))
    loss = entity_loss + self.config.loss.mlm_weight * mlm_loss
    return loss, {
        "loss": loss,
        "entity_loss": entity_loss,
        "mlm_loss": mlm_loss,
        "entity_accuracy": entity_metrics["accuracy"],
        "mlm_accuracy": mlm_metrics["accuracy"],
        "mlm_entity_fraction": mlm_metrics["entity_fraction"],  # Word positions predicted as entities.
        "entity_mask_fraction": jnp.mean(~inputs["entity_visible"]),
        "num_masked_words": jnp.sum(inputs["word_mask"]),
    }
