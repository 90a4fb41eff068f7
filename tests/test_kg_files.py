"""Tests of the KG-BERT-layout reader: real datasets and malformed inputs."""
import collections
import gzip
import pathlib

import pytest

from docent_jax.data import io
from docent_jax.data.kg import files as kg_files
import io_fixtures


def _write(directory: pathlib.Path, name: str, text: str | bytes) -> None:
  data = text.encode("utf-8") if isinstance(text, str) else text
  if name.endswith(".gz"):
    data = gzip.compress(data)
  (directory / name).write_bytes(data)


def _small_kg(directory: pathlib.Path, **overrides: str | bytes) -> pathlib.Path:
  """A five-entity graph with a class-file entity split (e4 in dev, e5 in test)."""
  files = {
      "entity2text.txt": "e1\tone\ne2\ttwo\ne3\tthree\ne4\tfour\ne5\tfive\n",
      "relations.txt": "r1\nr2\n",
      "train.tsv": "e1\tr1\te2\ne2\tr2\te3\ne3\tr1\te4\n",
      "dev.tsv": "e4\tr1\te1\n",
      "test.tsv": "e5\tr2\te4\n",
      "train-ents-class.txt": "e1\tA\ne2\tB\ne3\tA\n",
      "dev-ents-class.txt": "e4\tB\n",
      "test-ents-class.txt": "e5\tA\n",
  }
  files.update(overrides)
  directory.mkdir(parents=True, exist_ok=True)
  for name, text in files.items():
    if text is not None:
      _write(directory, name, text)
  return directory


def test_small_graph_rebuilds_inductive_split(tmp_path):
  graph = kg_files.read_kg_directory(_small_kg(tmp_path))
  assert graph.triples["train"] == [("e1", "r1", "e2"), ("e2", "r2", "e3")]
  assert graph.triples["validation"] == [("e3", "r1", "e4"), ("e4", "r1", "e1")]
  assert graph.triples["test"] == [("e5", "r2", "e4")]
  assert graph.entity_split == {"e1": "train", "e2": "train", "e3": "train", "e4": "validation", "e5": "test"}
  assert graph.entity_labels["e4"] == "B"


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
def test_byte_order_marks_and_line_ends_do_not_change_the_graph(tmp_path, line_end):
  plain = _small_kg(tmp_path / "plain", **{
      "train.tsv": None, "train.tsv.gz": "e1\tr1\te2\ne2\tr2\te3\ne3\tr1\te4\n", "entities.txt": "e1\ne2\ne3\ne4\ne5\n",
      "relation2text.txt": "r1\trelation one\nr2\trelation two\n"})
  resaved = io_fixtures.resaved_copy(plain, tmp_path / "resaved", line_end)
  assert kg_files.read_kg_directory(resaved) == kg_files.read_kg_directory(plain)


def test_reads_a_gs_directory(gcs_bucket):
  bucket, opened = gcs_bucket
  names = {"train.tsv.gz", "dev.tsv", "test.tsv", "entity2text.txt", "relations.txt", "train-ents-class.txt",
           "dev-ents-class.txt", "test-ents-class.txt"}
  _small_kg(bucket / "kg", **{"train.tsv": None, "train.tsv.gz": "e1\tr1\te2\ne2\tr2\te3\ne3\tr1\te4\n"})
  graph = kg_files.read_kg_directory("gs://bucket/kg")
  assert sorted(opened) == sorted(f"gs://bucket/kg/{name}" for name in names)
  assert graph == kg_files.read_kg_directory(bucket / "kg")


def test_crlf_gzip_and_missing_final_newline(tmp_path):
  graph = kg_files.read_kg_directory(_small_kg(
      tmp_path, **{"train.tsv": None, "train.tsv.gz": "e1\tr1\te2\r\ne2\tr2\te3\r\ne3\tr1\te4",
                   "entity2text.txt": "e1\tone\r\ne2\ttwo\r\ne3\tthree\r\ne4\tfour\r\ne5\tfive"}))
  assert graph.triples["train"] == [("e1", "r1", "e2"), ("e2", "r2", "e3")]
  assert graph.entity_texts == ["one", "two", "three", "four", "five"]


@pytest.mark.parametrize("name, text, message", [
    ("train.tsv", "e1\tr1\te2\ne2\tr2\n", r"train.tsv:2: expected 3 tab-separated fields, found 2"),
    ("train.tsv", "e1\tr1\te2\ne2\tr9\te3\n", r"train.tsv:2: unknown relation 'r9'"),
    ("dev.tsv", "", r"dev.tsv: file is empty"),
    ("test.tsv", b"e5\tr2\te4\ne5\tr1\t\xffe4\n", r"test.tsv:2: bytes that are not valid UTF-8"),
    ("entity2text.txt", "e1\tone\ne2\ttwo\ne1\tagain\n", r"entity2text.txt:3: duplicate id 'e1' \(first on line 1\)"),
    ("entity2text.txt", "e1\tone\ne2 two\n", r"entity2text.txt:2: expected 2 tab-separated fields, found 1"),
])
def test_bad_input_names_file_and_line(tmp_path, name, text, message):
  with pytest.raises(io.DataFormatError, match=message):
    kg_files.read_kg_directory(_small_kg(tmp_path, **{name: text}))


