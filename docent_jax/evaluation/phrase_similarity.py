"""Phrase similarity: whether the cosine of two phrases' vectors orders phrase pairs as people's scores do.

Spearman's rank correlation between cos(u_i, v_i) and the mean human score of pair i (Li & Zhao, on the PPDB
human-rated sample: `data.universal.corpus.EvaluationSources.rated_phrase_pairs`). A zero vector has cosine 0 with
anything. The correlation is NaN when either side is constant (a model mapping every phrase to one vector).
"""
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.stats

from docent_jax import vectors as vector_maths
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.evaluation import registry

def phrase_similarity(first: np.ndarray, second: np.ndarray,
                      human_scores: np.ndarray | Sequence[float]) -> dict[str, float]:
  """{'spearman': the rank correlation of cos(first[i], second[i]) with human_scores[i]}.

  Args:
    first: [N, d] a model's vector of each pair's first phrase, N >= 2.
    second: [N, d] its vector of each pair's second phrase.
    human_scores: [N] the pairs' human similarity scores.
  """
  first, second = vector_maths.unit_rows(first), vector_maths.unit_rows(second)
  human_scores = np.asarray(human_scores, np.float64)
  if first.shape != second.shape or human_scores.shape != first.shape[:1] or len(human_scores) < 2:
    raise ValueError(f"Expected vectors [N, d] of both phrases and [N] human scores, N >= 2; got {first.shape}, "
                     f"{second.shape} and {human_scores.shape}.")
  if not np.isfinite(human_scores).all():
    raise ValueError("Human scores hold NaN or infinite values.")
  cosines = np.sum(first * second, axis=1)
  return {"spearman": float(scipy.stats.spearmanr(cosines, human_scores).statistic)}


@registry.register("phrase_similarity")
def rate_phrase_pairs(model: Any, sources: universal_corpus.EvaluationSources) -> dict[str, float]:
  """`ppdb_sample/spearman`: Spearman correlation of cos(u, v) with the human ratings of the sources'
  `rated_phrase_pairs`."""
  pairs = sources.rated_phrase_pairs
  vectors = model.encode([pair.phrase1 for pair in pairs] + [pair.phrase2 for pair in pairs])
  scores = np.array([pair.score for pair in pairs])
  found = phrase_similarity(vectors[:len(pairs)], vectors[len(pairs):], scores)
  return {f"ppdb_sample/{key}": value for key, value in found.items()}
