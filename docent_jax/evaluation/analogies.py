"""Vector-arithmetic analogies at the word, phrase and sentence level, answered among fixed candidates (Li & Zhao).

A question a : b :: c : ? is answered by the candidate d of highest cos(b - a + c, d), a, b, c and d unit
vectors (3CosAdd, Mikolov et al. 2013), among the 5 candidates of the evaluation data
(`data.universal.analogy_candidates`: made once from a fixed reference, the same for every model). A model's
tied scores go to the earlier candidate, the reference's preference.

Metric keys (`analogy_metrics`), for each level ('word', 'phrase', 'sentence'), all floats in [0, 1]:

  <level>/accuracy             share of the questions solved
  <level>/semantic_accuracy    of the semantic sections' questions; like every key, left out when it has none
  <level>/syntactic_accuracy   of the syntactic (`gram*`) sections' questions
  <level>/<section>/accuracy   of one section's questions
  <level>/ppr                  (levels above the word) of the questions solved at the word level, the share
                               solved at this level too: positive preservation
  <level>/pnr                  of the questions failed at the word level, the share solved at this level
"""
from collections.abc import Mapping, Sequence
import dataclasses
import functools
from typing import Any

import numpy as np

from docent_jax import vectors as vector_maths
from docent_jax.data.universal import analogies as analogy_sets
from docent_jax.data.universal import analogy_candidates
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.evaluation import registry
from docent_jax.modules import bert
from docent_jax.modules import pretrained

WORD = analogy_candidates.WORD
LEVELS = (WORD, *analogy_sets.FRAMES)


@dataclasses.dataclass(frozen=True)
class AnalogyTexts:
  """What a model encodes to answer questions among their candidates: each distinct text once, and where it goes.

  Attributes:
    texts: the distinct texts of the questions' a, b and c and of their candidates, in order of first use.
    question_rows: [Q, 3] int, the rows of `texts` holding each question's a, b and c.
    candidate_rows: [Q, K] int, the rows of `texts` holding each question's candidates, in their order.
    gold_positions: [Q] int, the column of `candidate_rows` holding each question's answer.
  """
  texts: list[str]
  question_rows: np.ndarray
  candidate_rows: np.ndarray
  gold_positions: np.ndarray


def analogy_texts(questions: Sequence[analogy_sets.AnalogyQuestion],
                  candidates: analogy_candidates.Candidates) -> AnalogyTexts:
  """The texts a model encodes to answer `questions` among `candidates`, and where each goes.

  Raises:
    ValueError: no questions, a candidate list per question missing, lists of different lengths, or a question
      whose answer is not among its candidates exactly once.
  """
  if not questions or len(candidates) != len(questions):
    raise ValueError(f"Expected one candidate list per question; got {len(candidates)} for {len(questions)}.")
  lengths = sorted({len(question_candidates) for question_candidates in candidates})
  if len(lengths) != 1:
    raise ValueError(f"Every question needs as many candidates as the others; got lists of lengths {lengths}.")
  wrong = [index for index, (question, question_candidates) in enumerate(zip(questions, candidates))
           if question_candidates.count(question.items[3]) != 1]
  if wrong:
    raise ValueError(f"{len(wrong)} questions do not have their answer exactly once among their candidates, e.g. "
                     f"question {wrong[0]}: {questions[wrong[0]].items[3]!r} in {candidates[wrong[0]]}.")
  texts = list(dict.fromkeys(text for question, question_candidates in zip(questions, candidates)
                             for text in (*question.items[:3], *question_candidates)))
  row_of = {text: row for row, text in enumerate(texts)}
  return AnalogyTexts(
      texts=texts,
      question_rows=np.array([[row_of[item] for item in question.items[:3]] for question in questions], np.int64),
      candidate_rows=np.array([[row_of[text] for text in question_candidates] for question_candidates in candidates],
                              np.int64),
      gold_positions=np.array([question_candidates.index(question.items[3])
                               for question, question_candidates in zip(questions, candidates)], np.int64))


def solved(vectors: np.ndarray, texts: AnalogyTexts, block_size: int = analogy_candidates.BLOCK_SIZE) -> np.ndarray:
  """[Q] bool: whether each question's candidate of highest cos(b - a + c, d), over unit vectors, is its answer.

  Of tied candidates the earlier one is chosen.

  Args:
    vectors: [N, d] a model's vector of each of `texts.texts`.
    texts: the questions and their candidates, from `analogy_texts`.
    block_size: the most floats of candidate vectors gathered at once, at least one question's.
  """
  vectors = vector_maths.unit_rows(vectors)
  if len(vectors) != len(texts.texts):
    raise ValueError(f"Expected one vector per text ({len(texts.texts)}); got {len(vectors)}.")
  num_questions, num_candidates = texts.candidate_rows.shape
  choices = np.empty(num_questions, np.int64)
  for block in vector_maths.row_blocks(num_questions, num_candidates * vectors.shape[1], block_size):
    # cos(q, d) is q . d / |q| for a unit d, and |q| is the same for all of a question's candidates.
    scores = np.einsum("qd,qkd->qk", vector_maths.analogy_queries(vectors, texts.question_rows[block]),
                       vectors[texts.candidate_rows[block]])
    choices[block] = np.argmax(scores, axis=1)
  return choices == texts.gold_positions


