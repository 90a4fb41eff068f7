"""BLP's re-ranking of a first-stage entity run: file readers, the combined score, alpha per fold, trec_eval's
NDCG, and the `docent_jax.rerank` command on a tiny collection with a tiny trained BLP run."""
import json
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import docent_jax
from docent_jax import experiment
from docent_jax import rerank
from docent_jax.data import io
from docent_jax.evaluation import entity_reranking as reranking
import kg_fixtures
import tiny_training

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
LOG3 = math.log2(3)

# Two queries, three entities, two folds (each trains on one query and tests on the other).
QRELS = {"q1": {"a": 2, "b": 0, "c": 1}, "q2": {"a": 0, "b": 1, "c": 0}}
FIRST_STAGE = {"q1": {"a": 0.0, "b": 1.0, "c": 0.5}, "q2": {"a": 0.2, "b": 0.6, "c": 0.9}}
SIMILARITY = {"q1": {"a": 1.0, "b": 0.0, "c": 0.4}, "q2": {"a": 0.9, "b": 0.1, "c": 0.0}}
FOLDS = {"0": reranking.Fold(training=("q2",), testing=("q1",)),
         "1": reranking.Fold(training=("q1",), testing=("q2",))}


def _write(path: pathlib.Path, text: str) -> pathlib.Path:
  path.write_text(text)
  return path


def test_the_grid_is_blps():
  assert len(reranking.ALPHAS) == 20
  assert reranking.ALPHAS[0] == 0.0 and reranking.ALPHAS[-1] == 1.0
  np.testing.assert_allclose(np.diff(reranking.ALPHAS), 1 / 19)


def test_the_combined_score_mixes_similarity_and_first_stage():
  combined = reranking.combine(FIRST_STAGE, {"q1": {"a": 1.0}}, 0.25)
  # a: 0.25 * 1 + 0.75 * 0; an entity without a similarity counts 0: b: 0.75 * 1.0.
  assert combined["q1"] == pytest.approx({"a": 0.25, "b": 0.75, "c": 0.375})
  assert combined["q2"] == pytest.approx({"a": 0.15, "b": 0.45, "c": 0.675})


def test_ndcg_is_trec_evals_with_linear_gains():
  # q1 ranked b (0), c (1), a (2): DCG = 1/log2(3) + 2/log2(4); ideal a, c: 2 + 1/log2(3).
  q1 = (1 / LOG3 + 2 / 2) / (2 + 1 / LOG3)
  q2 = (1 / LOG3) / 1  # c, b, a: the one relevant entity second.
  found = reranking.ndcg(FIRST_STAGE, QRELS, ["q1", "q2"], 10)
  assert found == pytest.approx({"q1": q1, "q2": q2})
  assert reranking.mean_ndcg(FIRST_STAGE, QRELS, ["q1", "q2"], 100) == pytest.approx((q1 + q2) / 2)
  # Cut at 1: only b and c count.
  assert reranking.ndcg(FIRST_STAGE, QRELS, ["q1", "q2"], 1) == pytest.approx({"q1": 0.0, "q2": 0.0})
  # A query without a ranking counts 0; one without judgements is an error.
  assert reranking.ndcg({"q1": FIRST_STAGE["q1"]}, QRELS, ["q1", "q2"], 10)["q2"] == 0.0
  with pytest.raises(ValueError, match="no judgements"):
    reranking.ndcg(FIRST_STAGE, QRELS, ["q1", "q3"], 10)


