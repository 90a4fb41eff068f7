"""Universal representations from word to sentence (Li & Zhao): siamese multi-task training.

One encoder (a BERT-family model, mean-pooled) encodes each text of a pair alone; each task has its own
softmax head over [u, v, |u - v|] (`models.task_heads`), as in Sentence-BERT. Tasks:
  * 'nli': premise / hypothesis -> entailment, neutral, contradiction (SNLI, MultiNLI);
  * 'phrase': phrase / phrase -> Equivalence, Entailment, Independent (PPDB 2.0 packs, or the same
    relations derived from WordNet where no pack is available).
Every batch mixes the tasks in `data.task_ratio` (a share of 0 leaves a task out: the NLI-only and
phrase-only ablations); the loss is the mean cross-entropy over the batch's rows, and each task's loss and
accuracy are logged apart. Only the encoder is used afterwards: the evaluators embed words, phrases and
sentences with it.

Evaluators: `pair_tasks` (each head's held-out accuracy, for model selection), `analogies` (word, phrase and
sentence analogies among fixed candidates, with PPR / PNR; `static=True` answers with the reference model's
word-piece vectors instead, the static baseline) and `phrase_similarity` (Spearman against PPDB ratings).
"""
import dataclasses
import functools
from typing import Any

from etils import epath
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax import evaluators
from docent_jax import parallel
from docent_jax.data import tfds_loading
from docent_jax.data import tokenization
from docent_jax.data.universal import analogies as analogy_files
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.data.universal import phrases
from docent_jax.data.universal import sampling
from docent_jax.evaluation import analogies
from docent_jax.evaluation import phrase_similarity
from docent_jax.models import bert
from docent_jax.models import pretrained
from docent_jax.models import task_heads
from docent_jax.objectives import base

TASKS = ("nli", "phrase")
# Under data.manual_dir (or the evaluators' `directory`): the analogy sets and the rated PPDB sample.
ANALOGY_FILES = {"words": "analogy/questions-words.txt", "phrases": "analogy/questions-phrases.txt"}
PPDB_SAMPLE_FILE = "ppdb/ppdb-sample.tsv"
# Beside the TFDS datasets: the analogy candidates, made once per question set and reference model.
CANDIDATES_DIR = "analogy_candidates"
# Row lengths (tokens) that texts are encoded in, the shortest that fits each text (then data.max_len): words
# and phrases need a few tokens.
_LENGTH_BUCKETS = (8, 16, 32)


@dataclasses.dataclass(frozen=True)
class AnalogySet:
  """Questions, and the candidates every model answers among."""
  questions: list[analogy_files.AnalogyQuestion]
  candidates: analogies.Candidates


def static_vectors(tokenizer: Any, word_pieces: np.ndarray, texts: list[str]) -> np.ndarray:
  """[len(texts), d] mean input word-piece vectors of each text (no special tokens): a static embedding model."""
  ids = tokenization.encode(tokenizer, list(texts), add_special_tokens=False)["input_ids"]
  return np.stack([word_pieces[row].mean(axis=0) if row else np.zeros(word_pieces.shape[1]) for row in ids])