def test_missing_description_is_counted_skip_or_error(tmp_path):
  directory = _small_kg(tmp_path, **{"entity2text.txt": "e1\tone\ne2\ttwo\ne3\tthree\ne4\tfour\n"})
  graph = kg_files.read_kg_directory(directory)
  assert graph.skipped_triples == 1  # The test triple (e5, r2, e4).
  assert graph.triples["test"] == []
  assert "e5" not in graph.entity_ids
  with pytest.raises(io.DataFormatError, match=r"1 test triples have an entity without description"):
    kg_files.read_kg_directory(directory, on_missing_text="error")


def test_repeated_triples_count_once_and_unseen_relations_are_named(tmp_path, caplog):
  directory = _small_kg(tmp_path, **{"relations.txt": "r1\nr2\nr3\n",
                                     "test.tsv": "e5\tr2\te4\ne5\tr3\te4\ne5\tr2\te4\n"})
  train = (directory / "train.tsv").read_text()
  (directory / "train.tsv").write_text(train + train.splitlines(keepends=True)[0])
  with caplog.at_level("WARNING"):
    graph = kg_files.read_kg_directory(directory)
  assert graph.triples["test"] == [("e5", "r2", "e4"), ("e5", "r3", "e4")]
  assert "dropped 1 repeated test triples" in caplog.text
  assert graph.triples["train"] == [("e1", "r1", "e2"), ("e2", "r2", "e3")]
  assert "dropped 1 repeated train triples" in caplog.text
  assert "1 test triples have relations no training triple has (r3)" in caplog.text


def test_empty_description_is_kept(tmp_path):
  graph = kg_files.read_kg_directory(_small_kg(tmp_path, **{
      "entity2text.txt": "e1\t\ne2\ttwo\ne3\tthree\ne4\tfour\ne5\tfive\n"}))
  assert graph.entity_texts[graph.entity_ids.index("e1")] == ""
  assert graph.skipped_triples == 0


def test_entity_text_file_preference(tmp_path):
  directory = _small_kg(tmp_path, **{
      "fb-entity2text-new.txt": "e1\tOne -- the first\ne2\tTwo\ne3\tThree\ne4\tFour\ne5\tFive\n"})
  assert kg_files.read_kg_directory(directory).entity_texts[0] == "One -- the first"
  _write(directory, "entity2textlong.txt", "e1\tlong one\ne2\tlong two\ne3\tx\ne4\ty\ne5\tz\n")
  assert kg_files.read_kg_directory(directory).entity_texts[0] == "long one"


def test_non_inductive_ind_files_are_rejected(tmp_path):
  directory = _small_kg(tmp_path, **{"ind-train.tsv": "e1\tr1\te4\n", "ind-dev.tsv": "e4\tr1\te1\n",
                                     "ind-test.tsv": "e5\tr2\te4\n"})
  with pytest.raises(io.DataFormatError, match="not inductive"):
    kg_files.read_kg_directory(directory)


def test_wn18rr_inductive_counts(shared_data_dir):
  graph = kg_files.read_kg_directory(shared_data_dir / "wn18rr")
  assert [len(graph.triples[s]) for s in kg_files.SPLITS] == [69_585, 11_381, 12_037]
  assert [len(graph.triples[f"transductive_{s}"]) for s in kg_files.SPLITS] == [86_835, 3_034, 3_134]
  assert len(graph.entity_ids) == 40_943
  assert collections.Counter(graph.entity_split.values()) == {"train": 32_755, "validation": 4_094, "test": 4_094}
  assert sorted(set(graph.entity_labels.values())) == ["BR", "BV", "JJ", "NN"]


def test_wn18rr_rebuilt_split_equals_shipped_split(shared_data_dir, tmp_path):
  source = shared_data_dir / "wn18rr"
  for path in source.iterdir():
    if not path.name.startswith("ind-"):
      (tmp_path / path.name).symlink_to(path)
  rebuilt = kg_files.read_kg_directory(tmp_path)
  shipped = kg_files.read_kg_directory(source)
  for split in kg_files.SPLITS:
    assert collections.Counter(rebuilt.triples[split]) == collections.Counter(shipped.triples[split])


def test_fb15k237_inductive_counts(shared_data_dir):
  graph = kg_files.read_kg_directory(shared_data_dir / "fb15k-237")
  assert [len(graph.triples[s]) for s in kg_files.SPLITS] == [215_085, 42_164, 52_867]
  assert len(graph.triples["transductive_train"]) == 272_115
  assert len(graph.entity_ids) == 14_541
  assert collections.Counter(graph.entity_split.values()) == {"train": 11_636, "validation": 1_454, "test": 1_451}
  # The first-sentence descriptions are preferred over the bare names.
  assert graph.entity_texts[graph.entity_ids.index("/m/016ywr")].startswith("Jeremy Irons -- ")
  assert len(graph.relation_ids) == 237


def test_inductive_rule():
  split = {"a": "train", "b": "train", "v": "validation", "t": "test"}
  triples = [("a", "r", "b"), ("a", "r", "v"), ("v", "r", "t"), ("t", "r", "a"), ("unlisted", "r", "a")]
  assert kg_files.inductive_triple_split(triples, split) == {
      "train": [("a", "r", "b"), ("unlisted", "r", "a")],
      "validation": [("a", "r", "v")],
      "test": [("v", "r", "t"), ("t", "r", "a")],
  }
