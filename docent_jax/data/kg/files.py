"""Reads knowledge graphs stored in the KG-BERT file layout, with validation.

Layout of a dataset directory (any file may instead be gzipped as `<name>.gz`):
  train.tsv, dev.tsv, test.tsv          transductive triples, head<TAB>relation<TAB>tail
  ind-train.tsv, ind-dev.tsv, ind-test.tsv   inductive triples (BLP), optional
  entity2text.txt (or a preferred variant, see ENTITY_TEXT_FILES)   id<TAB>text
  entities.txt, relations.txt           optional vocabularies, one id per line
  relation2text.txt                     optional, id<TAB>text
  {train,dev,test}-ents-class.txt       optional entity split with class labels, id<TAB>label

Every format error (`io.DataFormatError`) names the file and line. Triples whose entity has no
text are dropped and counted (BLP drops them), or rejected when `on_missing_text='error'`.
"""
import collections
import dataclasses
import sys
from typing import Iterable, Literal, Mapping, Sequence

from absl import logging
from etils import epath

from docent_jax.data import io

# Entity description files, most preferred first: BLP uses the long FB15k-237
# descriptions; the first-sentence version is the closest substitute.
ENTITY_TEXT_FILES = ("entity2textlong.txt", "fb-entity2text-new.txt", "entity2text.txt")
SPLITS = ("train", "validation", "test")
# File stem of each split in the KG-BERT layout.
FILE_STEMS = {"train": "train", "validation": "dev", "test": "test"}

Triple = tuple[str, str, str]


@dataclasses.dataclass
class ParsedGraph:
  """A knowledge graph as identifiers, before indexing.

  Attributes:
    entity_ids: every entity with a description, in a fixed order.
    entity_texts: the description of each entity (may be empty).
    relation_ids: every relation, in a fixed order.
    relation_texts: a readable text for each relation.
    entity_labels: entity id -> class label, for the labelled entities.
    entity_split: entity id -> 'train' | 'validation' | 'test', for every entity.
    triples: 'train' / 'validation' / 'test' (inductive when the directory has an
      inductive split or class files, else transductive) and, when present,
      'transductive_train' / 'transductive_validation' / 'transductive_test'.
    label_names: all class labels, when fixed in advance (else the labels present).
    skipped_triples: triples of train/validation/test dropped because an entity
      had no description (the transductive copies are dropped too, uncounted).
    skipped_entities: entities of the source left out because they had no
      description (or, where the reader keeps only entities of triples, had no
      triple left).
  """
  entity_ids: list[str]
  entity_texts: list[str]
  relation_ids: list[str]
  relation_texts: list[str]
  entity_labels: dict[str, str]
  entity_split: dict[str, str]
  triples: dict[str, list[Triple]]
  label_names: list[str] | None = None
  skipped_triples: int = 0
  skipped_entities: int = 0


def split_fields(path: epath.PathLike, num_fields: int) -> Iterable[tuple[int, list[str]]]:
  """Yields (line number, fields) for tab-separated rows of exactly `num_fields` fields."""
  for number, line in io.row_lines(path):
    fields = line.split("\t", num_fields - 1) if num_fields == 2 else line.split("\t")
    if len(fields) != num_fields:
      raise io.DataFormatError(f"{path}:{number}: expected {num_fields} tab-separated fields, "
                               f"found {len(fields)}: {line[:100]!r}")
    yield number, fields


def read_id_list(path: epath.PathLike) -> list[str]:
  """Reads a one-id-per-line vocabulary; rejects empty and duplicate ids."""
  first_line: dict[str, int] = {}
  for number, line in io.row_lines(path):
    io.check_new_id(path, number, line.strip(), first_line)
  return list(first_line)


def read_id_texts(path: epath.PathLike) -> dict[str, str]:
  """Reads `id<TAB>text` rows; the text may be empty but must be present."""
  texts: dict[str, str] = {}
  first_line: dict[str, int] = {}
  for number, (identifier, text) in split_fields(path, 2):
    io.check_new_id(path, number, identifier, first_line)
    texts[identifier] = text.strip()
  return texts