class UniversalObjective(base.Objective):
  """Siamese multi-task training of a text encoder; see the module docstring."""

  def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh):
    super().__init__(config, mesh)
    data = config.data
    unknown = sorted(set(data.task_ratio) - set(TASKS))
    if unknown:
      raise ValueError(f"config.data.task_ratio: unknown tasks {unknown}; valid: {list(TASKS)}.")
    self.rows_per_task = sampling.rows_per_task(dict(data.task_ratio), config.train.global_batch_size)
    self.tasks: dict[str, universal_corpus.PairTask] = {}
    if "nli" in self.rows_per_task:
      self.tasks["nli"] = universal_corpus.load_nli_task(
          tuple(data.nli_sources), data_dir=data.tfds_data_dir, manual_dir=data.manual_dir,
          validation_fraction=data.validation_fraction, seed=config.seed)
    if "phrase" in self.rows_per_task:
      self.tasks["phrase"] = universal_corpus.load_phrase_task(
          data.ppdb_pack, data_dir=data.tfds_data_dir, max_pairs_per_class=data.max_pairs_per_class or None,
          seed=config.seed)
    self.tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
    self.bert_config, self._bert_params = pretrained.load_model_bert(config.model, len(self.tokenizer))
    self.encoder = bert.BertModel(self.bert_config, dtype=jnp.dtype(config.model.dtype), add_pooler=False)
    self.heads = task_heads.TaskHeads(tuple((name, len(task.label_names)) for name, task in self.tasks.items()),
                                      self.bert_config.initializer_range)
    self.pair_tokens = {name: {split: self.tokenize_pairs(task.first[split], task.second[split])
                               for split in universal_corpus.TASK_SPLITS}
                        for name, task in self.tasks.items()}
    self._analogy_cache: dict[str, dict[str, AnalogySet]] = {}

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

  def pretrained_params(self) -> dict[str, Any]:
    return {} if self._bert_params is None else {"bert": self._bert_params}

  def train_batches(self, seed: int) -> Any:
    return sampling.mixed_task_batches(
        {name: tokens["train"] for name, tokens in self.pair_tokens.items()},
        {name: task.labels["train"] for name, task in self.tasks.items()},
        {name: self.config.data.task_ratio[name] for name in self.tasks},
        global_batch_size=self.config.train.global_batch_size, seed=seed)

  def encode(self, params: Any, tokens: jax.Array, *, deterministic: bool = True,
             rng: jax.Array | None = None) -> jax.Array:
    """Text vectors [N, d] of token ids [N, L]."""
    return bert.mean_pooled(self.encoder, params["bert"], tokens, pad_token_id=self.tokenizer.pad_token_id,
                            deterministic=deterministic, rng=rng)

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
    for number, name in enumerate(self.tasks):
      rows = batch["task"] == number
      labels = jnp.where(rows, batch["label"], 0)  # Other tasks' labels may exceed this head's classes.
      cross_entropy = jnp.where(rows, optax.softmax_cross_entropy_with_integer_labels(logits[name], labels), 0.0)
      count = jnp.maximum(rows.sum(), 1)
      total += cross_entropy.sum()
      metrics[f"{name}_loss"] = cross_entropy.sum() / count
      metrics[f"{name}_accuracy"] = jnp.sum(rows & (logits[name].argmax(-1) == labels)) / count
    loss = total / batch["task"].shape[0]
    return loss, {**metrics, "loss": loss}

  @functools.cached_property
  def reference_word_pieces(self) -> np.ndarray:
    """The pretrained model's input word-piece table: the analogy reference and static baseline."""
    reference = self.config.model.pretrained or "minilm-l6"
    _, params = pretrained.load_or_create_bert(reference, {}, len(self.tokenizer))
    return np.asarray(bert.word_embedding_matrix(params), np.float64)

  def analogy_sets(self, directory: str) -> dict[str, AnalogySet]:
    """'word', 'phrase', 'sentence' (questions-words.txt and its aligned versions) and 'phrase_set'
    (questions-phrases.txt), with candidates from the reference word pieces, saved beside the TFDS data."""
    if directory not in self._analogy_cache:
      root = epath.Path(directory or self.config.data.manual_dir or "")
      words = analogy_files.read_analogies(root / ANALOGY_FILES["words"])
      aligned = analogy_files.phrase_and_sentence_versions(words)
      phrase_set = analogy_files.read_analogies(root / ANALOGY_FILES["phrases"])
      word_candidates = self._candidates("words", words)
      sets = {analogies.WORD: AnalogySet(words, word_candidates),
              "phrase_set": AnalogySet(phrase_set, self._candidates("phrases", phrase_set))}
      for level, questions in (("phrase", aligned.phrases), ("sentence", aligned.sentences)):
        sets[level] = AnalogySet(questions, analogies.level_candidates(words, questions, word_candidates, level))
      self._analogy_cache[directory] = sets
    return self._analogy_cache[directory]

  def _candidates(self, name: str, questions: list[analogy_files.AnalogyQuestion]) -> analogies.Candidates:
    reference = (self.config.model.pretrained or "minilm-l6").replace("/", "_")
    data_dir = epath.Path(self.config.data.tfds_data_dir or tfds_loading.default_data_dir())
    path = data_dir / CANDIDATES_DIR / f"{name}_{reference}.json"
    if path.exists():
      return analogies.read_candidates(path, questions)
    vocabulary = sorted({item for question in questions for item in question.items})
    candidates = analogies.closed_vocabulary_candidates(
        questions, vocabulary, static_vectors(self.tokenizer, self.reference_word_pieces, vocabulary))
    path.parent.mkdir(parents=True, exist_ok=True)
    analogies.write_candidates(path, questions, candidates)
    return candidates

  def encode_texts(self, params: Any, texts: list[str]) -> np.ndarray:
    """[len(texts), d] vectors of texts, batched over the mesh; each distinct text is encoded once, and short
    texts in short rows (one compilation per length bucket): words and phrases need a few tokens, not max_len."""
    unique, position = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    tokens = tokenization.tokenize_texts(self.tokenizer, list(unique), self.config.data.max_len)
    vectors = parallel.map_token_batches(self.encode, params, tokens, pad_id=self.tokenizer.pad_token_id,
                                         batch_size=self.config.eval.batch_size, mesh=self.mesh,
                                         buckets=_LENGTH_BUCKETS, what="texts")
    return vectors[position]


