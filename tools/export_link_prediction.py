"""BLP's link prediction from an exported model, in NumPy and sentence-transformers only: the filtered MRR of a
split's triples, scored with the export's encoder (or its saved entity vectors) and relation table, against the
MRR the run reported. docs/export.md's recipe, run on a whole split.

  python tools/export_link_prediction.py --export=exports/blp_transe --run=workdir/default/blp_transe

The run directory gives the graph (its recorded config's dataset) and its results.json; nothing of the run's
params is read.
"""
import argparse
import csv
import json
import os
import pathlib
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order
from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import bench_export  # pylint: disable=g-import-not-at-top  # A tool beside this one.
from docent_jax import run_dir as run_dirs  # pylint: disable=g-import-not-at-top
from docent_jax.data.kg import graph as knowledge_graph  # pylint: disable=g-import-not-at-top


def unit(x: np.ndarray) -> np.ndarray:
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def candidate_scores(scoring: str, anchor: np.ndarray, relation: np.ndarray, entities: np.ndarray,
                     tails: bool) -> np.ndarray:
  """Scores of (anchor, relation, e) for every entity e (`tails`), else of (e, relation, anchor): TransE (entities
  L2-normalised, as BLP scores them) or DistMult."""
  if scoring == "transe":
    query = unit(anchor) + relation if tails else unit(anchor) - relation
    return -np.abs(query - unit(entities)).sum(axis=-1)
  if scoring == "distmult":
    return entities @ (anchor * relation)
  raise ValueError(f"scoring {scoring!r}: this recipe covers transe and distmult (docent_jax/modules/relations.py "
                   "has ComplEx and SimplE).")


def filtered_mrr(scoring: str, entities: np.ndarray, relations: np.ndarray, triples: np.ndarray,
                 known: np.ndarray, candidates: np.ndarray) -> float:
  """BLP's filtered MRR of `triples` (rows of entity, relation, entity) among `candidates`: both directions, every
  other true answer (`known` triples) left out, ties counting half; a target that is no candidate is skipped."""
  answers: dict[tuple[bool, int, int], set[int]] = {}
  for h, r, t in known:
    answers.setdefault((True, h, r), set()).add(t)
    answers.setdefault((False, t, r), set()).add(h)
  is_candidate = np.zeros(len(entities), bool)
  is_candidate[candidates] = True
  reciprocal = []
  for h, r, t in triples:
    for tails, anchor, target in ((True, h, t), (False, t, h)):
      if not is_candidate[target]:
        continue
      scores = candidate_scores(scoring, entities[anchor], relations[r], entities, tails)
      others = is_candidate.copy()
      others[list(answers[(tails, anchor, r)] | {target})] = False
      above, tied = (scores[others] > scores[target]).sum(), (scores[others] == scores[target]).sum()
      reciprocal.append(1 / (1 + above + tied / 2))
  return float(np.mean(reciprocal))


def export_tables(export: pathlib.Path) -> tuple[list[str], list[str], np.ndarray, dict, np.ndarray]:
  """(entity ids, their texts, their saved vectors, relations.json, the relation table) of a BLP export."""
  with open(export / "entity_ids.tsv", encoding="utf-8", newline="") as file:
    rows = list(csv.DictReader(file, delimiter="\t"))
  relations = json.loads((export / "relations.json").read_text())
  return ([row["id"] for row in rows], [row["text"] for row in rows],
          load_file(str(export / "entities.safetensors"))["vectors"], relations,
          load_file(str(export / "relations.safetensors"))["relations"])


def split_mrr(export: pathlib.Path, graph: knowledge_graph.KnowledgeGraph, split: str, encode: bool) -> float:
  """The filtered MRR of `graph`'s `split` from `export`, among the entities known by then (BLP's dynamic
  setting: validation ranks among training and validation entities, test among all), entities encoded by the
  export's sentence-transformers model (`encode`) or read from its saved vectors."""
  ids, texts, vectors, relation_record, table = export_tables(export)
  if encode:
    from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
    vectors = SentenceTransformer(str(export), device="cpu").encode(texts, batch_size=128)
  row = {entity: i for i, entity in enumerate(ids)}
  relation_row = {name: i for i, name in enumerate(relation_record["relation_ids"])}
  remap = lambda triples: np.asarray([[row[graph.entity_ids[h]], relation_row[graph.relation_ids[r]],
                                       row[graph.entity_ids[t]]] for h, r, t in triples], np.int64).reshape(-1, 3)
  known_by = ("train", "validation") if split == "validation" else ("train", "validation", "test")
  candidates = np.asarray([row[graph.entity_ids[e]] for name in known_by for e in graph.entity_split[name]])
  return filtered_mrr(relation_record["scoring"], vectors, table, remap(graph.triples[split]),
                      remap(graph.all_triples()), candidates)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--export", type=pathlib.Path, required=True, help="A BLP run's sentence-transformers export.")
  parser.add_argument("--run", required=True, help="The run it was exported from (for its graph and results).")
  parser.add_argument("--split", default="test", choices=("validation", "test"))
  parser.add_argument("--saved_vectors", action="store_true", help="Use entities.safetensors instead of encoding "
                      "the entity texts with the exported encoder.")
  parser.add_argument("--output", type=pathlib.Path, help="Write the JSON here too.")
  args = parser.parse_args()
  run = run_dirs.RunDir(args.run)
  data = run.recorded_config().data
  graph = knowledge_graph.load_knowledge_graph(data.dataset, data_dir=data.tfds_data_dir, manual_dir=data.manual_dir,
                                               setting=data.get("setting", "inductive"))
  mrr = split_mrr(args.export, graph, args.split, encode=not args.saved_vectors)
  reported = run.workdir.read_results().get(f"{run.name}/{args.split}/mrr")
  text = json.dumps({"command": "python " + " ".join(sys.argv), "cpu": bench_export.cpu_name(),
                     "export": str(args.export), "run": args.run, "split": args.split,
                     "entities": "saved" if args.saved_vectors else "encoded", "numpy_mrr": mrr,
                     "reported_mrr": reported, "difference": None if reported is None else mrr - reported}, indent=2)
  print(text)
  if args.output:
    args.output.write_text(text + "\n")


if __name__ == "__main__":
  main()