def test_alpha_is_chosen_per_fold_on_its_training_queries():
  alphas = (0.0, 0.6, 1.0)
  # Fold 1 trains on q1: a = alpha, b = 1 - alpha, c = 0.5 - 0.1 alpha.
  #   alpha 0: b, c, a -> (1/log2 3 + 1) / (2 + 1/log2 3); 0.6: a .6, c .44, b .4 -> ideal 1; 1.0: ideal 1 too,
  #   so the first of the tied values, 0.6.
  # Fold 0 trains on q2: a = .2 + .7 alpha, b = .6 - .5 alpha, c = .9 - .9 alpha.
  #   alpha 0: c, b, a -> 1/log2 3; 0.6: a .62, c .36, b .30 -> 1/log2 4 = 0.5; 1.0: a, b, c -> 1/log2 3: alpha 0.
  run, choices = reranking.rerank_folds(FIRST_STAGE, SIMILARITY, QRELS, FOLDS, alphas)
  assert choices["1"].alpha == 0.6 and choices["0"].alpha == 0.0
  assert choices["1"].training_ndcg == pytest.approx(((1 / LOG3 + 1) / (2 + 1 / LOG3), 1.0, 1.0))
  assert choices["0"].training_ndcg == pytest.approx((1 / LOG3, 0.5, 1 / LOG3))
  # Each query is tested with the alpha chosen on the other: q1 with 0 (its first stage), q2 with 0.6 (a, c, b).
  assert run["q1"] == FIRST_STAGE["q1"]
  assert run["q2"] == pytest.approx({"a": 0.62, "b": 0.30, "c": 0.36})
  assert reranking.mean_ndcg(run, QRELS, ["q1", "q2"], 10) == pytest.approx(((1 / LOG3 + 1) / (2 + 1 / LOG3) + 0.5) / 2)


def test_on_blps_grid_the_first_alpha_that_orders_q1_ideally_wins():
  # a, c, b needs alpha > 5/9 (c over b; a over c needs only alpha > 5/11): the first grid value above is 11/19.
  choice = reranking.choose_alpha(FIRST_STAGE, SIMILARITY, QRELS, ["q1"])
  assert choice.alpha == pytest.approx(11 / 19)
  assert choice.training_ndcg[11:] == pytest.approx([1.0] * 9)
  assert max(choice.training_ndcg[:11]) < 1.0


@pytest.mark.parametrize("similarity, expected", [
    ("inner_product", {"x": 24.0, "y": -8.0, "z": 0.0}), ("cosine", {"x": 24 / 25, "y": -4 / 5, "z": 0.0})])
def test_similarity_of_candidates_without_a_vector_is_zero(similarity, expected):
  scored = reranking.similarity_run({"q": {"x": 5.0, "y": 1.0, "z": 2.0}}, ["q"], np.array([[3.0, 4.0]]),
                                    ["x", "y"], np.array([[4.0, 3.0], [0.0, -2.0]]), similarity)
  assert scored == {"q": pytest.approx(expected)}


def test_inner_product_and_cosine_order_candidates_differently():
  # "long" is further from the query's direction but 10 times as long: first by inner product, last by cosine.
  query = np.array([[1.0, 0.0]])
  entities = np.array([[1.0, 0.0], [6.0, 8.0]])  # "near": cosine 1, product 1; "long": cosine 0.6, product 6.
  candidates = {"q": {"near": 0.0, "long": 0.0}}
  order = lambda similarity: [entity for entity, _ in reranking.ranked(reranking.similarity_run(
      candidates, ["q"], query, ["near", "long"], entities, similarity)["q"])]
  assert order("inner_product") == ["long", "near"]
  assert order("cosine") == ["near", "long"]
  assert order("inner_product") == [entity for entity, _ in reranking.ranked(reranking.similarity_run(
      candidates, ["q"], query, ["near", "long"], entities)["q"])]  # The inner product is the default.


def test_an_unknown_similarity_is_an_error_naming_the_key():
  with pytest.raises(ValueError, match="^similarity='dot': must be one of 'inner_product', 'cosine'"):
    reranking.similarity_run({"q": {"x": 1.0}}, ["q"], np.ones((1, 2)), ["x"], np.ones((1, 2)), "dot")


