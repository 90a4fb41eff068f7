"""`wikidata5m`: the inductive split of Wikidata5M (Wang et al., KEPLER), BLP's largest benchmark.

Source files, as released on https://deepgraphlearning.github.io/project/wikidata5m (any may be
gzipped as `<name>.gz`):
  wikidata5m_inductive_{train,valid,test}.txt   head<TAB>relation<TAB>tail, Wikidata ids (Q42, P31)
  wikidata5m_text.txt                           entity id<TAB>description (its Wikipedia abstract)
  wikidata5m_relation.txt                       optional, relation id<TAB>alias<TAB>alias...
The triple files come in the archive wikidata5m_inductive.tar.gz and the aliases in
wikidata5m_alias.tar.gz; a manual directory may hold the archives instead of their files.

The entities are those of the triples, indexed in order of first appearance in train, validation,
test; each belongs to the split that first mentions it (the release's entity sets are disjoint). A
relation's text is its first alias, else its id. Like BLP, which needs a description for every
entity, the triples of an entity without a description are dropped and counted (`skipped_triples`
and `skipped_entities` in the dataset's metadata); of repeated descriptions of one entity the first
counts.

Memory: the description file (about 1 GB gzipped) is streamed once, and only the descriptions of
the graph's entities are kept, in the one dict that also orders the entities; with the entity ids
interned (`kg_files.read_triples`), the peak is those descriptions plus about 2 GB for the 20.5M
training triples. The `subgraph_<N>` configs apply as to every KG builder, after reading it all.
"""
from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from docent_jax.data import io
from docent_jax.data import tfds_builder
from docent_jax.data.kg import builders as kg_builders
from docent_jax.data.kg import files as kg_files

TRIPLE_FILES = {"train": "wikidata5m_inductive_train.txt", "validation": "wikidata5m_inductive_valid.txt",
                "test": "wikidata5m_inductive_test.txt"}
TEXT_FILE = "wikidata5m_text.txt"
RELATION_FILE = "wikidata5m_relation.txt"
INDUCTIVE_ARCHIVE = "wikidata5m_inductive.tar.gz"
TEXT_ARCHIVE = TEXT_FILE + ".gz"
ALIAS_ARCHIVE = "wikidata5m_alias.tar.gz"
# Release file -> (URL on the KEPLER page, how to unpack it): the URLs end in '?dl=1', which hides the
# file type from TFDS.
RELEASE = {
    INDUCTIVE_ARCHIVE: ("https://www.dropbox.com/s/csed3cgal3m7rzo/wikidata5m_inductive.tar.gz?dl=1",
                        tfds.download.ExtractMethod.TAR_GZ),
    TEXT_ARCHIVE: ("https://www.dropbox.com/s/7jp4ib8zo3i6m10/wikidata5m_text.txt.gz?dl=1",
                   tfds.download.ExtractMethod.GZIP),
    ALIAS_ARCHIVE: ("https://www.dropbox.com/s/s1q38yzqzvuodl3/wikidata5m_alias.tar.gz?dl=1",
                    tfds.download.ExtractMethod.TAR_GZ),
}


def read_wikidata5m(triple_dir: epath.PathLike, text_file: epath.PathLike,
                    relation_file: epath.PathLike | None = None) -> kg_files.ParsedGraph:
  """Reads the inductive split.

  Args:
    triple_dir: the directory of the three triple files.
    text_file: the entity descriptions.
    relation_file: the relation aliases; None: each relation's text is its id.

  Returns:
    The parsed graph, without entity labels.
  """
  triple_dir = epath.Path(triple_dir)
  triples = {split: kg_files.read_triples(_required_file(triple_dir, name)) for split, name in TRIPLE_FILES.items()}
  # Entity -> description (None until read): fixes the entities' order, then holds the only copy of their texts.
  texts: dict[str, str | None] = _entities(triples)
  _read_descriptions(text_file, texts)
  num_mentioned = len(texts)
  missing = [entity for entity, text in texts.items() if text is None]
  for entity in missing:
    del texts[entity]
  if missing:
    logging.warning("%s: %d of %d entities have no description (e.g. %s); their triples are dropped.", text_file,
                    len(missing), num_mentioned, ", ".join(missing[:5]))
  num_empty = sum(1 for text in texts.values() if not text)
  if num_empty:
    logging.warning("%s: %d entities have an empty description; they are kept.", text_file, num_empty)
  triples, skipped = kg_files.clean_triples(triples, texts, triple_dir)
  entity_ids = list(_entities(triples))
  if len(entity_ids) < len(texts):
    logging.warning("%s: %d entities with a description are only in dropped triples and are left out.", triple_dir,
                    len(texts) - len(entity_ids))
  entity_split = kg_files.assign_entity_splits(entity_ids, triples, {})
  _warn_shared_entities(triples, entity_split, triple_dir)
  relation_ids = list(dict.fromkeys(relation for split in kg_files.SPLITS for _, relation, _ in triples[split]))
  return kg_files.ParsedGraph(
      entity_ids=entity_ids,
      entity_texts=[texts[e] for e in entity_ids],
      relation_ids=relation_ids,
      relation_texts=_relation_texts(relation_file, relation_ids),
      entity_labels={},
      entity_split=entity_split,
      triples=triples,
      skipped_triples=skipped,
      skipped_entities=num_mentioned - len(entity_ids))