def read_triples(path: epath.PathLike, known_relations: Sequence[str] | None = None,
                 known_entities: Sequence[str] | None = None) -> list[Triple]:
  """Reads `head<TAB>relation<TAB>tail` rows, checking against known vocabularies."""
  relations = set(known_relations) if known_relations is not None else None
  entities = set(known_entities) if known_entities is not None else None
  triples = []
  for number, (head, relation, tail) in split_fields(path, 3):
    if not head or not relation or not tail:
      raise io.DataFormatError(f"{path}:{number}: empty field in triple {(head, relation, tail)!r}.")
    if relations is not None and relation not in relations:
      raise io.DataFormatError(f"{path}:{number}: unknown relation {relation!r} (not in relations.txt).")
    if entities is not None:
      for entity in (head, tail):
        if entity not in entities:
          raise io.DataFormatError(f"{path}:{number}: unknown entity {entity!r} (not in entities.txt).")
    # Interned: an id repeats in many triples, and a large graph's triples then share one string per id.
    triples.append((sys.intern(head), sys.intern(relation), sys.intern(tail)))
  return triples


def inductive_triple_split(triples: Iterable[Triple], entity_split: Mapping[str, str]) -> dict[str, list[Triple]]:
  """Splits triples by BLP's rule, given the split of each entity.

  train: both entities are train entities; validation: touches a validation
  entity and no test entity; test: touches a test entity. Entities missing from
  `entity_split` count as train entities.
  """
  result = {split: [] for split in SPLITS}
  for triple in triples:
    splits = {entity_split.get(triple[0], "train"), entity_split.get(triple[2], "train")}
    if "test" in splits:
      result["test"].append(triple)
    elif "validation" in splits:
      result["validation"].append(triple)
    else:
      result["train"].append(triple)
  return result


def _entity_text_file(directory: epath.Path) -> epath.Path:
  for name in ENTITY_TEXT_FILES:
    path = io.find_file(directory, name)
    if path is not None:
      return path
  raise io.DataFormatError(f"{directory}: no entity description file (looked for {', '.join(ENTITY_TEXT_FILES)}).")


def _read_split_triples(directory: epath.Path, prefix: str, relations: Sequence[str] | None,
                        entities: Sequence[str] | None) -> dict[str, list[Triple]] | None:
  """Reads `<prefix>{train,dev,test}.tsv`; None when none exist, error when only some do."""
  paths = {split: io.find_file(directory, f"{prefix}{FILE_STEMS[split]}.tsv") for split in SPLITS}
  present = [split for split, path in paths.items() if path is not None]
  if not present:
    return None
  if len(present) != len(SPLITS):
    missing = [f"{prefix}{FILE_STEMS[split]}.tsv" for split in SPLITS if paths[split] is None]
    raise io.DataFormatError(f"{directory}: missing {', '.join(missing)} (the other splits exist).")
  return {split: read_triples(path, relations, entities) for split, path in paths.items()}


def _read_class_files(directory: epath.Path) -> tuple[dict[str, str], dict[str, str]] | None:
  """Returns (entity -> label, entity -> split) from the class files, None if absent."""
  paths = {split: io.find_file(directory, f"{FILE_STEMS[split]}-ents-class.txt") for split in SPLITS}
  if all(path is None for path in paths.values()):
    return None
  if any(path is None for path in paths.values()):
    raise io.DataFormatError(f"{directory}: the entity class files must exist for all of train, dev and test.")
  labels: dict[str, str] = {}
  split_of: dict[str, str] = {}
  for split, path in paths.items():
    for entity, label in read_id_texts(path).items():
      if entity in split_of:
        raise io.DataFormatError(f"{path}: entity {entity!r} is also in the {split_of[entity]} class file.")
      split_of[entity] = split
      if label:
        labels[entity] = label
  return labels, split_of


