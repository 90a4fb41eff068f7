"""Tests of the universal-representation readers: analogies, NLI pairs, phrase relations, the PPDB sample, FAQ sets."""
import collections
import gzip
import itertools
import json
import pathlib
import sys

import pytest

from docent_jax.data import io
from docent_jax.data import wordnet
from docent_jax.data.universal import analogies
from docent_jax.data.universal import faq
from docent_jax.data.universal import nli
from docent_jax.data.universal import phrases
import io_fixtures

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import stackfaq_twins  # pylint: disable=g-import-not-at-top

# ---------------------------------------------------------------------------------------------------
# Tiny sources, also used by test_universal_builders.

ANALOGIES = (": capital-common-countries\nAthens Greece Baghdad Iraq\n\n"
             ": family\nboy girl he she\nhis her brother sister\n"
             ": gram8-plural\nbanana bananas mouse mice\n")
NLI_DEV = [
    {"premise": "A man sleeps.", "hypothesis": "A person rests.", "label": "entailment"},
    {"premise": "A dog runs.", "hypothesis": "The dog is old.", "label": "neutral"},
    {"premise": "Kids play.", "hypothesis": "Nobody plays.", "label": "contradiction"},
]
SNLI_TEST = [
    {"sentence1": "Two men talk.", "sentence2": "Men speak.", "gold_label": "entailment", "pairID": "1"},
    {"sentence1": "A cat sits.", "sentence2": "A cat stands.", "gold_label": "-", "pairID": "2"},
    {"sentence1": "A girl sings.", "sentence2": "A girl is silent.", "gold_label": "contradiction", "pairID": "3"},
]
# Equivalence 3 (one repeated), Entailment 4 (one reversed), Independent 3, Exclusion 1, OtherRelated 1.
PPDB_PACK = """\
[NN] ||| car ||| automobile ||| PPDB2.0Score=4.1 ||| 0-0 ||| Equivalence
[NP] ||| the car ||| the auto ||| PPDB2.0Score=3.9 ||| 0-0 1-1 ||| Equivalence
[NN] ||| big ||| large ||| PPDB2.0Score=3.5 ||| 0-0 ||| Equivalence
[NNS] ||| big ||| large ||| PPDB2.0Score=3.5 ||| 0-0 ||| Equivalence
[NN] ||| dog ||| animal ||| PPDB2.0Score=3.0 ||| 0-0 ||| ForwardEntailment
[NN] ||| animal ||| cat ||| PPDB2.0Score=3.0 ||| 0-0 ||| ReverseEntailment
[NN] ||| rose ||| flower ||| PPDB2.0Score=2.9 ||| 0-0 ||| ForwardEntailment
[VP] ||| run fast ||| move ||| PPDB2.0Score=2.5 ||| 0-0 ||| ForwardEntailment
[NN] ||| hot ||| cold ||| PPDB2.0Score=1.0 ||| 0-0 ||| Exclusion
[NN] ||| house ||| roof ||| PPDB2.0Score=1.1 ||| 0-0 ||| OtherRelated
[NN] ||| table ||| river ||| PPDB2.0Score=0.5 ||| 0-0 ||| Independent
[NP] ||| a song ||| the tax ||| PPDB2.0Score=0.4 ||| 0-0 1-1 ||| Independent
[VP] ||| sing ||| pay ||| PPDB2.0Score=0.3 ||| 0-0 ||| Independent
"""
PPDB_SAMPLE = "4.0\t[NP]\tthis video\tthe movie\t3.0,4.0,4.0,4.0,5.0\n2.2\t[NN]\teditor\thead\t1.0,1.0,2.0,3.0,4.0\n"
FAQ_TSV = ("faq_id\tquestion\tanswer\nf1\tHow do I reset my password?\tUse the reset link.\n"
           "f2\tHow do I delete my account?\t\n")
