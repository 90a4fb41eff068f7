"""Analogy evaluation: candidates against a naive per-question reference, the real vocabulary they come from (a
tiny WordPiece vocabulary, and MiniLM's), their file and its protocol digest, answering on hand-made 2-D vectors,
the frames and cross-level mapping of candidates, and accuracies, PPR and PNR computed by hand."""
import json
import re

from etils import epath
import numpy as np
import pytest
import transformers

from docent_jax.data import io
from docent_jax.data.universal import analogies as analogy_sets
from docent_jax.data.universal import analogy_candidates
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.evaluation import analogies
from docent_jax.modules import pretrained

NUM_ITEMS, DIM, NUM_QUESTIONS = 40, 8, 30


def _question(section, items):
  return analogy_sets.AnalogyQuestion(section, tuple(items), semantic=not section.startswith("gram"))


@pytest.fixture(scope="module")
def reference():
  """(questions, vocabulary, vectors): random questions over random vectors; a third of them have an item whose
  vector is exactly b - a + c, so that their answer ranks first, while the others' answers mostly rank low."""
  rng = np.random.default_rng(0)
  vocabulary = [f"w{i}" for i in range(NUM_ITEMS)]
  vectors = rng.normal(size=(NUM_ITEMS, DIM))
  unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
  questions = []
  for index in range(NUM_QUESTIONS):
    a, b, c, d = rng.choice(NUM_ITEMS, 4, replace=False)
    section = "capital-world" if index % 2 else "gram8-plural"
    if index % 3 == 0:
      vocabulary.append(f"exact{index}")
      vectors = np.concatenate([vectors, [unit[b] - unit[a] + unit[c]]])
      questions.append(_question(section, (vocabulary[a], vocabulary[b], vocabulary[c], vocabulary[-1])))
    else:
      questions.append(_question(section, (vocabulary[a], vocabulary[b], vocabulary[c], vocabulary[d])))
  return questions, vocabulary, vectors


def _naive_candidates(questions, vocabulary, vectors, num_candidates):
  """Each question on its own, straight from the definition: a full sort by (-cosine, row)."""
  cosine = lambda u, v: u @ v / np.linalg.norm(u) / np.linalg.norm(v)
  unit = {item: vector / np.linalg.norm(vector) for item, vector in zip(vocabulary, vectors)}
  candidates = []
  for question in questions:
    a, b, c, d = question.items
    query = unit[b] - unit[a] + unit[c]
    ranked = sorted((-cosine(query, unit[item]), row, item) for row, item in enumerate(vocabulary)
                    if item not in (a, b, c))
    top = [item for _, _, item in ranked[:num_candidates]]
    if d not in top:
      top[-1] = d
    candidates.append(tuple(top))
  return candidates


def test_candidates_are_the_reference_top_with_the_answer(reference):
  questions, vocabulary, vectors = reference
  candidates = analogy_candidates.closed_vocabulary_candidates(questions, vocabulary, vectors)
  assert candidates == _naive_candidates(questions, vocabulary, vectors, analogy_candidates.NUM_CANDIDATES)
  for question, question_candidates in zip(questions, candidates):
    assert len(question_candidates) == analogy_candidates.NUM_CANDIDATES
    assert question_candidates.count(question.items[3]) == 1
    assert not set(question.items[:3]) & set(question_candidates)
  # Both cases occur: answers the reference ranks first, and answers put last in place of the 5th.
  gold = analogies.analogy_texts(questions, candidates).gold_positions
  assert (gold[::3] == 0).all()
  assert (gold == analogy_candidates.NUM_CANDIDATES - 1).sum() >= NUM_QUESTIONS // 2


def test_candidates_do_not_depend_on_the_block_or_the_run(reference):
  questions, vocabulary, vectors = reference
  candidates = analogy_candidates.closed_vocabulary_candidates(questions, vocabulary, vectors, num_candidates=3)
  for block_size in (1, len(vocabulary) * 7, 10**9):
    assert analogy_candidates.closed_vocabulary_candidates(questions, vocabulary, vectors, num_candidates=3,
                                                  block_size=block_size) == candidates
  assert candidates == _naive_candidates(questions, vocabulary, vectors, 3)