def test_query_types_are_dbpedia_entitys_by_id_prefix():
  assert [reranking.query_type(query) for query in (
      "SemSearch_ES-1", "INEX_LD-2009022", "INEX_XER-60", "SemSearch_LS-1", "TREC_Entity-7", "QALD2_tr-1",
      "QALD2_te-99", "Q-1", "SemSearch_ESX-1")] == [
      "SemSearch-ES", "INEX-LD", "ListSearch", "ListSearch", "ListSearch", "QALD2", "QALD2", None, None]
  assert reranking.query_groups(["QALD2_te-1", "Q-1", "INEX_XER-2", "QALD2_tr-3"]) == {
      "all": ["QALD2_te-1", "Q-1", "INEX_XER-2", "QALD2_tr-3"], "ListSearch": ["INEX_XER-2"],
      "QALD2": ["QALD2_te-1", "QALD2_tr-3"]}


def test_the_query_types_are_those_of_the_collections_per_type_folds(shared_data_dir):
  directory = shared_data_dir / "dbpedia_entity"
  queries = reranking.read_texts(directory / "queries-v2.txt")
  assert len(queries) == 467 and all(reranking.query_type(query) for query in queries)
  for name in reranking.QUERY_TYPES:
    folds = reranking.read_folds(directory / "folds" / f"{name}.json")
    tested = {query for fold in folds.values() for query in fold.testing}
    assert tested == {query for query in queries if reranking.query_type(query) == name}, name


def test_ndcg_and_t_test_per_query_type():
  # Two SemSearch ES queries and one QALD-2 query, one relevant entity each (grade 1, ideal DCG 1).
  qrels = {"SemSearch_ES-1": {"a": 1, "b": 0}, "SemSearch_ES-2": {"c": 1, "d": 0}, "QALD2_te-1": {"e": 1, "f": 0}}
  first_stage = {"SemSearch_ES-1": {"a": 1.0, "b": 2.0}, "SemSearch_ES-2": {"c": 1.0, "d": 2.0},
                 "QALD2_te-1": {"e": 2.0, "f": 1.0}}
  # Re-ranked: SemSearch_ES-1 moves its relevant entity to the top, SemSearch_ES-2 keeps it second (a tie that
  # trec_eval breaks by entity id, last first: d before c), QALD2_te-1 loses it to rank 2.
  reranked = {"SemSearch_ES-1": {"a": 3.0, "b": 2.0}, "SemSearch_ES-2": {"c": 2.0, "d": 2.0},
              "QALD2_te-1": {"e": 1.0, "f": 2.0}}
  results = reranking.compare_by_type(first_stage, reranked, qrels, list(qrels))
  second = 1 / LOG3  # The relevant entity at rank 2.
  for cutoff in (10, 100):
    expected = {"all/first_stage": (second + second + 1) / 3, "all": (1 + second + second) / 3,
                "SemSearch-ES/first_stage": second, "SemSearch-ES": (1 + second) / 2,
                "QALD2/first_stage": 1.0, "QALD2": second}
    assert {key: results[f"{key}/ndcg@{cutoff}"] for key in expected} == pytest.approx(expected)
  assert results["all/num_queries"] == 3 and results["SemSearch-ES/num_queries"] == 2
  assert results["QALD2/num_queries"] == 1 and "ListSearch/num_queries" not in results
  # SemSearch ES's differences are 1 - 1/log2 3 and 0: t = 1 with 1 degree of freedom, two-sided p = 0.5.
  assert results["SemSearch-ES/p_value_ndcg@10"] == pytest.approx(0.5)
  # One query cannot be tested, nor can equal runs: p = 1, no evidence of a difference.
  assert results["QALD2/p_value_ndcg@10"] == 1.0
  assert reranking.compare_by_type(first_stage, first_stage, qrels, list(qrels))["all/p_value_ndcg@100"] == 1.0
  assert all(0.0 <= value <= 1.0 for key, value in results.items() if "/p_value_ndcg@" in key)


def test_bm25_first_stage_retrieves_only_matching_entities_best_first():
  texts = {"e1": "red apple", "e2": "green apple tree", "e3": "blue sky", "e4": "red red car"}
  run = reranking.bm25_run({"q": "red apple"}, texts, depth=2)
  # e1 holds both words; e4 "red" twice and e2 "apple" once in a longer text: e4 second.
  assert list(run["q"]) == ["e1", "e4"]
  assert set(reranking.bm25_run({"q": "red apple"}, texts, depth=10)["q"]) == {"e1", "e2", "e4"}


