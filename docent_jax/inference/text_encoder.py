"""Models whose encoder is a mean-pooled BERT-family model: universal representations (with their pair-task
heads), FAQ retrieval (with its FAQ items), SupCon offers. `model.pooling = "input_word_pieces"` makes the same
model the static word-piece baseline: a text is the mean of its word pieces' input vectors, the transformer
skipped."""
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.inference import protocol
from docent_jax.modules import bert
from docent_jax.modules import pretrained
from docent_jax.modules import task_heads

# Row lengths (tokens) that texts are encoded in, the shortest that fits each text (then data.max_len): words
# and phrases need a few tokens.
LENGTH_BUCKETS = (8, 16, 32)


class TextEncoderModel(protocol.Model):
  """Texts -> mean-pooled BERT outputs (params under `bert`). Each distinct text is encoded once, in the shortest
  row that holds it. The record may list special tokens added to the tokenizer (`special_tokens`) and an
  entity set (`entity_ids`, `entity_texts`). With `model.pooling = "input_word_pieces"` a text is instead the mean
  of its word pieces' rows of the input table (no special tokens, untruncated; a text without word pieces: zeros)."""

  def __init__(self, *args: Any, tokenizer: Any = None, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.tokenizer = tokenizer or pretrained.load_tokenizer(
        self.config.model.tokenizer, extra_special_tokens=tuple(self.record.get("special_tokens", ())))
    self.bert_config = pretrained.model_bert_config(self.config.model, len(self.tokenizer))
    self.encoder = bert.BertModel(self.bert_config, dtype=jnp.dtype(self.config.model.dtype), add_pooler=False)
    self.pooling = self.config.model.get("pooling", "mean")  # One of `config_schema.MODEL_POOLINGS`.
    self._encode_tokens_fn = self.encode_tokens  # Bound once: copies (`with_params`) share its compilations.

  def _encode(self, texts: list[str]) -> np.ndarray:
    if self.pooling == "input_word_pieces":
      return self._mean_input_word_pieces(texts)
    unique, position = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    tokens = tokenization.tokenize_texts(self.tokenizer, list(unique), self.config.data.max_len)
    vectors = parallel.map_token_batches(self._encode_tokens_fn, self.params, tokens,
                                         pad_id=self.tokenizer.pad_token_id,
                                         batch_size=self.config.model.inference_batch_size, mesh=self.mesh,
                                         buckets=LENGTH_BUCKETS, what="texts")
    return vectors[position.reshape(-1)]

  def _mean_input_word_pieces(self, texts: list[str]) -> np.ndarray:
    # float64 on the host: a lookup and a mean per text, nothing to compile.
    table = self.computed("input_table", lambda: np.asarray(bert.word_embedding_matrix(self.params["bert"]),
                                                            np.float64))
    return pretrained.mean_input_word_pieces(self.tokenizer, table, texts)

  def text_encoder_layout(self) -> protocol.TextEncoderLayout:
    if self.pooling == "input_word_pieces":
      raise protocol.NotExportableError(
          f"{self.name}: the static word-piece model averages input word-piece vectors without special tokens or "
          "truncation, on the host; it has no transformer to export (its vectors are the pretrained table's).")
    return protocol.TextEncoderLayout(bert_config=self.bert_config, bert_path=("bert",), pooling="mean",
                                      max_len=self.config.data.max_len)

  def encode_tokens(self, params: Any, tokens: jax.Array) -> jax.Array:
    if self.pooling == "input_word_pieces":
      raise TypeError(f"{self.name}: the static word-piece model encodes texts on the host (`encode`), not token "
                      "batches.")
    return bert.mean_pooled(self.encoder, params["bert"], tokens, pad_token_id=self.tokenizer.pad_token_id)


class UniversalModel(TextEncoderModel):
  """The multi-task encoder and its pair-task heads (record: `tasks`, each task's label names)."""

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    self.tasks: dict[str, list[str]] = {name: list(labels) for name, labels in self.record["tasks"].items()}
    self.heads = task_heads.TaskHeads(tuple((name, len(labels)) for name, labels in self.tasks.items()),
                                      self.bert_config.initializer_range)

  def classify_pairs(self, task: str, first: Sequence[str], second: Sequence[str]) -> np.ndarray:
    """[n, classes] logits of the task's head for pairs of texts (label names: `tasks[task]`)."""
    if task not in self.tasks:
      raise KeyError(f"{self.name} has no task {task!r}; its tasks: {sorted(self.tasks)}.")
    u, v = self.encode(first), self.encode(second)
    return np.asarray(self.heads.apply({"params": self.params["heads"]}, jnp.asarray(u), jnp.asarray(v))[task])


class FaqModel(TextEncoderModel):
  """A FAQ retrieval encoder and its FAQ: the entities are the FAQ's questions (record: `entity_ids`,
  `entity_texts`, `answers`)."""

  def answer(self, queries: str | Sequence[str], k: int = 1) -> list[list[dict[str, Any]]]:
    """Per query, the `k` FAQ items whose questions are nearest (cosine): id, question, answer and score. One
    query (a `str`) gives its one list."""
    if isinstance(queries, str):
      return self.answer([queries], k)[0]
    items = {entity: row for row, entity in enumerate(self.record["entity_ids"])}
    return [[{"id": entity, "question": self.record["entity_texts"][items[entity]],
              "answer": self.record["answers"][items[entity]], "score": score} for entity, score in ranking]
            for ranking in self.search(queries, k)]
