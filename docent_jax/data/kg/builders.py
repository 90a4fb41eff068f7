"""TFDS builders for knowledge graphs with entity descriptions (array_record output).

Every builder writes the same splits:
  train, validation, test        inductive triples: head, relation, tail (int64 indices)
  transductive_{train,validation,test}   the transductive triples, when the source has them
  entities                       index, id, text, label (int64, -1 = none), split (str)
  relations                      index, id, text
TFDS needs one schema for all splits, so every feature is optional and each
split fills only its own fields (the others read back as None). Examples keep
their order, so example i of `entities` / `relations` has index i.

Builders: `wn18rr`, `fb15k237` (KG-BERT layout from a manual directory, or
downloaded) and `kg_directory` (any directory in that layout); `wordnet_kg` and
`wikidata5m` have their own modules.
"""
import abc
import collections
import dataclasses
import re
from typing import Any, Iterator, Mapping

from absl import logging
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from docent_jax.data import tfds_builder
from docent_jax.data.kg import files as kg_files

TRIPLE_SPLITS = ("train", "validation", "test")
TRANSDUCTIVE_SPLITS = tuple(f"transductive_{split}" for split in TRIPLE_SPLITS)
_CONFIG_NAME = re.compile(r"^(?:full|subgraph_(?P<size>\d+))(?:_seed(?P<seed>\d+))?$")


@dataclasses.dataclass(eq=False)
class KgConfig(tfds.core.BuilderConfig):
  """Which part of the graph to keep.

  Attributes:
    max_entities: keep a connected subgraph of this many entities (None: all).
    seed: seeds the subgraph search (and, where the builder draws one, the entity split).
    directory: the source directory, for the generic `kg_directory` builder.
  """
  max_entities: int | None = None
  seed: int = 0
  directory: str | None = None


def config_name(max_entities: int | None, seed: int = 0) -> str:
  """The config name encoding a subgraph size and seed, e.g. 'subgraph_3000' or 'full_seed1'."""
  name = "full" if max_entities is None else f"subgraph_{max_entities}"
  return name if seed == 0 else f"{name}_seed{seed}"


def parse_config_name(name: str) -> tuple[int | None, int]:
  """Inverse of `config_name`: returns (max_entities, seed)."""
  match = _CONFIG_NAME.match(name)
  if not match:
    raise ValueError(f"Config name {name!r} is not 'full' or 'subgraph_<N>', optionally followed by '_seed<S>'.")
  size = match.group("size")
  return (int(size) if size else None), int(match.group("seed") or 0)


def make_config(max_entities: int | None = None, seed: int = 0, **kwargs: Any) -> KgConfig:
  """A config named by `config_name`."""
  return KgConfig(name=config_name(max_entities, seed), max_entities=max_entities, seed=seed, **kwargs)


def connected_subgraph(graph: kg_files.ParsedGraph, max_entities: int, seed: int) -> list[str]:
  """Entities of a connected subgraph found by breadth-first search.

  The search runs over the undirected graph of all triples, starts at the
  highest-degree entity and visits each entity's neighbours in a seeded random
  order, so the seed varies the subgraph.
  """
  neighbours: dict[str, set[str]] = collections.defaultdict(set)
  for split_triples in graph.triples.values():
    for head, _, tail in split_triples:
      if head != tail:
        neighbours[head].add(tail)
        neighbours[tail].add(head)
  if not neighbours:
    raise ValueError("The graph has no triples to take a subgraph from.")
  start = max(sorted(neighbours), key=lambda e: len(neighbours[e]))
  rng = np.random.default_rng(seed)
  kept = {start: None}
  queue = collections.deque([start])
  while queue and len(kept) < max_entities:
    entity = queue.popleft()
    for neighbour in rng.permutation(sorted(neighbours[entity])):
      if neighbour not in kept:
        kept[neighbour] = None
        queue.append(neighbour)
        if len(kept) == max_entities:
          break
  if len(kept) < max_entities:
    logging.warning("The component of %s has only %d entities; asked for %d.", start, len(kept), max_entities)
  return list(kept)


