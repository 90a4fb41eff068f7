"""TFDS builders of movie-review collections for DOCENT (array_record output).

Every builder writes the same splits:
  sentences   entity (int64 index), review (int64 index), text: the training
              examples, grouped by entity and review
  entities    index, id, title, split ('train' / 'validation' / 'test', seeded
              80/10/10), num_reviews
  tags        entity, tag, votes (distinct users who applied the tag); absent without tags
  genres      entity, genre; absent without genres
TFDS needs one schema for all splits, so every feature is optional and each split
fills only its own fields. Examples keep their order, so example i of `entities`
has index i. The metadata holds the counts of everything dropped.

Builders: `imdb_movielens` (aclImdb joined to MovieLens ml-latest-small),
`reviews2movielens` (the paper's Amazon-to-MovieLens release, manual directory)
and `review_tsv` (any directory of review TSV files; see
`review_files.read_review_tsv`). The config (see `ReviewConfig`) holds the
preprocessing options; its name encodes the non-default ones.
"""
import abc
import dataclasses
from typing import Any, Iterator

from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from docent_jax.data import tfds_builder
from docent_jax.data.reviews import files as review_files

SPLITS = ("sentences", "entities", "tags", "genres")
_DEFAULTS = review_files.PreprocessOptions()
# A config name holds the non-default options, e.g. 'minreviews1_cap20_seed3_keeptitles'; 'default' when none.
_OPTION_NAMES = tfds_builder.OptionNames(
    what="Review", defaults=_DEFAULTS,
    numbers=(("min_review_words", "minwords"), ("min_reviews", "minreviews"), ("max_words", "maxwords"),
             ("max_reviews_per_entity", "cap"), ("seed", "seed")),
    flags=(("strip_markup", "keepmarkup"), ("split_sentences", "nosplit"), ("remove_titles", "keeptitles")),
    empty="default")


@dataclasses.dataclass(eq=False)
class ReviewConfig(tfds.core.BuilderConfig):
  """Preprocessing options (fields of `review_files.PreprocessOptions`) and, for `review_tsv`, the directory."""
  min_review_words: int = _DEFAULTS.min_review_words
  min_reviews: int = _DEFAULTS.min_reviews
  strip_markup: bool = _DEFAULTS.strip_markup
  split_sentences: bool = _DEFAULTS.split_sentences
  max_words: int = _DEFAULTS.max_words
  remove_titles: bool = _DEFAULTS.remove_titles
  max_reviews_per_entity: int | None = _DEFAULTS.max_reviews_per_entity
  seed: int = _DEFAULTS.seed
  directory: str | None = None

  def options(self) -> review_files.PreprocessOptions:
    return review_files.PreprocessOptions(
        **{field.name: getattr(self, field.name) for field in dataclasses.fields(review_files.PreprocessOptions)})


def config_name(options: review_files.PreprocessOptions) -> str:
  """'default', or the non-default options, e.g. 'minreviews1_cap20_seed3_keeptitles'."""
  return _OPTION_NAMES.name(options)


def parse_config_name(name: str) -> review_files.PreprocessOptions:
  """Inverse of `config_name`; ValueError naming a part that is no option."""
  return _OPTION_NAMES.parse(name)


def make_config(options: review_files.PreprocessOptions = _DEFAULTS) -> ReviewConfig:
  """A config for the options, named by `config_name`."""
  return ReviewConfig(name=config_name(options), **dataclasses.asdict(options))


