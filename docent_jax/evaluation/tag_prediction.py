"""DOCENT tag prediction: score every (movie, tag) pair against MovieLens tag votes.

Protocol (Zemlyanskiy et al., EACL 2021):
  * votes[e, t] is how many users applied tag t to movie e. A tag is positive for a movie when
    votes >= `vote_threshold`; MAP and ROC-AUC use these binary labels and are computed per movie,
    then averaged over movies (the numbers the paper reports). Pooled ('micro') AUC is extra.
  * Precision@k counts positives in the top k; NDCG@k takes the votes themselves as graded
    relevance (linear gain by default, see `metrics.ndcg_at_k`); k = 1..20.
  * Movies with no positive or no negative candidate tag have no AUC; they are skipped for every
    metric (so all metrics average over one set of movies), counted and logged.
  * Closed vocabulary: a tag scorer fit on the training movies scores every tag of the held-out
    (test) movies.
  * Open vocabulary: the tags are held out, not the movies. The tags are split into training and
    held-out tags (`data.reviews.tag_labels.split_tag_vocabulary`); a tag scorer fit on every movie's training tags scores
    the held-out tags (never seen in fitting) and, for reference, the training tags of every movie.
    One seed gives nested splits, so runs at several training fractions make a curve over the
    number of training tags; the tags held out at its largest fraction are held out at every point,
    and scoring them at each point compares the points on the same tags.

The metrics take score matrices, so the same code scores every model (`tag_prediction`: a fine-tuned tag scorer,
`inference.movies.TagModel`) and the non-neural baselines (`top_tags`: global tag popularity, `tfidf_tags`: TF-IDF
of the tag words in a movie's reviews); bag of sentences is the mean of sentence-level predictions.
"""
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from absl import logging
import numpy as np
import scipy.sparse
from sklearn import metrics as sklearn_metrics
from sklearn.feature_extraction import text as sklearn_text

from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import tag_labels
from docent_jax.evaluation import metrics
from docent_jax.evaluation import registry

# Reported cut-offs of P@k and NDCG@k: enough for a curve, few enough to read.
KS = (1, 5, 10, 20)

# Words of one character or more ("a", "3d"), unlike scikit-learn's default of two or more.
_WORD_PATTERN = r"(?u)\b\w+\b"


