"""Re-ranking a first-stage entity-retrieval run with text encodings (BLP, Daza, Cochez & Groth 2021, the
information-retrieval task on DBpedia-Entity v2).

For a query q and a candidate entity e of the first stage's ranking, with f the entity encoder,

  score(q, e) = alpha * sim(f(q), f(e)) + (1 - alpha) * s0(q, e),

where s0 is the first stage's own score, used as it is (BLP does not rescale it), and sim the inner product
f(q) . f(e), as in the paper's eq. 4 and BLP's `retrieval.py` ("cosine", the inner product of unit vectors, is the
other choice of `SIMILARITIES`). A candidate with no text has no encoding and similarity 0. alpha is chosen per
fold of the collection's folds from ALPHAS, the grid of BLP's `retrieval.py` (20 evenly spaced values from 0 to 1,
both included), as the value of best mean NDCG@100 over the fold's training queries (the first such value on a
tie); the fold's testing queries are then scored with it, and the re-ranked run is the union of the testing
queries' rankings.

NDCG is trec_eval's (`ndcg_cut`, through ir-measures and pytrec_eval): gain = relevance, discount
log2(rank + 1), a ranking ordered by score with ties broken by entity id, from last to first. A query of the
evaluated set without any ranking counts 0, as `trec_eval -c` counts it. The re-ranked run is compared with the
first stage over all queries and per query type of DBpedia-Entity v2 (`QUERY_TYPES`), as the paper's table 5
does: mean NDCG@10 and @100 of each, and the p-value of a two-sided paired t-test over the queries (scipy's
`ttest_rel`, as BLP's `retrieval.py` runs it over all queries).

Files (every format error names `<file>:<line>`):
  run      `qid Q0 docid rank score tag`, whitespace-separated (TREC); the rank column is not read back into
           the order, the score is.
  qrels    `qid Q0 docid relevance`, tab-separated (DBpedia-Entity's) or whitespace-separated (TREC).
  texts    `id<TAB>text` (queries, entity descriptions); further tabs are part of the text, read as spaces.
  folds    JSON `{"0": {"training": [qid, ...], "testing": [qid, ...]}, ...}`.
"""
from collections.abc import Collection, Iterable, Mapping, Sequence
import dataclasses
import json
import math
import re
import warnings

from absl import logging
from etils import epath
import ir_measures
import numpy as np
from scipy import stats

from docent_jax import outputs
from docent_jax.data import io
from docent_jax.evaluation import bm25

Run = dict[str, dict[str, float]]  # query id -> {entity id: score}
Qrels = dict[str, dict[str, int]]  # query id -> {entity id: relevance}

# BLP's grid: numpy.linspace(0, 1, 20), so consecutive values are 1/19 apart.
ALPHAS: tuple[float, ...] = tuple(float(alpha) for alpha in np.linspace(0.0, 1.0, 20))
# BLP chooses alpha by NDCG@100 on the training queries and reports NDCG@10 and NDCG@100.
SELECTION_CUTOFF = 100
CUTOFFS = (10, 100)
# How a query's and an entity's vectors are compared: BLP's inner product (eq. 4), or the cosine.
SIMILARITIES = ("inner_product", "cosine")
# DBpedia-Entity v2's query types by query-id prefix, named as the collection's per-type folds files name them
# (folds/SemSearch-ES.json, INEX-LD.json, ListSearch.json, QALD2.json hold exactly these queries).
QUERY_TYPES: dict[str, tuple[str, ...]] = {
    "SemSearch-ES": ("SemSearch_ES-",),
    "INEX-LD": ("INEX_LD-",),
    "ListSearch": ("INEX_XER-", "SemSearch_LS-", "TREC_Entity-"),
    "QALD2": ("QALD2_tr-", "QALD2_te-"),
}
ALL_QUERIES = "all"
# `<dbpedia:Albert_Einstein>`: a prefixed resource name in angle brackets.
_PREFIXED_RESOURCE = re.compile(r"<[^:<>]+:(.+)>")


