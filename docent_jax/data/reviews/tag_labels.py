"""The labels of DOCENT's tag-prediction tasks: MovieLens tags and genres of the review corpus, the seeded split of
a tag vocabulary into training and held-out tags, and the task a tag-scorer run is evaluated on. The objective
that fits a tag scorer (`objectives.tag_finetuning`) and the evaluator that scores it (`evaluation.tag_prediction`)
share them."""
import dataclasses

import numpy as np

from docent_jax.data.reviews import corpus as review_corpus


@dataclasses.dataclass(frozen=True)
class LabelSet:
  """Texts of the labels of one task and their [E, T] int votes; positive at `vote_threshold` votes."""
  name: str
  texts: list[str]
  votes: np.ndarray
  vote_threshold: int


def label_sets(corpus: review_corpus.ReviewCorpus, tag_vote_threshold: int) -> list[LabelSet]:
  """MovieLens tags (votes; positive at `tag_vote_threshold`) and genres (one vote each), those the corpus has."""
  sets = [LabelSet("tags", list(corpus.tags), corpus.tag_votes.toarray(), tag_vote_threshold),
          LabelSet("genres", list(corpus.genres), corpus.genre_labels.astype(np.int32), 1)]
  return [label_set for label_set in sets if label_set.texts]


def split_tag_vocabulary(num_tags: int, train_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Seeded split of tag indices into (training tags, held-out tags), each sorted.

  One seed gives nested splits: the training tags of a smaller fraction are a subset of those of a
  larger one, so points of a curve over fractions differ only by the fraction.
  """
  num_train = int(round(train_fraction * num_tags))
  if not 0 < num_train < num_tags:
    raise ValueError(f"train_fraction {train_fraction} of {num_tags} tags leaves no training or no held-out tag.")
  permutation = np.random.default_rng(seed).permutation(num_tags)
  return np.sort(permutation[:num_train]), np.sort(permutation[num_train:])


@dataclasses.dataclass(frozen=True)
class TagTask:
  """One tag-prediction task of a fine-tuning run: a label set, the labels the scorer was fit on, the labels held
  out of fitting (none for a closed vocabulary) and the items scored (movies, or their sampled sentences).

  Closed vocabulary: the items are those of the held-out movies (split 'test'). Open vocabulary: the labels are
  held out instead of the movies, so the items are those of every movie (split 'all').
  """
  label_set: LabelSet
  train_tags: np.ndarray
  heldout_tags: np.ndarray
  common_tags: np.ndarray  # Held-out labels every point of a curve shares, also scored on their own (or none).
  vocabulary_fraction: float
  split: str  # Which movies the items are: 'test' or 'all'; the split of the reported keys.
  items: np.ndarray  # Rows of the model's item vectors.
  item_entity: np.ndarray  # The movie of each item.
