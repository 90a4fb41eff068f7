"""The in-memory review corpus (entities, sentences, tag and genre labels), loaded from the TFDS builders."""
import dataclasses
import functools
from typing import Any

from absl import logging
from etils import epath
import numpy as np
import scipy.sparse

from docent_jax.data import fingerprint
from docent_jax.data import tfds_loading
from docent_jax.data.reviews import builders as review_builders
from docent_jax.data.reviews import files as review_files
from docent_jax.data.reviews import search_queries as query_sets

ENTITY_SPLITS = review_files.ENTITY_SPLITS
# Options: the preprocessing (`review_files.PreprocessOptions`); a config name holds them ('minreviews1').
BUILDERS = tfds_loading.BuilderRegistry(
    what="review dataset",
    builders={"imdb_movielens": review_builders.ImdbMovielens, "reviews2movielens": review_builders.Reviews2Movielens},
    directory_builder=review_builders.ReviewTsv,
    config=lambda options, directory: (review_builders.directory_config(directory, options) if directory
                                       else review_builders.make_config(options)),
    parse_config_name=review_builders.parse_config_name,
    default_options=review_files.PreprocessOptions(),
    known_shapes={"imdb_movielens": {"num_entities": 812},
                  "reviews2movielens": {"num_entities": 81057}})  # The DOCENT paper's Amazon movies.


@dataclasses.dataclass
class ReviewCorpus:
  """Entities, their review sentences and their labels.

  Attributes:
    name: the dataset name with its config, e.g. 'imdb_movielens/default'.
    entity_ids: entity identifiers (MovieLens movieIds); list position is the entity index.
    titles: entity titles ('' when unknown).
    sentences: the training texts (sentences packed into short paragraphs).
    sentence_entity: int32 [num_sentences] the entity index of each sentence.
    sentence_review: int32 [num_sentences] the review index of each sentence.
    entity_split: split -> sorted int32 indices of the entities of that split.
    tags: the tag vocabulary (sorted).
    tag_votes: int32 CSR [num_entities, num_tags], votes of each tag for each entity.
    genres: the genre vocabulary (sorted).
    genre_labels: bool [num_entities, num_genres].
    sentence_source: TFDS data source of the sentences (for the input pipeline).
    dropped: reason -> count of what preprocessing dropped.
  """
  name: str
  entity_ids: list[str]
  titles: list[str]
  sentences: list[str]
  sentence_entity: np.ndarray
  sentence_review: np.ndarray
  entity_split: dict[str, np.ndarray]
  tags: list[str]
  tag_votes: scipy.sparse.csr_matrix
  genres: list[str]
  genre_labels: np.ndarray
  sentence_source: Any
  dropped: dict[str, int]

  def documents(self) -> list[str]:
    """Per entity, its sentences joined into one text (the lexical baselines' documents)."""
    sentences = [[] for _ in range(self.num_entities)]
    for sentence, entity in zip(self.sentences, self.sentence_entity):
      sentences[entity].append(sentence)
    return [" ".join(texts) for texts in sentences]

  @property
  def num_entities(self) -> int:
    return len(self.entity_ids)

  def fingerprint(self) -> fingerprint.Fingerprint:
    """Counts and digests of the entities, sentences, tags and genres (see `data.fingerprint`)."""
    return {"entities": self.num_entities, "entity_ids_digest": fingerprint.digest(self.entity_ids),
            "sentences": len(self.sentences), "sentences_digest": fingerprint.digest(self.sentences),
            "sentence_entities_digest": fingerprint.digest([self.sentence_entity]),
            "tags": len(self.tags), "tags_digest": fingerprint.digest(
                [*self.tags, self.tag_votes.indptr, self.tag_votes.indices, self.tag_votes.data]),
            "genres": len(self.genres), "genres_digest": fingerprint.digest([*self.genres, self.genre_labels])}

  @property
  def num_reviews(self) -> int:
    return int(self.sentence_review.max()) + 1 if len(self.sentence_review) else 0