def level_accuracy(questions: Sequence[analogy_sets.AnalogyQuestion], correct: np.ndarray | Sequence[bool],
                   level: str) -> dict[str, float]:
  """The accuracy keys of `level` (see the module docstring), from whether each question was solved."""
  correct = _correctness(correct, len(questions), level)
  semantic = np.array([question.semantic for question in questions], bool)
  sections = np.array([question.section for question in questions])
  groups = {"accuracy": np.ones_like(semantic), "semantic_accuracy": semantic, "syntactic_accuracy": ~semantic}
  groups.update({f"{section}/accuracy": sections == section for section in np.unique(sections)})
  return _shares_solved(correct, groups, level)


def ppr_pnr(word_correct: np.ndarray | Sequence[bool], level_correct: np.ndarray | Sequence[bool],
            level: str) -> dict[str, float]:
  """'<level>/ppr' and '<level>/pnr': of the questions solved (PPR) or failed (PNR) at the word level, the share
  solved at `level`; a key is left out when no question was solved, or none failed, at the word level."""
  word_correct = _correctness(word_correct, np.size(word_correct), WORD)
  level_correct = _correctness(level_correct, len(word_correct), level)
  return _shares_solved(level_correct, {"ppr": word_correct, "pnr": ~word_correct}, level)


def analogy_metrics(questions: Sequence[analogy_sets.AnalogyQuestion],
                    correct: Mapping[str, np.ndarray | Sequence[bool]]) -> dict[str, float]:
  """The accuracies of each level in `correct` (level -> whether each question was solved) and, with the word
  level among them, the PPR and PNR of the others; keys as in the module docstring."""
  unknown = sorted(set(correct) - set(LEVELS))
  if unknown:
    raise ValueError(f"Unknown analogy levels {unknown}; valid: {LEVELS}.")
  results = {}
  for level, level_correct in correct.items():
    results.update(level_accuracy(questions, level_correct, level))
    if level != WORD and WORD in correct:
      results.update(ppr_pnr(correct[WORD], level_correct, level))
  return results


def _correctness(correct: np.ndarray | Sequence[bool], num_questions: int, level: str) -> np.ndarray:
  correct = np.asarray(correct)
  if correct.dtype != bool or correct.shape != (num_questions,) or not num_questions:
    raise ValueError(f"{level}: expected a bool per question ({num_questions}, at least one); got {correct.dtype} "
                     f"{correct.shape}.")
  return correct


def _shares_solved(correct: np.ndarray, groups: Mapping[str, np.ndarray], level: str) -> dict[str, float]:
  """'<level>/<name>': the share of `correct` within each group (a mask over questions) that is not empty."""
  return {f"{level}/{name}": float(correct[mask].mean()) for name, mask in groups.items() if mask.any()}


@functools.cache
def reference(name: str, tokenizer_name: str) -> analogy_candidates.Reference:
  """Pretrained model `name`'s input word pieces as the candidates' reference: a text's vector is the mean of its
  pieces' rows (float64)."""
  tokenizer = pretrained.load_tokenizer(tokenizer_name)
  _, params = pretrained.load_or_create_bert(name, {}, len(tokenizer))
  table = np.asarray(bert.word_embedding_matrix(params), np.float64)
  return analogy_candidates.Reference(name, tokenizer_name, tokenizer,
                                      lambda texts: pretrained.mean_input_word_pieces(tokenizer, table, texts))


def question_sets(sources: universal_corpus.EvaluationSources) -> dict[str, analogy_candidates.QuestionSet]:
  """'word', 'phrase', 'sentence' (the word questions and their phrase and sentence versions) and 'phrase_set'
  (Mikolov's phrase questions), each with the candidates every model answers among (made once from the sources'
  reference, kept in their `candidates_dir`)."""
  return analogy_candidates.question_sets(tuple(sources.word_analogies), tuple(sources.phrase_analogies),
                                          sources.candidates_dir, reference(sources.reference, sources.tokenizer))


@registry.register("analogies")
def solve_analogies(model: Any, sources: universal_corpus.EvaluationSources) -> dict[str, float]:
  """`analogy_<level>/<metric>` (see the module docstring) at the word, phrase and sentence level, and
  `analogy_phrase_set/<metric>` on Mikolov's phrase questions (the sources' `word_analogies`, `phrase_analogies`)."""
  sets = question_sets(sources)
  correct = {}
  for level, question_set in sets.items():
    texts = analogy_texts(question_set.questions, question_set.candidates)
    correct[level] = solved(model.encode(texts.texts), texts)
  phrase_set = correct.pop("phrase_set")
  found = {**analogy_metrics(sets[WORD].questions, correct),
           **level_accuracy(sets["phrase_set"].questions, phrase_set, "phrase_set")}
  return {f"analogy_{key}": value for key, value in found.items()}