QUERIES = [f"q{i}\tquery number {i}\t{'f1' if i % 2 else 'f2'}" for i in range(20)]
STACKFAQ_XML = """<root>
<qapair>
<rephr>
  How can I cross out   text?
</rephr>
<rephr>
*
</rephr>
<rephr>
Writing &amp;lt;s&amp;gt; text &amp;amp; more
</rephr>
<question>
Strikethrough with Markdown
</question>
<answer>
   Use ~~tildes~~.
</answer>
<answer>
   Or the &lt;del&gt; tag.
</answer>
</qapair>
<qapair>
<rephr>
</rephr>
<rephr>
Deleting my account.
</rephr>
<question>
How do I delete my account?
</question>
<answer>
Go to settings.
</answer>
</qapair>
</root>
"""
# A WordNet database in the format of the data.* files: (offset, lemmas, pointers (symbol, offset, pos)).
TINY_WORDNET = {
    "noun": [
        ("00000001", ["dog", "domestic_dog"], [("@", "00000002", "n")]),
        ("00000002", ["canine", "canid"], [("~", "00000001", "n")]),
        ("00000003", ["puppy"], [("@", "00000001", "n")]),
        ("00000004", ["car", "auto"], [("@", "00000005", "n")]),
        ("00000005", ["vehicle"], []),
        ("00000006", ["rock", "stone"], []),
        # 'ship' is a kind of vessel and, in another sense, a boat: (ship, boat) is in two relations.
        ("00000008", ["ship"], [("@", "00000009", "n")]),
        ("00000009", ["vessel", "boat"], []),
        ("00000010", ["boat", "ship"], []),
        *((f"000001{i:02d}", [word], []) for i, word in enumerate(["tree", "cloud", "piano", "river", "lamp"])),
    ],
    "verb": [("00000020", ["run", "sprint"], []), ("00000021", ["eat"], []), ("00000022", ["sleep"], [])],
    "adj": [("00000030", ["big", "large(a)"], []), ("00000031", ["red"], []), ("00000032", ["happy"], [])],
    "adv": [("00000040", ["quickly", "rapidly"], []), ("00000041", ["slowly"], []), ("00000042", ["often"], [])],
}
TINY_EQUIVALENT = {("dog", "domestic dog"), ("canine", "canid"), ("car", "auto"), ("rock", "stone"),
                   ("vessel", "boat"), ("run", "sprint"), ("big", "large"), ("quickly", "rapidly")}
TINY_ENTAILING = {("dog", "canine"), ("dog", "canid"), ("domestic dog", "canine"), ("domestic dog", "canid"),
                  ("puppy", "dog"), ("puppy", "domestic dog"), ("car", "vehicle"), ("auto", "vehicle"),
                  ("ship", "vessel")}


def write(path: pathlib.Path, text: str) -> pathlib.Path:
  """Writes UTF-8 text, gzipped when the name ends in .gz."""
  path.parent.mkdir(parents=True, exist_ok=True)
  data = text.encode("utf-8")
  path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
  return path


def json_lines(records: list[dict]) -> str:
  return "".join(json.dumps(record) + "\n" for record in records)


def write_nli(directory: pathlib.Path) -> pathlib.Path:
  """dev.jsonl (plain records) and snli_1.0_test.jsonl.gz (original SNLI records, one without gold label)."""
  write(directory / "dev.jsonl", json_lines(NLI_DEV))
  write(directory / "snli_1.0_test.jsonl.gz", json_lines(SNLI_TEST))
  write(directory / "README.txt", "Not a split.\n")
  return directory


def write_faq_tsv(directory: pathlib.Path, queries: list[str] = QUERIES) -> pathlib.Path:
  write(directory / faq.FAQ_FILE, FAQ_TSV)
  write(directory / faq.QUERY_FILE, "".join(line + "\n" for line in queries))
  return directory


def write_wordnet(directory: pathlib.Path) -> pathlib.Path:
  """`TINY_WORDNET` as data.noun, data.verb, data.adj and data.adv, each after a licence header line."""
  for pos, synsets in TINY_WORDNET.items():
    lines = ["  1 This software and database is being provided to you, the LICENSEE, by Princeton University"]
    for offset, lemmas, pointers in synsets:
      words = " ".join(f"{lemma} 0" for lemma in lemmas)
      links = " ".join(f"{symbol} {target} {target_pos} 0000" for symbol, target, target_pos in pointers)
      lines.append(f"{offset} 05 n {len(lemmas):02x} {words} {len(pointers):03d} {links} | a gloss")
    write(directory / f"data.{pos}", "\n".join(lines) + "\n")
  return directory


# ---------------------------------------------------------------------------------------------------
# Analogies.


