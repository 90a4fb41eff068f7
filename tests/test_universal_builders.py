"""Tests of the universal-representation TFDS builders: each prepared from a tiny manual directory and read back."""
import pathlib

import pytest

from docent_jax.data import tfds_builder
from docent_jax.data import tfds_loading
from docent_jax.data.universal import builders as universal_builders
from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.data.universal import faq
from docent_jax.data.universal import nli
from docent_jax.data.universal import phrases
import test_universal_files


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("universal_tfds")


def _prepare(builder_class, config, tfds_dir, manual_dir=None):
  """The builder and the data source of each split, after preparing it."""
  builder = builder_class(config=config, **tfds_loading.builder_kwargs(tfds_dir))
  return builder, tfds_loading.prepare(builder, manual_dir)


def _rows(source, names):
  columns = tfds_loading.read_columns(source, names)
  return list(zip(*(list(columns[name]) for name in names)))


def test_nli_pairs_from_a_manual_directory(tfds_dir, tmp_path):
  manual_dir = test_universal_files.write_nli(tmp_path / "nli")
  builder, sources = _prepare(universal_builders.NliPairs, "snli", tfds_dir, manual_dir)
  # The SNLI config strips the original files' prefix.
  assert sorted(sources) == ["dev", "test"]
  expected = nli.read_nli_directory(manual_dir, "snli_1.0_").pairs
  for split, pairs in expected.items():
    assert _rows(sources[split], ("premise", "hypothesis", "label")) == [
        (p.premise, p.hypothesis, p.label) for p in pairs]
  assert builder.info.metadata["label_names"] == ["entailment", "neutral", "contradiction"]
  assert builder.info.metadata["counts"]["test skipped without gold label"] == 1


def test_nli_directory_config_names_the_directory(tfds_dir, tmp_path):
  directory = test_universal_files.write_nli(tmp_path / "my nli")
  config = universal_builders.nli_directory_config(directory)
  assert config.name.startswith("my_nli_")
  _, sources = _prepare(universal_builders.NliPairs, config, tfds_dir)
  assert {split: len(source) for split, source in sources.items()} == {"dev": 3, "snli_1_0_test": 2}
  (directory / "train.jsonl").write_text((directory / "dev.jsonl").read_text())
  assert universal_builders.nli_directory_config(directory).name != config.name
  with pytest.raises(FileNotFoundError, match="NLI directory .* does not exist"):
    universal_builders.nli_directory_config(tmp_path / "missing")


def test_phrase_relations_from_wordnet(tfds_dir, tmp_path):
  manual_dir = test_universal_files.write_wordnet(tmp_path / "wordnet")
  builder, sources = _prepare(universal_builders.PhraseRelations, None, tfds_dir, manual_dir)
  assert builder.builder_config.name == "wordnet"
  expected = phrases.split_pairs(phrases.wordnet_relations(manual_dir).pairs, seed=0)
  assert {split: len(pairs) for split, pairs in expected.items()} == {"train": 19, "validation": 2, "test": 3}
  for split, pairs in expected.items():
    assert _rows(sources[split], ("phrase1", "phrase2", "label")) == [(p.phrase1, p.phrase2, p.label) for p in pairs]
  assert builder.info.metadata["label_names"] == ["Equivalence", "Entailment", "Independent"]
  assert builder.info.metadata["counts"]["pairs both Equivalence and Entailment dropped"] == 1


def test_phrase_relations_from_a_ppdb_pack(tfds_dir, tmp_path):
  pack = test_universal_files.write(tmp_path / "packs" / "ppdb-2.0-s-phrasal.gz", test_universal_files.PPDB_PACK)
  config = universal_builders.ppdb_config(pack, seed=2)
  assert config.name.startswith("ppdb_ppdb_2_0_s_phrasal_gz_") and config.name.endswith("_seed2")
  builder, sources = _prepare(universal_builders.PhraseRelations, config, tfds_dir)
  expected = phrases.split_pairs(phrases.read_ppdb_pack(pack, seed=2).pairs, seed=2)
  for split, pairs in expected.items():
    assert _rows(sources[split], ("phrase1", "phrase2", "label")) == [(p.phrase1, p.phrase2, p.label) for p in pairs]
  assert builder.info.metadata["counts"]["Exclusion pairs dropped"] == 1
  with pytest.raises(FileNotFoundError, match="PPDB pack .* does not exist"):
    universal_builders.ppdb_config(tmp_path / "missing.gz")