def test_queries_with_a_relevant_entity_in_the_top():
  assert reranking.queries_with_relevant(FIRST_STAGE, QRELS, ["q1", "q2"], 1) == 0  # b and c lead.
  assert reranking.queries_with_relevant(FIRST_STAGE, QRELS, ["q1", "q2"], 2) == 2


def test_names_and_descriptions(tmp_path):
  assert reranking.entity_name("<dbpedia:Albert_Einstein>") == "Albert Einstein"
  assert reranking.entity_name("<dbpedia:Python_(programming_language)>") == "Python (programming language)"
  assert reranking.entity_name("<dbpedia:AC/DC>") == "AC/DC"
  assert reranking.entity_name("plain_id") == "plain id"
  path = _write(tmp_path / "fb.txt", "/m/1\tAlbert Einstein -- A physicist.\n/m/2\tParis -- A city.\n"
                "/m/3\tParis -- A figure of myth.\n/m/4\tNo Description -- \n/m/5\tBare Name\n")
  descriptions = reranking.read_name_descriptions(path)
  assert descriptions == {"Albert Einstein": "A physicist."}  # Paris is ambiguous.
  assert reranking.name_texts(["<dbpedia:Albert_Einstein>", "<dbpedia:Paris>"], descriptions) == {
      "<dbpedia:Albert_Einstein>": "Albert Einstein -- A physicist.", "<dbpedia:Paris>": "Paris"}


def test_readers_parse_trec_and_dbpedia_entity_files(tmp_path):
  run = _write(tmp_path / "a.run", "q1 Q0 <dbpedia:A> 1 2.5 bm25\nq1 Q0 <dbpedia:B> 2 -1e-3 bm25\n\n"
               "q2 Q0 <dbpedia:A> 1 7 bm25\n")
  assert reranking.read_run(run) == {"q1": {"<dbpedia:A>": 2.5, "<dbpedia:B>": -0.001}, "q2": {"<dbpedia:A>": 7.0}}
  qrels = _write(tmp_path / "qrels.txt", "INEX_LD-2009022\tQ0\t<dbpedia:Afghan_cuisine>\t0\n"
                 "INEX_LD-2009022\tQ0\t<dbpedia:Ambuyat>\t2\nq2 0 doc 1\n")
  assert reranking.read_qrels(qrels) == {"INEX_LD-2009022": {"<dbpedia:Afghan_cuisine>": 0, "<dbpedia:Ambuyat>": 2},
                                         "q2": {"doc": 1}}
  texts = _write(tmp_path / "queries.txt", "q1\tvietnam war movie\nq2\t July, 1850  president\tdied\n")
  assert reranking.read_texts(texts) == {"q1": "vietnam war movie", "q2": "July, 1850 president died"}
  folds = _write(tmp_path / "folds.json", json.dumps({"0": {"training": ["q2"], "testing": ["q1"]},
                                                      "1": {"training": ["q1"], "testing": ["q2"]}}))
  assert reranking.read_folds(folds) == FOLDS


def test_a_written_run_evaluates_to_the_same_numbers(tmp_path):
  path = tmp_path / "out.run"
  run = {"q1": {"a": 1 / 3, "b": 0.1 + 0.2, "c": 1 / 3}, "q2": {"c": 1e-17, "b": 0.0}}
  reranking.write_run(run, path, "tag")
  lines = path.read_text().splitlines()
  assert lines[:3] == [f"q1 Q0 c 1 {1 / 3!r} tag", f"q1 Q0 a 2 {1 / 3!r} tag", f"q1 Q0 b 3 {0.1 + 0.2!r} tag"]
  assert reranking.read_run(path) == run
  for cutoff in (1, 10):
    assert reranking.mean_ndcg(reranking.read_run(path), QRELS, ["q1", "q2"], cutoff) == \
        reranking.mean_ndcg(run, QRELS, ["q1", "q2"], cutoff)


