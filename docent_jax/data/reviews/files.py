"""Reads movie-review collections (IMDB, Amazon, TSV) and applies DOCENT's preprocessing.

Readers return a `RawReviews`: entities with titles, tags and genres, and the raw
review texts of each. `preprocess` turns it into a `ReviewDataset` of (entity,
sentence) pairs as in the paper: markup stripped, reviews shorter than
`min_review_words` words dropped, the movie's own title removed from its
reviews, reviews split into sentences packed into paragraphs of at most
`max_words` words, and entities with fewer than `min_reviews` reviews dropped.
Every drop is counted and logged. Format errors (`io.DataFormatError`) name the file and line.
"""
import collections
import dataclasses
import html
import re
from typing import Iterable, Mapping, Sequence

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import io

ENTITY_SPLITS = ("train", "validation", "test")
NO_GENRES = "(no genres listed)"
# aclImdb review file name: <review id>_<rating>.txt; the id is a line of urls_<label>.txt.
_REVIEW_FILE = re.compile(r"^(\d+)_(\d+)\.txt$")
_IMDB_URL = re.compile(r"^https?://(?:www\.)?imdb\.com/title/tt(\d+)/?(?:usercomments)?/?$")
# A tag starts with a letter, "/" or "!" right after "<", so "a < b > c" is not markup.
_TAG = re.compile(r"<[/!]?[A-Za-z][^<>]{0,200}>|<!--.*?-->")
_LINE_BREAK_TAG = re.compile(r"<\s*br\s*/?\s*>|<\s*/?\s*p\s*>", re.IGNORECASE)
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")
# A sentence ends at . ! ? (plus closing quotes/brackets) followed by space and a capital, digit or quote,
# or at a full-width 。！？ (Chinese, Japanese), which needs no space after it.
_BOUNDARY = re.compile(r"[.!?]+[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|[。！？]+[」』）\"']*\s*")
# A word: one character of a script written without spaces (Han, kana; as BERT's tokenizer splits them),
# or a run of other non-space characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_WORD_SPAN = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")
# Entities dropped by preprocessing that are named in a warning; the rest are counted.
_NAMED_ENTITY_DROPS = 10
# Words after which a period does not end a sentence.
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "st", "jr", "sr", "vs", "prof", "mt", "lt", "col", "gen",
                            "no", "vol", "etc", "i.e", "e.g"})
_YEAR = re.compile(r"\s*\((?:\d{4}(?:\s*-\s*\d{4})?)?\)\s*$")
_TRAILING_PARENTHESES = re.compile(r"\s*\(([^()]*)\)\s*$")
# MovieLens writes leading articles after the title: "Usual Suspects, The", "Auberge espagnole, L'".
_TRAILING_ARTICLE = re.compile(r"^(.*), (The|A|An|La|Le|Les|L'|Il|El|Los|Las|Das|Der|Die|Den|Det)$")