def test_analogy_file_reads_sections_items_and_kinds(tmp_path):
  questions = analogies.read_analogies(write(tmp_path / "questions.txt", ANALOGIES + ": airlines\nA B_C D E_F_G\n"))
  assert [q.section for q in questions] == ["capital-common-countries", "family", "family", "gram8-plural",
                                            "airlines"]
  assert questions[0].items == ("Athens", "Greece", "Baghdad", "Iraq")
  assert questions[-1].items == ("A", "B C", "D", "E F G")
  assert [q.semantic for q in questions] == [True, True, True, False, True]


@pytest.mark.parametrize("text, line, message", [
    ("Athens Greece Baghdad Iraq\n", 1, "before the first section header"),
    (": family\nboy girl he\n", 2, "expected 4 items"),
    (": family\n\nboy girl he she man\n", 3, "expected 4 items"),
    (":  \nboy girl he she\n", 1, "without a name"),
])
def test_analogy_format_errors_name_file_and_line(tmp_path, text, line, message):
  path = write(tmp_path / "questions.txt", text)
  with pytest.raises(io.DataFormatError, match=rf"questions.txt:{line}: .*{message}"):
    analogies.read_analogies(path)


def _in_their_frames(words: analogies.AnalogyQuestion, version: analogies.AnalogyQuestion, level: str) -> bool:
  """Whether a and b of `version` are the level's first frame filled with their words, and c and d its second."""
  template = analogies.TEMPLATES[words.section]
  first, second = getattr(template, level)
  return version.items == (*(first.format(template.slot(word)) for word in words.items[:2]),
                           *(second.format(template.slot(word)) for word in words.items[2:]))


def test_phrase_and_sentence_versions_put_each_pair_in_its_own_frame(tmp_path):
  words = analogies.read_analogies(write(tmp_path / "questions.txt", ANALOGIES))
  aligned = analogies.phrase_and_sentence_versions(words)
  assert aligned.words == words
  assert [q.items for q in aligned.phrases] == [
      ("a flight to Athens", "a flight to Greece", "a postcard from Baghdad", "a postcard from Iraq"),
      ("a photo of the boy", "a photo of the girl", "a letter from him", "a letter from her"),
      ("a photo of his family", "a photo of her family", "a letter from the brother", "a letter from the sister"),
      ("a story about the banana", "a story about the bananas", "a picture of the mouse", "a picture of the mice")]
  assert aligned.sentences[0].items[0] == "She flew to Athens last spring."
  for word, phrase, sentence in zip(aligned.words, aligned.phrases, aligned.sentences):
    assert (phrase.section, phrase.semantic) == (sentence.section, sentence.semantic) == (word.section, word.semantic)
    assert _in_their_frames(word, phrase, "phrase") and _in_their_frames(word, sentence, "sentence")


def test_phrase_versions_need_a_template(tmp_path):
  questions = analogies.read_analogies(write(tmp_path / "questions.txt", ": airlines\nA B C D\n"))
  with pytest.raises(ValueError, match=r"No phrase and sentence templates for the sections \['airlines'\]"):
    analogies.phrase_and_sentence_versions(questions)


def test_real_analogy_files(shared_data_dir):
  words = analogies.read_analogies(shared_data_dir / "analogy" / "questions-words.txt")
  assert len(words) == 19_544
  sections = list(dict.fromkeys(q.section for q in words))
  assert sections == list(analogies.TEMPLATES)
  assert sum(q.semantic for q in words) == 8_869  # The first five sections.
  assert {q.section for q in words if q.semantic} == set(sections[:5])
  phrase_set = analogies.read_analogies(shared_data_dir / "analogy" / "questions-phrases.txt")
  assert len(phrase_set) == 3_218 and len({q.section for q in phrase_set}) == 5
  assert all(q.semantic for q in phrase_set) and phrase_set[0].items[1] == "Albuquerque Journal"
  aligned = analogies.phrase_and_sentence_versions(words)
  assert len(aligned.phrases) == len(aligned.sentences) == 19_544
  for word, phrase, sentence in zip(words, aligned.phrases, aligned.sentences):
    # Distinct words stay distinct phrases and sentences, so no question gives its answer away.
    assert len(set(phrase.items)) == len(set(sentence.items)) == len(set(word.items))
    assert _in_their_frames(word, sentence, "sentence")


