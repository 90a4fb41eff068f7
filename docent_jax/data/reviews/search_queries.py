"""The queries of DOCENT's zero-shot movie search, each with its relevant movies.

A query set is JSON Lines, one object per line: {"query": "a heist gone wrong", "relevant":
["1234", "5678"]} with entity ids as strings or integers. Relevant ids that are not among the
evaluated entities are skipped; a query left without any relevant entity is dropped. Both are
counted and logged. The built-in query set takes MovieLens tags as queries (`tag_query_set`); a run
also searches a query-set file its config names (`data.search_queries`; `corpus.ReviewEvaluation.search_tasks`).
"""
from collections.abc import Sequence
import dataclasses
import json

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import io


class QueryFormatError(io.DataFormatError):
  """A query-set file is malformed; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class QuerySet:
  """Queries and, per query, the sorted indices of its relevant entities.

  Attributes:
    queries: query texts.
    relevant: per query, a non-empty sorted int64 array of entity indices.
    num_unknown_relevant: relevant ids skipped because they are not evaluated entities.
    num_dropped_queries: queries dropped for having no (or too few) relevant entities.
  """

  queries: list[str]
  relevant: list[np.ndarray]
  num_unknown_relevant: int = 0
  num_dropped_queries: int = 0

  def __len__(self) -> int:
    return len(self.queries)

  def label_matrix(self, num_entities: int) -> np.ndarray:
    """[Q, E] bool, True where the entity is relevant to the query."""
    labels = np.zeros((len(self.queries), num_entities), bool)
    for row, relevant in enumerate(self.relevant):
      labels[row, relevant] = True
    return labels


def _parse_line(path: epath.Path, number: int, line: str) -> tuple[str, list[str]]:
  try:
    record = json.loads(line)
  except json.JSONDecodeError as error:
    raise QueryFormatError(f"{path}:{number}: not valid JSON ({error.msg}): {line[:100]!r}") from None
  if not isinstance(record, dict) or "query" not in record or "relevant" not in record:
    raise QueryFormatError(f"{path}:{number}: expected an object with keys 'query' and 'relevant': {line[:100]!r}")
  query, relevant = record["query"], record["relevant"]
  if not isinstance(query, str) or not query.strip():
    raise QueryFormatError(f"{path}:{number}: 'query' must be a non-empty string; got {query!r}.")
  # bool is an int in Python, but never an entity id.
  if not isinstance(relevant, list) or any(isinstance(x, bool) or not isinstance(x, (str, int)) for x in relevant):
    raise QueryFormatError(f"{path}:{number}: 'relevant' must be a list of entity ids (strings or integers); "
                           f"got {relevant!r:.100}.")
  return query, [str(x) for x in relevant]


def load_query_set(path: epath.PathLike, entity_ids: Sequence[str]) -> QuerySet:
  """Reads a JSON Lines query set; relevant ids become indices into `entity_ids`.

  Blank lines are ignored. Raises QueryFormatError, naming file and line, for an empty file, a
  line that is not a JSON object with a non-empty 'query' string and a 'relevant' list of ids,
  and when no query keeps a relevant entity.
  """
  path = epath.Path(path)
  index = {str(entity): position for position, entity in enumerate(entity_ids)}
  queries, relevant = [], []
  num_unknown = num_dropped = 0
  try:
    lines = io.read_lines(path)
  except io.DataFormatError as error:
    raise QueryFormatError(str(error)) from None
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    query, ids = _parse_line(path, number, line)
    known = sorted({index[x] for x in ids if x in index})
    num_unknown += sum(x not in index for x in ids)
    if not known:
      num_dropped += 1
      continue
    queries.append(query)
    relevant.append(np.asarray(known, np.int64))
  if num_unknown:
    logging.warning("%s: skipped %d relevant ids that are not among the %d entities.", path, num_unknown,
                    len(index))
  if num_dropped:
    logging.warning("%s: dropped %d queries without a known relevant entity.", path, num_dropped)
  if not queries:
    raise QueryFormatError(f"{path}: no query has a relevant entity among the {len(index)} entities.")
  return QuerySet(queries, relevant, num_unknown, num_dropped)


def tag_query_set(tags: Sequence[str], tag_votes: np.ndarray, tag_indices: Sequence[int] | np.ndarray, *,
                  min_votes: int = 1, min_relevant: int = 1) -> QuerySet:
  """Tags as queries: query = the tag's text, relevant = movies with at least `min_votes` votes for it.

  Args:
    tags: tag texts, the columns of `tag_votes`.
    tag_votes: [E, T] int votes (`tag_prediction.tag_vote_matrix`); rows are the entities ranked.
    tag_indices: the tags to use, normally held-out tags no model was trained on.
    min_votes: votes that make a movie relevant.
    min_relevant: queries with fewer relevant movies are dropped, counted and logged.
  """
  tag_votes = np.asarray(tag_votes)
  if tag_votes.ndim != 2 or tag_votes.shape[1] != len(tags):
    raise ValueError(f"Expected tag_votes [E, {len(tags)}]; got {tag_votes.shape}.")
  tag_indices = np.asarray(tag_indices, np.int64)
  if tag_indices.size and (tag_indices.min() < 0 or tag_indices.max() >= len(tags)):
    raise ValueError(f"tag_indices must lie in [0, {len(tags)}).")
  queries, relevant = [], []
  for tag in tag_indices:
    movies = np.flatnonzero(tag_votes[:, tag] >= min_votes)
    if len(movies) >= max(min_relevant, 1):
      queries.append(tags[tag])
      relevant.append(movies.astype(np.int64))
  num_dropped = len(tag_indices) - len(queries)
  if num_dropped:
    logging.info("Tag queries: dropped %d of %d tags with fewer than %d movies having %d votes.", num_dropped,
                 len(tag_indices), min_relevant, min_votes)
  if not queries:
    raise ValueError(f"None of {len(tag_indices)} tags has {min_relevant} movies with {min_votes} votes.")
  return QuerySet(queries, relevant, num_dropped_queries=num_dropped)
