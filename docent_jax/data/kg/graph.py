"""The in-memory knowledge graph, loaded from the TFDS builders."""
import dataclasses

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import fingerprint
from docent_jax.data import tfds_loading
from docent_jax.data.kg import builders as kg_builders
from docent_jax.data.kg import wikidata5m
from docent_jax.data.kg import wordnet_kg

SPLITS = kg_builders.TRIPLE_SPLITS
# Which triples a graph's splits hold: BLP's inductive ones (unseen entities at test time), or the source's
# transductive ones (BLP's appendix; every entity of a test triple is in training, as far as the source has it).
SETTINGS = ("inductive", "transductive")
# Options: (max_entities, seed) of a connected subgraph; a config name holds them ('subgraph_3000_seed1').
BUILDERS = tfds_loading.BuilderRegistry(
    what="knowledge graph",
    builders={"wordnet_kg": wordnet_kg.WordnetKg, "wn18rr": kg_builders.Wn18rr, "fb15k237": kg_builders.Fb15k237,
              "wikidata5m": wikidata5m.Wikidata5m},
    directory_builder=kg_builders.KgDirectory,
    config=lambda options, directory: (kg_builders.directory_config(directory, *options) if directory
                                       else kg_builders.make_config(*options)),
    parse_config_name=kg_builders.parse_config_name,
    default_options=(None, 0),
    known_shapes={"wordnet_kg/subgraph_3000": {"num_entities": 3000, "num_relations": 11},
                  "wn18rr": {"num_entities": 40943, "num_relations": 11},
                  "fb15k237": {"num_entities": 14541, "num_relations": 237},
                  "wikidata5m": {"num_entities": 4594485, "num_relations": 822}})


@dataclasses.dataclass
class KnowledgeGraph:
  """Entities with descriptions, relations and the inductive triple splits.

  Attributes:
    name: the dataset name with its config, e.g. 'wordnet_kg/subgraph_3000'.
    entity_ids: entity identifiers; list position is the entity index.
    entity_texts: entity descriptions.
    relation_ids: relation identifiers; list position is the relation index.
    triples: split -> int32 [n, 3] (head, relation, tail) for 'train', 'validation', 'test'.
    entity_split: split -> sorted int32 indices of the entities of that split.
    entity_labels: int32 [num_entities] index into `label_names`, -1 = unlabelled.
    label_names: the class label names.
  """
  name: str
  entity_ids: list[str]
  entity_texts: list[str]
  relation_ids: list[str]
  triples: dict[str, np.ndarray]
  entity_split: dict[str, np.ndarray]
  entity_labels: np.ndarray
  label_names: list[str]

  @property
  def num_entities(self) -> int:
    return len(self.entity_ids)

  @property
  def num_relations(self) -> int:
    return len(self.relation_ids)

  def fingerprint(self) -> fingerprint.Fingerprint:
    """Counts and digests of the entities, their texts, relations and triples (see `data.fingerprint`)."""
    return {"entities": self.num_entities, "entity_ids_digest": fingerprint.digest(self.entity_ids),
            "entity_texts_digest": fingerprint.digest(self.entity_texts), "relations": self.num_relations,
            "relation_ids_digest": fingerprint.digest(self.relation_ids),
            **{f"triples/{split}": len(t) for split, t in sorted(self.triples.items())},
            "triples_digest": fingerprint.digest(t for _, t in sorted(self.triples.items())),
            "entity_labels_digest": fingerprint.digest([self.entity_labels, *self.label_names])}

  def all_triples(self) -> np.ndarray:
    """All triples of all splits, int32 [n, 3], e.g. for filtered ranking."""
    return np.concatenate([self.triples[split] for split in SPLITS])


