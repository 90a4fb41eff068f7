"""Tests of the TFDS knowledge-graph builders and `load_knowledge_graph`."""
import collections
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from docent_jax.data import tfds_loading
from docent_jax.data.kg import builders as kg_builders
from docent_jax.data.kg import files as kg_files
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.data.kg import wordnet_kg
import kg_fixtures

SPLITS = knowledge_graph.SPLITS


@pytest.fixture(scope="session")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("tfds")


@pytest.fixture(scope="session")
def wn18rr(tfds_dir, shared_data_dir) -> knowledge_graph.KnowledgeGraph:
  return knowledge_graph.load_knowledge_graph("wn18rr", data_dir=tfds_dir, manual_dir=shared_data_dir / "wn18rr")


@pytest.fixture(scope="session")
def wordnet_subgraph(tfds_dir) -> knowledge_graph.KnowledgeGraph:
  return knowledge_graph.load_knowledge_graph("wordnet_kg/subgraph_1000", data_dir=tfds_dir)


@pytest.fixture(scope="session")
def wordnet_graph() -> kg_files.ParsedGraph:
  return wordnet_kg.read_wordnet()


def _triple_ids(kg, split):
  return [(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples[split]]


def _check_inductive(kg):
  held_out = np.concatenate([kg.entity_split["validation"], kg.entity_split["test"]])
  assert not np.isin(kg.triples["train"][:, [0, 2]], held_out).any()
  assert np.isin(kg.triples["validation"][:, [0, 2]], kg.entity_split["validation"]).any(axis=1).all()
  assert np.isin(kg.triples["test"][:, [0, 2]], kg.entity_split["test"]).any(axis=1).all()


def test_wn18rr_matches_files(wn18rr, shared_data_dir):
  assert wn18rr.name == "wn18rr/full"
  assert [len(wn18rr.triples[s]) for s in SPLITS] == [69_585, 11_381, 12_037]
  assert [len(wn18rr.entity_split[s]) for s in SPLITS] == [32_755, 4_094, 4_094]
  assert (wn18rr.num_entities, wn18rr.num_relations) == (40_943, 11)
  assert wn18rr.all_triples().shape == (93_003, 3)
  assert wn18rr.triples["train"].dtype == np.int32
  files = kg_files.read_kg_directory(shared_data_dir / "wn18rr")
  for split in SPLITS:
    assert _triple_ids(wn18rr, split) == files.triples[split]
  texts = dict(zip(files.entity_ids, files.entity_texts))
  assert all(texts[e] == t for e, t in zip(wn18rr.entity_ids, wn18rr.entity_texts))
  labels = [wn18rr.label_names[i] for i in wn18rr.entity_labels]
  assert labels == [files.entity_labels[e] for e in wn18rr.entity_ids]
  _check_inductive(wn18rr)


def test_fast_column_reader_agrees_with_tfds_decoding(wn18rr, tfds_dir, shared_data_dir):
  source = tfds_loading.prepare(tfds_loading.make_builder(knowledge_graph.BUILDERS, "wn18rr", data_dir=tfds_dir),
                                shared_data_dir / "wn18rr")["validation"]
  for index in (0, 17, len(source) - 1):
    record = source[index]
    assert [record["head"], record["relation"], record["tail"]] == wn18rr.triples["validation"][index].tolist()
    assert record["id"] is None and record["label"] is None


def test_wordnet_subgraph_is_connected_and_inductive(wordnet_subgraph):
  kg = wordnet_subgraph
  assert kg.name == "wordnet_kg/subgraph_1000"
  assert kg.num_entities == 1000
  assert [len(kg.entity_split[s]) for s in SPLITS] == [800, 100, 100]
  assert kg.label_names == ["BR", "BV", "JJ", "NN"] and (kg.entity_labels >= 0).all()
  _check_inductive(kg)
  neighbours = collections.defaultdict(set)
  for head, _, tail in kg.all_triples():
    neighbours[head].add(tail)
    neighbours[tail].add(head)
  seen, frontier = {0}, [0]
  while frontier:
    frontier = [n for e in frontier for n in neighbours[e] if n not in seen]
    seen.update(frontier)
  assert len(seen) == kg.num_entities


def test_wordnet_matches_wn18rr_relations_and_directions(wordnet_graph, shared_data_dir):
  triples = set(wordnet_graph.triples["train"])
  ids = set(wordnet_graph.entity_ids)

  def candidates(entity):  # WN18RR merges synsets sharing an offset; here they carry a suffix.
    return [entity] if entity in ids else [f"{entity}-{pos}" for pos in "nvar" if f"{entity}-{pos}" in ids]

  reference = kg_files.read_triples(shared_data_dir / "wn18rr" / "train.tsv")
  found, total = collections.Counter(), collections.Counter(r for _, r, _ in reference)
  for head, relation, tail in reference:
    found[relation] += any((h, relation, t) in triples for h in candidates(head) for t in candidates(tail))
  assert sum(found.values()) / len(reference) > 0.95
  assert all(found[r] / total[r] > 0.95 for r in total), {r: found[r] / total[r] for r in total}
  # Direction: hypernym edges point from the specific synset to the general one.
  hypernyms = [(h, t) for h, r, t in reference if r == "_hypernym"]
  assert sum((t, "_hypernym", h) in triples for h, t in hypernyms) < 0.001 * len(hypernyms)


def test_wordnet_ids_texts_and_offset_collisions(wordnet_graph, shared_data_dir):
  texts = dict(zip(wordnet_graph.entity_ids, wordnet_graph.entity_texts))
  labels = wordnet_graph.entity_labels
  # Offset 00001740 names a noun, a verb, an adjective and an adverb synset.
  assert texts["00001740-n"].startswith("entity, that which is perceived")
  assert texts["00001740-v"].startswith("breathe, draw air into")
  assert (labels["00001740-n"], labels["00001740-v"]) == ("NN", "BV")
  assert "00001740" not in texts
  offsets = collections.Counter(e.split("-")[0] for e in wordnet_graph.entity_ids)
  suffixed = {e.split("-")[0] for e in wordnet_graph.entity_ids if "-" in e}
  assert all(offsets[o] == 1 for o in offsets if o not in suffixed)
  # WN18RR's texts are "lemma, gloss" too, with some lemma of the synset (here always the first).
  reference = kg_files.read_id_texts(shared_data_dir / "wn18rr" / "entity2text.txt")
  assert texts["00590383"] == "chieftaincy, the position of chieftain"
  assert reference["00590383"] == "chieftainship, the position of chieftain"
  shared = [e for e in reference if e in texts]
  assert len(shared) > 40_000
  assert all(reference[e].endswith(texts[e].partition(", ")[2]) for e in shared)
  assert sum(reference[e] == texts[e] for e in shared) / len(shared) > 0.55


def _write_fruit_kg(directory: pathlib.Path) -> pathlib.Path:
  directory.mkdir(parents=True)
  (directory / "entity2text.txt").write_text("a\tapple\nb\tbanana\nc\tcherry\nd\tdate\n")
  (directory / "train.tsv").write_text("a\tlikes\tb\nb\tlikes\tc\n")
  (directory / "dev.tsv").write_text("c\tlikes\td\n")
  (directory / "test.tsv").write_text("d\thates\ta\n")
  return directory


def test_training_triples_among_a_fraction_of_the_training_entities(wordnet_subgraph):
  kg = wordnet_subgraph
  assert knowledge_graph.triples_among_training_entities(kg, 1.0, seed=0) is kg.triples["train"]
  half = knowledge_graph.triples_among_training_entities(kg, 0.5, seed=0)
  entities = np.unique(half[:, [0, 2]])
  assert len(entities) <= 400 and np.isin(entities, kg.entity_split["train"]).all()
  # Every training triple between two entities of the subset is kept, and only those.
  subset = np.isin(kg.triples["train"][:, [0, 2]], entities).all(axis=1)
  assert 0 < len(half) < len(kg.triples["train"])
  assert {tuple(t) for t in half} == {tuple(t) for t in kg.triples["train"][subset]}
  assert np.array_equal(half, knowledge_graph.triples_among_training_entities(kg, 0.5, seed=0))
  assert not np.array_equal(half, knowledge_graph.triples_among_training_entities(kg, 0.5, seed=1))
  with pytest.raises(ValueError, match="in \\(0, 1\\], not 0"):
    knowledge_graph.triples_among_training_entities(kg, 0.0, seed=0)


def test_generic_directory_builder(tmp_path, tfds_dir):
  directory = _write_fruit_kg(tmp_path / "My KG")
  kg = knowledge_graph.load_knowledge_graph(os.fspath(directory), data_dir=tfds_dir)
  assert kg.name.startswith("kg_directory/my_kg_")
  assert kg.entity_texts == ["apple", "banana", "cherry", "date"]
  assert _triple_ids(kg, "test") == [("d", "hates", "a")]
  assert kg.entity_split["validation"].tolist() == [3]  # d is first seen in dev; a transductive split.
  first_name = kg_builders.directory_config(directory).name
  (directory / "test.tsv").write_text("d\thates\ta\nd\tlikes\ta\n")
  assert kg_builders.directory_config(directory).name != first_name
  assert len(knowledge_graph.load_knowledge_graph(os.fspath(directory), data_dir=tfds_dir).triples["test"]) == 2


def test_gs_source_directories(gcs_bucket, tmp_path):
  bucket, opened = gcs_bucket
  _write_fruit_kg(bucket / "My KG")
  kg = knowledge_graph.load_knowledge_graph("gs://bucket/My KG", data_dir=tmp_path / "tfds")
  assert kg.name.startswith("kg_directory/my_kg_")
  assert kg.entity_texts == ["apple", "banana", "cherry", "date"]
  assert "gs://bucket/My KG/train.tsv" in opened
  first_name = kg_builders.directory_config("gs://bucket/My KG").name
  (bucket / "My KG" / "test.tsv").write_text("d\thates\ta\nd\tlikes\ta\n")
  assert kg_builders.directory_config("gs://bucket/My KG").name != first_name
  # A registered builder with its manual directory on gs://.
  opened.clear()
  wn18rr = knowledge_graph.load_knowledge_graph("wn18rr", data_dir=tmp_path / "tfds", manual_dir="gs://bucket/My KG")
  assert wn18rr.name == "wn18rr/full" and len(wn18rr.triples["test"]) == 2
  assert "gs://bucket/My KG/entity2text.txt" in opened


def test_a_named_builder_is_rebuilt_from_a_changed_manual_directory(tmp_path):
  first, second = tmp_path / "first", tmp_path / "second"
  _write_fruit_kg(first)
  _write_fruit_kg(second)
  (second / "test.tsv").write_text("d\thates\ta\nd\tlikes\ta\nc\tlikes\ta\n")
  load = lambda manual_dir: knowledge_graph.load_knowledge_graph("wn18rr", data_dir=tmp_path / "tfds",
                                                                 manual_dir=manual_dir)
  assert len(load(first).triples["test"]) == len(load(first).triples["test"]) != 3
  assert len(load(second).triples["test"]) == 3
  (first / "test.tsv").write_text("d\thates\ta\n")
  assert len(load(first).triples["test"]) == 1


def test_config_names():
  assert kg_builders.parse_config_name("subgraph_3000") == (3000, 0)
  assert kg_builders.parse_config_name("full_seed4") == (None, 4)
  assert kg_builders.config_name(500, 2) == "subgraph_500_seed2"
  with pytest.raises(ValueError, match="not 'full' or 'subgraph_<N>'"):
    kg_builders.parse_config_name("subgraph")
  with pytest.raises(ValueError, match="Unknown knowledge graph"):
    tfds_loading.make_builder(knowledge_graph.BUILDERS, "no_such_graph")
  with pytest.raises(ValueError, match="'wordnet_kg/subgraph_1000' names its config; do not also pass options"):
    tfds_loading.make_builder(knowledge_graph.BUILDERS, "wordnet_kg/subgraph_1000", options=(3000, 0))


def test_builds_and_reads_without_tensorflow(tmp_path):
  """Builds and reads a small graph in a process where TensorFlow cannot be imported."""
  directory = tmp_path / "kg"
  directory.mkdir()
  (directory / "entity2text.txt").write_text("a\tapple\nb\tbanana\nc\tcherry\n")
  (directory / "train.tsv").write_text("a\tr\tb\n")
  (directory / "dev.tsv").write_text("b\tr\tc\n")
  (directory / "test.tsv").write_text("c\tr\ta\n")
  script = textwrap.dedent(f"""
      import importlib.machinery, sys

      class HideTensorflow:
        def find_spec(self, name, path=None, target=None):
          if name == "tensorflow" or name.startswith("tensorflow."):
            return None
          return importlib.machinery.PathFinder.find_spec(name, path, target)

      sys.meta_path[:] = [HideTensorflow() if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
      from docent_jax.data.kg import graph as knowledge_graph
      kg = knowledge_graph.load_knowledge_graph({os.fspath(directory)!r}, data_dir={os.fspath(tmp_path / "tfds")!r})
      assert kg.triples["test"].tolist() == [[2, 0, 0]], kg.triples
      assert kg.triples["train"].tolist() == [[0, 0, 1]], kg.triples
      loaded = [m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow.")]
      assert not loaded, loaded
      print("ok")
  """)
  result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=pathlib.Path(__file__).resolve().parent.parent)
  assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_the_transductive_setting_needs_transductive_triples(tmp_path, tfds_dir):
  directory = kg_fixtures.write_tiny_kg(tmp_path / "inductive_only")
  with pytest.raises(ValueError, match="has no transductive triples"):
    knowledge_graph.load_knowledge_graph(os.fspath(directory), data_dir=tfds_dir, setting="transductive")
  with pytest.raises(ValueError, match="Unknown knowledge-graph setting 'semi'"):
    knowledge_graph.load_knowledge_graph(os.fspath(directory), data_dir=tfds_dir, setting="semi")
