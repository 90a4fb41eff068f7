"""The candidates every model answers analogy questions among (Li & Zhao answer among 5 candidates rather than
a whole vocabulary, so that an encoder without a vocabulary of phrases or sentences can be asked the phrase and
sentence versions). They are part of the evaluation data, made once from a fixed reference, never from the
model being evaluated:

  * `closed_vocabulary_candidates` takes them from a static reference model (an encoder's input word-piece
    table, GloVe, ...): the top 5 of a vocabulary by cos(b - a + c, x), x not a, b or c (as in the standard
    protocol), with the answer d in place of the 5th when the reference ranks it lower. They are made once and
    saved with a digest of their questions and one of the protocol that made them (`write_candidates`,
    `read_candidates`), so every model evaluated answers the same questions and candidates of an earlier
    protocol are made anew.
  * The vocabulary (`candidate_vocabulary`) is a real one: the reference tokenizer's whole words (`whole_words`:
    its vocabulary entries of letters only, no '##' continuation pieces, no special tokens), which hold the
    inflected forms the syntactic sections ask for (plurals, past tenses, comparatives) where WordNet's lemmas
    are base forms only. A question item the tokenizer reads as one of them takes its row, written as the
    question writes it ('Athens'); every other item of the question file (a word of several pieces, 'Ashgabat';
    a name of several words, 'Boston Globe' of Mikolov's phrase set) is a row of its own, its reference vector
    the mean of its pieces, so that it can be a candidate of other questions and an answer of several pieces is
    not the only one among its candidates.
  * Candidates are in order of descending reference score (ties by vocabulary row), so the answer stands where
    the reference ranks it, last when it replaced the 5th: its place tells the model nothing the reference
    does not. A model's tied scores go to the earlier candidate, the reference's preference.
  * The phrase and sentence versions of a question put a and b in one frame of its section and c and d in
    another (`analogies.phrase_and_sentence_versions`); its candidates are its word candidates in the frame
    of d (`level_candidates`): question i has the same candidates at every level.
"""
from collections.abc import Callable, Sequence
import dataclasses
import functools
import json
from typing import Any

from absl import logging
from etils import epath
import numpy as np

from docent_jax import outputs
from docent_jax.data import fingerprint
from docent_jax.data import io
from docent_jax.data import tokenization
from docent_jax.data.universal import analogies
from docent_jax import vectors as vector_maths

NUM_CANDIDATES = 5
# Part of the protocol digest of saved candidates: raised whenever the way candidates are made changes, so that
# candidates made the earlier way are made anew. 2: a real vocabulary (`candidate_vocabulary`).
CANDIDATE_PROTOCOL_VERSION = 2
# The position of the answer d in a question (a, b, c, d): its candidates are put in the frame of that position.
ANSWER_POSITION = 3
WORD = "word"  # The level of the word questions; their phrase and sentence versions are `analogies.FRAMES`.
# The most floats one block of scores or of gathered vectors holds (64 MiB of float64).
BLOCK_SIZE = 2**23

# Per question, its candidate answers (items, or their phrase or sentence versions), in order.
Candidates = list[tuple[str, ...]]


class StaleCandidatesError(ValueError):
  """A file of candidates made for other questions, or by another protocol."""


def whole_words(tokenizer: Any) -> dict[int, str]:
  """The tokenizer's whole words by token id, in id order: its vocabulary entries of ASCII letters only (no
  '##' continuation piece, special or unused token, number, punctuation or other script's character) that it
  reads back as that one entry."""
  special = set(tokenizer.all_special_tokens)
  entries = sorted((token_id, token) for token, token_id in tokenizer.get_vocab().items()
                   if token.isascii() and token.isalpha() and token not in special)
  read = tokenization.encode(tokenizer, [token for _, token in entries], add_special_tokens=False)["input_ids"]
  return {token_id: token for (token_id, token), ids in zip(entries, read) if ids == [token_id]}


def candidate_vocabulary(questions: Sequence[analogies.AnalogyQuestion], tokenizer: Any) -> list[str]:
  """What the candidates of `questions` are chosen from (see the module docstring): the tokenizer's whole words,
  each written as the first question item (in sorted order) that the tokenizer reads as that word alone where
  there is one, then the questions' other items, sorted.

  Raises:
    ValueError: the tokenizer has no whole words.
  """
  words = whole_words(tokenizer)
  if not words:
    raise ValueError("The tokenizer has no whole words (vocabulary entries of letters only) to take candidates "
                     "from.")
  items = sorted({item for question in questions for item in question.items})
  read = tokenization.encode(tokenizer, items, add_special_tokens=False)["input_ids"]
  written_as: dict[int, str] = {}
  for item, ids in zip(items, read):
    if len(ids) == 1 and ids[0] in words:
      written_as.setdefault(ids[0], item)
  in_words = set(written_as.values())
  return [written_as.get(token_id, word) for token_id, word in words.items()] + [
      item for item in items if item not in in_words]