# ---------------------------------------------------------------------------------------------------
# NLI.


def test_nli_directory_splits_by_file_stem_and_skips_pairs_without_gold_label(tmp_path, caplog):
  directory = write_nli(tmp_path)
  with caplog.at_level("WARNING"):
    data = nli.read_nli_directory(directory)
  assert "skipped 1 pairs without a gold label" in caplog.text
  assert list(data.pairs) == ["dev", "snli_1_0_test"]
  assert data.pairs["dev"][0] == nli.NliPair("A man sleeps.", "A person rests.", 0)
  assert [p.label for p in data.pairs["dev"]] == [0, 1, 2]
  assert data.pairs["snli_1_0_test"] == [nli.NliPair("Two men talk.", "Men speak.", 0),
                                         nli.NliPair("A girl sings.", "A girl is silent.", 2)]
  assert data.counts == {"dev pairs": 3, "dev skipped without gold label": 0, "snli_1_0_test pairs": 2,
                         "snli_1_0_test skipped without gold label": 1}
  assert list(nli.read_nli_directory(directory, prefix="snli_1.0_").pairs) == ["dev", "test"]
  resaved = io_fixtures.resaved_copy(directory, tmp_path.parent / f"{tmp_path.name}_resaved", "\r\n")
  assert nli.read_nli_directory(resaved) == data
  write(directory / "train.jsonl", json_lines(SNLI_TEST[1:2]))
  with pytest.raises(io.DataFormatError, match="train.jsonl: no pairs with a gold label"):
    nli.read_nli_directory(directory)


@pytest.mark.parametrize("record, message", [
    ({"premise": "a", "hypothesis": "b", "label": "unknown"}, "label 'unknown' is not one of"),
    ({"premise": "a", "hypothesis": "b", "label": 0}, "label 0 is not one of"),
    ({"premise": "  ", "hypothesis": "b", "label": "neutral"}, "premise is missing or empty"),
    ({"premise": "a", "label": "neutral"}, "hypothesis is missing or empty"),
    ({"sentence1": "a", "sentence2": "b", "gold_label": "maybe"}, "gold_label 'maybe' is not one of"),
    ({"sentence1": "a", "gold_label": "neutral"}, "sentence2 is missing or empty"),
    ({"text": "a", "label": "neutral"}, "a record needs the keys"),
])
def test_nli_format_errors_name_file_and_line(tmp_path, record, message):
  path = write(tmp_path / "dev.jsonl", json_lines([NLI_DEV[0], record]))
  with pytest.raises(io.DataFormatError, match=rf"dev.jsonl:2: {message}"):
    nli.read_nli_file(path)


def test_nli_directory_needs_one_file_a_split(tmp_path):
  with pytest.raises(FileNotFoundError, match="no \\*.jsonl or \\*.jsonl.gz files"):
    nli.nli_files(tmp_path)
  write(tmp_path / "dev.jsonl", json_lines(NLI_DEV))
  write(tmp_path / "dev.jsonl.gz", json_lines(NLI_DEV))
  with pytest.raises(io.DataFormatError, match="both dev.jsonl and dev.jsonl.gz exist"):
    nli.nli_files(tmp_path)
  (tmp_path / "dev.jsonl.gz").unlink()
  write(tmp_path / "d-ev.jsonl", json_lines(NLI_DEV))
  write(tmp_path / "d_ev.jsonl", json_lines(NLI_DEV))
  with pytest.raises(io.DataFormatError, match="d-ev.jsonl and d_ev.jsonl are both split 'd_ev'"):
    nli.nli_files(tmp_path)


def test_nli_reads_a_gs_directory(gcs_bucket):
  bucket, opened = gcs_bucket
  write_nli(bucket / "nli")
  data = nli.read_nli_directory("gs://bucket/nli")
  assert [len(data.pairs[split]) for split in ("dev", "snli_1_0_test")] == [3, 2]
  assert sorted(opened) == ["gs://bucket/nli/dev.jsonl", "gs://bucket/nli/snli_1.0_test.jsonl.gz"]


def test_real_nli_dev_sets(shared_data_dir):
  snli = nli.read_nli_directory(shared_data_dir / "nli" / "snli")
  mnli = nli.read_nli_directory(shared_data_dir / "nli" / "mnli")
  assert len(snli.pairs["dev"]) == 9_842 and len(mnli.pairs["dev_matched"]) == 9_815
  assert collections.Counter(p.label for p in snli.pairs["dev"]) == {0: 3_329, 1: 3_235, 2: 3_278}


