"""Analogy evaluation: candidates against a naive per-question reference, their file, answering on hand-made 2-D
vectors, the cross-level mapping of candidates, and accuracies, PPR and PNR computed by hand."""
import json
import re

import numpy as np
import pytest

from docent_jax.data import io
from docent_jax.data.universal import analogies as analogy_sets
from docent_jax.evaluation import analogies

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
  candidates = analogies.closed_vocabulary_candidates(questions, vocabulary, vectors)
  assert candidates == _naive_candidates(questions, vocabulary, vectors, analogies.NUM_CANDIDATES)
  for question, question_candidates in zip(questions, candidates):
    assert len(question_candidates) == analogies.NUM_CANDIDATES
    assert question_candidates.count(question.items[3]) == 1
    assert not set(question.items[:3]) & set(question_candidates)
  # Both cases occur: answers the reference ranks first, and answers put last in place of the 5th.
  gold = analogies.analogy_texts(questions, candidates).gold_positions
  assert (gold[::3] == 0).all()
  assert (gold == analogies.NUM_CANDIDATES - 1).sum() >= NUM_QUESTIONS // 2


def test_candidates_do_not_depend_on_the_block_or_the_run(reference):
  questions, vocabulary, vectors = reference
  candidates = analogies.closed_vocabulary_candidates(questions, vocabulary, vectors, num_candidates=3)
  for block_size in (1, len(vocabulary) * 7, 10**9):
    assert analogies.closed_vocabulary_candidates(questions, vocabulary, vectors, num_candidates=3,
                                                  block_size=block_size) == candidates
  assert candidates == _naive_candidates(questions, vocabulary, vectors, 3)


def test_candidates_refuse_what_breaks_the_protocol(reference):
  questions, vocabulary, vectors = reference
  with pytest.raises(ValueError, match=r"1 question items are not in the vocabulary, e.g. \['Paris'\]"):
    analogies.closed_vocabulary_candidates([_question("capital-world", ("w0", "w1", "w2", "Paris"))], vocabulary,
                                           vectors)
  with pytest.raises(ValueError, match=r"answer among a, b and c, e.g. question 0"):
    analogies.closed_vocabulary_candidates([_question("capital-world", ("w0", "w1", "w2", "w1"))], vocabulary,
                                           vectors)
  with pytest.raises(ValueError, match=r"\(1 repeated\)"):
    analogies.closed_vocabulary_candidates(questions, ["w1", *vocabulary[1:]], vectors)
  with pytest.raises(ValueError, match=r"Cannot take 5 candidates from 7 items"):
    analogies.closed_vocabulary_candidates(questions[:1], vocabulary[:7], vectors[:7])


def test_candidate_file_round_trips_and_refuses_other_questions(reference, tmp_path):
  questions, vocabulary, vectors = reference
  candidates = analogies.closed_vocabulary_candidates(questions, vocabulary, vectors)
  path = tmp_path / "made" / "candidates.json"
  analogies.write_candidates(path, questions, candidates)
  assert analogies.read_candidates(path, questions) == candidates
  for other_questions in (questions[:-1], [_question("family", question.items) for question in questions]):
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} holds the candidates of other questions \(30 "):
      analogies.read_candidates(path, other_questions)
  path.write_text(json.dumps({"candidates": [list(c) for c in candidates]}))
  with pytest.raises(io.DataFormatError, match=rf"^{re.escape(str(path))}: not a file of analogy candidates"):
    analogies.read_candidates(path, questions)


def test_candidate_file_on_gs(reference, gcs_bucket):
  questions, vocabulary, vectors = reference
  _, opened = gcs_bucket
  candidates = analogies.closed_vocabulary_candidates(questions, vocabulary, vectors)
  analogies.write_candidates("gs://bucket/analogies/candidates.json", questions, candidates)
  assert analogies.read_candidates("gs://bucket/analogies/candidates.json", questions) == candidates
  assert opened == ["gs://bucket/analogies/candidates.json"] * 2


# man : king :: woman : ? in 2-D. Only over unit vectors is b - a + c = (-2, 1), the direction of 'queen':
# unscaled, 'man' (3, 0) would make it (-4, 1), the direction of 'rival'; and 'prince', long, has the largest
# dot product with (-2, 1) but a cosine of only 1/sqrt(5). 'twin' is 'queen' again, under another name.
VECTORS_2D = {"man": (3.0, 0.0), "king": (0.0, 1.0), "woman": (-1.0, 0.0), "queen": (-4.0, 2.0),
              "rival": (-4.0, 1.0), "prince": (0.0, 50.0), "twin": (-4.0, 2.0), "nothing": (0.0, 0.0)}
ROYAL = ("man", "king", "woman")


@pytest.mark.parametrize("block_size", [1, analogies.BLOCK_SIZE])
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
  phrase_candidates = analogies.level_candidates(words, aligned.phrases, word_candidates, "phrase")
  assert phrase_candidates == [("a flight to Iran", "a flight to Iraq", "a flight to Syria"),
                               ("a photo of her family", "a photo of the woman", "a photo of her")]
  sentence_candidates = analogies.level_candidates(words, aligned.sentences, word_candidates, "sentence")
  assert sentence_candidates[1] == ("Everyone in the village knew her family well.",
                                    "Everyone in the village knew the woman well.",
                                    "Everyone in the village knew her well.")
  word_gold = analogies.analogy_texts(words, word_candidates).gold_positions
  for level_questions, candidates in ((aligned.phrases, phrase_candidates), (aligned.sentences, sentence_candidates)):
    np.testing.assert_array_equal(analogies.analogy_texts(level_questions, candidates).gold_positions, word_gold)

  with pytest.raises(ValueError, match=r"phrase question 0 \(family: .*\) is not the phrase version of word question"):
    analogies.level_candidates(words, aligned.phrases[::-1], word_candidates, "phrase")
  with pytest.raises(ValueError, match=r"is not the phrase version"):
    analogies.level_candidates(words, aligned.sentences, word_candidates, "phrase")
  with pytest.raises(ValueError, match=r"Got 2 word questions, 1 phrase questions and 2 candidate lists"):
    analogies.level_candidates(words, aligned.phrases[:1], word_candidates, "phrase")
  with pytest.raises(ValueError, match=r"Unknown frame 'paragraph'"):
    analogies.level_candidates(words, aligned.phrases, word_candidates, "paragraph")


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