def test_candidates_refuse_what_breaks_the_protocol(reference):
  questions, vocabulary, vectors = reference
  with pytest.raises(ValueError, match=r"1 question items are not in the vocabulary, e.g. \['Paris'\]"):
    analogy_candidates.closed_vocabulary_candidates([_question("capital-world", ("w0", "w1", "w2", "Paris"))], vocabulary,
                                           vectors)
  with pytest.raises(ValueError, match=r"answer among a, b and c, e.g. question 0"):
    analogy_candidates.closed_vocabulary_candidates([_question("capital-world", ("w0", "w1", "w2", "w1"))], vocabulary,
                                           vectors)
  with pytest.raises(ValueError, match=r"\(1 repeated\)"):
    analogy_candidates.closed_vocabulary_candidates(questions, ["w1", *vocabulary[1:]], vectors)
  with pytest.raises(ValueError, match=r"Cannot take 5 candidates from 7 items"):
    analogy_candidates.closed_vocabulary_candidates(questions[:1], vocabulary[:7], vectors[:7])


PROTOCOL = analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w0", "w1"])


def test_candidate_file_round_trips_and_refuses_other_questions(reference, tmp_path):
  questions, vocabulary, vectors = reference
  candidates = analogy_candidates.closed_vocabulary_candidates(questions, vocabulary, vectors)
  path = tmp_path / "made" / "candidates.json"
  analogy_candidates.write_candidates(path, questions, candidates, PROTOCOL)
  assert analogy_candidates.read_candidates(path, questions, PROTOCOL) == candidates
  for other_questions in (questions[:-1], [_question("family", question.items) for question in questions]):
    with pytest.raises(analogy_candidates.StaleCandidatesError,
                       match=rf"^{re.escape(str(path))} holds the candidates of other questions \(30 "):
      analogy_candidates.read_candidates(path, other_questions, PROTOCOL)
  path.write_text(json.dumps({"candidates": [list(c) for c in candidates]}))
  with pytest.raises(io.DataFormatError, match=rf"^{re.escape(str(path))}: not a file of analogy candidates"):
    analogy_candidates.read_candidates(path, questions, PROTOCOL)


def test_candidate_file_of_another_protocol_is_stale(reference, tmp_path):
  questions, vocabulary, vectors = reference
  candidates = analogy_candidates.closed_vocabulary_candidates(questions, vocabulary, vectors)
  path = tmp_path / "candidates.json"
  analogy_candidates.write_candidates(path, questions, candidates, PROTOCOL)
  other = analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w0", "w1"], num_candidates=4)
  with pytest.raises(analogy_candidates.StaleCandidatesError, match=rf"made by another protocol \(digest {PROTOCOL}\)"):
    analogy_candidates.read_candidates(path, questions, other)
  # A file of the protocol before the digest was recorded (candidates from the question words only).
  path.write_text(json.dumps({"questions_digest": json.loads(path.read_text())["questions_digest"],
                              "num_questions": len(questions), "candidates": [list(c) for c in candidates]}))
  with pytest.raises(analogy_candidates.StaleCandidatesError, match=r"made by another protocol \(digest None\)"):
    analogy_candidates.read_candidates(path, questions, PROTOCOL)


def test_protocol_digest_covers_what_makes_candidates():
  digests = {analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w0", "w1"]),
             analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w0", "w1"], num_candidates=4),
             analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w0", "w2"]),
             analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w1", "w0"]),
             analogy_candidates.candidate_protocol_digest("other", "tokenizer", ["w0", "w1"]),
             analogy_candidates.candidate_protocol_digest("reference", "other", ["w0", "w1"])}
  assert len(digests) == 6
  assert analogy_candidates.candidate_protocol_digest("reference", "tokenizer", ["w0", "w1"]) == PROTOCOL