def _drop_missing_text(triples: dict[str, list[Triple]], texts: Mapping[str, str],
                       on_missing_text: str, directory: epath.Path) -> tuple[dict[str, list[Triple]], int]:
  kept: dict[str, list[Triple]] = {}
  skipped = 0
  for split, split_triples in triples.items():
    kept[split] = [t for t in split_triples if t[0] in texts and t[2] in texts]
    dropped = len(split_triples) - len(kept[split])
    if dropped and on_missing_text == "error":
      example = next(t for t in split_triples if t[0] not in texts or t[2] not in texts)
      raise io.DataFormatError(f"{directory}: {dropped} {split} triples have an entity without description, "
                               f"e.g. {example!r}.")
    if dropped:
      logging.warning("%s: dropped %d %s triples whose entity has no description.", directory, dropped, split)
    if split in SPLITS:
      skipped += dropped
  return kept, skipped


def _drop_repeated_triples(triples: dict[str, list[Triple]], directory: epath.Path) -> dict[str, list[Triple]]:
  """Keeps the first copy of a triple listed twice in a split: it would count twice in an evaluation
  split's metrics, and weigh twice in training (a file appended to itself, say)."""
  kept = {}
  for split, split_triples in triples.items():
    kept[split] = list(dict.fromkeys(split_triples))
    if len(kept[split]) < len(split_triples):
      logging.warning("%s: dropped %d repeated %s triples (each is used once).", directory,
                      len(split_triples) - len(kept[split]), split)
  return kept


def _warn_unseen_relations(triples: dict[str, list[Triple]], directory: epath.Path) -> None:
  """Warns about relations of evaluation triples that no training triple has: their embedding stays untrained."""
  trained = {t[1] for split, split_triples in triples.items() if split.endswith("train") for t in split_triples}
  for split, split_triples in triples.items():
    unseen = {t[1] for t in split_triples} - trained
    if unseen:
      count = sum(t[1] in unseen for t in split_triples)
      logging.warning("%s: %d %s triples have relations no training triple has (%s); their relation embeddings "
                      "are untrained.", directory, count, split, ", ".join(sorted(unseen)[:5]))


def clean_triples(triples: dict[str, list[Triple]], texts: Mapping[str, str], directory: epath.Path,
                  on_missing_text: Literal["skip", "error"] = "skip") -> tuple[dict[str, list[Triple]], int]:
  """Drops triples whose entity has no text in `texts` and repeated triples; warns about relations no training
  triple has. Returns the kept triples and the number of train/validation/test triples dropped for lack of text.

  Args:
    triples: split -> triples.
    texts: entity id -> description, for every entity with one.
    directory: the graph's directory, for messages.
    on_missing_text: 'skip' drops and counts the triples whose entity has no text (BLP's protocol), 'error' raises.
  """
  triples, skipped = _drop_missing_text(triples, texts, on_missing_text, directory)
  triples = _drop_repeated_triples(triples, directory)
  _warn_unseen_relations(triples, directory)
  return triples, skipped


