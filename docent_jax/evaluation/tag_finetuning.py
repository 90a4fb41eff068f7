"""DOCENT tag prediction by fine-tuning a scorer of (item, tag) pairs against frozen item vectors.

`Finetuner` runs the optimisation and `evaluate_tag_tasks` the evaluation for any `TagScorer`, which
says what a step trains on, its loss and how every pair is scored (FULL's pair classifier is in
`tag_classifier`). Protocol (Zemlyanskiy et al., EACL 2021), with this module's `DualScorer` for
dual-encoder models (DUAL, HYBRID):
  * score(e, t) = g(e) . f(t): g(e) is the trained entity vector, kept frozen; f(t) is the mean of
    BERT's token outputs over the tag text, fine-tuned from the trained model's BERT.
  * Each step samples a batch of training items and a set of candidate tags (all tags when few,
    else the batch's known tags plus random others). Every known (item, tag) pair is a positive of
    a softmax over that tag and the candidates that are *not* known tags of the item, weighted by
    its votes (or log(1 + votes)).
  * Closed vocabulary: train on the training movies, score every tag for the held-out movies.
    Open vocabulary: train on a fraction of the tags, score the other tags for the held-out movies.
  * Bag of sentences (BoS-BERT): the items are single review sentences (frozen pretrained vectors)
    labelled with their movie's tags; a movie's scores are the mean over its sentences.
Metrics come from `tag_prediction.evaluate_tag_predictions`.
"""
import abc
from collections.abc import Sequence
import dataclasses
import functools
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax import optim
from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.evaluation import tag_prediction
from docent_jax.models import bert
from docent_jax.models import entity_table

POOLINGS = ("mean", "cls")
VOTE_WEIGHTINGS = ("votes", "log_votes")
# Reported cut-offs of P@k and NDCG@k: enough for a curve, few enough to read.
KS = (1, 5, 10, 20)


@dataclasses.dataclass(frozen=True)
class FinetuneOptions:
  """A tag scorer's optimisation (AdamW, linear decay, gradient clipping) and its steps' sizes."""
  num_steps: int = 100
  learning_rate: float = 1e-4
  weight_decay: float = 0.01
  items_per_step: int = 32
  tags_per_step: int = 64
  vote_weighting: str = "votes"
  seed: int = 0

  def __post_init__(self):
    if self.vote_weighting not in VOTE_WEIGHTINGS:
      raise ValueError(f"Unknown vote weighting {self.vote_weighting!r}; valid: {list(VOTE_WEIGHTINGS)}.")
    if min(self.num_steps, self.items_per_step, self.tags_per_step) < 1:
      raise ValueError(f"num_steps, items_per_step and tags_per_step must be positive: {self}.")


def finetune_options(eval_config: ml_collections.ConfigDict, seed: int) -> FinetuneOptions:
  """The options of a DOCENT config's `eval` block (`tag_finetune_steps`, `tag_learning_rate`, ...)."""
  return FinetuneOptions(
      num_steps=eval_config.tag_finetune_steps, learning_rate=eval_config.tag_learning_rate,
      weight_decay=eval_config.tag_weight_decay, items_per_step=eval_config.tag_items_per_step,
      tags_per_step=eval_config.tag_tags_per_step, vote_weighting=eval_config.tag_vote_weighting, seed=seed)


@dataclasses.dataclass(frozen=True)
class LabelSet:
  """Texts of the labels of one task and their [E, T] int votes; positive at `vote_threshold` votes."""
  name: str
  texts: list[str]
  votes: np.ndarray
  vote_threshold: int


def pool(encoder: bert.BertModel, params: Any, tokens: jax.Array, pooling: str) -> jax.Array:
  """[N, d] sentence vectors: [CLS] output, or the mean output over the non-padding tokens."""
  mask = (tokens != 0).astype(jnp.int32)
  hidden = encoder.apply({"params": params}, tokens, mask).last_hidden_state
  if pooling == "cls":
    return hidden[:, 0]
  if pooling == "mean":
    return bert.mean_pool(hidden, mask)
  raise ValueError(f"Unknown pooling {pooling!r}; valid: {list(POOLINGS)}.")


def encode_texts(encoder: bert.BertModel, params: Any, tokens: np.ndarray, pooling: str, *, batch_size: int,
                 mesh: Mesh) -> np.ndarray:
  """Normalised pooled vectors of token rows, batched over the mesh's data axis."""
  params = jax.device_put(params, parallel.replicated(mesh))
  fn = lambda p, t: entity_table.l2_normalize(pool(encoder, p, t, pooling))
  return parallel.map_batches(fn, params, tokens, batch_size=batch_size, mesh=mesh)


