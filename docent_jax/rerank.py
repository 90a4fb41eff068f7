"""Re-ranks a first-stage entity-retrieval run with a trained run's encoder (BLP's information-retrieval task on
DBpedia-Entity v2; the formula, the alpha grid and its choice per fold are in `evaluation.entity_reranking`).

  python -m docent_jax.rerank --run_dir=WORKDIR/<model> --queries=queries-v2_stopped.txt --qrels=qrels-v2.txt \
      --folds=folds/all_queries.json --first_stage=bm25f-ca_v2.run --entity_texts=descriptions.txt \
      --output=reranked.run --results=results.json [--similarity=inner_product|cosine]

The similarity of a query's and an entity's encodings is their inner product (the paper's eq. 4), or their cosine
with --similarity=cosine. The paper's setting: --first_stage is DBpedia-Entity's BM25F-CA run
(`runs/v2/bm25f-ca_v2.run`) and --entity_texts an `id<TAB>text` file of its entities' DBpedia abstracts, ids as in
the run (`<dbpedia:Name>`). Each candidate is scored with its text's encoding; one without a text gets similarity 0.

Without those files (--first_stage and --entity_texts empty), the setting is built from what the collection
itself holds: the candidate pool is every entity judged in the qrels, each entity's text is its name read from
its id (`<dbpedia:Albert_Einstein>` -> 'Albert Einstein'), followed by ' -- ' and a description where
--descriptions (an `id<TAB>Name -- description` file, FB15k-237's fb-entity2text-new.txt) has one for exactly that
name, and the first stage is BM25 over those texts, the top --depth entities of each query. The pool holds every
judged entity and nothing else, so this first stage is not comparable with one over all of DBpedia.

Writes the re-ranked run (--output), optionally the BM25 first stage (--first_stage_output), and adds to the JSON
--results the keys `<name>/dbpedia_entity/...`: over every fold's testing queries (`all/`) and per DBpedia-Entity v2
query type (`SemSearch-ES/`, `INEX-LD/`, `ListSearch/`, `QALD2/`), NDCG@10 and NDCG@100 of the first stage
(`<type>/first_stage/ndcg@k`) and of the re-ranked run (`<type>/ndcg@k`), the p-value of a paired t-test of the two
(`<type>/p_value_ndcg@k`) and the number of queries; each fold's alpha; and coverage counts (a query the first
stage ranks no entity for scores 0, and is counted: `queries_without_candidates`); keys of other models in that file
stay.
Every input file and flag is read and checked before the model loads, and every output is written whole (a full
disk or a signal leaves an earlier file as it was).
"""
import time

from absl import app
from absl import flags
from absl import logging
import numpy as np

from docent_jax import cli
from docent_jax import outputs

from docent_jax.evaluation import entity_reranking as reranking
from docent_jax.inference import model as inference_model
from docent_jax.inference import protocol

COLLECTION = "dbpedia_entity"