class ReviewBuilder(tfds_builder.Builder, skip_registration=True):
  """Writes the preprocessed reviews of `_read_reviews` as the splits described above."""

  FEATURES = {
      "entity": tfds_builder.integer(), "review": tfds_builder.integer(), "text": tfds_builder.text(),
      "index": tfds_builder.integer(), "id": tfds_builder.text(), "title": tfds_builder.text(),
      "split": tfds_builder.text(), "num_reviews": tfds_builder.integer(), "tag": tfds_builder.text(),
      "votes": tfds_builder.integer(), "genre": tfds_builder.text(),
  }
  BUILDER_CONFIGS = [make_config()]

  @abc.abstractmethod
  def _read_reviews(self, dl_manager: tfds.download.DownloadManager) -> review_files.RawReviews:
    """Reads (or downloads and reads) the raw reviews."""

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator[Any]]:
    dataset = review_files.preprocess(self._read_reviews(dl_manager), self.builder_config.options())
    self.info.metadata["dropped"] = dataset.dropped
    logging.info("%s/%s: %d entities, %d reviews, %d sentences, %d tagged entities.", self.name,
                 self.builder_config.name, len(dataset.entity_ids), sum(dataset.num_reviews.values()),
                 len(dataset.sentences), len(dataset.tags))
    index = {entity: i for i, entity in enumerate(dataset.entity_ids)}
    generators = {
        "sentences": self._generate_examples(
            {"entity": entity, "review": review, "text": text} for entity, review, text in dataset.sentences),
        "entities": self._generate_examples(
            {"index": i, "id": entity, "title": title, "split": dataset.entity_split[entity],
             "num_reviews": dataset.num_reviews[entity]}
            for i, (entity, title) in enumerate(zip(dataset.entity_ids, dataset.titles))),
        "tags": self._generate_examples(
            {"entity": index[entity], "tag": tag, "votes": votes}
            for entity, entity_tags in dataset.tags.items() for tag, votes in entity_tags.items()),
        "genres": self._generate_examples(
            {"entity": index[entity], "genre": genre}
            for entity, entity_genres in dataset.genres.items() for genre in entity_genres),
    }
    # TFDS cannot write an empty split: a dataset without tags or genres has no such split.
    present = {"sentences", "entities", *(["tags"] if dataset.tags else []), *(["genres"] if dataset.genres else [])}
    return {split: generator for split, generator in generators.items() if split in present}


class ImdbMovielens(ReviewBuilder):
  """IMDB reviews (aclImdb) of MovieLens ml-latest-small movies, with their tags and genres."""

  URLS = {"aclimdb": "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
          "movielens": "https://files.grouplens.org/datasets/movielens/ml-latest-small.zip"}
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  The manual directory holds imdb_reviews/aclImdb/ ({train,test}/{pos,neg}/<id>_<rating>.txt and
  urls_{pos,neg}.txt) and movielens/ml-latest-small/ (movies.csv, links.csv, tags.csv). Without one,
  both archives are downloaded.
  """

  def _read_reviews(self, dl_manager: tfds.download.DownloadManager) -> review_files.RawReviews:
    manual_dir = tfds_builder.manual_dir(dl_manager)
    if manual_dir is not None:
      return review_files.read_aclimdb(manual_dir / "imdb_reviews" / "aclImdb",
                                       manual_dir / "movielens" / "ml-latest-small")
    logging.info("%s: no manual directory; downloading aclImdb and ml-latest-small.", self.name)
    extracted = dl_manager.download_and_extract(dict(self.URLS))
    return review_files.read_aclimdb(epath.Path(extracted["aclimdb"]) / "aclImdb",
                                     epath.Path(extracted["movielens"]) / "ml-latest-small")


class Reviews2Movielens(ReviewBuilder):
  """Amazon "Movies and TV" reviews mapped to MovieLens movies by the DOCENT release (manual directory only)."""

  name = "reviews2movielens"
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Unpack the Reviews2Movielens release (Reviews2Movielens.csv) into the manual directory, add the
  Amazon "Movies and TV" review files (JSON lines with 'asin' and 'reviewText', *.json or *.json.gz)
  and a movielens/ directory with the MovieLens movies.csv and tags.csv.
  """

  def _read_reviews(self, dl_manager: tfds.download.DownloadManager) -> review_files.RawReviews:
    manual_dir = tfds_builder.manual_dir(dl_manager)
    if manual_dir is None:
      raise FileNotFoundError(f"{self.name} needs a manual directory:{self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
    return review_files.read_reviews2movielens(manual_dir)


class ReviewTsv(ReviewBuilder):
  """Any directory of review TSV files; the config names the directory (see `directory_config`)."""

  BUILDER_CONFIGS = []

  def _read_reviews(self, dl_manager: tfds.download.DownloadManager) -> review_files.RawReviews:
    del dl_manager  # Reads the config's directory.
    return review_files.read_review_tsv(self.builder_config.directory)


def directory_config(directory: epath.PathLike, options: review_files.PreprocessOptions = _DEFAULTS) -> ReviewConfig:
  """A `ReviewTsv` config named after the directory and its files, so a changed directory rebuilds."""
  return tfds_builder.directory_config(ReviewConfig, directory, kind="Review", default_stem="reviews",
                                      options_name=config_name(options), **dataclasses.asdict(options))