def test_candidate_file_on_gs(reference, gcs_bucket):
  questions, vocabulary, vectors = reference
  _, opened = gcs_bucket
  candidates = analogy_candidates.closed_vocabulary_candidates(questions, vocabulary, vectors)
  analogy_candidates.write_candidates("gs://bucket/analogies/candidates.json", questions, candidates, PROTOCOL)
  assert analogy_candidates.read_candidates("gs://bucket/analogies/candidates.json", questions, PROTOCOL) == candidates
  assert opened == ["gs://bucket/analogies/candidates.json"] * 2


# A WordPiece vocabulary (uncased, as MiniLM's): its whole words are the entries of letters only, not the special
# and unused tokens, punctuation, numbers, '##' pieces or other scripts' characters.
TINY_VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "!", "7", "##s", "##nard", "\u65e5",
                   "paris", "france", "rome", "italy", "spain", "ox", "california", "capital", "the"]
TINY_WHOLE_WORDS = TINY_VOCABULARY[11:]
TINY_QUESTIONS = [_question("capital-common-countries", ("Paris", "France", "Rome", "Italy")),
                  # 'Oxnard' is two pieces (ox ##nard), 'Boston Globe' unknown words: rows of their own.
                  _question("city-in-state", ("Paris", "France", "Oxnard", "California")),
                  _question("capital-world", ("Rome", "Italy", "Paris", "Boston Globe"))]


@pytest.fixture
def tiny_tokenizer(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(TINY_VOCABULARY) + "\n")
  return transformers.BertTokenizer(str(path))


def test_whole_words_of_a_wordpiece_vocabulary(tiny_tokenizer):
  assert analogy_candidates.whole_words(tiny_tokenizer) == {TINY_VOCABULARY.index(word): word for word in TINY_WHOLE_WORDS}


def test_candidate_vocabulary_is_the_whole_words_and_the_other_question_items(tiny_tokenizer):
  # Whole words in id order, written as the questions write them; then the items that are no whole word.
  assert analogy_candidates.candidate_vocabulary(TINY_QUESTIONS, tiny_tokenizer) == [
      "Paris", "France", "Rome", "Italy", "spain", "ox", "California", "capital", "the", "Boston Globe", "Oxnard"]


def test_candidates_come_from_words_outside_the_questions(tiny_tokenizer):
  """A static reference over the tiny vocabulary (each word piece's row made by hand) ranks 'spain', in no
  question, first for France - Paris + Rome, and the answer 'Italy' last of all: it takes the 5th place."""
  rows = {"paris": (1, 0, 0), "france": (1, 1, 0), "rome": (0, 0, 1), "spain": (-0.3, 0.7, 1), "capital": (0, 1, 1),
          "the": (0, 1, 0.5), "ox": (0.2, 0.5, 0.9), "##nard": (0, 0.2, 1), "california": (1, 0, 0.3),
          "italy": (-1, -1, -1)}
  table = np.random.default_rng(0).normal(size=(len(TINY_VOCABULARY), 3))
  for piece, row in rows.items():
    table[TINY_VOCABULARY.index(piece)] = row
  vocabulary = analogy_candidates.candidate_vocabulary(TINY_QUESTIONS, tiny_tokenizer)
  vectors = pretrained.mean_input_word_pieces(tiny_tokenizer, table, vocabulary)
  np.testing.assert_allclose(vectors[vocabulary.index("Oxnard")], (0.1, 0.35, 0.95))
  candidates = analogy_candidates.closed_vocabulary_candidates(TINY_QUESTIONS, vocabulary, vectors)
  assert candidates == _naive_candidates(TINY_QUESTIONS, vocabulary, vectors, analogy_candidates.NUM_CANDIDATES)
  assert candidates[0][0] == "spain" and candidates[0][-1] == "Italy"
  # Cosines with France - Paris + Rome: spain 1.00, capital 0.96, Oxnard 0.91, ox 0.90, the 0.86, ...
  assert candidates[0] == ("spain", "capital", "Oxnard", "ox", "Italy")
  question_items = {item for question in TINY_QUESTIONS for item in question.items}
  assert all(set(question_candidates) - question_items for question_candidates in candidates)