def candidate_protocol_digest(reference: str, tokenizer_name: str, vocabulary: Sequence[str],
                              num_candidates: int = NUM_CANDIDATES) -> str:
  """A digest of how candidates are made: the protocol's version, the reference model and tokenizer, the
  vocabulary and the number of candidates."""
  return fingerprint.digest([CANDIDATE_PROTOCOL_VERSION, reference, tokenizer_name, num_candidates, *vocabulary])


def closed_vocabulary_candidates(questions: Sequence[analogies.AnalogyQuestion], vocabulary: Sequence[str],
                                 vectors: np.ndarray, num_candidates: int = NUM_CANDIDATES,
                                 block_size: int = BLOCK_SIZE) -> Candidates:
  """Each question's candidates from a reference model: its top `num_candidates` by cos(b - a + c, x) over the
  vocabulary less a, b and c, the answer in place of the last when it ranks lower; by descending score.

  Scores are float64, so that a block size can only change an order decided by the last bits of a score.

  Args:
    questions: the questions; the four items of each must be in the vocabulary.
    vocabulary: the distinct item of each row of `vectors`.
    vectors: [V, d] the reference model's vectors.
    num_candidates: candidates per question.
    block_size: the most scores ([questions, V] floats) held at once, at least one question's.

  Raises:
    ValueError: an item missing from the vocabulary, a question whose answer is its a, b or c, a repeated
      vocabulary item, or a vocabulary too small to leave `num_candidates` items besides a, b and c.
  """
  vectors = vector_maths.unit_rows(vectors)
  row_of = {item: row for row, item in enumerate(vocabulary)}
  if len(row_of) != len(vocabulary) or len(vocabulary) != len(vectors):
    raise ValueError(f"Expected one distinct item per vector; got {len(vocabulary)} items "
                     f"({len(vocabulary) - len(row_of)} repeated) for {len(vectors)} vectors.")
  if not 1 <= num_candidates <= len(vocabulary) - 3:
    raise ValueError(f"Cannot take {num_candidates} candidates from {len(vocabulary)} items less a, b and c.")
  missing = sorted({item for question in questions for item in question.items} - row_of.keys())
  if missing:
    raise ValueError(f"{len(missing)} question items are not in the vocabulary, e.g. {missing[:5]}.")
  rows = np.array([[row_of[item] for item in question.items] for question in questions], np.int64).reshape(-1, 4)
  answer_given = np.flatnonzero((rows[:, :3] == rows[:, 3:]).any(axis=1))
  if answer_given.size:
    raise ValueError(f"{answer_given.size} questions have their answer among a, b and c, e.g. question "
                     f"{answer_given[0]}: {questions[answer_given[0]].items}.")
  top_rows = np.empty((len(rows), num_candidates), np.int64)
  for block in vector_maths.row_blocks(len(rows), len(vocabulary), block_size):
    scores = vector_maths.analogy_queries(vectors, rows[block]) @ vectors.T
    np.put_along_axis(scores, rows[block, :3], -np.inf, axis=1)
    top = np.argpartition(-scores, num_candidates - 1, axis=1)[:, :num_candidates]
    top = np.take_along_axis(top, np.lexsort((top, -np.take_along_axis(scores, top, axis=1)), axis=1), axis=1)
    answers = rows[block, 3]
    missed = ~(top == answers[:, None]).any(axis=1)
    top[missed, -1] = answers[missed]
    top_rows[block] = top
  return [tuple(vocabulary[row] for row in question_rows) for question_rows in top_rows]


def write_candidates(path: epath.PathLike, questions: Sequence[analogies.AnalogyQuestion],
                     candidates: Candidates, protocol_digest: str) -> None:
  """Saves the candidates of `questions` as JSON, with a digest of the questions and the digest of the protocol
  that made them (`candidate_protocol_digest`), for `read_candidates` to check."""
  if len(candidates) != len(questions):
    raise ValueError(f"Got {len(candidates)} candidate lists for {len(questions)} questions.")
  record = {"questions_digest": _questions_digest(questions), "protocol_digest": protocol_digest,
            "num_questions": len(questions),
            "candidates": [list(question_candidates) for question_candidates in candidates]}
  outputs.write_atomically(path, json.dumps(record) + "\n")