def restrict(graph: kg_files.ParsedGraph, entity_ids: list[str]) -> kg_files.ParsedGraph:
  """The graph induced by `entity_ids` (kept in the graph's own order)."""
  keep = set(entity_ids)
  order = [i for i, e in enumerate(graph.entity_ids) if e in keep]
  return dataclasses.replace(
      graph,
      entity_ids=[graph.entity_ids[i] for i in order],
      entity_texts=[graph.entity_texts[i] for i in order],
      entity_labels={e: label for e, label in graph.entity_labels.items() if e in keep},
      entity_split={e: split for e, split in graph.entity_split.items() if e in keep},
      triples={split: [t for t in triples if t[0] in keep and t[2] in keep]
               for split, triples in graph.triples.items()})


class KnowledgeGraphBuilder(tfds_builder.Builder, skip_registration=True):
  """Writes a `ParsedGraph` (from `_read_graph`) as the splits described above."""

  FEATURES = {
      "head": tfds_builder.integer(), "relation": tfds_builder.integer(), "tail": tfds_builder.integer(),
      "index": tfds_builder.integer(), "id": tfds_builder.text(), "text": tfds_builder.text(),
      "label": tfds_builder.integer(), "split": tfds_builder.text(),
  }
  BUILDER_CONFIGS = [make_config()]

  @abc.abstractmethod
  def _read_graph(self, dl_manager: tfds.download.DownloadManager) -> kg_files.ParsedGraph:
    """Reads (or downloads and reads) the whole graph."""

  def _select(self, graph: kg_files.ParsedGraph) -> kg_files.ParsedGraph:
    """Applies the config's subgraph selection."""
    if self.builder_config.max_entities is None:
      return graph
    return restrict(graph, connected_subgraph(graph, self.builder_config.max_entities, self.builder_config.seed))

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator[Any]]:
    graph = self._select(self._read_graph(dl_manager))
    label_names = graph.label_names or sorted(set(graph.entity_labels.values()))
    self.info.metadata["label_names"] = label_names
    self.info.metadata["skipped_triples"] = graph.skipped_triples
    self.info.metadata["skipped_entities"] = graph.skipped_entities
    entity_index = {e: i for i, e in enumerate(graph.entity_ids)}
    relation_index = {r: i for i, r in enumerate(graph.relation_ids)}
    label_index = {label: i for i, label in enumerate(label_names)}
    generators = {
        split: self._generate_examples(_triple_examples(triples, entity_index, relation_index))
        for split, triples in graph.triples.items()}
    generators["entities"] = self._generate_examples(_entity_examples(graph, label_index))
    generators["relations"] = self._generate_examples(_relation_examples(graph))
    logging.info("%s: %d entities, %d relations, triples %s.", self.name, len(graph.entity_ids),
                 len(graph.relation_ids), {s: len(t) for s, t in graph.triples.items()})
    return generators


def _triple_examples(triples: list[kg_files.Triple], entity_index: Mapping[str, int],
                     relation_index: Mapping[str, int]) -> Iterator[dict[str, Any]]:
  for head, relation, tail in triples:
    yield {"head": entity_index[head], "relation": relation_index[relation], "tail": entity_index[tail]}


def _entity_examples(graph: kg_files.ParsedGraph, label_index: Mapping[str, int]) -> Iterator[dict[str, Any]]:
  for index, (entity, text) in enumerate(zip(graph.entity_ids, graph.entity_texts)):
    label = graph.entity_labels.get(entity)
    yield {"index": index, "id": entity, "text": text, "label": -1 if label is None else label_index[label],
           "split": graph.entity_split[entity]}


def _relation_examples(graph: kg_files.ParsedGraph) -> Iterator[dict[str, Any]]:
  for index, (relation, text) in enumerate(zip(graph.relation_ids, graph.relation_texts)):
    yield {"index": index, "id": relation, "text": text}