@dataclasses.dataclass(frozen=True)
class Fold:
  """One fold of a collection's cross-validation: alpha is chosen on `training` and applied to `testing`."""
  training: tuple[str, ...]
  testing: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class FoldChoice:
  """What one fold chose: alpha, and the training queries' mean NDCG@100 at each value of the grid."""
  alpha: float
  training_ndcg: tuple[float, ...]

  @property
  def best_training_ndcg(self) -> float:
    return max(self.training_ndcg)


def read_run(path: epath.PathLike) -> Run:
  """A TREC run file; a line that is not `qid Q0 docid rank score tag` with an integer rank and a finite
  score, or that repeats a (query, entity) pair, is an error naming `<file>:<line>`."""
  run: Run = {}
  first_line: dict[tuple[str, str], int] = {}
  for number, line in io.row_lines(path):
    fields = line.split()
    if len(fields) != 6:
      raise io.DataFormatError(f"{path}:{number}: expected 6 fields `qid Q0 docid rank score tag`, found "
                               f"{len(fields)}: {line[:100]!r}")
    query, _, entity, rank, score, _ = fields
    try:
      int(rank)
      value = float(score)
    except ValueError:
      raise io.DataFormatError(f"{path}:{number}: the rank must be an integer and the score a number; found "
                               f"rank {rank!r}, score {score!r}.") from None
    if not math.isfinite(value):
      raise io.DataFormatError(f"{path}:{number}: score {score!r} is not finite.")
    _check_new_pair(path, number, query, entity, first_line)
    run.setdefault(query, {})[entity] = value
  return run


def read_qrels(path: epath.PathLike) -> Qrels:
  """A qrels file, `qid Q0 docid relevance`; a line with a tab is split at tabs only (an entity id may then hold
  spaces), any other at whitespace. A malformed line or a repeated (query, entity) pair is an error naming
  `<file>:<line>`."""
  qrels: Qrels = {}
  first_line: dict[tuple[str, str], int] = {}
  for number, line in io.row_lines(path):
    fields = [field.strip() for field in line.split("\t")] if "\t" in line else line.split()
    if len(fields) != 4 or not all(fields):
      raise io.DataFormatError(f"{path}:{number}: expected 4 fields `qid Q0 docid relevance`, found "
                               f"{sum(1 for field in fields if field)}: {line[:100]!r}")
    query, _, entity, relevance = fields
    try:
      grade = int(relevance)
    except ValueError:
      raise io.DataFormatError(f"{path}:{number}: relevance {relevance!r} is not an integer.") from None
    _check_new_pair(path, number, query, entity, first_line)
    qrels.setdefault(query, {})[entity] = grade
  return qrels


def read_texts(path: epath.PathLike) -> dict[str, str]:
  """An `id<TAB>text` file (queries, entity descriptions); a line without a tab, an empty id or text, or a
  repeated id is an error naming `<file>:<line>`."""
  texts: dict[str, str] = {}
  first_line: dict[str, int] = {}
  for number, line in io.row_lines(path):
    identifier, tab, text = line.partition("\t")
    text = " ".join(text.replace("\t", " ").split())  # BLP reads further tabs as spaces.
    if not tab or not text:
      raise io.DataFormatError(f"{path}:{number}: expected `id<TAB>text` with a non-empty text: {line[:100]!r}")
    io.check_new_id(path, number, identifier.strip(), first_line)
    texts[identifier.strip()] = text
  return texts