def label_tokens(tokenizer: Any, texts: Sequence[str], max_len: int) -> np.ndarray:
  """Token rows of short label texts, cut to the longest one (labels are a few word pieces)."""
  tokens = tokenization.tokenize_texts(tokenizer, texts, max_len)
  return tokens[:, :max(int((tokens != 0).sum(axis=1).max()), 2)]


def subsample_per_entity(sentence_entity: np.ndarray, entities: np.ndarray, per_entity: int,
                         seed: int) -> np.ndarray:
  """Sorted indices of at most `per_entity` random sentences of each of `entities`."""
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(sentence_entity))
  keep = np.isin(sentence_entity[order], entities)
  order = order[keep]
  # Rank of each sentence among its entity's sentences in the random order.
  by_entity = np.argsort(sentence_entity[order], kind="stable")
  sorted_entities = sentence_entity[order][by_entity]
  starts = np.searchsorted(sorted_entities, sorted_entities, side="left")
  rank = np.empty(len(order), np.int64)
  rank[by_entity] = np.arange(len(order)) - starts
  return np.sort(order[rank < per_entity])


def vote_weights(votes: jax.Array, weighting: str) -> jax.Array:
  """Float32 weights of (item, tag) pairs: their votes, or log(1 + votes); 0 where unknown."""
  votes = votes.astype(jnp.float32)
  return votes if weighting == "votes" else jnp.log1p(votes)


def tag_softmax_loss(scores: jax.Array, votes: jax.Array, weighting: str = "votes") -> jax.Array:
  """Vote-weighted mean over known pairs of -log softmax of the pair among the item's negatives.

  scores, votes: [items, candidate tags]; a pair is known when votes > 0, a negative otherwise, so
  an item's other known tags never compete with one of its known tags.
  """
  negative = votes == 0
  # A large finite value, not -inf: an item whose candidates are all known tags has a zero loss and
  # finite gradients.
  negative_lse = jax.nn.logsumexp(jnp.where(negative, scores, -1e9), axis=1, keepdims=True)
  losses = jnp.logaddexp(scores, negative_lse) - scores
  weights = vote_weights(votes, weighting)
  return (weights * losses).sum() / jnp.maximum(weights.sum(), 1e-6)


def sample_step(rng: np.random.Generator, item_votes: np.ndarray, items_per_step: int,
                tags_per_step: int) -> tuple[np.ndarray, np.ndarray]:
  """Item and candidate-tag indices of one training step.

  The candidates are all tags when there are at most `tags_per_step`, else the items' known tags
  (a random subset when too many) filled up with random other tags.
  """
  num_items, num_tags = item_votes.shape
  items = rng.choice(num_items, items_per_step, replace=num_items < items_per_step)
  if num_tags <= tags_per_step:
    return items, np.arange(num_tags)
  known = np.flatnonzero(item_votes[items].any(axis=0))
  if len(known) >= tags_per_step:
    return items, rng.choice(known, tags_per_step, replace=False)
  others = np.setdiff1d(np.arange(num_tags), known)
  return items, np.concatenate([known, rng.choice(others, tags_per_step - len(known), replace=False)])


def _optimizer(options: FinetuneOptions) -> optax.GradientTransformation:
  """The trainer's AdamW without warm-up: linear decay to zero over the fine-tuning steps."""
  return optim.create_optimizer(ml_collections.ConfigDict(dict(
      learning_rate=options.learning_rate, warmup_steps=0, weight_decay=options.weight_decay, grad_clip_norm=1.0,
      b1=0.9, b2=0.999, eps=1e-8, lr_multipliers=())), options.num_steps)


class TagScorer(abc.ABC):
  """How fine-tuned params score (item, tag) pairs: what a step trains on, its loss, every pair's score.

  A scorer is a static argument of the jitted train step: hashable, and equal to another scorer
  that computes the same functions (a frozen dataclass of modules and numbers is).
  """

  @abc.abstractmethod
  def sample(self, rng: np.random.Generator, item_votes: np.ndarray,
             options: FinetuneOptions) -> tuple[np.ndarray, np.ndarray]:
    """Item indices [b] of one step and tag indices: [c] (each item with every one) or [b, k] (per item)."""

  @abc.abstractmethod
  def loss(self, params: Any, item_vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array,
           weighting: str) -> jax.Array:
    """Scalar loss of a step: item vectors [b, d], tokens of `sample`'s tags ([c, L] or [b, k, L]), their votes."""

  @abc.abstractmethod
  def scores(self, params: Any, item_vectors: np.ndarray, tag_tokens: np.ndarray) -> np.ndarray:
    """[N, T] scores (higher = more likely) of items [N, d] against the tags' token rows [T, L]."""