class _KgBertDataset(KnowledgeGraphBuilder, skip_registration=True):
  """A KG-BERT-layout dataset read from the manual directory, else downloaded."""

  # File name in the layout -> public URL; set by subclasses.
  URLS: Mapping[str, str] = {}

  def _read_graph(self, dl_manager: tfds.download.DownloadManager) -> kg_files.ParsedGraph:
    manual_dir = tfds_builder.manual_dir(dl_manager)
    if manual_dir is not None:
      return kg_files.read_kg_directory(manual_dir)
    logging.info("%s: no manual directory; downloading the KG-BERT files.", self.name)
    downloaded = dl_manager.download(dict(self.URLS))
    # The reader expects the layout's file names: copy the files into one directory under them.
    layout = epath.Path(dl_manager.download_dir) / f"{self.name}_layout"
    layout.mkdir(parents=True, exist_ok=True)
    for name, path in downloaded.items():
      if not (layout / name).exists():
        epath.Path(path).copy(layout / name)
    return kg_files.read_kg_directory(layout)


def _urls(kg_bert_name: str, class_name: str, text_files: tuple[str, ...]) -> dict[str, str]:
  kg_bert = f"https://raw.githubusercontent.com/yao8839836/kg-bert/master/data/{kg_bert_name}/"
  classes = f"https://raw.githubusercontent.com/IMU-BLM/HyEED/master/data/{class_name}/"
  names = ("train.tsv", "dev.tsv", "test.tsv", "entities.txt", "relations.txt", "relation2text.txt") + text_files
  urls = {name: kg_bert + name for name in names}
  urls.update({f"{stem}-ents-class.txt": f"{classes}{stem}-ents-class.txt" for stem in ("train", "dev", "test")})
  return urls


class Wn18rr(_KgBertDataset):
  """WN18RR (KG-BERT files) with BLP's inductive split rebuilt from the entity class files."""

  URLS = _urls("WN18RR", "WN18RR", ("entity2text.txt",))
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the KG-BERT WN18RR files (train/dev/test.tsv, entity2text.txt, entities.txt,
  relations.txt, relation2text.txt; any may be gzipped) with the BLP class files
  {train,dev,test}-ents-class.txt, and optionally ind-{train,dev,test}.tsv, in the
  manual directory. Without one, the files are downloaded from GitHub.
  """


class Fb15k237(_KgBertDataset):
  """FB15k-237 (KG-BERT files) with BLP's inductive split (ind-*.tsv, else rebuilt from the class files)."""

  URLS = _urls("FB15k-237", "FB15k-237", ("entity2textlong.txt",))
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the KG-BERT FB15k-237 files (train/dev/test.tsv, entity2textlong.txt or
  fb-entity2text-new.txt or entity2text.txt, entities.txt, relations.txt,
  relation2text.txt; any may be gzipped) with the BLP class files
  {train,dev,test}-ents-class.txt, and optionally ind-{train,dev,test}.tsv, in the
  manual directory. Without one, the files are downloaded from GitHub.
  """


class KgDirectory(KnowledgeGraphBuilder):
  """Any directory in the KG-BERT layout; the config names the directory (see `directory_config`)."""

  BUILDER_CONFIGS = []

  def _read_graph(self, dl_manager: tfds.download.DownloadManager) -> kg_files.ParsedGraph:
    del dl_manager  # Reads the config's directory.
    return kg_files.read_kg_directory(self.builder_config.directory)


def directory_config(directory: epath.PathLike, max_entities: int | None = None, seed: int = 0) -> KgConfig:
  """A `KgDirectory` config named after the directory, so a changed directory rebuilds."""
  return tfds_builder.directory_config(KgConfig, directory, kind="Knowledge-graph", default_stem="kg",
                                      options_name=config_name(max_entities, seed), max_entities=max_entities,
                                      seed=seed)