def read_kg_directory(directory: epath.PathLike,
                      on_missing_text: Literal["skip", "error"] = "skip") -> ParsedGraph:
  """Reads and validates a knowledge-graph directory in the KG-BERT layout.

  The inductive splits come from `ind-*.tsv` when present; otherwise, when class
  files exist, they are rebuilt from the transductive triples with BLP's rule;
  otherwise the transductive triples are used as the splits.

  Args:
    directory: the dataset directory.
    on_missing_text: what to do with triples whose entity has no description:
      'skip' drops and counts them (BLP's protocol), 'error' raises.

  Returns:
    The parsed graph.
  """
  if on_missing_text not in ("skip", "error"):
    raise ValueError(f"on_missing_text must be 'skip' or 'error', not {on_missing_text!r}.")
  directory = epath.Path(directory)
  if not directory.is_dir():
    raise FileNotFoundError(f"Knowledge-graph directory {directory} does not exist.")

  entities_path = io.find_file(directory, "entities.txt")
  known_entities = read_id_list(entities_path) if entities_path else None
  relations_path = io.find_file(directory, "relations.txt")
  known_relations = read_id_list(relations_path) if relations_path else None
  text_path = _entity_text_file(directory)
  all_texts = read_id_texts(text_path)
  logging.info("%s: entity descriptions from %s.", directory, text_path.name)

  transductive = _read_split_triples(directory, "", known_relations, known_entities)
  inductive = _read_split_triples(directory, "ind-", known_relations, known_entities)
  class_files = _read_class_files(directory)
  if transductive is None and inductive is None:
    raise io.DataFormatError(f"{directory}: no triple files (train/dev/test.tsv or ind-train/ind-dev/ind-test.tsv).")
  labels, class_split = class_files if class_files else ({}, {})
  if inductive is None and class_files is not None:
    inductive = inductive_triple_split(
        (t for split in SPLITS for t in transductive[split]), class_split)
    logging.info("%s: rebuilt the inductive split from the class files.", directory)
  main_triples = inductive if inductive is not None else transductive

  # The entity set: the vocabulary when given, else everything the files mention.
  if known_entities is not None:
    candidates = known_entities
  else:
    mentioned = dict.fromkeys(
        e for triples in (main_triples, transductive or {}) for split in triples for t in triples[split]
        for e in (t[0], t[2]))
    mentioned.update(dict.fromkeys(class_split))
    candidates = sorted(mentioned)
  entity_ids = [e for e in candidates if e in all_texts]
  texts = {e: all_texts[e] for e in entity_ids}
  if len(entity_ids) < len(candidates):
    logging.warning("%s: %d of %d entities have no description in %s and are left out.", directory,
                    len(candidates) - len(entity_ids), len(candidates), text_path.name)
  num_empty = sum(1 for e in entity_ids if not texts[e])
  if num_empty:
    # Kept, as BLP does: the encoder still sees the entity (as [CLS] [SEP]).
    logging.warning("%s: %d entities have an empty description; they are kept.", directory, num_empty)

  triples = {split: main_triples[split] for split in SPLITS}
  if inductive is not None and transductive is not None:
    triples.update({f"transductive_{split}": transductive[split] for split in SPLITS})
  triples, skipped = clean_triples(triples, texts, directory, on_missing_text)

  entity_split = assign_entity_splits(entity_ids, triples, class_split)
  if inductive is not None:
    _check_inductive(triples, entity_split, directory)

  relation_ids = known_relations or sorted({t[1] for split_triples in triples.values() for t in split_triples})
  relation_text_path = io.find_file(directory, "relation2text.txt")
  relation_texts = read_id_texts(relation_text_path) if relation_text_path else {}
  unknown = set(relation_texts) - set(relation_ids)
  if unknown:
    raise io.DataFormatError(f"{relation_text_path}: relations not in the graph: {sorted(unknown)[:5]}.")
  return ParsedGraph(
      entity_ids=entity_ids,
      entity_texts=[texts[e] for e in entity_ids],
      relation_ids=list(relation_ids),
      relation_texts=[relation_texts.get(r) or r for r in relation_ids],
      entity_labels={e: labels[e] for e in entity_ids if e in labels},
      entity_split=entity_split,
      triples=triples,
      skipped_triples=skipped,
      skipped_entities=len(candidates) - len(entity_ids))


def assign_entity_splits(entity_ids: Sequence[str], triples: Mapping[str, Sequence[Triple]],
                         class_split: Mapping[str, str]) -> dict[str, str]:
  """Assigns each entity to the split where it first appears.

  Class files decide when they list the entity. Otherwise the entity belongs to
  the first of train, validation, test whose triples mention it (for an
  inductive split this is its entity split; for a transductive one, where it is
  first seen); entities in no triple belong to train.
  """
  first_seen: dict[str, str] = {}
  for split in reversed(SPLITS):
    for head, _, tail in triples[split]:
      first_seen[head] = first_seen[tail] = split
  return {e: class_split.get(e) or first_seen.get(e, "train") for e in entity_ids}


def _check_inductive(triples: Mapping[str, Sequence[Triple]], entity_split: Mapping[str, str],
                     directory: epath.Path) -> None:
  """Rejects inductive splits with a held-out entity in the training triples."""
  leaked = collections.Counter(
      entity_split[e] for head, _, tail in triples["train"] for e in (head, tail) if entity_split[e] != "train")
  if leaked:
    raise io.DataFormatError(f"{directory}: the inductive training triples mention held-out entities "
                             f"({dict(leaked)}); the split is not inductive.")