def read_folds(path: epath.PathLike) -> dict[str, Fold]:
  """The folds file; invalid JSON is an error naming `<file>:<line>`, and so is (naming the file and fold) a fold
  without lists of query ids (or with an empty one), a query both trained and tested in one fold, or one tested in two folds."""
  text = "\n".join(io.read_lines(path))
  try:
    raw = json.loads(text)
  except json.JSONDecodeError as error:
    raise io.DataFormatError(f"{path}:{error.lineno}: not valid JSON ({error.msg}).") from None
  if not isinstance(raw, dict) or not raw:
    raise io.DataFormatError(f"{path}: expected a JSON object of folds, {{\"0\": {{\"training\": [...], "
                             "\"testing\": [...]}}, ...}.")
  folds, tested_in = {}, {}
  for name, fold in raw.items():
    lists = {key: fold.get(key) if isinstance(fold, dict) else None for key in ("training", "testing")}
    for key, queries in lists.items():
      if not isinstance(queries, list) or not all(isinstance(query, str) and query for query in queries):
        raise io.DataFormatError(f"{path}: fold {name!r} needs a list of query ids under {key!r}.")
      if not queries:  # A fold's alpha is chosen on its training queries and scored on its testing ones.
        raise io.DataFormatError(f"{path}: fold {name!r} has no query ids under {key!r}.")
    both = sorted(set(lists["training"]) & set(lists["testing"]))
    if both:
      raise io.DataFormatError(f"{path}: fold {name!r} both trains and tests on {both[:3]} ({len(both)} queries).")
    for query in lists["testing"]:
      if query in tested_in:
        raise io.DataFormatError(f"{path}: query {query!r} is tested in folds {tested_in[query]!r} and {name!r}.")
      tested_in[query] = name
    folds[name] = Fold(tuple(lists["training"]), tuple(lists["testing"]))
  return folds


def write_run(run: Run, path: epath.PathLike, tag: str) -> None:
  """Writes `run` as a TREC run file, each query's entities ranked as trec_eval ranks them; scores are written
  in full precision, so that the file evaluates to the numbers computed from `run`. The file is written whole or
not at all."""
  with outputs.atomic_writer(path) as file:
    for query in sorted(run):
      for rank, (entity, score) in enumerate(ranked(run[query]), 1):
        file.write(f"{query} Q0 {entity} {rank} {score!r} {tag}\n")


def ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
  """(entity, score) pairs best first, ties broken as trec_eval breaks them (by entity id, last first)."""
  return sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)


def entity_name(entity: str) -> str:
  """The readable name of a resource id: `<dbpedia:Albert_Einstein>` -> 'Albert Einstein' (any other id is
  read the same way without its brackets and prefix)."""
  match = _PREFIXED_RESOURCE.fullmatch(entity)
  return (match.group(1) if match else entity).replace("_", " ")


def read_name_descriptions(path: epath.PathLike) -> dict[str, str]:
  """name -> description from `id<TAB>Name -- description` lines (FB15k-237's fb-entity2text-new.txt). A line
  without ' -- ' or with an empty description gives none; a name on several lines is ambiguous and gives none."""
  found: dict[str, str] = {}
  seen: set[str] = set()
  ambiguous: set[str] = set()
  for number, line in io.row_lines(path):
    _, tab, text = line.partition("\t")
    if not tab:
      raise io.DataFormatError(f"{path}:{number}: expected `id<TAB>Name -- description`: {line[:100]!r}")
    name, _, description = (part.strip() for part in text.partition(" -- "))
    if name in seen:
      ambiguous.add(name)
      found.pop(name, None)
    elif description:
      found[name] = description
    seen.add(name)
  logging.info("%s: %d names with a description; %d names left out as ambiguous.", path, len(found),
               len(ambiguous))
  return found


def name_texts(entities: Iterable[str], descriptions: Mapping[str, str]) -> dict[str, str]:
  """Each entity's text: its name, followed by ' -- ' and the description of that exact name where there is one
  (the layout of the FB15k-237 texts that BLP models read)."""
  texts = {}
  for entity in entities:
    name = entity_name(entity)
    texts[entity] = f"{name} -- {descriptions[name]}" if name in descriptions else name
  return texts


def bm25_run(queries: Mapping[str, str], entity_texts: Mapping[str, str], depth: int = 100) -> Run:
  """Per query, the `depth` entities of best BM25 score (`evaluation.bm25`) over `entity_texts`; entities that
  share no word with the query (score 0) are not retrieved, and equal scores keep entity-id order."""
  entities = sorted(entity_texts)
  index = bm25.BM25Index([entity_texts[entity] for entity in entities])
  query_ids = list(queries)
  scores = index.scores([queries[query] for query in query_ids])  # [Q, E]
  run: Run = {}
  for query, row in zip(query_ids, scores):
    top = np.argsort(-row, kind="stable")[:depth]
    run[query] = {entities[j]: float(row[j]) for j in top if row[j] > 0}
  return run


