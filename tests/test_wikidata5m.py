"""Tests of the Wikidata5M reader and builder on a tiny graph in the release's file format, and of its BLP config."""
import gzip
import io as python_io
import pathlib
import tarfile

import pytest

from configs import blp as blp_config
from docent_jax.data import io
from docent_jax.data import tfds_loading
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.data.kg import wikidata5m

# Q9 has no description: its training triple is dropped, and so the training triples lose P3.
TRIPLES = {
    "wikidata5m_inductive_train.txt": "Q1\tP1\tQ2\nQ2\tP2\tQ3\nQ3\tP1\tQ1\nQ1\tP3\tQ9\n",
    "wikidata5m_inductive_valid.txt": "Q4\tP1\tQ5\nQ5\tP2\tQ4\n",
    "wikidata5m_inductive_test.txt": "Q6\tP3\tQ7\nQ7\tP1\tQ6\n",
}
# Not in the graph's order; Q1 twice (the first counts), Q8 in no triple, a tab inside Q2's description.
TEXTS = ("Q7\tSeventh entity\nQ3\tThird entity\nQ1\tDouglas Adams, English writer\nQ8\tNot in the graph\n"
         "Q2\tSecond\twith a tab\nQ1\tA repeated description\nQ4\t  Fourth entity  \nQ5\tFifth entity\n"
         "Q6\tSixth entity\n")
RELATIONS = "P1\tinstance of\tis a\nP2\tsubclass of\nP99\tin no triple\n"

ENTITY_IDS = ["Q1", "Q2", "Q3", "Q4", "Q5", "Q6", "Q7"]
ENTITY_TEXTS = ["Douglas Adams, English writer", "Second\twith a tab", "Third entity", "Fourth entity",
                "Fifth entity", "Sixth entity", "Seventh entity"]
RELATION_IDS = ["P1", "P2", "P3"]
SPLIT_TRIPLES = {
    "train": [("Q1", "P1", "Q2"), ("Q2", "P2", "Q3"), ("Q3", "P1", "Q1")],
    "validation": [("Q4", "P1", "Q5"), ("Q5", "P2", "Q4")],
    "test": [("Q6", "P3", "Q7"), ("Q7", "P1", "Q6")],
}