@pytest.mark.parametrize("reader, text, line, message", [
    (reranking.read_run, "q1 Q0 a 1 2.0 t\nq1 Q0 b 2 2.0\n", 2, "expected 6 fields"),
    (reranking.read_run, "q1 Q0 a 1 2.0 t\n\nq1 Q0 b two 2.0 t\n", 3, "rank must be an integer"),
    (reranking.read_run, "q1 Q0 a 1 high t\n", 1, "score a number"),
    (reranking.read_run, "q1 Q0 a 1 nan t\n", 1, "not finite"),
    (reranking.read_run, "q1 Q0 a 1 2.0 t\nq2 Q0 a 1 2.0 t\nq1 Q0 a 3 1.0 t\n", 3, "again \\(first on line 1\\)"),
    (reranking.read_qrels, "q1\tQ0\t<dbpedia:A>\t1\nq1\tQ0\t<dbpedia:B>\n", 2, "expected 4 fields"),
    (reranking.read_qrels, "q1\tQ0\t<dbpedia:A>\t1\nq1\tQ0\t\t1\n", 2, "expected 4 fields"),
    (reranking.read_qrels, "q1 Q0 a 1\nq1 Q0 b relevant\n", 2, "not an integer"),
    (reranking.read_qrels, "q1 Q0 a 1\nq1 Q0 a 2\n", 2, "again"),
    (reranking.read_texts, "q1\tfine\nq2 no tab\n", 2, "expected `id<TAB>text`"),
    (reranking.read_texts, "q1\tfine\nq2\t  \n", 2, "non-empty text"),
    (reranking.read_texts, "q1\tfine\nq1\tagain\n", 2, "duplicate id"),
    (reranking.read_name_descriptions, "/m/1\tA -- b\n/m/2 A -- b\n", 2, "Name -- description"),
    (reranking.read_folds, '{"0": {"training": ["q1"],\n "testing": ["q2"]]\n}}\n', 2, "not valid JSON"),
])
def test_a_malformed_line_is_an_error_naming_file_and_line(tmp_path, reader, text, line, message):
  path = _write(tmp_path / "input.txt", text)
  with pytest.raises(io.DataFormatError, match=f"^{re.escape(str(path))}:{line}: .*{message}"):
    reader(path)


@pytest.mark.parametrize("folds, message", [
    ({"0": {"training": ["q1"]}}, "needs a list of query ids under 'testing'"),
    ({"0": {"training": ["q1"], "testing": [3]}}, "needs a list of query ids under 'testing'"),
    ({"0": {"training": ["q1", "q2"], "testing": ["q2"]}}, "both trains and tests on \\['q2'\\]"),
    ({"0": {"training": ["q2"], "testing": ["q1"]}, "1": {"training": ["q3"], "testing": ["q1"]}},
     "'q1' is tested in folds '0' and '1'"),
    ({"0": {"training": ["q1"], "testing": []}}, "fold '0' has no query ids under 'testing'"),
    ({"0": {"training": [], "testing": ["q1"]}}, "fold '0' has no query ids under 'training'"),
    ([], "expected a JSON object of folds"),
])
def test_malformed_folds_are_errors_naming_the_file(tmp_path, folds, message):
  path = _write(tmp_path / "folds.json", json.dumps(folds))
  with pytest.raises(io.DataFormatError, match=f"^{re.escape(str(path))}: .*{message}"):
    reranking.read_folds(path)


# A tiny entity collection in DBpedia-Entity's formats, with entity texts of the tiny KG's kind.
COLOURS, THINGS = ("red", "green", "blue"), ("stone", "river", "tower", "cloud")
ENTITIES = [f"<dbpedia:{colour.title()}_{thing.title()}>" for colour in COLOURS for thing in THINGS]
QUERIES = {f"Q-{i}": f"{colour} {thing}" for i, (colour, thing) in enumerate(
    [("red", "stone"), ("green", "river"), ("blue", "tower"), ("red", "cloud"), ("green", "stone"), ("blue", "river"),
     ("red", "tower"), ("green", "cloud")])}