def check_similarity(similarity: str) -> None:
  """A ValueError naming the `similarity` key unless it is one of `SIMILARITIES`."""
  if similarity not in SIMILARITIES:
    raise ValueError(f"similarity={similarity!r}: must be one of {', '.join(map(repr, SIMILARITIES))}.")


def similarity_run(candidates: Run, query_ids: Sequence[str], query_vectors: np.ndarray,
                   entity_ids: Sequence[str], entity_vectors: np.ndarray, similarity: str = "inner_product") -> Run:
  """The similarity (`SIMILARITIES`) between each query's vector and each of its candidates' vectors (rows of the
  given matrices, in the order of the id lists); a candidate without a vector gets 0, as in BLP."""
  check_similarity(similarity)
  queries, entities = np.asarray(query_vectors, np.float64), np.asarray(entity_vectors, np.float64)
  if similarity == "cosine":
    unit = lambda vectors: vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    queries, entities = unit(queries), unit(entities)
  query_row = {query: row for row, query in enumerate(query_ids)}
  entity_row = {entity: row for row, entity in enumerate(entity_ids)}
  scored: Run = {}
  for query, scores in candidates.items():
    with_vector = [entity for entity in scores if entity in entity_row]
    scored[query] = {entity: 0.0 for entity in scores}
    if with_vector:
      products = entities[[entity_row[entity] for entity in with_vector]] @ queries[query_row[query]]
      scored[query].update(zip(with_vector, map(float, products)))
  return scored


def combine(first_stage: Run, similarity: Run, alpha: float) -> Run:
  """alpha * similarity + (1 - alpha) * first-stage score, for every candidate of the first stage."""
  return {query: {entity: alpha * similarity.get(query, {}).get(entity, 0.0) + (1.0 - alpha) * score
                  for entity, score in scores.items()}
          for query, scores in first_stage.items()}


def _trec_ordered(run: Run, queries: Collection[str]) -> list[ir_measures.ScoredDoc]:
  # Each entity's score is its position in `ranked`, so that the order is this module's trec_eval order whatever
  # the evaluator does with equal scores.
  return [ir_measures.ScoredDoc(query, entity, float(-i))
          for query in queries for i, (entity, _) in enumerate(ranked(run.get(query, {})))]


def _check_judged(qrels: Qrels, queries: Collection[str]) -> None:
  unjudged = sorted(query for query in queries if query not in qrels)
  if unjudged:
    raise ValueError(f"{len(unjudged)} queries have no judgements, e.g. {unjudged[:3]}.")


def ndcg_by_cutoff(run: Run, qrels: Qrels, queries: Collection[str],
                   cutoffs: Sequence[int]) -> dict[int, dict[str, float]]:
  """cutoff -> trec_eval's NDCG@cutoff of each query of `queries` (all judged in `qrels`), in one evaluation; 0 for
  a query without a ranking."""
  _check_judged(qrels, queries)
  judged = [ir_measures.Qrel(query, entity, grade) for query in queries for entity, grade in qrels[query].items()]
  found = {(metric.measure.params["cutoff"], metric.query_id): metric.value for metric in ir_measures.iter_calc(
      [ir_measures.nDCG @ cutoff for cutoff in cutoffs], judged, _trec_ordered(run, queries))}
  return {cutoff: {query: float(found.get((cutoff, query), 0.0)) for query in queries} for cutoff in cutoffs}


def ndcg(run: Run, qrels: Qrels, queries: Collection[str], cutoff: int) -> dict[str, float]:
  """trec_eval's NDCG@cutoff of each query of `queries` (all judged in `qrels`); 0 for one without a ranking."""
  return ndcg_by_cutoff(run, qrels, queries, (cutoff,))[cutoff]


def mean_ndcg(run: Run, qrels: Qrels, queries: Collection[str], cutoff: int) -> float:
  """The mean over `queries` of `ndcg`."""
  if not queries:
    raise ValueError("No queries to evaluate.")
  return float(np.mean(list(ndcg(run, qrels, queries, cutoff).values())))