def test_config_names():
  assert universal_builders.wordnet_config().name == "wordnet"
  assert universal_builders.wordnet_config(1_000, seed=1).name == "wordnet_max1000_seed1"
  assert universal_builders.faq_config().name == "stackfaq"
  assert universal_builders.faq_config(test_fraction=0.2, seed=3).name == "stackfaq_test0.2_seed3"


def _check_faq(sources, dataset: faq.FaqDataset):
  assert _rows(sources["faq"], ("index", "id", "question", "answer")) == [
      (i, item.id, item.question, item.answer) for i, item in enumerate(dataset.items)]
  for split in faq.QUERY_SPLITS:
    assert _rows(sources[f"{split}_queries"], ("id", "query", "faq_index")) == [
        (q.id, q.text, q.faq_index) for q in dataset.queries[split]]


def test_faq_from_a_manual_tsv_directory(tfds_dir, tmp_path):
  manual_dir = test_universal_files.write_faq_tsv(tmp_path / "faq")
  builder, sources = _prepare(universal_builders.Faq, "stackfaq", tfds_dir, manual_dir)
  assert sorted(sources) == sorted(universal_builders.FAQ_SPLITS)
  _check_faq(sources, faq.read_faq_directory(manual_dir))
  assert builder.info.metadata["counts"] == {"faq items": 2, "train queries": 10, "test queries": 10}


def test_faq_config_of_a_stackfaq_directory(tfds_dir, tmp_path):
  directory = tmp_path / "stack"
  test_universal_files.write(directory / faq.STACKFAQ_FILE, test_universal_files.STACKFAQ_XML)
  config = universal_builders.faq_config(directory, test_fraction=0.4, seed=1)
  assert config.name.startswith("stack_") and config.name.endswith("_test0.4_seed1")
  _, sources = _prepare(universal_builders.Faq, config, tfds_dir)
  _check_faq(sources, faq.read_faq_directory(directory, test_fraction=0.4, seed=1))


def test_real_stackfaq_builder(tfds_dir, shared_data_dir):
  _, sources = _prepare(universal_builders.Faq, "stackfaq", tfds_dir / "real", shared_data_dir / "faq" / "stackfaq")
  assert len(sources["faq"]) == 125
  assert len(sources["train_queries"]) + len(sources["test_queries"]) == 1_249