WORD_QUESTIONS = """\
: capital-common-countries
Athens Greece Paris France
Paris France Rome Italy
Rome Italy Athens Greece
: gram3-comparative
big bigger small smaller
small smaller cold colder
cold colder big bigger
"""
PHRASE_QUESTIONS = """\
: newspapers
Boston Boston_Globe Chicago Chicago_Tribune
Chicago Chicago_Tribune Denver Denver_Post
Denver Denver_Post Boston Boston_Globe
"""


def test_question_sets_remake_the_candidates_of_an_earlier_protocol(tmp_path):
  """MiniLM as the reference: a kept file of the earlier protocol (no protocol digest; candidates among the
  question words only) is made anew over MiniLM's whole words; a file of this protocol is read as it is."""
  (tmp_path / "analogy").mkdir()
  (tmp_path / universal_corpus.ANALOGY_FILES["words"]).write_text(WORD_QUESTIONS)
  (tmp_path / universal_corpus.ANALOGY_FILES["phrases"]).write_text(PHRASE_QUESTIONS)
  sources = universal_corpus.EvaluationSources(tasks={}, manual_dir=str(tmp_path),
                                               candidates_dir=epath.Path(tmp_path / "candidates"),
                                               reference="minilm-l6", tokenizer="minilm-l6")
  words = sources.word_analogies
  question_words = {item for question in words for item in question.items}
  earlier = [(question.items[3], *sorted(question_words - set(question.items))[:4]) for question in words]
  path = tmp_path / "candidates" / "words_minilm-l6.json"
  analogy_candidates.write_candidates(path, words, earlier, "unused")
  record = json.loads(path.read_text())
  del record["protocol_digest"]  # As files were written before they recorded their protocol.
  path.write_text(json.dumps(record))
  directories = (tuple(words), tuple(sources.phrase_analogies), sources.candidates_dir,
                 analogies.reference("minilm-l6", "minilm-l6"))

  analogy_candidates.question_sets.cache_clear()
  sets = analogy_candidates.question_sets(*directories)
  made = sets["word"].candidates
  assert made != earlier
  assert all(set(candidates) - question_words for candidates in made)  # Real words beyond the questions'.
  tokenizer = pretrained.load_tokenizer("minilm-l6")
  vocabulary = analogy_candidates.candidate_vocabulary(words, tokenizer)
  assert len(vocabulary) > 20_000
  protocol = analogy_candidates.candidate_protocol_digest("minilm-l6", "minilm-l6", vocabulary)
  assert analogy_candidates.read_candidates(path, words, protocol) == made
  assert [candidates[0] for candidates in sets["sentence"].candidates] == [
      analogy_sets.item_version(question.section, candidates[0], "sentence", analogy_candidates.ANSWER_POSITION)
      for question, candidates in zip(words, made)]
  phrase_items = {item for question in sets["phrase_set"].questions for item in question.items}
  assert all(set(candidates) - phrase_items for candidates in sets["phrase_set"].candidates)

  reordered = [candidates[::-1] for candidates in made]
  analogy_candidates.write_candidates(path, words, reordered, protocol)
  analogy_candidates.question_sets.cache_clear()
  assert analogy_candidates.question_sets(*directories)["word"].candidates == reordered
  analogy_candidates.question_sets.cache_clear()


# man : king :: woman : ? in 2-D. Only over unit vectors is b - a + c = (-2, 1), the direction of 'queen':
# unscaled, 'man' (3, 0) would make it (-4, 1), the direction of 'rival'; and 'prince', long, has the largest
# dot product with (-2, 1) but a cosine of only 1/sqrt(5). 'twin' is 'queen' again, under another name.
VECTORS_2D = {"man": (3.0, 0.0), "king": (0.0, 1.0), "woman": (-1.0, 0.0), "queen": (-4.0, 2.0),
              "rival": (-4.0, 1.0), "prince": (0.0, 50.0), "twin": (-4.0, 2.0), "nothing": (0.0, 0.0)}
ROYAL = ("man", "king", "woman")