def _collection(directory: pathlib.Path) -> dict[str, pathlib.Path]:
  """Queries, qrels (the named entity 2, same thing 1, others of the query's colour 0), 2 folds, descriptions."""
  qrels = []
  for query, text in QUERIES.items():
    colour, thing = text.split()
    for entity in ENTITIES:
      name = reranking.entity_name(entity).lower()
      if colour in name or thing in name:
        grade = 2 if name == text else 1 if thing in name else 0
        qrels.append(f"{query}\tQ0\t{entity}\t{grade}\n")
  ids = list(QUERIES)
  folds = {"0": {"training": ids[:4], "testing": ids[4:]}, "1": {"training": ids[4:], "testing": ids[:4]}}
  descriptions = [f"/m/{i}\t{reranking.entity_name(entity)} -- a {thing} number {i}\n"
                  for i, (entity, thing) in enumerate(zip(ENTITIES, THINGS * 3)) if i % 2 == 0]
  return {"queries": _write(directory / "queries.txt", "".join(f"{q}\t{t}\n" for q, t in QUERIES.items())),
          "qrels": _write(directory / "qrels.txt", "".join(qrels)),
          "folds": _write(directory / "folds.json", json.dumps(folds)),
          "descriptions": _write(directory / "descriptions.txt", "".join(descriptions))}


@pytest.fixture(scope="module")
def blp_run(kg_dir, tfds_dir, tmp_path_factory) -> pathlib.Path:
  """A tiny BLP run trained for 4 steps on the tiny KG."""
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 4
  config.evals.validation.every_steps = 2
  workdir = tmp_path_factory.mktemp("run")
  experiment.train_and_evaluate(config, workdir)
  return workdir / "blp_transe"


def test_the_command_reranks_a_bm25_first_stage(blp_run, tmp_path):
  files = _collection(tmp_path)
  results_path = tmp_path / "out" / "results.json"
  results_path.parent.mkdir()
  results_path.write_text(json.dumps({"other/dbpedia_entity/ndcg@10": 0.5, "tiny/dbpedia_entity/stale": 1.0}))
  command = [sys.executable, "-m", "docent_jax.rerank", f"--run_dir={blp_run}", f"--queries={files['queries']}",
             f"--qrels={files['qrels']}", f"--folds={files['folds']}", f"--descriptions={files['descriptions']}",
             f"--output={tmp_path / 'reranked.run'}", f"--first_stage_output={tmp_path / 'bm25.run'}",
             f"--results={results_path}", "--name=tiny", "--depth=5"]
  done = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(8), capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-3000:]
  results = json.loads(results_path.read_text())
  assert results.pop("other/dbpedia_entity/ndcg@10") == 0.5 and "tiny/dbpedia_entity/stale" not in results
  results = {key.removeprefix("tiny/dbpedia_entity/"): value for key, value in results.items()}
  # Every printed number is in the results.
  printed = dict(line.split(": ") for line in done.stdout.splitlines())
  assert {key.removeprefix("tiny/dbpedia_entity/") for key in printed} == set(results)

  queries, qrels = reranking.read_texts(files["queries"]), reranking.read_qrels(files["qrels"])
  judged = sorted({entity for scores in qrels.values() for entity in scores})
  # The first stage is BM25 over names with the even-numbered entities' descriptions, 5 per query.
  texts = {entity: reranking.entity_name(entity) + (f" -- a {THINGS[i % 4]} number {i}" if i % 2 == 0 else "")
           for i, entity in enumerate(ENTITIES) if entity in judged}
  first_stage = reranking.read_run(tmp_path / "bm25.run")
  assert first_stage == reranking.bm25_run(queries, texts, 5)
  assert all(len(scores) == 5 for scores in first_stage.values())
  assert results["all/num_queries"] == 8 and results["num_judged_entities"] == len(judged) == 12
  assert results["judged_entities_with_description"] == 6
  assert results["candidates_with_text"] == results["num_candidates"]
  assert results["queries_with_relevant_in_top5"] == reranking.queries_with_relevant(first_stage, qrels, queries, 5)

  # The re-ranked run: per fold, alpha * the inner product of the loaded model's encodings + (1 - alpha) * BM25,
  # with the alpha of best training NDCG@100. The tiny model's vectors nearly coincide, so the texts are encoded in
  # the command's batches (every query, then every candidate, sorted by id) on as many devices, which computes the
  # same vectors.
  model = docent_jax.load(blp_run)
  query_ids, candidates = sorted(queries), sorted({entity for scores in first_stage.values() for entity in scores})
  query_vectors = dict(zip(query_ids, model.encode([queries[query] for query in query_ids]).astype(np.float64)))
  entity_vectors = dict(zip(candidates, model.encode([texts[entity] for entity in candidates]).astype(np.float64)))

  def combined(query, alpha):
    return {entity: float(alpha * (entity_vectors[entity] @ query_vectors[query]) + (1 - alpha) * score)
            for entity, score in first_stage[query].items()}

  reranked = reranking.read_run(tmp_path / "reranked.run")
  assert set(reranked) == set(queries)
  for name, fold in reranking.read_folds(files["folds"]).items():
    training = [reranking.mean_ndcg({query: combined(query, alpha) for query in fold.training}, qrels, fold.training,
                                    100) for alpha in reranking.ALPHAS]
    alpha = results[f"fold_{name}/alpha"]
    assert alpha == reranking.ALPHAS[int(np.argmax(training))]
    assert results[f"fold_{name}/training_ndcg@100"] == pytest.approx(max(training))
    for query in fold.testing:
      assert reranked[query] == pytest.approx(combined(query, alpha), abs=1e-6)
  for cutoff in (10, 100):
    assert results[f"all/first_stage/ndcg@{cutoff}"] == pytest.approx(
        reranking.mean_ndcg(first_stage, qrels, list(queries), cutoff))
    assert results[f"all/ndcg@{cutoff}"] == pytest.approx(reranking.mean_ndcg(reranked, qrels, list(queries), cutoff))
    assert 0.0 <= results[f"all/p_value_ndcg@{cutoff}"] <= 1.0
  # The tiny collection's query ids are of no DBpedia-Entity type: all queries is the one group.
  assert not [key for key in results if key.startswith(tuple(reranking.QUERY_TYPES))]