# ---------------------------------------------------------------------------------------------------
# Phrase relations.


def test_ppdb_pack_maps_drops_and_balances_labels(tmp_path, caplog):
  path = write(tmp_path / "ppdb-2.0-s-phrasal.gz", PPDB_PACK)
  with caplog.at_level("WARNING"):
    relations = phrases.read_ppdb_pack(path, seed=0)
  assert "'Exclusion pairs dropped': 1" in caplog.text and "'OtherRelated pairs dropped': 1" in caplog.text
  assert relations.counts == {
      "Exclusion pairs dropped": 1, "OtherRelated pairs dropped": 1, "repeated pairs dropped": 1,
      "Equivalence pairs read": 3, "Equivalence pairs downsampled away": 0,
      "Entailment pairs read": 4, "Entailment pairs downsampled away": 1,
      "Independent pairs read": 3, "Independent pairs downsampled away": 0}
  labels = [pair.label for pair in relations.pairs]
  assert labels == [0, 0, 0, 1, 1, 1, 2, 2, 2]
  by_relation = collections.defaultdict(set)
  for pair in relations.pairs:
    by_relation[phrases.RELATIONS[pair.label]].add((pair.phrase1, pair.phrase2))
  assert by_relation["Equivalence"] == {("car", "automobile"), ("the car", "the auto"), ("big", "large")}
  # ReverseEntailment turned around: the entailing phrase first.
  assert by_relation["Entailment"] < {("dog", "animal"), ("cat", "animal"), ("rose", "flower"), ("run fast", "move")}
  assert by_relation["Independent"] == {("table", "river"), ("a song", "the tax"), ("sing", "pay")}
  assert phrases.read_ppdb_pack(path, seed=0) == relations
  draws = {tuple(phrases.read_ppdb_pack(path, seed=seed).pairs) for seed in range(10)}
  assert len(draws) > 1
  capped = phrases.read_ppdb_pack(path, seed=0, max_pairs_per_class=1)
  assert [pair.label for pair in capped.pairs] == [0, 1, 2]


@pytest.mark.parametrize("line, message", [
    ("[NN] ||| car ||| auto ||| 0-0 ||| Equivalence", "expected 6 fields"),
    ("[NN] ||| car ||| auto ||| f ||| 0-0 ||| Synonym", "entailment label 'Synonym' is not one of"),
    ("[NN] ||| car |||  ||| f ||| 0-0 ||| Equivalence", "an empty phrase or paraphrase"),
])
def test_ppdb_pack_format_errors_name_file_and_line(tmp_path, line, message):
  path = write(tmp_path / "pack.txt", PPDB_PACK + line + "\n")
  with pytest.raises(io.DataFormatError, match=rf"pack.txt:14: {message}"):
    phrases.read_ppdb_pack(path)


def test_ppdb_pack_needs_every_relation(tmp_path):
  path = write(tmp_path / "pack.txt", PPDB_PACK.replace("||| Independent", "||| Exclusion"))
  with pytest.raises(io.DataFormatError, match="pack.txt: no Independent pairs"):
    phrases.read_ppdb_pack(path)


def test_wordnet_relations_of_a_tiny_database(tmp_path):
  directory = write_wordnet(tmp_path)
  relations = phrases.wordnet_relations(directory, seed=0)
  by_relation = collections.defaultdict(list)
  for pair in relations.pairs:
    by_relation[phrases.RELATIONS[pair.label]].append((pair.phrase1, pair.phrase2))
  assert [len(by_relation[relation]) for relation in phrases.RELATIONS] == [8, 8, 8]
  assert set(by_relation["Equivalence"]) == TINY_EQUIVALENT
  assert set(by_relation["Entailment"]) < TINY_ENTAILING
  assert relations.counts["pairs both Equivalence and Entailment dropped"] == 1  # (ship, boat).
  assert relations.counts["Entailment pairs downsampled away"] == 1
  vocabulary = {pos: {wordnet.lemma_text(lemma) for _, lemmas, _ in synsets for lemma in lemmas}
                for pos, synsets in TINY_WORDNET.items()}
  related = {frozenset(pair) for pair in TINY_EQUIVALENT | TINY_ENTAILING | {("ship", "boat")}}
  for pair in by_relation["Independent"]:
    assert frozenset(pair) not in related and len(set(pair)) == 2
    assert any(set(pair) <= words for words in vocabulary.values())
  assert len({frozenset(pair) for pair in by_relation["Independent"]}) == 8
  assert phrases.wordnet_relations(directory, seed=0) == relations
  assert phrases.wordnet_relations(directory, seed=1) != relations