@pytest.mark.parametrize("block_size", [1, analogy_candidates.BLOCK_SIZE])
def test_answers_on_2d_vectors(block_size):
  questions = [_question("family", (*ROYAL, answer)) for answer in ("queen", "rival", "queen", "queen", "nothing")]
  candidates = [("prince", "rival", "queen", "nothing"),
                ("prince", "rival", "queen", "nothing"),
                ("twin", "queen", "rival", "prince"),  # a tie goes to the earlier candidate
                ("queen", "twin", "rival", "prince"),
                # Cosines 1/sqrt(5), -2/sqrt(5), 0 and 1/sqrt(5): the zero vector scores 0, not a NaN argmax would pick.
                ("prince", "man", "nothing", "king")]
  texts = analogies.analogy_texts(questions, candidates)
  assert len(texts.texts) == len(set(texts.texts)) == len(VECTORS_2D)
  for question, question_candidates, rows in zip(questions, candidates, texts.candidate_rows):
    assert tuple(texts.texts[row] for row in rows) == question_candidates
  vectors = np.array([VECTORS_2D[text] for text in texts.texts])
  np.testing.assert_array_equal(analogies.solved(vectors, texts, block_size), [True, False, False, True, False])


def test_answers_need_the_answer_once_among_the_candidates():
  questions = [_question("family", (*ROYAL, "queen"))]
  for candidates in ([("prince", "rival")], [("queen", "prince", "queen")]):
    with pytest.raises(ValueError, match=r"1 questions do not have their answer exactly once"):
      analogies.analogy_texts(questions, candidates)
  with pytest.raises(ValueError, match=r"NaN or infinite"):
    analogies.solved(np.full((3, 2), np.nan), analogies.analogy_texts(questions, [("queen", "prince")]))


def test_level_candidates_keep_the_alignment():
  words = [_question("capital-common-countries", ("Athens", "Greece", "Baghdad", "Iraq")),
           _question("family", ("boy", "girl", "he", "she"))]
  word_candidates = [("Iran", "Iraq", "Syria"), ("her", "woman", "she")]
  aligned = analogy_sets.phrase_and_sentence_versions(words)
  phrase_candidates = analogy_candidates.level_candidates(words, aligned.phrases, word_candidates, "phrase")
  assert phrase_candidates == [("a postcard from Iran", "a postcard from Iraq", "a postcard from Syria"),
                               ("a letter from her family", "a letter from the woman", "a letter from her")]
  sentence_candidates = analogy_candidates.level_candidates(words, aligned.sentences, word_candidates, "sentence")
  assert sentence_candidates[1] == ("We got a long letter from her family yesterday.",
                                    "We got a long letter from the woman yesterday.",
                                    "We got a long letter from her yesterday.")
  word_gold = analogies.analogy_texts(words, word_candidates).gold_positions
  for level_questions, candidates in ((aligned.phrases, phrase_candidates), (aligned.sentences, sentence_candidates)):
    np.testing.assert_array_equal(analogies.analogy_texts(level_questions, candidates).gold_positions, word_gold)

  with pytest.raises(ValueError, match=r"phrase question 0 \(family: .*\) is not the phrase version of word question"):
    analogy_candidates.level_candidates(words, aligned.phrases[::-1], word_candidates, "phrase")
  with pytest.raises(ValueError, match=r"is not the phrase version"):
    analogy_candidates.level_candidates(words, aligned.sentences, word_candidates, "phrase")
  with pytest.raises(ValueError, match=r"Got 2 word questions, 1 phrase questions and 2 candidate lists"):
    analogy_candidates.level_candidates(words, aligned.phrases[:1], word_candidates, "phrase")
  with pytest.raises(ValueError, match=r"Unknown level 'paragraph'"):
    analogy_candidates.level_candidates(words, aligned.phrases, word_candidates, "paragraph")