@pytest.mark.parametrize("similarity", reranking.SIMILARITIES)
def test_a_given_first_stage_and_entity_texts_score_entities_without_text_zero(blp_run, tmp_path, similarity):
  files = _collection(tmp_path)
  model = docent_jax.load(blp_run)
  queries, qrels, folds = (reranking.read_texts(files["queries"]), reranking.read_qrels(files["qrels"]),
                           reranking.read_folds(files["folds"]))
  given = {query: {entity: 1.0 / (rank + 1) for rank, entity in enumerate(ENTITIES[i:i + 4])}
           for i, query in enumerate(queries)}
  texts = {entity: f"the abstract of {reranking.entity_name(entity)}" for entity in ENTITIES[:9]}
  first_stage, reranked, results = rerank.rerank(model, queries, qrels, folds, first_stage=given, entity_texts=texts,
                                                 similarity=similarity)
  assert first_stage == given
  assert results["num_candidates"] == 11 and results["candidates_with_text"] == 9  # ENTITIES[9:11] have no text.
  assert "num_judged_entities" not in results and "judged_entities_with_description" not in results
  query = "Q-7"  # Ranks ENTITIES[7:11]: the last two have no text.
  alpha = results[f"fold_{next(n for n, f in folds.items() if query in f.testing)}/alpha"]
  for entity in ENTITIES[9:11]:
    assert reranked[query][entity] == pytest.approx((1 - alpha) * given[query][entity])
  vectors = model.encode([queries[query], texts[ENTITIES[7]]]).astype(np.float64)
  product = vectors[0] @ vectors[1]
  if similarity == "cosine":
    product /= np.linalg.norm(vectors[0]) * np.linalg.norm(vectors[1])
  assert reranked[query][ENTITIES[7]] == pytest.approx(alpha * product + (1 - alpha) * given[query][ENTITIES[7]],
                                                       rel=1e-5, abs=1e-5)