def triples_among_training_entities(graph: KnowledgeGraph, fraction: float, seed: int) -> np.ndarray:
  """The training triples whose head and tail are both among `fraction` of the training entities, drawn
  uniformly with `seed` (BLP's Fig. 2 trains on such subsets and tests on the same test set)."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"The fraction of training entities must be in (0, 1], not {fraction}.")
  triples = graph.triples["train"]
  if fraction == 1.0:
    return triples
  entities = graph.entity_split["train"]
  kept = np.random.default_rng(seed).choice(entities, size=round(fraction * len(entities)), replace=False)
  return triples[np.isin(triples[:, 0], kept) & np.isin(triples[:, 2], kept)]


def load_knowledge_graph(dataset: str, *, data_dir: epath.PathLike | None = None,
                         manual_dir: epath.PathLike | None = None, max_entities: int | None = None,
                         seed: int = 0, setting: str = "inductive") -> KnowledgeGraph:
  """Builds the dataset if needed (array_record under `data_dir`) and loads it.

  Args:
    dataset: 'wordnet_kg', 'wn18rr', 'fb15k237' or 'wikidata5m', optionally with a config
      ('wordnet_kg/subgraph_3000', 'wn18rr/subgraph_5000_seed1'), or a
      directory in the KG-BERT layout.
    data_dir: the TFDS data directory (TFDS's default when None).
    manual_dir: the source files for 'wn18rr' / 'fb15k237' / 'wikidata5m' (downloaded when None).
    max_entities: keep a connected subgraph of this many entities.
    seed: seeds the subgraph and, for 'wordnet_kg', the entity split.
    setting: 'inductive' (the splits the builder calls train, validation, test; their entity split) or
      'transductive' (its transductive_* triples; an entity belongs to the first split whose triples have it,
      so validation is ranked among train and validation entities and test among those of any triple, as in
      BLP's code).

  Returns:
    The knowledge graph.
  """
  if setting not in SETTINGS:
    raise ValueError(f"Unknown knowledge-graph setting {setting!r}; valid: {SETTINGS}.")
  builder = tfds_loading.make_builder(BUILDERS, dataset, data_dir=data_dir, options=(max_entities, seed))
  sources = tfds_loading.prepare(builder, manual_dir)
  name = f"{builder.name}/{builder.builder_config.name}"
  entities = tfds_loading.read_columns(sources["entities"], ("id", "text", "label", "split"))
  relations = tfds_loading.read_columns(sources["relations"], ("id",))
  prefix = "transductive_" if setting == "transductive" else ""
  if f"{prefix}train" not in sources:
    raise ValueError(f"{name} has no transductive triples (its source has no train.tsv / dev.tsv / test.tsv beside "
                     "the inductive ind-*.tsv); config.data.setting 'transductive' needs them.")
  triples = {}
  for split in SPLITS:
    columns = tfds_loading.read_columns(sources[f"{prefix}{split}"], ("head", "relation", "tail"))
    triples[split] = np.stack([columns["head"], columns["relation"], columns["tail"]], axis=1).astype(np.int32)
  if setting == "transductive":
    name = f"{name}/transductive"
    entity_split_names = _first_seen_split(len(entities["id"]), triples)
  else:
    entity_split_names = np.asarray(entities["split"])
  graph = KnowledgeGraph(
      name=name,
      entity_ids=entities["id"],
      entity_texts=entities["text"],
      relation_ids=relations["id"],
      triples=triples,
      entity_split={split: np.flatnonzero(entity_split_names == split).astype(np.int32) for split in SPLITS},
      entity_labels=np.asarray(entities["label"], np.int32).reshape(-1),
      label_names=list(builder.info.metadata["label_names"]))
  logging.info("Loaded %s: %d entities, %d relations, triples %s.", name, graph.num_entities,
               graph.num_relations, {split: len(t) for split, t in triples.items()})
  return graph


def _first_seen_split(num_entities: int, triples: dict[str, np.ndarray]) -> np.ndarray:
  """Each entity's first split (train, validation, test) with a triple that has it; none ('') for an entity in
  no triple, which BLP does not rank."""
  names = np.full(num_entities, "", dtype=object)
  for split in reversed(SPLITS):
    names[triples[split][:, [0, 2]].reshape(-1)] = split
  return names