@dataclasses.dataclass
class RawReviews:
  """Entities with their raw reviews and labels, before preprocessing.

  Attributes:
    entity_ids: every entity with at least one review, in a fixed order.
    titles: entity id -> title ('' when unknown).
    reviews: entity id -> raw review texts.
    tags: entity id -> normalised tag -> votes (number of distinct users).
    genres: entity id -> genres.
    skipped: reason -> number of reviews or rows dropped while reading.
  """
  entity_ids: list[str]
  titles: dict[str, str]
  reviews: dict[str, list[str]]
  tags: dict[str, dict[str, int]]
  genres: dict[str, list[str]]
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass(frozen=True)
class PreprocessOptions:
  """DOCENT's preprocessing steps (see the module docstring).

  Attributes:
    min_review_words: drop reviews with fewer words (after stripping markup).
    min_reviews: drop entities with fewer kept reviews.
    strip_markup: remove HTML tags (<br /> becomes a space) and unescape entities.
    split_sentences: split reviews into sentences packed into paragraphs of at
      most `max_words` words (else one example per review).
    max_words: words per paragraph; longer sentences are cut into pieces.
    remove_titles: delete the entity's title from its reviews.
    max_reviews_per_entity: keep at most this many reviews per entity (a seeded
      sample), None keeps all.
    seed: seeds the review sample and the entity split.
  """
  min_review_words: int = 5
  min_reviews: int = 5
  strip_markup: bool = True
  split_sentences: bool = True
  max_words: int = 64
  remove_titles: bool = True
  max_reviews_per_entity: int | None = None
  seed: int = 0

  def __post_init__(self):
    for name in ("min_review_words", "min_reviews", "max_words"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
    if self.max_reviews_per_entity is not None and self.max_reviews_per_entity < 1:
      raise ValueError(f"max_reviews_per_entity must be positive or None, got {self.max_reviews_per_entity}.")


@dataclasses.dataclass
class ReviewDataset:
  """Preprocessed reviews as (entity, paragraph) examples.

  Attributes:
    entity_ids, titles: the kept entities and their titles.
    entity_split: entity id -> 'train' | 'validation' | 'test' (seeded 80/10/10).
    num_reviews: entity id -> number of kept reviews.
    sentences: (entity index, review index, text), grouped by entity and review.
    tags: entity id -> tag -> votes, kept entities only.
    genres: entity id -> genres, kept entities only.
    dropped: reason -> count of everything dropped (reviews, entities, rows).
  """
  entity_ids: list[str]
  titles: list[str]
  entity_split: dict[str, str]
  num_reviews: dict[str, int]
  sentences: list[tuple[int, int, str]]
  tags: dict[str, dict[str, int]]
  genres: dict[str, list[str]]
  dropped: dict[str, int]


def _csv_records(path: epath.Path, columns: Sequence[str]) -> Iterable[tuple[int, dict[str, str]]]:
  """Yields (line number, row by column) of a CSV file with a header holding at least `columns`."""
  header, rows = io.csv_rows(path, columns)
  return ((line, dict(zip(header, row))) for line, row in rows)


def _integer(path: epath.Path, line: int, name: str, value: str) -> int:
  try:
    number = float(value)  # Also accepts "12.0", as written by tools that store ids as floats.
  except ValueError:
    number = float("nan")
  if not number.is_integer():
    raise io.DataFormatError(f"{path}:{line}: {name} {value!r} is not an integer.")
  return int(number)


# ---------------------------------------------------------------------------------------------------
# MovieLens.


@dataclasses.dataclass
class MovieLens:
  """The MovieLens files needed here.

  Attributes:
    titles: movieId -> title as written by MovieLens ("Usual Suspects, The (1995)").
    genres: movieId -> genres.
    tags: movieId -> normalised tag -> number of distinct users who applied it.
    imdb_to_movie: IMDb numeric title id -> movieId (empty without links.csv).
    skipped: reason -> rows dropped.
  """
  titles: dict[str, str]
  genres: dict[str, list[str]]
  tags: dict[str, dict[str, int]]
  imdb_to_movie: dict[int, str]
  skipped: collections.Counter


def read_movielens(directory: epath.PathLike) -> MovieLens:
  """Reads movies.csv and, when present, tags.csv and links.csv of a MovieLens directory."""
  directory = epath.Path(directory)
  movies_path = io.find_file(directory, "movies.csv")
  if movies_path is None:
    raise FileNotFoundError(f"{directory}: no movies.csv (a MovieLens directory such as ml-latest-small).")
  titles: dict[str, str] = {}
  genres: dict[str, list[str]] = {}
  for line, row in _csv_records(movies_path, ("movieId", "title", "genres")):
    movie = str(_integer(movies_path, line, "movieId", row["movieId"]))
    if movie in titles:
      raise io.DataFormatError(f"{movies_path}:{line}: duplicate movieId {movie}.")
    titles[movie] = row["title"].strip()
    genres[movie] = [g.strip() for g in row["genres"].split("|") if g.strip() and g.strip() != NO_GENRES]
  skipped: collections.Counter = collections.Counter()
  users: dict[str, dict[str, set[str]]] = collections.defaultdict(lambda: collections.defaultdict(set))
  tags_path = io.find_file(directory, "tags.csv")
  if tags_path is not None:
    for line, row in _csv_records(tags_path, ("userId", "movieId", "tag")):
      movie = str(_integer(tags_path, line, "movieId", row["movieId"]))
      tag = row["tag"].strip().lower()
      if movie not in titles:
        skipped["tag rows of unknown movies"] += 1
      elif not tag:
        skipped["empty tags"] += 1
      else:
        users[movie][tag].add(row["userId"])
  tags = {movie: {tag: len(u) for tag, u in sorted(movie_tags.items())} for movie, movie_tags in users.items()}
  imdb_to_movie: dict[int, str] = {}
  links_path = io.find_file(directory, "links.csv")
  if links_path is not None:
    for line, row in _csv_records(links_path, ("movieId", "imdbId")):
      movie = str(_integer(links_path, line, "movieId", row["movieId"]))
      if not row["imdbId"].strip():
        skipped["links without imdbId"] += 1
        continue
      imdb = _integer(links_path, line, "imdbId", row["imdbId"])
      if imdb in imdb_to_movie and imdb_to_movie[imdb] != movie:
        raise io.DataFormatError(f"{links_path}:{line}: imdbId {imdb} also links movie {imdb_to_movie[imdb]}.")
      imdb_to_movie[imdb] = movie
  for reason, count in skipped.items():
    logging.warning("%s: skipped %d %s.", directory, count, reason)
  return MovieLens(titles, genres, tags, imdb_to_movie, skipped)


def _collect(reviews: Mapping[str, list[str]], titles: Mapping[str, str], tags: Mapping[str, dict[str, int]],
             genres: Mapping[str, list[str]], skipped: collections.Counter) -> RawReviews:
  """Keeps the labels of entities that have reviews; counts tags of entities without reviews."""
  entity_ids = sorted(reviews, key=_entity_sort_key)
  unreviewed_tagged = sum(1 for e in tags if e not in reviews)
  if unreviewed_tagged:
    logging.info("%d tagged entities have no reviews; their tags are left out.", unreviewed_tagged)
  return RawReviews(
      entity_ids=entity_ids,
      titles={e: titles.get(e, "") for e in entity_ids},
      reviews={e: reviews[e] for e in entity_ids},
      tags={e: dict(tags[e]) for e in entity_ids if e in tags},
      genres={e: list(genres[e]) for e in entity_ids if e in genres},
      skipped=skipped)


def _entity_sort_key(entity: str) -> tuple[int, int | str]:
  # Numeric ids (MovieLens) in numeric order, others after them in string order.
  return (0, int(entity)) if entity.isdigit() else (1, entity)


# ---------------------------------------------------------------------------------------------------
# IMDB (aclImdb) joined to MovieLens.


def _read_urls(path: epath.Path) -> list[int]:
  """IMDb title ids of a urls_<label>.txt file, one per line."""
  ids = []
  for number, line in io.row_lines(path):
    match = _IMDB_URL.match(line.strip())
    if not match:
      raise io.DataFormatError(f"{path}:{number}: not an IMDb title URL: {line[:100]!r}")
    ids.append(int(match.group(1)))
  return ids


def read_aclimdb(aclimdb_dir: epath.PathLike, movielens_dir: epath.PathLike) -> RawReviews:
  """Reads aclImdb's labelled reviews and joins them to MovieLens movies through links.csv.

  Reviews of titles that MovieLens does not link are skipped and counted.

  Args:
    aclimdb_dir: the `aclImdb` directory ({train,test}/{pos,neg}/<id>_<rating>.txt, urls_{pos,neg}.txt).
    movielens_dir: a MovieLens directory with movies.csv, links.csv and optionally tags.csv.

  Returns:
    The reviews keyed by MovieLens movieId.
  """
  aclimdb_dir, movielens_dir = epath.Path(aclimdb_dir), epath.Path(movielens_dir)
  movielens = read_movielens(movielens_dir)
  if not movielens.imdb_to_movie:
    raise io.DataFormatError(f"{movielens_dir}: no links.csv to join IMDb reviews to MovieLens movies.")
  reviews: dict[str, list[str]] = collections.defaultdict(list)
  skipped = collections.Counter(movielens.skipped)
  folders = 0
  for split in ("train", "test"):
    for label in ("pos", "neg"):
      folder = aclimdb_dir / split / label
      if not folder.is_dir():
        continue
      folders += 1
      urls_path = aclimdb_dir / split / f"urls_{label}.txt"
      if not urls_path.exists():
        raise io.DataFormatError(f"{folder}: no {urls_path.name} beside it to map reviews to IMDb titles.")
      title_ids = _read_urls(urls_path)
      files = []
      for path in folder.iterdir():
        match = _REVIEW_FILE.match(path.name)
        if not match:
          raise io.DataFormatError(f"{path}: not a review file name <id>_<rating>.txt.")
        files.append((int(match.group(1)), path))
      for review_id, path in sorted(files):
        if review_id >= len(title_ids):
          raise io.DataFormatError(f"{urls_path}: has {len(title_ids)} lines; review {path.name} needs line "
                                   f"{review_id + 1}.")
        movie = movielens.imdb_to_movie.get(title_ids[review_id])
        if movie is None:
          skipped["reviews of titles not in MovieLens"] += 1
          continue
        if movie not in movielens.titles:
          raise io.DataFormatError(f"{movielens_dir}: links.csv names movieId {movie}, which movies.csv lacks.")
        reviews[movie].append("\n".join(io.read_lines(path)))
  if not folders:
    raise FileNotFoundError(f"{aclimdb_dir}: no review folders {{train,test}}/{{pos,neg}}.")
  for reason, count in skipped.items():
    logging.info("%s: skipped %d %s.", aclimdb_dir, count, reason)
  return _collect(reviews, movielens.titles, movielens.tags, movielens.genres, skipped)


# ---------------------------------------------------------------------------------------------------
# Reviews2Movielens: Amazon reviews mapped to MovieLens.


def read_reviews2movielens(directory: epath.PathLike) -> RawReviews:
  """Reads the Reviews2Movielens release joined with Amazon reviews and MovieLens.

  Layout of `directory`:
    Reviews2Movielens.csv   the release's mapping; columns asin, canon_asin, movielens_id
                            (others ignored); rows without movielens_id are unused
    *.json or *.json.gz     Amazon "Movies and TV" reviews, one JSON object per line with
                            'asin' and 'reviewText' (the 2014 and 2018 releases' format)
    movielens/              MovieLens files (movies.csv, optional tags.csv) of the ids used

  Reviews whose asin has no MovieLens id, or that have no reviewText, are skipped
  and counted.
  """
  directory = epath.Path(directory)
  mapping_path = io.find_file(directory, "Reviews2Movielens.csv")
  if mapping_path is None:
    raise FileNotFoundError(f"{directory}: no Reviews2Movielens.csv.")
  movielens = read_movielens(directory / "movielens")
  skipped = collections.Counter(movielens.skipped)
  asin_to_movie: dict[str, str] = {}
  for line, row in _csv_records(mapping_path, ("asin", "canon_asin", "movielens_id")):
    if not row["movielens_id"].strip():
      continue
    movie = str(_integer(mapping_path, line, "movielens_id", row["movielens_id"]))
    if movie not in movielens.titles:
      skipped["mapped asins of movies not in movies.csv"] += 1
      continue
    for asin in (row["asin"].strip(), row["canon_asin"].strip()):
      if asin:
        asin_to_movie[asin] = movie
  review_paths = sorted([*directory.glob("*.json"), *directory.glob("*.json.gz")])
  if not review_paths:
    raise FileNotFoundError(f"{directory}: no Amazon review files (*.json or *.json.gz, JSON lines).")
  reviews: dict[str, list[str]] = collections.defaultdict(list)
  for path in review_paths:
    for number, record in io.json_lines(path):
      if not isinstance(record.get("asin"), str):
        raise io.DataFormatError(f"{path}:{number}: expected a JSON object with a string 'asin'.")
      movie = asin_to_movie.get(record["asin"])
      text = record.get("reviewText")
      if movie is None:
        skipped["reviews of asins without a MovieLens id"] += 1
      elif not isinstance(text, str) or not text.strip():
        skipped["reviews without reviewText"] += 1
      else:
        reviews[movie].append(text)
  for reason, count in skipped.items():
    logging.info("%s: skipped %d %s.", directory, count, reason)
  return _collect(reviews, movielens.titles, movielens.tags, movielens.genres, skipped)


# ---------------------------------------------------------------------------------------------------
# Any directory of TSV files.


def _entity_tsv_rows(path: epath.Path, num_fields: int) -> Iterable[tuple[int, list[str]]]:
  for number, line in io.row_lines(path):
    fields = line.split("\t", num_fields - 1)
    if len(fields) != num_fields or not fields[0].strip():
      raise io.DataFormatError(f"{path}:{number}: expected {num_fields} tab-separated fields with a non-empty "
                               f"entity id: {line[:100]!r}")
    yield number, [fields[0].strip(), *fields[1:]]


def read_review_tsv(directory: epath.PathLike) -> RawReviews:
  """Reads a directory of review TSV files.

  Layout (UTF-8, optionally gzipped):
    reviews.tsv    entity_id<TAB>review text           (required)
    entities.tsv   entity_id<TAB>title                  (optional; titles are removed from reviews)
    tags.tsv       entity_id<TAB>tag<TAB>votes          (optional)
    genres.tsv     entity_id<TAB>genre                  (optional)
  Label rows of entities without reviews are skipped and counted; duplicate ids
  in entities.tsv and malformed rows are errors.
  """
  directory = epath.Path(directory)
  if not directory.is_dir():
    raise FileNotFoundError(f"Review directory {directory} does not exist.")
  reviews_path = io.find_file(directory, "reviews.tsv")
  if reviews_path is None:
    raise FileNotFoundError(f"{directory}: no reviews.tsv (entity_id<TAB>text).")
  reviews: dict[str, list[str]] = collections.defaultdict(list)
  for _, (entity, text) in _entity_tsv_rows(reviews_path, 2):
    reviews[entity].append(text)
  skipped: collections.Counter = collections.Counter()
  titles: dict[str, str] = {}
  entities_path = io.find_file(directory, "entities.tsv")
  if entities_path is not None:
    for number, (entity, title) in _entity_tsv_rows(entities_path, 2):
      if entity in titles:
        raise io.DataFormatError(f"{entities_path}:{number}: duplicate entity id {entity!r}.")
      titles[entity] = title.strip()
    skipped["entities.tsv rows without reviews"] = sum(1 for e in titles if e not in reviews)
  tags: dict[str, dict[str, int]] = collections.defaultdict(dict)
  tags_path = io.find_file(directory, "tags.tsv")
  if tags_path is not None:
    for number, (entity, tag, votes) in _entity_tsv_rows(tags_path, 3):
      tag = tag.strip().lower()
      if not tag:
        raise io.DataFormatError(f"{tags_path}:{number}: empty tag.")
      if not votes.strip().isdigit() or int(votes) < 1:
        raise io.DataFormatError(f"{tags_path}:{number}: votes {votes!r} is not a positive integer.")
      if entity not in reviews:
        skipped["tags.tsv rows of entities without reviews"] += 1
      else:
        tags[entity][tag] = tags[entity].get(tag, 0) + int(votes)
  genres: dict[str, list[str]] = collections.defaultdict(list)
  genres_path = io.find_file(directory, "genres.tsv")
  if genres_path is not None:
    for number, (entity, genre) in _entity_tsv_rows(genres_path, 2):
      if not genre.strip():
        raise io.DataFormatError(f"{genres_path}:{number}: empty genre.")
      if entity not in reviews:
        skipped["genres.tsv rows of entities without reviews"] += 1
      elif genre.strip() not in genres[entity]:
        genres[entity].append(genre.strip())
  skipped = collections.Counter({reason: count for reason, count in skipped.items() if count})
  for reason, count in skipped.items():
    logging.warning("%s: skipped %d %s.", directory, count, reason)
  return _collect(reviews, titles, tags, genres, skipped)


# ---------------------------------------------------------------------------------------------------
# Preprocessing.


def strip_markup(text: str) -> str:
  """Removes HTML tags (line breaks become spaces), unescapes entities, collapses whitespace."""
  text = _LINE_BREAK_TAG.sub(" ", text)
  text = _TAG.sub("", text)
  return _SPACE.sub(" ", html.unescape(text)).strip()


def split_sentences(text: str) -> list[str]:
  """Splits text into sentences with a regular expression, keeping common abbreviations intact."""
  text = _SPACE.sub(" ", text).strip()
  sentences, start = [], 0
  for match in _BOUNDARY.finditer(text):
    words_before = text[start:match.start() + 1].split()
    last_word = words_before[-1].rstrip(".").lower() if words_before else ""
    # "Mr. Smith", "J. R. R. Tolkien": a period after an abbreviation or an initial.
    if text[match.start()] == "." and (last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha())):
      continue
    sentences.append(text[start:match.end()].strip())
    start = match.end()
  sentences.append(text[start:].strip())
  return [s for s in sentences if s]


