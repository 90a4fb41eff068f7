"""Universal representations from word to sentence (Li & Zhao): siamese multi-task training.

One encoder (a BERT-family model, mean-pooled) encodes each text of a pair alone; each task has its own
softmax head over [u, v, |u - v|] (`modules.task_heads`), as in Sentence-BERT. Tasks:
  * 'nli': premise / hypothesis -> entailment, neutral, contradiction (SNLI, MultiNLI);
  * 'phrase': phrase / phrase -> Equivalence, Entailment, Independent (PPDB 2.0 packs, or the same
    relations derived from WordNet where no pack is available).
Every batch mixes the tasks in `data.task_ratio` (a share of 0 leaves a task out: the NLI-only and
phrase-only ablations); the loss is the mean cross-entropy over the batch's rows, and each task's loss and
accuracy are logged apart. Only the encoder is used afterwards: the evaluators embed words, phrases and
sentences with it.

Its evaluators (`evaluation/`): `pair_tasks` (each head's held-out accuracy, for model selection), `analogies`
(word, phrase and sentence analogies among fixed candidates, with PPR / PNR) and `phrase_similarity` (Spearman
against PPDB ratings). The static word-piece baseline is a run of its own: the pretrained model with
`model.pooling = "input_word_pieces"`, 0 steps.
"""
import functools
from typing import Any

from etils import epath
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax.data import tfds_loading
from docent_jax.data import tokenization
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.data.universal import nli
from docent_jax.data.universal import phrases
from docent_jax.data.universal import sampling
from docent_jax.modules import pretrained
from docent_jax.modules import task_heads
from docent_jax.objectives import base

TASKS = ("nli", "phrase")
# Each task's label names: its head's classes.
TASK_LABELS = {"nli": nli.LABELS, "phrase": phrases.RELATIONS}
# Beside the TFDS datasets: the analogy candidates, made once per question set and reference model.
CANDIDATES_DIR = "analogy_candidates"


def tasks_in_batches(config: ml_collections.ConfigDict) -> dict[str, int]:
  """Each task's rows of a global batch (`data.task_ratio`; a task of share 0 is left out)."""
  unknown = sorted(set(config.data.task_ratio) - set(TASKS))
  if unknown:
    raise ValueError(f"config.data.task_ratio: unknown tasks {unknown}; valid: {list(TASKS)}.")
  return sampling.rows_per_task(dict(config.data.task_ratio), config.train.global_batch_size)