@pytest.fixture(scope="module")
def wordnet_pairs() -> phrases.PhraseRelations:
  return phrases.wordnet_relations(max_pairs_per_class=3_000, seed=0)


def test_wordnet_relations_are_balanced_and_true(wordnet_pairs):
  directory = wordnet.wordnet_directory()
  senses = collections.defaultdict(set)
  hypernyms = collections.defaultdict(set)
  for pos in wordnet.POS_FILES:
    for offset, lemmas, pointers, _ in wordnet.parse_data_file(directory / f"data.{pos}"):
      for lemma in lemmas:
        senses[wordnet.lemma_text(lemma)].add((pos, offset))
      hypernyms[(pos, offset)] = {(pos, target) for symbol, target, _, _ in pointers if symbol == "@"}
  by_label = collections.defaultdict(list)
  for pair in wordnet_pairs.pairs:
    by_label[pair.label].append((pair.phrase1, pair.phrase2))
  assert [len(by_label[label]) for label in range(3)] == [3_000] * 3
  for first, second in by_label[0]:
    assert senses[first] & senses[second]
  for hyponym, hypernym in by_label[1]:
    assert any(target in senses[hypernym] for synset in senses[hyponym] for target in hypernyms[synset])
  for first, second in by_label[2]:
    assert not senses[first] & senses[second]
  assert any(" " in phrase for pair in wordnet_pairs.pairs for phrase in (pair.phrase1, pair.phrase2))
  assert wordnet_pairs.counts["Equivalence pairs read"] > 100_000 and wordnet_pairs.counts["Entailment pairs read"]


def test_split_pairs_is_seeded_and_disjoint(wordnet_pairs):
  splits = phrases.split_pairs(wordnet_pairs.pairs, seed=0)
  assert [len(splits[split]) for split in phrases.SPLIT_FRACTIONS] == [7_200, 900, 900]
  position = {pair: i for i, pair in enumerate(wordnet_pairs.pairs)}
  assert all(positions == sorted(positions) for positions in ([position[p] for p in s] for s in splits.values()))
  assert sorted(position[pair] for pair in itertools.chain(*splits.values())) == list(range(len(position)))
  assert phrases.split_pairs(wordnet_pairs.pairs, seed=0) == splits
  assert phrases.split_pairs(wordnet_pairs.pairs, seed=1)["test"] != splits["test"]
  with pytest.raises(ValueError, match="6 pairs are too few to split .*: test would be empty"):
    phrases.split_pairs(wordnet_pairs.pairs[:6], seed=0)


def test_ppdb_sample(tmp_path):
  rated = phrases.read_ppdb_sample(write(tmp_path / "ppdb-sample.tsv", PPDB_SAMPLE))
  assert rated == [phrases.RatedPair("this video", "the movie", 4.0, "NP", (3.0, 4.0, 4.0, 4.0, 5.0)),
                   phrases.RatedPair("editor", "head", 2.2, "NN", (1.0, 1.0, 2.0, 3.0, 4.0))]


@pytest.mark.parametrize("row, message", [
    ("4.0\t[NP]\tthis video\tthe movie", "expected 5 tab-separated fields"),
    ("high\t[NP]\ta\tb\t3.0", "'high' is not a rating from 1 to 5"),
    ("4.0\t[NP]\ta\tb\t3.0,,4.0", "'' is not a rating"),
    ("4.0\t[NP]\ta\tb\t3.0,9.0", "'9.0' is not a rating"),
    ("4.0\tNP\ta\tb\t3.0", "constituent 'NP' is not a label in brackets"),
    ("4.0\t[NP]\t \tb\t3.0", "an empty phrase"),
])
def test_ppdb_sample_format_errors_name_file_and_line(tmp_path, row, message):
  path = write(tmp_path / "ppdb-sample.tsv", PPDB_SAMPLE + row + "\n")
  with pytest.raises(io.DataFormatError, match=rf"ppdb-sample.tsv:3: {message}"):
    phrases.read_ppdb_sample(path)