def choose_alpha(first_stage: Run, similarity: Run, qrels: Qrels, queries: Collection[str],
                 alphas: Sequence[float] = ALPHAS) -> FoldChoice:
  """The alpha of `alphas` whose combined run has the best mean NDCG@100 over `queries` (the first on a tie)."""
  scores = tuple(mean_ndcg(combine(first_stage, similarity, alpha), qrels, queries, SELECTION_CUTOFF)
                 for alpha in alphas)
  return FoldChoice(alphas[int(np.argmax(scores))], scores)


def rerank_folds(first_stage: Run, similarity: Run, qrels: Qrels, folds: Mapping[str, Fold],
                 alphas: Sequence[float] = ALPHAS) -> tuple[Run, dict[str, FoldChoice]]:
  """The re-ranked run of every fold's testing queries, each fold's with the alpha chosen on its training
  queries, and each fold's choice."""
  run: Run = {}
  choices = {}
  for name, fold in folds.items():
    choices[name] = choose_alpha(first_stage, similarity, qrels, fold.training, alphas)
    tested = {query: first_stage.get(query, {}) for query in fold.testing}
    run.update(combine(tested, similarity, choices[name].alpha))
  return run, choices


def query_type(query: str) -> str | None:
  """The DBpedia-Entity v2 query type (a key of `QUERY_TYPES`) of a query id, None for an id of none."""
  return next((name for name, prefixes in QUERY_TYPES.items() if query.startswith(prefixes)), None)


def query_groups(queries: Iterable[str]) -> dict[str, list[str]]:
  """`ALL_QUERIES` -> every query, then each query type that has queries -> its queries, in the given order."""
  queries = list(queries)
  groups = {ALL_QUERIES: queries}
  for name in QUERY_TYPES:
    members = [query for query in queries if query_type(query) == name]
    if members:
      groups[name] = members
  return groups


def compare_by_type(first_stage: Run, reranked: Run, qrels: Qrels, queries: Collection[str]) -> dict[str, float]:
  """The re-ranked run against the first stage over `queries` (`ALL_QUERIES`) and per query type, keys
  `<group>/num_queries`, `<group>/first_stage/ndcg@k`, `<group>/ndcg@k` (the re-ranked run's) and
  `<group>/p_value_ndcg@k`: the two-sided paired t-test of the two runs' per-query NDCG@k, for k in `CUTOFFS`."""
  # Each query's NDCG once per run; the groups take their members' values.
  before, after = (ndcg_by_cutoff(run, qrels, queries, CUTOFFS) for run in (first_stage, reranked))
  results: dict[str, float] = {}
  for group, members in query_groups(queries).items():
    results[f"{group}/num_queries"] = len(members)
    for cutoff in CUTOFFS:
      group_before = [before[cutoff][query] for query in members]
      group_after = [after[cutoff][query] for query in members]
      with warnings.catch_warnings():
        # scipy warns, and gives NaN, where the differences have no spread (all 0) or there is one query; neither
        # is evidence of a difference: p = 1.
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        p_value = float(stats.ttest_rel(group_after, group_before).pvalue)
      results[f"{group}/first_stage/ndcg@{cutoff}"] = float(np.mean(group_before))
      results[f"{group}/ndcg@{cutoff}"] = float(np.mean(group_after))
      results[f"{group}/p_value_ndcg@{cutoff}"] = p_value if math.isfinite(p_value) else 1.0
  return results


def queries_with_relevant(run: Run, qrels: Qrels, queries: Iterable[str], depth: int) -> int:
  """How many of `queries` have an entity of relevance > 0 in their run's top `depth`."""
  return sum(1 for query in queries
             if any(qrels.get(query, {}).get(entity, 0) > 0 for entity, _ in ranked(run.get(query, {}))[:depth]))


def _check_new_pair(path: epath.PathLike, number: int, query: str, entity: str,
                    first_line: dict[tuple[str, str], int]) -> None:
  if (query, entity) in first_line:
    raise io.DataFormatError(f"{path}:{number}: query {query!r} lists {entity!r} again (first on line "
                             f"{first_line[query, entity]}).")
  first_line[query, entity] = number