def count_words(text: str) -> int:
  """Words of `text`: whitespace-separated runs, and each Han or kana character (scripts without spaces)."""
  return len(_WORD_SPAN.findall(text))


def pack_sentences(sentences: Sequence[str], max_words: int) -> list[str]:
  """Merges consecutive sentences into paragraphs of at most `max_words` words (`count_words`).

  A sentence longer than `max_words` is cut into pieces of `max_words` words, so
  every paragraph fits a BERT input of about 1.3 * max_words word pieces.
  """
  paragraphs: list[str] = []
  current: list[str] = []
  current_words = 0
  for sentence in sentences:
    spans = [match.span() for match in _WORD_SPAN.finditer(sentence)]
    if current and current_words + len(spans) > max_words:
      paragraphs.append(" ".join(current))
      current, current_words = [], 0
    while len(spans) > max_words:
      paragraphs.append(sentence[spans[0][0]:spans[max_words - 1][1]])
      spans = spans[max_words:]
    if spans:
      current.append(sentence[spans[0][0]:spans[-1][1]])
      current_words += len(spans)
  if current:
    paragraphs.append(" ".join(current))
  return paragraphs


def title_variants(title: str) -> list[str]:
  """Forms of a MovieLens title to remove from reviews, longest first.

  "Usual Suspects, The (1995)" -> ["The Usual Suspects", "Usual Suspects"];
  alternative titles in trailing parentheses ("Seven (a.k.a. Se7en) (1995)")
  are variants too.
  """
  title = _YEAR.sub("", title.strip())
  names = []
  while (match := _TRAILING_PARENTHESES.search(title)) and match.start() > 0:
    names.append(re.sub(r"^a\.k\.a\.\s*", "", match.group(1).strip()))
    title = title[:match.start()]
  names.insert(0, title)
  variants = []
  for name in names:
    name = name.strip()
    article = _TRAILING_ARTICLE.match(name)
    if article:
      bare, word = article.group(1).strip(), article.group(2)
      variants.append(f"{word}{bare}" if word.endswith("'") else f"{word} {bare}")
      variants.append(bare)
    elif name:
      variants.append(name)
  return sorted(dict.fromkeys(v for v in variants if _WORD.search(v)), key=lambda v: (-len(v), v))