def _write_release(directory: pathlib.Path, relations: bool = True, **overrides: str | None) -> pathlib.Path:
  """The extracted release: plain triple and alias files, the descriptions gzipped; an override of None leaves a
  file out."""
  directory.mkdir(parents=True)
  files = {**TRIPLES, "wikidata5m_text.txt.gz": TEXTS, "wikidata5m_relation.txt": RELATIONS if relations else None,
           **overrides}
  for name, text in files.items():
    if text is not None:
      data = text.encode()
      (directory / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
  return directory


def _write_tar(path: pathlib.Path, members: dict[str, str]) -> None:
  with tarfile.open(path, "w:gz") as archive:
    for name, text in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(text.encode())
      archive.addfile(info, python_io.BytesIO(text.encode()))


def _triple_ids(kg, split):
  return [(kg.entity_ids[h], kg.relation_ids[r], kg.entity_ids[t]) for h, r, t in kg.triples[split]]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """The builder, its splits' data sources and the loaded graph, built from an extracted release."""
  manual_dir = _write_release(tmp_path_factory.mktemp("wikidata5m") / "release")
  tfds_dir = tmp_path_factory.mktemp("tfds")
  builder = tfds_loading.make_builder(knowledge_graph.BUILDERS, "wikidata5m", data_dir=tfds_dir)
  sources = tfds_loading.prepare(builder, manual_dir)
  kg = knowledge_graph.load_knowledge_graph("wikidata5m", data_dir=tfds_dir, manual_dir=manual_dir)
  return builder, sources, kg


def test_builds_the_splits_entities_and_relations(built):
  builder, sources, kg = built
  assert kg.name == "wikidata5m/full"
  assert kg.entity_ids == ENTITY_IDS  # First appearance in train, validation, test.
  assert kg.entity_texts == ENTITY_TEXTS
  assert kg.relation_ids == RELATION_IDS
  for split, triples in SPLIT_TRIPLES.items():
    assert _triple_ids(kg, split) == triples
  assert kg.triples["train"].tolist() == [[0, 0, 1], [1, 1, 2], [2, 0, 0]]
  assert {split: indices.tolist() for split, indices in kg.entity_split.items()} == {
      "train": [0, 1, 2], "validation": [3, 4], "test": [5, 6]}
  assert kg.label_names == [] and (kg.entity_labels == -1).all()
  # Q9's triple and Q9 itself are left out, and counted.
  assert (builder.info.metadata["skipped_triples"], builder.info.metadata["skipped_entities"]) == (1, 1)
  relations = tfds_loading.read_columns(sources["relations"], ("index", "id", "text"))
  assert relations["index"].tolist() == [0, 1, 2]
  assert relations["text"] == ["instance of", "subclass of", "P3"]  # P3 has no alias: its id.


def test_reads_the_release_archives_as_downloaded(built, tmp_path):
  manual_dir = tmp_path / "downloads"
  manual_dir.mkdir()
  _write_tar(manual_dir / "wikidata5m_inductive.tar.gz", TRIPLES)
  _write_tar(manual_dir / "wikidata5m_alias.tar.gz",
             {"wikidata5m_entity.txt": "Q1\tdouglas adams\n", "wikidata5m_relation.txt": RELATIONS})
  (manual_dir / "wikidata5m_text.txt.gz").write_bytes(gzip.compress(TEXTS.encode()))
  builder = tfds_loading.make_builder(knowledge_graph.BUILDERS, "wikidata5m", data_dir=tmp_path / "tfds")
  sources = tfds_loading.prepare(builder, manual_dir)
  kg = knowledge_graph.load_knowledge_graph("wikidata5m", data_dir=tmp_path / "tfds", manual_dir=manual_dir)
  assert kg.fingerprint() == built[2].fingerprint()
  assert tfds_loading.read_columns(sources["relations"], ("text",))["text"] == ["instance of", "subclass of", "P3"]


def test_relation_texts_are_ids_without_the_alias_file(tmp_path):
  directory = _write_release(tmp_path / "release", relations=False)
  graph = wikidata5m.read_wikidata5m(directory, directory / "wikidata5m_text.txt.gz")
  assert graph.relation_ids == graph.relation_texts == RELATION_IDS
  assert graph.entity_ids == ENTITY_IDS and graph.entity_texts == ENTITY_TEXTS
  assert (graph.skipped_triples, graph.skipped_entities) == (1, 1)
  assert list(graph.entity_split.values()) == ["train"] * 3 + ["validation"] * 2 + ["test"] * 2


def test_an_entity_shared_with_training_stays_a_training_entity(tmp_path, caplog):
  directory = _write_release(tmp_path / "release", **{
      "wikidata5m_inductive_valid.txt": "Q4\tP1\tQ5\nQ5\tP2\tQ1\n"})
  graph = wikidata5m.read_wikidata5m(directory, directory / "wikidata5m_text.txt.gz")
  assert graph.triples["validation"] == [("Q4", "P1", "Q5"), ("Q5", "P2", "Q1")]
  assert (graph.entity_split["Q1"], graph.entity_split["Q5"]) == ("train", "validation")
  assert "1 validation triples have an entity of an earlier split" in caplog.text


@pytest.mark.parametrize("name, text, message", [
    ("wikidata5m_inductive_valid.txt", "Q4\tP1\tQ5\nQ5\tP2\n", "wikidata5m_inductive_valid.txt:2: expected 3"),
    ("wikidata5m_inductive_train.txt", "Q1\tP1\tQ2\nQ2\t\tQ3\n", "wikidata5m_inductive_train.txt:2: empty field"),
    ("wikidata5m_text.txt.gz", "Q1\tone\nQ2\tP2\nQ3 three\n", "wikidata5m_text.txt.gz:3: expected 2"),
    ("wikidata5m_text.txt.gz", "Q1\tone\n\tno id\n", "wikidata5m_text.txt.gz:2: empty id"),
    ("wikidata5m_relation.txt", "P1\tinstance of\nP2\n", "wikidata5m_relation.txt:2: relation 'P2' has no alias"),
    ("wikidata5m_relation.txt", "P1\tinstance of\nP1\tis a\n", "wikidata5m_relation.txt:2: duplicate id 'P1'"),
])
def test_a_malformed_line_names_the_file_and_line(tmp_path, name, text, message):
  directory = _write_release(tmp_path / "release", **{name: text})
  with pytest.raises(io.DataFormatError, match=message):
    wikidata5m.read_wikidata5m(directory, directory / "wikidata5m_text.txt.gz", directory / "wikidata5m_relation.txt")


def test_a_missing_triple_file_is_named(tmp_path):
  directory = _write_release(tmp_path / "release", **{"wikidata5m_inductive_test.txt": None})
  with pytest.raises(io.DataFormatError, match="no wikidata5m_inductive_test.txt"):
    wikidata5m.read_wikidata5m(directory, directory / "wikidata5m_text.txt.gz")


def test_blp_config_has_blps_wikidata5m_values(tmp_path):
  config = blp_config.get_config("wikidata5m,distmult")
  epoch = -(-20_496_514 // 1024)
  assert config.data.dataset == "wikidata5m" and config.data.max_len == 64
  assert config.model.scoring == "distmult" and config.name == "blp_distmult"
  assert config.train.global_batch_size == 1024 and config.loss.num_negatives == 64
  assert config.train.num_steps == 5 * epoch and config.optim.warmup_steps == config.train.num_steps // 5
  assert config.optim.learning_rate == 5e-5
  assert config.evals.validation.every_steps == epoch and config.train.best_metric == "validation/transfer_mrr"
  # Other datasets keep the defaults.
  assert blp_config.get_config("wn18rr").data.max_len == 32
  with pytest.raises(ValueError, match="paper settings are defined for"):
    blp_config.get_config("wikidata5m,transe,paper")
  builder = tfds_loading.make_builder(knowledge_graph.BUILDERS, "wikidata5m/subgraph_3", data_dir=tmp_path)
  assert builder.builder_config.max_entities == 3