@evaluators.register("pair_tasks")
def evaluate_pair_tasks(objective: UniversalObjective, params: Any, split: str = "validation",
                        max_pairs: int = 0) -> dict[str, float]:
  """`<split>/<task>_accuracy` of each trained task's head on its held-out pairs, and their mean
  (`<split>/accuracy`). `max_pairs` > 0 scores that many pairs of each task, evenly spaced over the split
  (frequent model selection on a long run without encoding thousands of pairs each time)."""
  results = {}
  for name, task in objective.tasks.items():
    tokens, labels = objective.pair_tokens[name][split], task.labels[split]
    if 0 < max_pairs < len(labels):
      rows = np.linspace(0, len(labels) - 1, max_pairs).round().astype(int)
      tokens, labels = tokens[rows], labels[rows]
    logits = parallel.map_batches(objective.task_logits, params, tokens, batch_size=objective.config.eval.batch_size,
                                  mesh=objective.mesh, what=f"{name} pairs")[name]
    results[f"{split}/{name}_accuracy"] = float(np.mean(logits.argmax(-1) == labels))
  results[f"{split}/accuracy"] = float(np.mean(list(results.values())))
  return results


@evaluators.register("analogies")
def evaluate_analogies(objective: UniversalObjective, params: Any, directory: str = "",
                       static: bool = False) -> dict[str, float]:
  """`analogy_<level>/<metric>` (see `evaluation.analogies`) at the word, phrase and sentence level, and
  `analogy_phrase_set/<metric>` on Mikolov's phrase questions. `directory` holds ANALOGY_FILES (default
  data.manual_dir); `static` answers with the reference's word-piece vectors instead of the encoder."""
  sets = objective.analogy_sets(directory)
  correct = {}
  for level, analogy_set in sets.items():
    texts = analogies.analogy_texts(analogy_set.questions, analogy_set.candidates)
    vectors = (static_vectors(objective.tokenizer, objective.reference_word_pieces, texts.texts) if static
               else objective.encode_texts(params, texts.texts))
    correct[level] = analogies.solved(vectors, texts)
  phrase_set = correct.pop("phrase_set")
  metrics = {**analogies.analogy_metrics(sets[analogies.WORD].questions, correct),
             **analogies.level_accuracy(sets["phrase_set"].questions, phrase_set, "phrase_set")}
  return {f"analogy_{key}": value for key, value in metrics.items()}


@evaluators.register("phrase_similarity")
def evaluate_phrase_similarity(objective: UniversalObjective, params: Any, directory: str = "",
                               static: bool = False) -> dict[str, float]:
  """`ppdb_sample/spearman`: Spearman correlation of cos(u, v) with the human ratings of PPDB_SAMPLE_FILE."""
  pairs = phrases.read_ppdb_sample(epath.Path(directory or objective.config.data.manual_dir or "") / PPDB_SAMPLE_FILE)
  texts = [pair.phrase1 for pair in pairs] + [pair.phrase2 for pair in pairs]
  vectors = (static_vectors(objective.tokenizer, objective.reference_word_pieces, texts) if static
             else objective.encode_texts(params, texts))
  scores = np.array([pair.score for pair in pairs])
  return {f"ppdb_sample/{key}": value
          for key, value in phrase_similarity.phrase_similarity(vectors[:len(pairs)], vectors[len(pairs):], scores).items()}