def rerank(model: protocol.Model, queries: dict[str, str], qrels: reranking.Qrels,
           folds: dict[str, reranking.Fold], *, first_stage: reranking.Run | None = None,
           entity_texts: dict[str, str] | None = None, descriptions: dict[str, str] | None = None,
           depth: int = 100, similarity: str = "inner_product"
           ) -> tuple[reranking.Run, reranking.Run, dict[str, float]]:
  """(the first stage, the re-ranked run, the results) of `model` (see the module docstring for the settings).

  Args:
    model: encodes query and entity texts.
    queries: query id -> text, for every query of the folds.
    qrels: the judgements of every query of the folds.
    folds: the collection's folds.
    first_stage: the run to re-rank; None builds the BM25 first stage over every judged entity.
    entity_texts: entity id -> text; None takes names, with `descriptions` where they match.
    descriptions: name -> description (`reranking.read_name_descriptions`), when `entity_texts` is None.
    depth: how many entities the BM25 first stage retrieves per query, and the depth of the coverage count.
    similarity: how query and entity encodings are compared, one of `reranking.SIMILARITIES`.
  """
  reranking.check_similarity(similarity)
  fold_queries = sorted({query for fold in folds.values() for query in fold.training + fold.testing})
  for what, known in (("text", queries), ("judgements", qrels)):
    missing = [query for query in fold_queries if query not in known]
    if missing:
      raise ValueError(f"{len(missing)} queries of the folds have no {what}, e.g. {missing[:3]}.")
  tested = sorted({query for fold in folds.values() for query in fold.testing})
  judged = sorted({entity for query in fold_queries for entity in qrels[query]})
  results: dict[str, float] = {}
  if entity_texts is None:
    pool = set(judged) if first_stage is None else {entity for query in fold_queries
                                                      for entity in first_stage.get(query, {})}
    entity_texts = reranking.name_texts(sorted(pool), descriptions or {})
  if first_stage is None:
    first_stage = reranking.bm25_run({query: queries[query] for query in fold_queries},
                                     {entity: entity_texts[entity] for entity in judged if entity in entity_texts},
                                     depth)
    results["num_judged_entities"] = len(judged)
  unranked = [query for query in fold_queries if not first_stage.get(query)]
  if unranked:  # As trec_eval counts them: every measure 0 for the query.
    logging.warning("%d of %d queries have no candidates in the first stage (e.g. %s); they score 0.", len(unranked),
                    len(fold_queries), ", ".join(unranked[:3]))
  results["queries_without_candidates"] = len(unranked)
  first_stage = {query: first_stage.get(query, {}) for query in fold_queries}
  candidates = sorted({entity for scores in first_stage.values() for entity in scores})
  encoded = [entity for entity in candidates if entity in entity_texts]
  results.update(num_candidates=len(candidates), candidates_with_text=len(encoded))
  if descriptions is not None:
    described = lambda entities: sum(1 for entity in entities if reranking.entity_name(entity) in descriptions)
    relevant = sorted({entity for query in tested for entity, grade in qrels[query].items() if grade > 0})
    results.update(judged_entities_with_description=described(judged), candidates_with_description=described(
        candidates), num_relevant_entities=len(relevant), relevant_entities_with_description=described(relevant))
  results[f"queries_with_relevant_in_top{depth}"] = reranking.queries_with_relevant(first_stage, qrels, tested, depth)

  start = time.perf_counter()
  query_vectors = model.encode([queries[query] for query in fold_queries])
  entity_vectors = (model.encode([entity_texts[entity] for entity in encoded]) if encoded else
                    np.zeros((0, query_vectors.shape[1])))
  logging.info("Encoded %d queries and %d entities in %.1f s.", len(fold_queries), len(encoded),
               time.perf_counter() - start)
  similarities = reranking.similarity_run(first_stage, fold_queries, query_vectors, encoded, entity_vectors,
                                         similarity)
  reranked, choices = reranking.rerank_folds(first_stage, similarities, qrels, folds)
  results.update(reranking.compare_by_type(first_stage, reranked, qrels, tested))
  for name, choice in choices.items():
    results[f"fold_{name}/alpha"] = choice.alpha
    results[f"fold_{name}/training_ndcg@{reranking.SELECTION_CUTOFF}"] = choice.best_training_ndcg
    results[f"fold_{name}/num_testing_queries"] = len(folds[name].testing)
  return first_stage, reranked, results


FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if FLAGS.descriptions and FLAGS.entity_texts:
    raise app.UsageError("--descriptions completes names when there is no --entity_texts; pass one of the two.")
  if FLAGS.depth < 1:
    raise app.UsageError(f"--depth={FLAGS.depth}: must be at least 1.")
  if FLAGS.similarity not in reranking.SIMILARITIES:
    raise app.UsageError(f"--similarity={FLAGS.similarity}: must be one of {', '.join(reranking.SIMILARITIES)}.")
  start = time.perf_counter()
  # Everything cheap first: a bad flag or file costs no model load, and no output is touched.
  written = [(flag, getattr(FLAGS, flag)) for flag in ("output", "first_stage_output", "results")
             if getattr(FLAGS, flag)]
  read = [(flag, getattr(FLAGS, flag)) for flag in ("queries", "qrels", "folds", "first_stage", "entity_texts",
                                                     "descriptions") if getattr(FLAGS, flag)]
  for flag, path in written:
    clash = next((other for other, source in read if outputs.same_file(source, path)), None)
    if clash:
      raise app.UsageError(f"--{flag}={path} is the --{clash} file; outputs never overwrite inputs.")
    outputs.check_writable(path, f"--{flag}")
  if FLAGS.results:
    outputs.read_results(FLAGS.results)  # A damaged file stops the command now, not after the work.
  queries, qrels = reranking.read_texts(FLAGS.queries), reranking.read_qrels(FLAGS.qrels)
  folds = reranking.read_folds(FLAGS.folds)
  first_stage = reranking.read_run(FLAGS.first_stage) if FLAGS.first_stage else None
  entity_texts = reranking.read_texts(FLAGS.entity_texts) if FLAGS.entity_texts else None
  descriptions = reranking.read_name_descriptions(FLAGS.descriptions) if FLAGS.descriptions else None
  config, _ = inference_model.read_run(FLAGS.run_dir)
  name = FLAGS.name or config.get("name", "model")
  model = inference_model.load(FLAGS.run_dir)
  model.show_progress_bar = True
  first_stage, reranked, results = rerank(model, queries, qrels, folds, first_stage=first_stage,
                                          entity_texts=entity_texts, descriptions=descriptions, depth=FLAGS.depth,
                                          similarity=FLAGS.similarity)
  reranking.write_run(reranked, FLAGS.output, name)
  if FLAGS.first_stage_output:
    reranking.write_run(first_stage, FLAGS.first_stage_output, "first_stage")
  prefix = f"{name}/{COLLECTION}/"
  if FLAGS.results:
    # A model's earlier results are replaced, others' kept.
    outputs.merge_results(FLAGS.results, {prefix + key: value for key, value in results.items()},
                          replaces=lambda key: key.startswith(prefix))
  for key, value in results.items():
    print(f"{prefix}{key}: {value:.4f}" if isinstance(value, float) else f"{prefix}{key}: {value}")
  logging.info("Re-ranked in %.1f s.", time.perf_counter() - start)


if __name__ == "__main__":
  flags.DEFINE_string("run_dir", None, "A trained run's directory, WORKDIR/<model> (local or gs://).")
  flags.DEFINE_string("queries", None, "The queries, `id<TAB>text` (DBpedia-Entity: queries-v2_stopped.txt).")
  flags.DEFINE_string("qrels", None, "The judgements, `qid Q0 entity relevance` (qrels-v2.txt).")
  flags.DEFINE_string("folds", None, "The folds, JSON (folds/all_queries.json).")
  flags.DEFINE_string("first_stage", "", "A TREC run to re-rank; empty: BM25 over every judged entity's text.")
  flags.DEFINE_string("entity_texts", "", "Entity texts, `id<TAB>text`; empty: names (and --descriptions).")
  flags.DEFINE_string("descriptions", "", "Without --entity_texts: `id<TAB>Name -- description` lines matched to "
                      "entities by name (FB15k-237's fb-entity2text-new.txt).")
  flags.DEFINE_integer("depth", 100, "Entities per query of the BM25 first stage; depth of the coverage count.")
  flags.DEFINE_string("similarity", "inner_product", "How query and entity encodings are compared: inner_product "
                      "(the paper's eq. 4) or cosine.")
  flags.DEFINE_string("output", None, "Where the re-ranked TREC run goes.")
  flags.DEFINE_string("first_stage_output", "", "Where the first stage goes as a TREC run; empty: not written.")
  flags.DEFINE_string("results", "", "A results JSON to add this model's keys to (created if missing).")
  flags.DEFINE_string("name", "", "The model's name in the results' keys; default: the run's config name.")
  flags.mark_flags_as_required(["run_dir", "queries", "qrels", "folds", "output"])
  cli.run(main, "rerank")