def test_registries_give_the_config_names_the_hand_built_builders_gave(tfds_dir, tmp_path, monkeypatch):
  nli_dir = test_universal_files.write_nli(tmp_path / "my nli")
  faq_dir = tmp_path / "FAQ dir"
  test_universal_files.write(faq_dir / faq.STACKFAQ_FILE, test_universal_files.STACKFAQ_XML)
  pack = test_universal_files.write(tmp_path / "packs" / "ppdb-2.0-s-phrasal.gz", test_universal_files.PPDB_PACK)

  def fingerprint(directory):
    return tfds_builder.directory_fingerprint(tfds_builder.source_directory(directory, "test"))

  def config_name(registry, dataset, options=None):
    return tfds_loading.make_builder(registry, dataset, data_dir=tfds_dir, options=options).builder_config.name

  assert config_name(universal_corpus.NLI_BUILDERS, "nli_pairs/mnli") == "mnli"
  assert config_name(universal_corpus.NLI_BUILDERS, str(nli_dir)) == f"my_nli_{fingerprint(nli_dir)}"
  phrase_options = universal_builders.PhraseOptions(max_pairs_per_class=1_000, seed=1)
  assert config_name(universal_corpus.PHRASE_BUILDERS, "phrase_relations") == "wordnet"
  assert config_name(universal_corpus.PHRASE_BUILDERS, "phrase_relations", phrase_options) == "wordnet_max1000_seed1"
  assert config_name(universal_corpus.PHRASE_BUILDERS, "phrase_relations/wordnet_max1000_seed1") == (
      "wordnet_max1000_seed1")
  assert config_name(universal_corpus.PHRASE_BUILDERS, "phrase_relations",
                     universal_builders.PhraseOptions(str(pack), seed=2)) == (
                         f"ppdb_ppdb_2_0_s_phrasal_gz_{fingerprint(pack.parent)}_seed2")
  faq_options = universal_builders.FaqOptions(test_fraction=0.2, seed=3)
  assert config_name(universal_corpus.FAQ_BUILDERS, "faq", faq_options) == "stackfaq_test0.2_seed3"
  assert config_name(universal_corpus.FAQ_BUILDERS, "faq/stackfaq_test0.2_seed3") == "stackfaq_test0.2_seed3"
  assert config_name(universal_corpus.FAQ_BUILDERS, str(faq_dir), faq_options) == (
      f"faq_dir_{fingerprint(faq_dir)}_test0.2_seed3")
  # A registered name is the registered builder, even beside a directory of that name.
  (tmp_path / "faq").mkdir()
  monkeypatch.chdir(tmp_path)
  assert config_name(universal_corpus.FAQ_BUILDERS, "faq") == "stackfaq"

  with pytest.raises(ValueError, match=r"Unknown NLI dataset 'snli': not a directory and not one of \['nli_pairs'\]"):
    config_name(universal_corpus.NLI_BUILDERS, "snli")
  with pytest.raises(ValueError, match=r"Unknown config 'rte' of nli_pairs; valid: \['mnli', 'snli'\]"):
    config_name(universal_corpus.NLI_BUILDERS, "nli_pairs/rte")
  with pytest.raises(ValueError, match=r"Unknown phrase-relation dataset 'wordnet': not one of \['phrase_relations'\]"):
    config_name(universal_corpus.PHRASE_BUILDERS, "wordnet")
  with pytest.raises(ValueError, match="Phrase-relation config name 'ppdb_x': a name is 'wordnet', optionally"):
    config_name(universal_corpus.PHRASE_BUILDERS, "phrase_relations/ppdb_x")
  with pytest.raises(ValueError, match=r"unknown part 'max1.5'; a name is 'wordnet', optionally followed by "
                     r"'_'-joined \['max<N>', 'seed<N>'\]"):
    config_name(universal_corpus.PHRASE_BUILDERS, "phrase_relations/wordnet_max1.5")
  with pytest.raises(ValueError, match="unknown part 'bogus'"):
    config_name(universal_corpus.FAQ_BUILDERS, "faq/stackfaq_bogus")
  with pytest.raises(ValueError, match="names its config; do not also pass options"):
    config_name(universal_corpus.FAQ_BUILDERS, "faq/stackfaq_seed1", faq_options)


class _Built(Exception):
  """Stops a loader once it has its builder."""


def test_universal_loaders_build_through_their_registries(tfds_dir, tmp_path, monkeypatch):
  calls = []
  make_builder = tfds_loading.make_builder

  def recording_make_builder(registry, dataset, **kwargs):
    calls.append((registry, dataset, make_builder(registry, dataset, **kwargs).builder_config.name))
    raise _Built

  monkeypatch.setattr(tfds_loading, "make_builder", recording_make_builder)
  nli_dir = test_universal_files.write_nli(tmp_path / "my nli")
  loads = [
      lambda: universal_corpus.load_nli_task(["mnli"], data_dir=tfds_dir, manual_dir=None, validation_fraction=0.1,
                                             seed=0),
      lambda: universal_corpus.load_nli_task([str(nli_dir)], data_dir=tfds_dir, manual_dir=None,
                                             validation_fraction=0.1, seed=0),
      lambda: universal_corpus.load_phrase_task("", data_dir=tfds_dir, max_pairs_per_class=1_000, seed=1),
      lambda: universal_corpus.load_faq("stackfaq", data_dir=tfds_dir, manual_dir=None, test_fraction=0.2, seed=3),
  ]
  for load in loads:
    with pytest.raises(_Built):
      load()
  assert calls == [
      (universal_corpus.NLI_BUILDERS, "nli_pairs/mnli", "mnli"),
      (universal_corpus.NLI_BUILDERS, str(nli_dir), universal_builders.nli_directory_config(nli_dir).name),
      (universal_corpus.PHRASE_BUILDERS, "phrase_relations", "wordnet_max1000_seed1"),
      (universal_corpus.FAQ_BUILDERS, "faq", "stackfaq_test0.2_seed3"),
  ]
  with pytest.raises(ValueError, match="Unknown FAQ source 'faq_set': not 'stackfaq' and not a directory"):
    universal_corpus.load_faq("faq_set", data_dir=tfds_dir, manual_dir=None, test_fraction=0.2, seed=3)