def test_real_ppdb_sample(shared_data_dir):
  rated = phrases.read_ppdb_sample(shared_data_dir / "ppdb" / "ppdb-sample.tsv")
  assert len(rated) == 26_456
  assert rated[0] == phrases.RatedPair("this video", "the movie", 4.0, "NP", (3.0, 4.0, 4.0, 4.0, 5.0))


# ---------------------------------------------------------------------------------------------------
# FAQ retrieval.


def test_faq_tsv_seed_split_is_reproducible_and_disjoint(tmp_path):
  directory = write_faq_tsv(tmp_path)
  dataset = faq.read_faq_directory(directory, test_fraction=0.25, seed=3)
  assert dataset.items == [faq.FaqItem("f1", "How do I reset my password?", "Use the reset link."),
                           faq.FaqItem("f2", "How do I delete my account?", "")]
  assert dataset.counts == {"faq items": 2, "train queries": 15, "test queries": 5}
  train_ids = [q.id for q in dataset.queries["train"]]
  test_ids = [q.id for q in dataset.queries["test"]]
  assert not set(train_ids) & set(test_ids) and len(train_ids + test_ids) == 20
  assert train_ids == sorted(train_ids, key=lambda i: int(i[1:]))  # File order within a split.
  # Odd queries ask for f1 (index 0), even ones for f2 (index 1).
  queries = dataset.queries["train"] + dataset.queries["test"]
  assert all(q.faq_index == (0 if int(q.id[1:]) % 2 else 1) for q in queries)
  assert faq.read_faq_directory(directory, test_fraction=0.25, seed=3) == dataset
  other_seeds = {tuple(q.id for q in faq.read_faq_directory(directory, 0.25, seed).queries["test"])
                 for seed in range(4, 8)}
  assert other_seeds - {tuple(test_ids)}
  resaved = io_fixtures.resaved_copy(directory, tmp_path.parent / f"{tmp_path.name}_resaved", "\r")
  assert faq.read_faq_directory(resaved, test_fraction=0.25, seed=3) == dataset


def test_faq_tsv_split_column(tmp_path):
  queries = ["query_id\tquery\tfaq_id\tsplit", "a\tforgot my password\tf1\ttest", "b\tremove account\tf2\ttrain",
             "c\tclose my account\tf2\ttrain"]
  dataset = faq.read_faq_directory(write_faq_tsv(tmp_path, queries), seed=5)
  assert dataset.queries == {
      "train": [faq.FaqQuery("b", "remove account", 1), faq.FaqQuery("c", "close my account", 1)],
      "test": [faq.FaqQuery("a", "forgot my password", 0)]}


@pytest.mark.parametrize("name, text, location, message", [
    ("faq.tsv", "f1\tQ one\tA\nf1\tQ two\tA\n", "faq.tsv:2", "duplicate id 'f1' \\(first on line 1\\)"),
    ("faq.tsv", "f1\t \tA\n", "faq.tsv:1", "FAQ item 'f1' has an empty question"),
    ("faq.tsv", "f1\tQ one\n", "faq.tsv:1", "expected 3 tab-separated fields"),
    ("faq.tsv", "\tQ one\tA\n", "faq.tsv:1", "empty id"),
    ("queries.tsv", "q1\thello\tf1\nq1\thi\tf2\n", "queries.tsv:2", "duplicate id 'q1' \\(first on line 1\\)"),
    ("queries.tsv", "q1\thello\tf1\nq2\t\tf2\n", "queries.tsv:2", "query 'q2' is empty"),
    ("queries.tsv", "q1\thello\tf9\n", "queries.tsv:1", "query 'q1' asks for FAQ id 'f9', which .*faq.tsv does not"),
    ("queries.tsv", "q1\thello\tf1\tdev\n", "queries.tsv:1", "split 'dev' is not one of \\['train', 'test'\\]"),
    ("queries.tsv", "q1\thello\tf1\ttrain\nq2\thi\tf2\n", "queries.tsv:2", "expected 4 tab-separated fields"),
    ("queries.tsv", "q1\thello\tf1\ttrain\nq2\thi\tf2\ttrain\n", "queries.tsv", "no test queries"),
])
def test_faq_tsv_format_errors_name_file_and_line(tmp_path, name, text, location, message):
  write_faq_tsv(tmp_path)
  write(tmp_path / name, text)
  with pytest.raises(io.DataFormatError, match=rf"{location}: {message}"):
    faq.read_faq_directory(tmp_path)