@pytest.mark.parametrize("level", analogy_sets.FRAMES)
def test_the_pairs_of_a_question_and_the_candidates_take_their_frames(level):
  """a and b share one frame, c, d and d's candidates another: the frame of a and b cancels in b - a, and no frame
  is common to all four items. Every section's question is 'x : y :: x : z', so that a and c are one word."""
  for section, template in analogy_sets.TEMPLATES.items():
    first, second = getattr(template, level)
    assert first != second, section
    word = _question(section, ("calm", "Calm", "calm", "Calmly"))
    [version] = getattr(analogy_sets.phrase_and_sentence_versions([word]), f"{level}s")
    a, b, c, d = version.items
    assert a != c, (section, a)
    assert (a, b) == (first.format(template.slot("calm")), first.format(template.slot("Calm")))
    assert (c, d) == (second.format(template.slot("calm")), second.format(template.slot("Calmly")))
    [candidates] = analogy_candidates.level_candidates([word], [version], [("Calm", "Calmly", "calm")], level)
    assert candidates == (second.format(template.slot("Calm")), d, c)


SECTION_QUESTIONS = [_question(section, ("a", "b", "c", "d")) for section in (
    "capital-world", "capital-world", "family", "gram8-plural", "gram8-plural", "gram8-plural")]


def test_accuracy_by_section_and_kind():
  correct = [True, False, True, False, False, True]
  assert analogies.level_accuracy(SECTION_QUESTIONS, correct, "phrase") == pytest.approx({
      "phrase/accuracy": 3 / 6, "phrase/semantic_accuracy": 2 / 3, "phrase/syntactic_accuracy": 1 / 3,
      "phrase/capital-world/accuracy": 1 / 2, "phrase/family/accuracy": 1.0, "phrase/gram8-plural/accuracy": 1 / 3})
  # Without syntactic questions there is no syntactic accuracy, rather than 0/0.
  assert analogies.level_accuracy(SECTION_QUESTIONS[:3], correct[:3], "word") == pytest.approx({
      "word/accuracy": 2 / 3, "word/semantic_accuracy": 2 / 3, "word/capital-world/accuracy": 1 / 2,
      "word/family/accuracy": 1.0})
  with pytest.raises(ValueError, match=r"word: expected a bool per question \(6, at least one\)"):
    analogies.level_accuracy(SECTION_QUESTIONS, [1, 0, 1, 0, 0, 1], "word")


def test_ppr_and_pnr():
  word = [True, True, False, False, True]
  phrase = [True, False, True, False, False]
  # Solved at the word level: questions 0, 1 and 4, of which the phrase level solves 0; failed: 2 and 3, solved 2.
  assert analogies.ppr_pnr(word, phrase, "phrase") == pytest.approx({"phrase/ppr": 1 / 3, "phrase/pnr": 1 / 2})
  assert analogies.ppr_pnr([True, True], [False, True], "sentence") == {"sentence/ppr": 0.5}
  assert analogies.ppr_pnr([False, False], [False, True], "sentence") == {"sentence/pnr": 0.5}
  with pytest.raises(ValueError, match=r"phrase: expected a bool per question \(5"):
    analogies.ppr_pnr(word, phrase[:4], "phrase")


def test_analogy_metrics_of_all_levels():
  correct = {"word": np.array([True, True, False, False, True, False]),
             "phrase": np.array([True, False, True, False, False, False]),
             "sentence": np.array([False] * 6)}
  results = analogies.analogy_metrics(SECTION_QUESTIONS, correct)
  assert results["word/accuracy"] == pytest.approx(1 / 2)
  assert results["phrase/ppr"] == pytest.approx(1 / 3) and results["phrase/pnr"] == pytest.approx(1 / 3)
  assert results["sentence/ppr"] == results["sentence/pnr"] == results["sentence/accuracy"] == 0.0
  assert sorted(key for key in results if key.startswith("sentence/")) == [
      "sentence/accuracy", "sentence/capital-world/accuracy", "sentence/family/accuracy",
      "sentence/gram8-plural/accuracy", "sentence/pnr", "sentence/ppr", "sentence/semantic_accuracy",
      "sentence/syntactic_accuracy"]
  assert not any(key.startswith("word/p") for key in results)
  assert "phrase/ppr" not in analogies.analogy_metrics(SECTION_QUESTIONS, {"phrase": correct["phrase"]})
  with pytest.raises(ValueError, match=r"Unknown analogy levels \['words'\]"):
    analogies.analogy_metrics(SECTION_QUESTIONS, {"words": correct["word"]})