def _required_file(directory: epath.Path, name: str) -> epath.Path:
  path = io.find_file(directory, name)
  if path is None:
    raise io.DataFormatError(f"{directory}: no {name} (or {name}.gz).")
  return path


def _entities(triples: dict[str, list[kg_files.Triple]]) -> dict[str, None]:
  """The entities of the train, validation and test triples, in order of first appearance."""
  return dict.fromkeys(e for split in kg_files.SPLITS for head, _, tail in triples[split] for e in (head, tail))


def _read_descriptions(path: epath.PathLike, texts: dict[str, str | None]) -> None:
  """Fills in `texts` (entity -> None) from `id<TAB>description` lines, streamed; other entities' lines pass by."""
  repeated = 0
  for number, (identifier, text) in kg_files.split_fields(path, 2):
    if not identifier:
      raise io.DataFormatError(f"{path}:{number}: empty id.")
    if identifier not in texts:
      continue
    if texts[identifier] is None:
      texts[identifier] = text.strip()
    else:
      repeated += 1
  if repeated:
    logging.warning("%s: %d repeated descriptions of an entity of the graph; the first of each is kept.", path,
                    repeated)


def _relation_texts(path: epath.PathLike | None, relation_ids: list[str]) -> list[str]:
  """Each relation's first alias in `path` (`id<TAB>alias<TAB>...` lines), else its id."""
  aliases: dict[str, str] = {}
  if path is None:
    logging.info("No %s: each relation's text is its id.", RELATION_FILE)
  else:
    first_line: dict[str, int] = {}
    for number, line in io.row_lines(path):
      identifier, *names = line.split("\t")
      io.check_new_id(path, number, identifier, first_line)
      names = [name.strip() for name in names if name.strip()]
      if not names:
        raise io.DataFormatError(f"{path}:{number}: relation {identifier!r} has no alias.")
      aliases[identifier] = names[0]
    missing = [r for r in relation_ids if r not in aliases]
    if missing:
      logging.warning("%s: %d of %d relations have no alias (e.g. %s); their text is their id.", path, len(missing),
                      len(relation_ids), ", ".join(missing[:5]))
  return [aliases.get(r, r) for r in relation_ids]


def _warn_shared_entities(triples: dict[str, list[kg_files.Triple]], entity_split: dict[str, str],
                          directory: epath.Path) -> None:
  """Warns about evaluation triples with an entity of an earlier split: BLP ranks a split's triples among all
  entities of that split's triples, the `transfer_` metrics among the split's own entities; the two agree
  only while the splits share no entity, as released."""
  for split in ("validation", "test"):
    shared = sum(entity_split[head] != split or entity_split[tail] != split for head, _, tail in triples[split])
    if shared:
      logging.warning("%s: %d %s triples have an entity of an earlier split; the transfer metrics rank them among "
                      "the %s entities only.", directory, shared, split, split)


def _unpacked(manual_dir: epath.Path, archive: str, member: str, dl_manager: tfds.download.DownloadManager
              ) -> epath.Path:
  """The directory holding `member`: the manual directory, unless only the release `archive` there has it."""
  if io.find_file(manual_dir, member) is None and (manual_dir / archive).exists():
    return epath.Path(dl_manager.extract(manual_dir / archive))
  return manual_dir


class Wikidata5m(kg_builders.KnowledgeGraphBuilder):
  """Wikidata5M's inductive split (KEPLER's release) with Wikipedia descriptions, as in BLP."""

  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the Wikidata5M release files wikidata5m_inductive.tar.gz, wikidata5m_text.txt.gz and,
  for relation texts, wikidata5m_alias.tar.gz in the manual directory, as downloaded from
  https://deepgraphlearning.github.io/project/wikidata5m or extracted
  (wikidata5m_inductive_{train,valid,test}.txt, wikidata5m_relation.txt; any may be gzipped).
  Without one, they are downloaded (about 1.2 GB; the description file is unzipped, several GB).
  """

  def _read_graph(self, dl_manager: tfds.download.DownloadManager) -> kg_files.ParsedGraph:
    manual_dir = tfds_builder.manual_dir(dl_manager)
    if manual_dir is None:
      logging.info("%s: no manual directory; downloading the Wikidata5M release.", self.name)
      paths = dl_manager.download_and_extract({name: tfds.download.Resource(url=url, extract_method=method)
                                               for name, (url, method) in RELEASE.items()})
      triple_dir, text_file, alias_dir = paths[INDUCTIVE_ARCHIVE], paths[TEXT_ARCHIVE], paths[ALIAS_ARCHIVE]
    else:
      triple_dir = _unpacked(manual_dir, INDUCTIVE_ARCHIVE, TRIPLE_FILES["train"], dl_manager)
      alias_dir = _unpacked(manual_dir, ALIAS_ARCHIVE, RELATION_FILE, dl_manager)
      text_file = _required_file(manual_dir, TEXT_FILE)
    return read_wikidata5m(triple_dir, text_file, io.find_file(alias_dir, RELATION_FILE))