# Module-level jits with the encoder or scorer and the options static: fits of one shape share one compilation.
_pool_jit = jax.jit(pool, static_argnames=("encoder", "pooling"))


@dataclasses.dataclass(frozen=True)
class DualScorer(TagScorer):
  """score(e, t) = g(e) . f(t), f(t) the mean of `encoder`'s outputs; a softmax over sampled candidate tags."""
  encoder: bert.BertModel

  def sample(self, rng: np.random.Generator, item_votes: np.ndarray,
             options: FinetuneOptions) -> tuple[np.ndarray, np.ndarray]:
    return sample_step(rng, item_votes, options.items_per_step, options.tags_per_step)

  def loss(self, params: Any, item_vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array,
           weighting: str) -> jax.Array:
    return tag_softmax_loss(item_vectors @ pool(self.encoder, params, tag_tokens, "mean").T, votes, weighting)

  def tag_vectors(self, params: Any, tag_tokens: np.ndarray) -> np.ndarray:
    """[T, d] f(t) of token rows."""
    return np.asarray(_pool_jit(self.encoder, params, tag_tokens, "mean"))

  def scores(self, params: Any, item_vectors: np.ndarray, tag_tokens: np.ndarray) -> np.ndarray:
    return item_vectors @ self.tag_vectors(params, tag_tokens).T


@functools.partial(jax.jit, static_argnames=("scorer", "options"), donate_argnums=(0, 1))
def _train_step(params: Any, opt_state: Any, vectors: jax.Array, tag_tokens: jax.Array, votes: jax.Array, *,
                scorer: TagScorer, options: FinetuneOptions) -> tuple[Any, Any, jax.Array]:
  loss, grads = jax.value_and_grad(scorer.loss)(params, vectors, tag_tokens, votes, options.vote_weighting)
  updates, opt_state = _optimizer(options).update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


class Finetuner:
  """Fits a scorer's params (from `initial_params`) to the known tags of frozen items, and scores with them."""

  def __init__(self, scorer: TagScorer, initial_params: Any, tokenizer: Any, *, max_len: int,
               options: FinetuneOptions):
    self.scorer = scorer
    self.initial_params = jax.device_get(initial_params)
    self.tokenizer = tokenizer
    self.max_len = max_len
    self.options = options

  def fit(self, tag_texts: Sequence[str], item_vectors: np.ndarray, item_votes: np.ndarray) -> Any:
    """Fine-tuned params for tags `tag_texts` (the columns of `item_votes` [N, T])."""
    options = self.options
    item_vectors, item_votes = np.asarray(item_vectors, np.float32), np.asarray(item_votes)
    if item_votes.shape != (len(item_vectors), len(tag_texts)):
      raise ValueError(f"Expected item_votes [{len(item_vectors)}, {len(tag_texts)}]; got {item_votes.shape}.")
    labelled = item_votes.any(axis=1)
    if not labelled.any():
      raise ValueError("No training item has a known tag.")
    item_vectors, item_votes = item_vectors[labelled], item_votes[labelled]
    tokens = label_tokens(self.tokenizer, tag_texts, self.max_len)
    params = jax.tree.map(jnp.array, self.initial_params)
    opt_state = _optimizer(options).init(params)
    rng = np.random.default_rng(options.seed)
    losses = []
    for _ in range(options.num_steps):
      items, tags = self.scorer.sample(rng, item_votes, options)
      # One indexing for both layouts of `tags`: [c] gives the [b, c] grid, [b, k] each item's own.
      params, opt_state, loss = _train_step(params, opt_state, item_vectors[items], tokens[tags],
                                            item_votes[items[:, None], tags], scorer=self.scorer, options=options)
      losses.append(loss)
    losses = np.asarray(jax.device_get(losses))
    logging.info("%s: %d items, %d tags, %d steps; loss %.4f -> %.4f (mean of first / last 10 steps).",
                 type(self.scorer).__name__, len(item_vectors), len(tag_texts), options.num_steps,
                 losses[:10].mean(), losses[-10:].mean())
    return params

  def scores(self, params: Any, tag_texts: Sequence[str], item_vectors: np.ndarray) -> np.ndarray:
    """[N, T] scores of frozen items [N, d] against `tag_texts` under fitted params."""
    return self.scorer.scores(params, np.asarray(item_vectors, np.float32),
                              label_tokens(self.tokenizer, tag_texts, self.max_len))