def title_pattern(title: str) -> re.Pattern[str] | None:
  """A regex matching any variant of the title as whole words, None for an empty title.

  Matching ignores case, except for one-word variants of at most three letters
  ("It", "Up", "Her"), which must match as written so common words survive.
  """
  parts = []
  for variant in title_variants(title):
    body = r"\s+".join(re.escape(word) for word in variant.split())
    short = len(variant.split()) == 1 and len(variant) <= 3
    parts.append(body if short else f"(?i:{body})")
  if not parts:
    return None
  return re.compile(r"(?<!\w)(?:" + "|".join(parts) + r")(?!\w)")


def _split_entities(entity_ids: Sequence[str], seed: int) -> dict[str, str]:
  """A seeded 80/10/10 split of the entities into train / validation / test."""
  order = np.random.default_rng(seed).permutation(len(entity_ids))
  num_held_out = int(round(0.1 * len(entity_ids)))
  split = {}
  for rank, index in enumerate(order):
    split[entity_ids[index]] = ("validation" if rank < num_held_out else
                                "test" if rank < 2 * num_held_out else "train")
  return split


def preprocess(raw: RawReviews, options: PreprocessOptions) -> ReviewDataset:
  """Applies DOCENT's preprocessing (see the module docstring) to raw reviews."""
  dropped = collections.Counter(raw.skipped)
  rng = np.random.default_rng(options.seed)
  kept: dict[str, list[list[str]]] = {}
  title_mentions = 0
  for entity in raw.entity_ids:
    reviews = raw.reviews[entity]
    if options.max_reviews_per_entity is not None and len(reviews) > options.max_reviews_per_entity:
      chosen = np.sort(rng.choice(len(reviews), options.max_reviews_per_entity, replace=False))
      dropped["reviews over max_reviews_per_entity"] += len(reviews) - len(chosen)
      reviews = [reviews[i] for i in chosen]
    pattern = title_pattern(raw.titles.get(entity, "")) if options.remove_titles else None
    paragraphs_of_reviews = []
    for review in reviews:
      text = strip_markup(review) if options.strip_markup else _SPACE.sub(" ", review).strip()
      if not _WORD.search(text):
        dropped["reviews with no text after cleaning"] += 1
        continue
      if count_words(text) < options.min_review_words:
        dropped["reviews shorter than min_review_words"] += 1
        continue
      if pattern is not None:
        text, count = pattern.subn("", text)
        title_mentions += count
        text = _SPACE.sub(" ", text).strip()
      pieces = pack_sentences(split_sentences(text), options.max_words) if options.split_sentences else [text]
      pieces = [p for p in pieces if _WORD.search(p)]
      if not pieces:
        dropped["reviews with no text after title removal"] += 1
        continue
      paragraphs_of_reviews.append(pieces)
    if len(paragraphs_of_reviews) < options.min_reviews:
      if dropped["entities with fewer than min_reviews reviews"] < _NAMED_ENTITY_DROPS:
        logging.warning("Entity %s is dropped: %d of its %d reviews are left after cleaning, fewer than "
                        "min_reviews (%d).", entity, len(paragraphs_of_reviews), len(reviews), options.min_reviews)
      dropped["entities with fewer than min_reviews reviews"] += 1
      dropped["reviews of entities with fewer than min_reviews reviews"] += len(paragraphs_of_reviews)
      continue
    kept[entity] = paragraphs_of_reviews
  if not kept:
    raise ValueError(f"No entity has {options.min_reviews} reviews after preprocessing (dropped: {dict(dropped)}).")
  entity_ids = list(kept)
  sentences = []
  review_index = 0
  for entity_index, entity in enumerate(entity_ids):
    for pieces in kept[entity]:
      sentences.extend((entity_index, review_index, piece) for piece in pieces)
      review_index += 1
  if dropped["entities with fewer than min_reviews reviews"] > _NAMED_ENTITY_DROPS:
    logging.warning("%d entities are dropped in all for having fewer than %d reviews left.",
                    dropped["entities with fewer than min_reviews reviews"], options.min_reviews)
  dropped = {reason: count for reason, count in sorted(dropped.items()) if count}
  for reason, count in dropped.items():
    logging.info("Dropped %d %s.", count, reason)
  logging.info("Kept %d entities, %d reviews, %d sentences; removed %d title mentions.", len(entity_ids),
               review_index, len(sentences), title_mentions)
  return ReviewDataset(
      entity_ids=entity_ids,
      titles=[raw.titles.get(e, "") for e in entity_ids],
      entity_split=_split_entities(entity_ids, options.seed),
      num_reviews={e: len(kept[e]) for e in entity_ids},
      sentences=sentences,
      tags={e: raw.tags[e] for e in entity_ids if e in raw.tags},
      genres={e: raw.genres[e] for e in entity_ids if e in raw.genres},
      dropped=dropped)