def _rerank_command(blp_run, files, tmp_path, *extra) -> list[str]:
  return [sys.executable, "-m", "docent_jax.rerank", f"--run_dir={blp_run}", f"--queries={files['queries']}",
          f"--qrels={files['qrels']}", f"--folds={files['folds']}", f"--descriptions={files['descriptions']}",
          f"--output={tmp_path / 'reranked.run'}", "--name=tiny", "--depth=5", *extra]


def test_the_command_checks_every_file_before_loading_and_names_the_one_at_fault(blp_run, tmp_path):
  files = _collection(tmp_path)
  damaged = _write(tmp_path / "results.json", '{"other/dbpedia_entity/ndcg@10": 0.5')
  empty_folds = _write(tmp_path / "empty_folds.json", json.dumps({"0": {"training": ["Q-1"], "testing": []}}))
  cases = {  # extra flags -> (exit code, what the one line says)
      (f"--results={damaged}",): (1, f"{damaged} is damaged"),
      (f"--folds={empty_folds}",): (1, f"{empty_folds}: fold '0' has no query ids under 'testing'"),
      ("--output=/proc/x",): (1, "--output=/proc/x: cannot write in /proc"),
      (f"--output={files['queries']}",): (2, "is the --queries file"),
      ("--depth=0",): (2, "--depth=0: must be at least 1"),
      ("--similarity=dot",): (2, "--similarity=dot: must be one of inner_product, cosine"),
  }
  for extra, (code, message) in cases.items():
    command = _rerank_command(blp_run, files, tmp_path, *extra)
    run = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True, text=True)
    said = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("I")]
    assert run.returncode == code and len(said) == 1 and message in said[0], (extra, run.stderr[-3000:])
    assert "Loaded" not in run.stderr  # Refused before the model loads.
  assert damaged.read_text() == '{"other/dbpedia_entity/ndcg@10": 0.5'
  assert not (tmp_path / "reranked.run").exists()


def test_results_on_a_full_disk_keep_every_earlier_key(blp_run, tmp_path):
  files = _collection(tmp_path)
  results = tmp_path / "results.json"
  earlier = {f"model_{i}/dbpedia_entity/ndcg@10": i / 1000 for i in range(400)}  # ~20 KB: more than may be written.
  results.write_text(json.dumps(earlier))
  preamble = ("import resource, runpy, signal, sys\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))\n"
              "sys.argv = sys.argv[1:]\n"
              "runpy.run_module('docent_jax.rerank', run_name='__main__')\n")
  command = _rerank_command(blp_run, files, tmp_path, f"--results={results}")
  run = subprocess.run([sys.executable, "-c", preamble, *command[2:]], cwd=REPO_ROOT,
                       env=tiny_training.subprocess_env(1), capture_output=True, text=True)
  assert run.returncode == 1, run.stderr[-3000:]
  errors = [line for line in run.stderr.splitlines() if line.startswith("E")]
  assert len(errors) == 1 and f"{results}: not written (File too large)" in errors[0], run.stderr[-3000:]
  assert json.loads(results.read_text()) == earlier
  assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # No partial file left behind.


def test_queries_the_first_stage_left_empty_are_counted_and_logged(blp_run, tmp_path, caplog):
  files = _collection(tmp_path)
  model = docent_jax.load(blp_run)
  queries, qrels, folds = (reranking.read_texts(files["queries"]), reranking.read_qrels(files["qrels"]),
                           reranking.read_folds(files["folds"]))
  given = {query: {entity: 1.0} for query, entity in zip(queries, ENTITIES) if query != "Q-3"}
  with caplog.at_level("WARNING"):
    _, reranked, results = rerank.rerank(model, queries, qrels, folds, first_stage=given)
  assert results["queries_without_candidates"] == 1 and reranked["Q-3"] == {}
  assert "1 of 8 queries have no candidates in the first stage (e.g. Q-3); they score 0." in caplog.text