def tag_vote_matrix(entity_tags: Mapping[str, Mapping[str, int]], entity_ids: Sequence[str],
                    tags: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
  """Tag names and the int32 vote matrix [E, T] of `entity_ids` (rows) and tags (columns).

  Args:
    entity_tags: entity id -> tag -> votes; entities without an entry have no votes.
    entity_ids: the row order.
    tags: the column order; by default every tag of `entity_ids`, sorted. Votes for tags outside
      a given vocabulary are left out, counted and logged.
  """
  if tags is None:
    tags = sorted({tag for entity in entity_ids for tag in entity_tags.get(entity, {})})
  tags = list(tags)
  column = {tag: index for index, tag in enumerate(tags)}
  if len(column) != len(tags):
    raise ValueError(f"tags holds duplicates ({len(tags) - len(column)}).")
  votes = np.zeros((len(entity_ids), len(tags)), np.int32)
  num_outside = 0
  for row, entity in enumerate(entity_ids):
    for tag, count in entity_tags.get(entity, {}).items():
      if tag in column:
        votes[row, column[tag]] = count
      else:
        num_outside += 1
  if num_outside:
    logging.info("Left out %d (entity, tag) votes for tags outside the %d-tag vocabulary.", num_outside, len(tags))
  return tags, votes


def evaluate_tag_predictions(scores: np.ndarray, votes: np.ndarray, *, vote_threshold: int = 2,
                             ks: Sequence[int] = range(1, 21), exclude_mask: np.ndarray | None = None,
                             ndcg_gain: str = "linear") -> dict[str, float | int]:
  """MAP, AUC, P@k and NDCG@k of tag scores against tag votes.

  Args:
    scores: [E, T] float, higher = more likely tag.
    votes: [E, T] non-negative int.
    vote_threshold: a tag is positive for a movie with at least this many votes.
    ks: cut-offs for Precision@k and NDCG@k.
    exclude_mask: optional [E, T] bool, True for pairs that are not ranked (e.g. tags seen with
      this movie in training).
    ndcg_gain: 'linear' or 'exponential' (see `metrics.ndcg_at_k`).

  Returns:
    Flat metrics: 'map', 'auc' (both per movie, averaged), 'auc_micro', 'p@k', 'ndcg@k',
    'num_entities' (evaluated) and 'num_skipped_entities'.
  """
  scores, votes = np.asarray(scores), np.asarray(votes)
  if scores.ndim != 2 or votes.shape != scores.shape:
    raise ValueError(f"Expected scores and votes of one shape [E, T]; got {scores.shape} and {votes.shape}.")
  if not np.issubdtype(votes.dtype, np.integer) or (votes < 0).any():
    raise ValueError(f"votes must be non-negative integers; got dtype {votes.dtype}, min {votes.min(initial=0)}.")
  if vote_threshold < 1:
    raise ValueError(f"vote_threshold must be at least 1; got {vote_threshold}.")
  candidates = np.ones(scores.shape, bool)
  if exclude_mask is not None:
    exclude_mask = np.asarray(exclude_mask, bool)
    if exclude_mask.shape != scores.shape:
      raise ValueError(f"exclude_mask shape {exclude_mask.shape} differs from scores shape {scores.shape}.")
    candidates = ~exclude_mask
  labels = votes >= vote_threshold
  evaluated = (labels & candidates).any(axis=1) & (~labels & candidates).any(axis=1)
  num_skipped = int((~evaluated).sum())
  if not evaluated.any():
    raise ValueError(f"No movie of {len(scores)} has both a positive (>= {vote_threshold} votes) and a negative "
                     "candidate tag.")
  if num_skipped:
    logging.warning("Tag prediction: skipped %d of %d movies without a positive or without a negative tag.",
                    num_skipped, len(scores))
  scores, labels, votes, candidates = (x[evaluated] for x in (scores, labels, votes, candidates))
  ks = list(ks)
  result: dict[str, float | int] = {
      "map": metrics.mean_over_rows(metrics.average_precision(scores, labels, candidates), "MAP")[0],
      "auc": metrics.mean_over_rows(metrics.roc_auc(scores, labels, candidates), "AUC")[0],
      "auc_micro": float(sklearn_metrics.roc_auc_score(labels[candidates], scores[candidates])),  # Pooled pairs.
  }
  precision, _ = metrics.mean_over_rows(metrics.precision_at_k(scores, labels, ks, candidates), "P@k")
  ndcg, _ = metrics.mean_over_rows(metrics.ndcg_at_k(scores, votes, ks, ndcg_gain, candidates), "NDCG@k")
  for k, p, n in zip(ks, precision, ndcg):
    result[f"p@{k}"] = float(p)
    result[f"ndcg@{k}"] = float(n)
  result["num_entities"] = int(evaluated.sum())
  result["num_skipped_entities"] = num_skipped
  return result


def top_tags_scores(train_votes: np.ndarray, num_eval: int, vote_threshold: int = 2) -> np.ndarray:
  """[num_eval, T] float32: every movie gets each tag's popularity (training movies tagged with it)."""
  train_votes = np.asarray(train_votes)
  if train_votes.ndim != 2 or not len(train_votes):
    raise ValueError(f"Expected train_votes [E_train, T] with E_train > 0; got {train_votes.shape}.")
  popularity = (train_votes >= vote_threshold).sum(axis=0).astype(np.float32)
  return np.tile(popularity, (num_eval, 1))


def tfidf_tag_scores(entity_texts: Sequence[str], tags: Sequence[str]) -> np.ndarray:
  """[E, T] float32 TF-IDF weight of each tag's words in each movie's text, averaged over the words.

  `entity_texts[e]` is all of movie e's review text. IDF is computed over these texts, with the
  vocabulary restricted to tag words (lower-cased word characters). A tag without any word scores
  0 everywhere; such tags are counted and logged.
  """
  if not len(entity_texts) or not len(tags):
    raise ValueError(f"Need at least one text and one tag; got {len(entity_texts)} and {len(tags)}.")
  analyzer = sklearn_text.TfidfVectorizer(token_pattern=_WORD_PATTERN).build_analyzer()
  tag_words = [sorted(set(analyzer(tag))) for tag in tags]
  vocabulary = sorted({word for words in tag_words for word in words})
  if not vocabulary:
    raise ValueError("No tag holds a word.")
  num_wordless = sum(not words for words in tag_words)
  if num_wordless:
    logging.warning("TF-IDF baseline: %d of %d tags hold no word and score 0.", num_wordless, len(tags))
  vectorizer = sklearn_text.TfidfVectorizer(token_pattern=_WORD_PATTERN, vocabulary=vocabulary)
  weights = vectorizer.fit_transform(entity_texts)  # [E, V]
  word_index = {word: index for index, word in enumerate(vocabulary)}
  rows, columns, values = [], [], []
  for tag, words in enumerate(tag_words):
    for word in words:
      rows.append(word_index[word])
      columns.append(tag)
      values.append(1.0 / len(words))
  averaging = scipy.sparse.csr_matrix((values, (rows, columns)), shape=(len(vocabulary), len(tags)))
  return np.asarray((weights @ averaging).todense(), np.float32)


def check_sentence_entity(sentence_entity: np.ndarray, num_sentences: int, num_entities: int) -> np.ndarray:
  """Validated [S] entity index of each sentence; every entity must have a sentence."""
  sentence_entity = np.asarray(sentence_entity)
  if sentence_entity.shape != (num_sentences,) or not np.issubdtype(sentence_entity.dtype, np.integer):
    raise ValueError(f"sentence_entity must be an integer array [{num_sentences}]; got {sentence_entity.dtype} "
                     f"{sentence_entity.shape}.")
  bad = np.flatnonzero((sentence_entity < 0) | (sentence_entity >= num_entities))
  if bad.size:
    raise ValueError(f"sentence_entity[{bad[0]}] = {sentence_entity[bad[0]]} is outside [0, {num_entities}).")
  counts = np.bincount(sentence_entity, minlength=num_entities)
  if (counts == 0).any():
    raise ValueError(f"{int((counts == 0).sum())} of {num_entities} entities have no sentence "
                     f"(first: {int(np.argmin(counts))}).")
  return sentence_entity


def bag_of_sentences_scores(sentence_scores: np.ndarray, sentence_entity: np.ndarray,
                            num_entities: int) -> np.ndarray:
  """[E, T] float32 BoS baseline: the mean of a movie's sentence-level tag scores [S, T]."""
  sentence_scores = np.asarray(sentence_scores, np.float32)
  if sentence_scores.ndim != 2:
    raise ValueError(f"Expected sentence_scores [S, T]; got {sentence_scores.shape}.")
  sentence_entity = check_sentence_entity(sentence_entity, len(sentence_scores), num_entities)
  counts = np.bincount(sentence_entity, minlength=num_entities).astype(np.float32)
  # Row e of this [E, S] matrix averages the sentences of entity e.
  averaging = scipy.sparse.csr_matrix(
      (1.0 / counts[sentence_entity], (sentence_entity, np.arange(len(sentence_entity)))),
      shape=(num_entities, len(sentence_entity)))
  return np.asarray(averaging @ sentence_scores, np.float32)


def _evaluable(votes: np.ndarray, label_set: tag_labels.LabelSet) -> bool:
  """Whether some movie has both a positive and a negative label (else no metric is defined; logged)."""
  labels = votes >= label_set.vote_threshold
  if (labels.any(axis=1) & (~labels).any(axis=1)).any():
    return True
  logging.warning("Tag prediction (%s): none of %d movies has both a label with >= %d votes and one without; "
                  "nothing to evaluate.", label_set.name, len(votes), label_set.vote_threshold)
  return False


def evaluate_label_scores(scores: np.ndarray, label_set: tag_labels.LabelSet, movies: np.ndarray,
                          tags: np.ndarray | None = None) -> dict[str, float | int]:
  """Tag-prediction metrics of [len(movies), len(tags)] scores (tags: all by default).

  P@k and NDCG@k are reported for k in `KS`. When no movie has both a positive and a negative
  label, the result is only {'num_entities': 0}.
  """
  votes = label_set.votes[movies] if tags is None else label_set.votes[np.ix_(movies, tags)]
  if not _evaluable(votes, label_set):
    return {"num_entities": 0}
  return evaluate_tag_predictions(scores, votes, vote_threshold=label_set.vote_threshold, ks=KS)


# Open-vocabulary runs report fewer numbers: the ones of the paper's curve.
OPEN_VOCABULARY_METRICS = ("map", "auc", "p@5", "ndcg@10", "num_entities")


@registry.register("tag_prediction")
def predict_tags(model: Any, task: tag_labels.TagTask) -> dict[str, float]:
  """A tag scorer's predictions for the task's movies (a movie's scores: its item's, or the mean of its
  sentences'). Closed vocabulary: `<split>/<label set>_<metric>` over every label. Open vocabulary:
  `<split>/<label set>_open<fraction>_<metric>` over the held-out labels, `..._open<fraction>_seen_<metric>` over
  the training labels (the pairs the scorer was fit on), `..._open<fraction>_common_<metric>` over the common
  held-out labels (if any), and the number of each."""
  movies = np.unique(task.item_entity)
  item_movie = np.searchsorted(movies, task.item_entity)

  def metrics_of(tags: np.ndarray) -> dict[str, float | int]:
    item_scores = model.tag_scores(task.items, [task.label_set.texts[t] for t in tags])
    return evaluate_label_scores(bag_of_sentences_scores(item_scores, item_movie, len(movies)), task.label_set,
                                 movies, tags)

  name = task.label_set.name
  if not len(task.heldout_tags):
    return {f"{task.split}/{name}_{k}": v for k, v in metrics_of(task.train_tags).items()}
  prefix = f"{task.split}/{name}_open{task.vocabulary_fraction:g}_"
  results = {f"{prefix}num_train_tags": len(task.train_tags), f"{prefix}num_heldout_tags": len(task.heldout_tags)}
  kinds = [("", task.heldout_tags), ("seen_", task.train_tags)]
  if len(task.common_tags):
    results[f"{prefix}num_common_tags"] = len(task.common_tags)
    kinds.append(("common_", task.common_tags))
  for kind, tags in kinds:
    results.update({f"{prefix}{kind}{k}": v for k, v in metrics_of(tags).items() if k in OPEN_VOCABULARY_METRICS})
  return results


def _baseline(data: review_corpus.ReviewEvaluation,
              scores_of: Callable[[tag_labels.LabelSet, np.ndarray, np.ndarray], np.ndarray]) -> dict[str, float]:
  corpus = data.corpus
  train_movies, test_movies = corpus.entity_split["train"], corpus.entity_split["test"]
  results = {}
  for label_set in tag_labels.label_sets(corpus, data.tag_vote_threshold):
    found = evaluate_label_scores(scores_of(label_set, train_movies, test_movies), label_set, test_movies)
    results.update({f"test/{label_set.name}_{k}": v for k, v in found.items()})
  return results


@registry.register("top_tags")
def predict_popular_tags(model: Any, data: review_corpus.ReviewEvaluation) -> dict[str, float]:
  """Baseline: every held-out movie gets the labels most often positive among the training movies."""
  del model
  return _baseline(data, lambda labels, train, test: top_tags_scores(labels.votes[train], len(test),
                                                                      labels.vote_threshold))


@registry.register("tfidf_tags")
def predict_tags_by_tfidf(model: Any, data: review_corpus.ReviewEvaluation) -> dict[str, float]:
  """Baseline: a label's TF-IDF weight in a movie's reviews (IDF over every movie's reviews; no labels used)."""
  del model
  texts = data.corpus.documents()
  return _baseline(data, lambda labels, train, test: tfidf_tag_scores(texts, labels.texts)[test])