class TagFinetuner(Finetuner):
  """DUAL's and HYBRID's: f(t), mean-pooled BERT from `initial_params`, against frozen item vectors g(e)."""

  def __init__(self, bert_config: bert.BertConfig, initial_params: Any, tokenizer: Any, *, max_len: int,
               options: FinetuneOptions):
    super().__init__(DualScorer(bert.BertModel(bert_config, add_pooler=False)), initial_params, tokenizer,
                     max_len=max_len, options=options)

  def tag_vectors(self, params: Any, tag_texts: Sequence[str]) -> np.ndarray:
    """[T, d] f(t) of the tags under fine-tuned params."""
    return self.scorer.tag_vectors(params, label_tokens(self.tokenizer, tag_texts, self.max_len))


@dataclasses.dataclass(frozen=True)
class Items:
  """Frozen item vectors [N, d] and the corpus entity each item belongs to [N] (itself, or a sentence's movie)."""
  vectors: np.ndarray
  entity: np.ndarray


def _evaluable(votes: np.ndarray, label_set: LabelSet) -> bool:
  """Whether some movie has both a positive and a negative label (else no metric is defined; logged)."""
  labels = votes >= label_set.vote_threshold
  if (labels.any(axis=1) & (~labels).any(axis=1)).any():
    return True
  logging.warning("Tag prediction (%s): none of %d movies has both a label with >= %d votes and one without; "
                  "nothing to evaluate.", label_set.name, len(votes), label_set.vote_threshold)
  return False


def evaluate_label_scores(scores: np.ndarray, label_set: LabelSet, movies: np.ndarray,
                          tags: np.ndarray | None = None) -> dict[str, float | int]:
  """Tag-prediction metrics of [len(movies), len(tags)] scores (tags: all by default).

  P@k and NDCG@k are reported for k in `KS`. When no movie has both a positive and a negative
  label, the result is only {'num_entities': 0}.
  """
  votes = label_set.votes[movies] if tags is None else label_set.votes[np.ix_(movies, tags)]
  if not _evaluable(votes, label_set):
    return {"num_entities": 0}
  return tag_prediction.evaluate_tag_predictions(scores, votes, vote_threshold=label_set.vote_threshold, ks=KS)


def _fit_and_evaluate(finetuner: Finetuner, label_set: LabelSet, train: Items, test: Items,
                      train_tags: np.ndarray, eval_tags: np.ndarray) -> dict[str, float | int]:
  """Fits on `train_tags` of the training items, evaluates `eval_tags` on the test movies."""
  movies = np.unique(test.entity)
  if not _evaluable(label_set.votes[np.ix_(movies, eval_tags)], label_set):
    return {"num_entities": 0}
  train_votes = label_set.votes[np.ix_(train.entity, train_tags)]
  if not train_votes.any():
    logging.warning("Tag prediction (%s): no training item has a known label; nothing to fit.", label_set.name)
    return {"num_entities": 0}
  texts = list(label_set.texts)
  params = finetuner.fit([texts[t] for t in train_tags], train.vectors, train_votes)
  item_scores = finetuner.scores(params, [texts[t] for t in eval_tags], test.vectors)
  # One item per movie gives the movie's own scores; several sentences give their mean.
  scores = tag_prediction.bag_of_sentences_scores(item_scores, np.searchsorted(movies, test.entity), len(movies))
  return evaluate_label_scores(scores, label_set, movies, eval_tags)


def evaluate_tag_tasks(finetuner: Finetuner, sets: Sequence[LabelSet], train: Items, test: Items, *,
                       open_vocabulary_fractions: Sequence[float] = (), seed: int = 0) -> dict[str, float]:
  """Closed-vocabulary metrics per label set ('<set>_<metric>') and, for tags, open-vocabulary ones.

  Open-vocabulary keys are 'tags_open<fraction>_<metric>' (map, auc, p@5, ndcg@10, entity and tag counts),
  one group per fraction of the tag vocabulary used for training (nested splits, see `auc_curve`).
  """
  results = {}
  for label_set in sets:
    every_tag = np.arange(len(label_set.texts))
    metrics = _fit_and_evaluate(finetuner, label_set, train, test, every_tag, every_tag)
    results.update({f"{label_set.name}_{k}": v for k, v in metrics.items()})
    if label_set.name != "tags" or not open_vocabulary_fractions:
      continue
    curve = tag_prediction.auc_curve(
        lambda seen, heldout, s=label_set: _fit_and_evaluate(finetuner, s, train, test, seen, heldout),
        len(every_tag), open_vocabulary_fractions, seed=seed)
    for fraction, metrics in curve.items():
      for key in ("map", "auc", "p@5", "ndcg@10", "num_entities", "num_train_tags", "num_heldout_tags"):
        if key in metrics:
          results[f"tags_open{fraction:g}_{key}"] = metrics[key]
  return results