def test_stackfaq_xml(tmp_path, caplog):
  path = write(tmp_path / f"{faq.STACKFAQ_FILE}.gz", STACKFAQ_XML)
  with caplog.at_level("WARNING"):
    dataset = faq.read_faq_directory(tmp_path, test_fraction=0.5, seed=0)
  assert "1 empty <rephr> skipped" in caplog.text
  assert dataset.items == [
      faq.FaqItem("1", "Strikethrough with Markdown", "Use ~~tildes~~. Or the <del> tag."),
      faq.FaqItem("2", "How do I delete my account?", "Go to settings.")]
  queries = sorted(dataset.queries["train"] + dataset.queries["test"], key=lambda q: q.id)
  assert queries == [faq.FaqQuery("1-1", "How can I cross out text?", 0),
                     faq.FaqQuery("1-3", "Writing <s> text & more", 0),
                     faq.FaqQuery("2-2", "Deleting my account.", 1)]
  assert dataset.counts == {"faq items": 2, "train queries": 1, "test queries": 2, "empty <rephr> skipped": 1}
  assert faq.read_stackfaq_xml(path, test_fraction=0.5, seed=0) == dataset


@pytest.mark.parametrize("old, new, line, message", [
    ("<answer>\nGo to settings.\n</answer>", "<answer>\nGo to settings.\n</answr>", 33, "malformed XML"),
    ("<question>\nHow do I delete my account?\n</question>", "", 22, "a <qapair> needs one non-empty <question>"),
    ("<answer>\nGo to settings.\n</answer>", "<notes>x</notes>", 31, "<notes> in <qapair>"),
    ("<answer>\nGo to settings.\n</answer>", "", 22, "a <qapair> without an <answer>"),
])
def test_stackfaq_format_errors_name_file_and_line(tmp_path, old, new, line, message):
  path = write(tmp_path / faq.STACKFAQ_FILE, STACKFAQ_XML.replace(old, new))
  with pytest.raises(io.DataFormatError, match=rf"{faq.STACKFAQ_FILE}:{line}: {message}"):
    faq.read_stackfaq_xml(path)


def test_faq_directory_needs_one_layout(tmp_path):
  with pytest.raises(FileNotFoundError, match="found none"):
    faq.read_faq_directory(tmp_path)
  write(tmp_path / faq.FAQ_FILE, FAQ_TSV)
  with pytest.raises(FileNotFoundError, match=r"found \['faq.tsv'\]"):
    faq.read_faq_directory(tmp_path)
  with pytest.raises(ValueError, match="test_fraction must lie between 0 and 1"):
    faq.read_faq_directory(write_faq_tsv(tmp_path), test_fraction=1.0)


def test_real_stackfaq(shared_data_dir):
  dataset = faq.read_faq_directory(shared_data_dir / "faq" / "stackfaq")
  assert len(dataset.items) == 125
  assert len(dataset.queries["train"]) + len(dataset.queries["test"]) == 1_249
  assert dataset.counts["empty <rephr> skipped"] == 1
  assert dataset.items[0].question == "Strikethrough with GitHub Markdown"
  assert all(q.text != faq.STACKFAQ_SEPARATOR for q in dataset.queries["train"] + dataset.queries["test"])


def test_stackfaq_twins_make_one_item_per_paraphrase_group_with_the_threads_answer():
  thread = faq.StackFaqThread("How do I X?", "Do Y.", [[(1, "x how"), (2, "doing x")], [(4, "X, how?"), (5, "x?")],
                                                      [(7, "lonely")]])
  items, queries = stackfaq_twins.twin_rows([thread])
  assert items == [("1a", "How do I X?", "Do Y."), ("1b", "X, how?", "Do Y.")]  # A group of one asks nothing.
  assert queries == [("1-1", "x how", "1a"), ("1-2", "doing x", "1a"), ("1-5", "x?", "1b")]