def read_candidates(path: epath.PathLike, questions: Sequence[analogies.AnalogyQuestion],
                    protocol_digest: str) -> Candidates:
  """The candidates `write_candidates` saved for `questions` by the protocol of `protocol_digest`.

  Raises:
    io.DataFormatError: the file is not such a JSON record.
    StaleCandidatesError: the file holds the candidates of other questions, or candidates made by another
      protocol (a file without a protocol digest was made before candidates recorded theirs).
  """
  path = epath.Path(path)
  try:
    record = json.loads(path.read_text())
    digest, num_questions, candidates = record["questions_digest"], record["num_questions"], record["candidates"]
    made_by = record.get("protocol_digest")
  except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
    raise io.DataFormatError(f"{path}: not a file of analogy candidates ({error!r}).") from error
  expected_digest = _questions_digest(questions)
  if digest != expected_digest:
    raise StaleCandidatesError(
        f"{path} holds the candidates of other questions ({num_questions} questions, digest {digest}) than these "
        f"{len(questions)} (digest {expected_digest}).")
  if made_by != protocol_digest:
    raise StaleCandidatesError(f"{path} holds candidates made by another protocol (digest {made_by}) than this one "
                               f"(digest {protocol_digest}).")
  return [tuple(question_candidates) for question_candidates in candidates]


def level_candidates(word_questions: Sequence[analogies.AnalogyQuestion],
                     level_questions: Sequence[analogies.AnalogyQuestion], word_candidates: Candidates,
                     level: str) -> Candidates:
  """The candidates of the `level` ('phrase' or 'sentence') versions of word questions: each word candidate put
  in the frame of its question's answer, as `analogies.phrase_and_sentence_versions` puts the answer.

  Raises:
    ValueError: the three lists differ in length, or a level question is not the version of the word question
      at its position (the lists are not aligned).
  """
  if not len(word_questions) == len(level_questions) == len(word_candidates):
    raise ValueError(f"Got {len(word_questions)} word questions, {len(level_questions)} {level} questions and "
                     f"{len(word_candidates)} candidate lists; expected one of each per question.")
  for index, (word_question, level_question) in enumerate(zip(word_questions, level_questions)):
    items = tuple(analogies.item_version(word_question.section, item, level, position)
                  for position, item in enumerate(word_question.items))
    if level_question != dataclasses.replace(word_question, items=items):
      raise ValueError(f"{level} question {index} ({level_question.section}: {level_question.items}) is not the "
                       f"{level} version of word question {index} ({word_question.section}: {word_question.items}).")
  return [tuple(analogies.item_version(question.section, candidate, level, ANSWER_POSITION)
                for candidate in candidates) for question, candidates in zip(word_questions, word_candidates)]



def _questions_digest(questions: Sequence[analogies.AnalogyQuestion]) -> str:
  return fingerprint.digest(value for question in questions for value in (question.section, *question.items))



@dataclasses.dataclass(frozen=True)
class QuestionSet:
  """Questions, and the candidates every model answers among."""
  questions: list[analogies.AnalogyQuestion]
  candidates: Candidates


@dataclasses.dataclass(frozen=True, eq=False)
class Reference:
  """The static model candidates come from (named in their protocol digest and file names): `tokenizer` gives the
  vocabulary's whole words, `vectors` maps texts to [N, d] reference vectors (a model's mean input word pieces)."""
  name: str
  tokenizer_name: str
  tokenizer: Any
  vectors: Callable[[Sequence[str]], np.ndarray]


@functools.cache
def question_sets(words: tuple[analogies.AnalogyQuestion, ...], phrase_set: tuple[analogies.AnalogyQuestion, ...],
                  candidates_dir: epath.Path, reference: Reference) -> dict[str, QuestionSet]:
  """'word', 'phrase', 'sentence' (the word questions and their aligned versions) and 'phrase_set' (Mikolov's
  phrase questions), with candidates from `reference` over `candidate_vocabulary`, kept in `candidates_dir` and
  made anew when the questions or the protocol changed."""
  def candidates(name: str, questions: list[analogies.AnalogyQuestion]) -> Candidates:
    path = candidates_dir / f"{name}_{reference.name.replace('/', '_')}.json"
    vocabulary = candidate_vocabulary(questions, reference.tokenizer)
    protocol_digest = candidate_protocol_digest(reference.name, reference.tokenizer_name, vocabulary)
    if path.exists():
      try:
        return read_candidates(path, questions, protocol_digest)
      except StaleCandidatesError as stale:
        logging.warning("%s Making them anew.", stale)
    made = closed_vocabulary_candidates(questions, vocabulary, reference.vectors(vocabulary))
    write_candidates(path, questions, made, protocol_digest)
    return made

  words, phrase_set = list(words), list(phrase_set)
  aligned = analogies.phrase_and_sentence_versions(words)
  word_candidates = candidates("words", words)
  sets = {WORD: QuestionSet(words, word_candidates), "phrase_set": QuestionSet(phrase_set, candidates("phrases", phrase_set))}
  for level, questions in (("phrase", aligned.phrases), ("sentence", aligned.sentences)):
    sets[level] = QuestionSet(questions, level_candidates(words, questions, word_candidates, level))
  return sets