class UniversalObjective(base.MeanPooledBertObjective):
  """Siamese multi-task training of a text encoder; see the module docstring."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh, inputs: Any = None):
    super().__init__(config, mesh, inputs)
    self.rows_per_task = tasks_in_batches(config)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config = pretrained.model_bert_config(config.model, len(self.tokenizer))
    # Each task's classes (name -> how many), in the batches' order of tasks.
    self.task_classes = {name: len(labels) for name, labels in self.model().tasks.items()}

  @classmethod
  def load_data(cls, config: ml_collections.ConfigDict) -> dict[str, universal_corpus.PairTask]:
    """The pair tasks that the batches mix (`data.task_ratio`), by name."""
    data, tasks = config.data, {}
    rows_per_task = tasks_in_batches(config)
    if "nli" in rows_per_task:
      tasks["nli"] = universal_corpus.load_nli_task(
          tuple(data.nli_sources), data_dir=data.tfds_data_dir, manual_dir=data.manual_dir,
          validation_fraction=data.validation_fraction, seed=config.seed)
    if "phrase" in rows_per_task:
      tasks["phrase"] = universal_corpus.load_phrase_task(
          data.ppdb_pack, data_dir=data.tfds_data_dir, max_pairs_per_class=data.max_pairs_per_class or None,
          seed=config.seed)
    return tasks

  @property
  def tasks(self) -> dict[str, universal_corpus.PairTask]:
    return self.data

  @functools.cached_property
  def pair_tokens(self) -> dict[str, dict[str, np.ndarray]]:
    """Per task and split, the token ids [m, 2, max_len] of its pairs."""
    return {name: {split: self.tokenize_pairs(task.first[split], task.second[split])
                   for split in universal_corpus.TASK_SPLITS}
            for name, task in self.tasks.items()}

  @property
  def heads(self) -> task_heads.TaskHeads:
    """One head per task: its model's."""
    return self.model().heads

  def record_from_shapes(self) -> dict[str, Any]:
    return {"tasks": {task: list(TASK_LABELS[task]) for task in TASKS if task in self.rows_per_task}}

  def batch_shapes(self, global_batch_size: int) -> dict[str, jax.ShapeDtypeStruct]:
    """One global training batch's arrays: each pair's two texts' tokens, its task and its label."""
    rows = (global_batch_size,)
    return {"tokens": jax.ShapeDtypeStruct((global_batch_size, 2, self.config.data.max_len), jnp.int32),
            "task": jax.ShapeDtypeStruct(rows, jnp.int32), "label": jax.ShapeDtypeStruct(rows, jnp.int32)}

  def tokenize_pairs(self, first: list[str], second: list[str]) -> np.ndarray:
    """int32 [m, 2, max_len] token ids of each pair's two texts, each encoded alone."""
    max_len = self.config.data.max_len
    return np.stack([tokenization.tokenize_texts(self.tokenizer, first, max_len),
                     tokenization.tokenize_texts(self.tokenizer, second, max_len)], axis=1)

  def data_fingerprint(self) -> dict[str, int | str]:
    return {key: value for task in self.tasks.values() for key, value in task.fingerprint().items()}

  def init_variables(self, rng: jax.Array) -> Any:
    bert_rng, heads_rng = jax.random.split(rng)
    tokens = jnp.zeros((1, self.config.data.max_len), jnp.int32)
    vectors = jnp.zeros((1, self.bert_config.hidden_size), jnp.float32)
    return {"bert": self.encoder.init(bert_rng, tokens, tokens)["params"],
            "heads": self.heads.init(heads_rng, vectors, vectors)["params"]}

  def train_batches(self, seed: int) -> Any:
    return sampling.mixed_task_batches(
        {name: tokens["train"] for name, tokens in self.pair_tokens.items()},
        {name: task.labels["train"] for name, task in self.tasks.items()},
        {name: self.config.data.task_ratio[name] for name in self.tasks},
        global_batch_size=self.config.train.global_batch_size, seed=seed)

  def task_logits(self, params: Any, tokens: jax.Array, *, deterministic: bool = True,
                  rng: jax.Array | None = None) -> dict[str, jax.Array]:
    """Every head's logits [B, classes] for pairs of token ids [B, 2, L]."""
    batch, _, length = tokens.shape
    vectors = self.encode(params, tokens.reshape(2 * batch, length), deterministic=deterministic, rng=rng)
    vectors = vectors.reshape(batch, 2, -1)
    return self.heads.apply({"params": params["heads"]}, vectors[:, 0], vectors[:, 1])

  def loss(self, params: Any, batch: dict[str, jax.Array], rng: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
    logits = self.task_logits(params, batch["tokens"], deterministic=False, rng=rng)
    total = jnp.zeros((), jnp.float32)
    metrics = {}
    for number, name in enumerate(self.task_classes):
      rows = batch["task"] == number
      labels = jnp.where(rows, batch["label"], 0)  # Other tasks' labels may exceed this head's classes.
      cross_entropy = jnp.where(rows, optax.softmax_cross_entropy_with_integer_labels(logits[name], labels), 0.0)
      count = jnp.maximum(rows.sum(), 1)
      total += cross_entropy.sum()
      metrics[f"{name}_loss"] = cross_entropy.sum() / count
      metrics[f"{name}_accuracy"] = jnp.sum(rows & (logits[name].argmax(-1) == labels)) / count
    loss = total / batch["task"].shape[0]
    return loss, {**metrics, "loss": loss}

  def inference_record(self) -> dict[str, Any]:
    return {"tasks": {name: list(task.label_names) for name, task in self.tasks.items()}}

  @functools.cached_property
  def _evaluation_sources(self) -> universal_corpus.EvaluationSources:
    """One for the run, so that each evaluation file is read once."""
    data = self.config.data
    return universal_corpus.EvaluationSources(
        tasks=self.tasks, manual_dir=data.manual_dir or "",
        candidates_dir=epath.Path(data.tfds_data_dir or tfds_loading.default_data_dir()) / CANDIDATES_DIR,
        reference=self.config.model.pretrained or "minilm-l6", tokenizer=self.config.model.tokenizer)

  def evaluation_data(self) -> universal_corpus.EvaluationSources:
    return self._evaluation_sources