@dataclasses.dataclass(frozen=True)
class ReviewEvaluation:
  """A review corpus with the labels and queries of DOCENT's evaluations of it (a config's
  `data.search_min_votes`, `data.tag_vote_threshold` and `data.search_queries`)."""
  corpus: ReviewCorpus
  search_min_votes: int  # Votes that make a movie relevant to a tag query.
  tag_vote_threshold: int  # Votes that make a tag positive for a movie.
  seed: int  # Draws the baselines' samples (bag-of-sentences).
  search_queries: str = ""  # A query-set file (`query_sets.load_query_set`) searched over every movie, or "".

  @functools.cached_property
  def search_tasks(self) -> dict[str, tuple[np.ndarray, query_sets.QuerySet]]:
    """Zero-shot search tasks: the ranked movies (entity indices) and the queries of each split.

    'test' (held-out movies) and 'all' (every movie) take tag queries: each tag with a movie of the split
    having at least `search_min_votes` votes for it; relevant = those movies. A split without such a tag (e.g. a
    corpus without tags.tsv) has no search task; the reason is logged. 'queries', when `search_queries` names a
    query-set file (a malformed line raises `query_sets.QueryFormatError` naming file and line), takes its
    queries over every movie.
    """
    corpus, min_votes = self.corpus, self.search_min_votes
    tasks = {}
    for split, movie_rows in (("test", corpus.entity_split["test"]), ("all", np.arange(corpus.num_entities))):
      votes = corpus.tag_votes[movie_rows].toarray()
      tags = np.flatnonzero((votes >= min_votes).any(axis=0))
      if not len(tags):
        logging.log_first_n(logging.WARNING, "%s: no tag has a %s movie with %d votes (%d tags in all); search on "
                            "%s movies is skipped.", 4, corpus.name, split, min_votes, len(corpus.tags), split)
        continue
      tasks[split] = (movie_rows, query_sets.tag_query_set(corpus.tags, votes, tags, min_votes=min_votes))
    if self.search_queries:
      tasks["queries"] = (np.arange(corpus.num_entities),
                          query_sets.load_query_set(self.search_queries, corpus.entity_ids))
    return tasks


def load_review_corpus(dataset: str, *, data_dir: epath.PathLike | None = None,
                       manual_dir: epath.PathLike | None = None,
                       options: review_files.PreprocessOptions | None = None) -> ReviewCorpus:
  """Builds the dataset if needed (array_record under `data_dir`) and loads it.

  Args:
    dataset: 'imdb_movielens' or 'reviews2movielens', optionally with a config
      name ('imdb_movielens/minreviews1_cap50'), or a directory of review TSV files.
    data_dir: the TFDS data directory (TFDS's default when None).
    manual_dir: the source files (for 'imdb_movielens', downloaded when None).
    options: preprocessing options, when `dataset` names no config.

  Returns:
    The corpus.
  """
  builder = tfds_loading.make_builder(BUILDERS, dataset, data_dir=data_dir, options=options)
  sources = tfds_loading.prepare(builder, manual_dir)
  entities = tfds_loading.read_columns(sources["entities"], ("id", "title", "split"))
  sentences = tfds_loading.read_columns(sources["sentences"], ("entity", "review", "text"))
  # A dataset without tags or genres has no such split (TFDS cannot write an empty one).
  tags = (tfds_loading.read_columns(sources["tags"], ("entity", "tag", "votes")) if "tags" in sources
          else {"entity": [], "tag": [], "votes": []})
  genres = (tfds_loading.read_columns(sources["genres"], ("entity", "genre")) if "genres" in sources
            else {"entity": [], "genre": []})
  num_entities = len(entities["id"])

  tag_names = sorted(set(tags["tag"]))
  tag_index = {tag: i for i, tag in enumerate(tag_names)}
  tag_votes = scipy.sparse.csr_matrix(
      (np.asarray(tags["votes"], np.int32), (np.asarray(tags["entity"], np.int64),
                                             np.asarray([tag_index[t] for t in tags["tag"]], np.int64))),
      shape=(num_entities, len(tag_names)), dtype=np.int32)
  genre_names = sorted(set(genres["genre"]))
  genre_index = {genre: i for i, genre in enumerate(genre_names)}
  genre_labels = np.zeros((num_entities, len(genre_names)), bool)
  genre_labels[np.asarray(genres["entity"], np.int64), [genre_index[g] for g in genres["genre"]]] = True

  split_names = np.asarray(entities["split"])
  corpus = ReviewCorpus(
      name=f"{builder.name}/{builder.builder_config.name}",
      entity_ids=entities["id"],
      titles=entities["title"],
      sentences=sentences["text"],
      sentence_entity=np.asarray(sentences["entity"], np.int32).reshape(-1),
      sentence_review=np.asarray(sentences["review"], np.int32).reshape(-1),
      entity_split={split: np.flatnonzero(split_names == split).astype(np.int32) for split in ENTITY_SPLITS},
      tags=tag_names,
      tag_votes=tag_votes,
      genres=genre_names,
      genre_labels=genre_labels,
      sentence_source=sources["sentences"],
      dropped=dict(builder.info.metadata.get("dropped", {})))
  logging.info("Loaded %s: %d entities, %d reviews, %d sentences, %d tags on %d entities, %d genres.",
               corpus.name, corpus.num_entities, corpus.num_reviews, len(corpus.sentences), len(tag_names),
               int((tag_votes.getnnz(axis=1) > 0).sum()), len(genre_names))
  return corpus
