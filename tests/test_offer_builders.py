"""Tests of the offer TFDS builders, `load_offer_corpus`, and the [COL] / [VAL] tokens of the pretrained model."""
import pathlib

from etils import epath
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax.data import io
from docent_jax.data import tfds_loading
from docent_jax.data import tokenization
from docent_jax.data.offers import builders as offer_builders
from docent_jax.data.offers import corpus as offer_corpus
from docent_jax.data.offers import files as offer_files
from docent_jax.modules import bert
from docent_jax.modules import pretrained
import test_offer_files

SPLITS = offer_corpus.PAIR_SPLITS
MARKERS = (offer_files.COL_TOKEN, offer_files.VAL_TOKEN)


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> pathlib.Path:
  return tmp_path_factory.mktemp("offers_tfds")


def _check_against(corpus: offer_corpus.OfferCorpus, dataset: offer_files.OfferDataset):
  """The loaded corpus holds exactly what the reader read."""
  assert corpus.texts == dataset.offer_texts
  assert corpus.ids == dataset.offer_ids
  assert corpus.product_ids == dataset.offer_products
  assert corpus.source_names == dataset.source_names
  assert corpus.source.dtype == np.int32 and corpus.source.tolist() == dataset.offer_source
  assert corpus.counts == dataset.counts
  for split in SPLITS:
    assert corpus.pairs[split].dtype == np.int64 and corpus.pairs[split].shape == (len(dataset.pairs[split]), 3)
    assert [tuple(row) for row in corpus.pairs[split].tolist()] == dataset.pairs[split]


def test_abt_buy(tfds_dir, shared_data_dir):
  corpus = offer_corpus.load_offer_corpus("abt_buy", data_dir=tfds_dir, manual_dir=shared_data_dir / "abt_buy")
  assert corpus.name == "abt_buy/default"
  assert corpus.num_offers == 1_081 + 1_092 and corpus.source_names == ("tableA", "tableB")
  assert np.bincount(corpus.source).tolist() == [1_081, 1_092]
  assert [len(corpus.pairs[s]) for s in SPLITS] == [5_743, 1_916, 1_916]
  assert [int(corpus.pairs[s][:, 2].sum()) for s in SPLITS] == [616, 206, 206]
  assert corpus.source[corpus.pairs["train"][:, :2]].tolist() == [[0, 1]] * 5_743
  # Peeters & Bizer's order: name, price, then the description.
  assert all(t.startswith("[COL] name [VAL] ") and " [COL] price [VAL]" in t and " [COL] description [VAL]" in t
             for t in corpus.texts)
  paths = offer_files.deepmatcher_paths(shared_data_dir / "abt_buy")
  _check_against(corpus, offer_files.read_deepmatcher(paths, ("name", "price", "description"), {"description": 100}))


def test_wdc_computers_small_pair_files(tfds_dir, shared_data_dir):
  manual_dir = shared_data_dir / "wdc_computers"
  corpus = offer_corpus.load_offer_corpus("wdc_computers/small", data_dir=tfds_dir, manual_dir=manual_dir)
  assert corpus.name == "wdc_computers/small" and corpus.source_names == ("offers",)
  assert [len(corpus.pairs[s]) for s in SPLITS] == [2_231, 536, 1_098]
  assert [int(corpus.pairs[s][:, 2].sum()) for s in SPLITS] == [557, 149, 299]
  assert set(corpus.product_ids) == {""} and (corpus.source == 0).all()
  paths = {"train": manual_dir / "train.txt.small", "validation": manual_dir / "valid.txt.small",
           "test": manual_dir / "test.txt"}
  _check_against(corpus, offer_files.read_wdc_pair_files(paths, ("title",)))


def test_wdc_computers_needs_the_files_of_its_config(tfds_dir, shared_data_dir):
  with pytest.raises(FileNotFoundError, match=r"neither all of .*computers_train_large.json.gz.*train.txt.large"):
    offer_corpus.load_offer_corpus("wdc_computers/large", data_dir=tfds_dir,
                                   manual_dir=shared_data_dir / "wdc_computers")
  # Ditto's pair files hold titles only.
  with pytest.raises(io.DataFormatError, match=r"train.txt.small:1: left offer lacks attributes \['brand'"):
    offer_corpus.load_offer_corpus("wdc_computers/small_all", data_dir=tfds_dir,
                                   manual_dir=shared_data_dir / "wdc_computers")


def test_wdc_computers_json_files(tfds_dir, tmp_path):
  paths = test_offer_files.write_wdc_json(tmp_path)
  for config, attributes in (("small", ("title",)), ("small_all", offer_files.WDC_ATTRIBUTES)):
    corpus = offer_corpus.load_offer_corpus(f"wdc_computers/{config}", data_dir=tfds_dir / "json", manual_dir=tmp_path)
    assert corpus.product_ids == ["100", "100", "200"] and corpus.ids == ["1", "2", "3"]
    _check_against(corpus, offer_files.read_wdc_json(paths["train"], paths["validation"], paths["test"], attributes))


def test_a_deepmatcher_directory_needs_only_its_path(tfds_dir, tmp_path):
  first = test_offer_files.write_deepmatcher(tmp_path / "first")
  corpus = offer_corpus.load_offer_corpus(str(first), data_dir=tfds_dir)
  assert corpus.name.startswith("deepmatcher_directory/first_")
  _check_against(corpus, offer_files.read_deepmatcher(offer_files.deepmatcher_paths(first)))
  second = test_offer_files.write_deepmatcher(tmp_path / "second", test_offer_files.TABLE_A + "3,apple ipod,99,\n")
  other = offer_corpus.load_offer_corpus(str(second), data_dir=tfds_dir)
  assert other.num_offers == corpus.num_offers + 1 and other.name != corpus.name
  _check_against(other, offer_files.read_deepmatcher(offer_files.deepmatcher_paths(second)))


def test_downloaded_archive_is_searched_for_its_file(tmp_path):
  (tmp_path / "computers_train" / "nested").mkdir(parents=True)
  (tmp_path / "computers_train" / "nested" / "train.json.gz").write_bytes(b"")
  find_in = offer_builders._find_in  # pylint: disable=protected-access
  assert find_in(epath.Path(tmp_path), "train.json.gz") == epath.Path(tmp_path / "computers_train/nested/train.json.gz")
  with pytest.raises(FileNotFoundError, match="holds no valid.csv"):
    find_in(epath.Path(tmp_path), "valid.csv")


def test_unknown_datasets_and_configs_are_named(tfds_dir):
  with pytest.raises(ValueError, match=r"Unknown offer dataset 'amazon_google'.*\['abt_buy', 'wdc_computers'\]"):
    tfds_loading.make_builder(offer_corpus.BUILDERS, "amazon_google", data_dir=tfds_dir)
  with pytest.raises(ValueError, match=r"Unknown config 'tiny' of wdc_computers; valid: .*'small_all'"):
    tfds_loading.make_builder(offer_corpus.BUILDERS, "wdc_computers/tiny", data_dir=tfds_dir)


# ---------------------------------------------------------------------------------------------------
# [COL] / [VAL] as special tokens, and the grown word-embedding table.


@pytest.fixture(scope="module")
def tokenizer():
  return pretrained.load_tokenizer("minilm-l6", extra_special_tokens=MARKERS)


def test_markers_are_single_special_tokens(tokenizer):
  plain = pretrained.load_tokenizer("minilm-l6")
  assert len(tokenizer) == plain.vocab_size + 2 == tokenizer.vocab_size + 2
  col, val = tokenizer.convert_tokens_to_ids(list(MARKERS))
  assert (col, val) == (plain.vocab_size, plain.vocab_size + 1)
  text = offer_files.serialize([("Title", "Sony TV[COL]x"), ("price", "")])
  assert tokenizer.tokenize(text) == ["[COL]", "title", "[VAL]", "sony", "tv", "[COL]", "x", "[COL]", "price", "[VAL]"]
  assert plain.tokenize("[COL]") == ["[", "col", "]"]  # Without them, each marker is three word pieces.
  assert tokenizer.tokenize("[col]") == ["[", "col", "]"]  # Only the marker as written is special.
  ids = tokenization.tokenize_texts(tokenizer, [text], max_len=16)[0]
  assert ids.tolist().count(col) == 3 and ids.tolist().count(val) == 2
  assert tokenizer.decode(ids, skip_special_tokens=True) == "title sony tv x price"


def test_pretrained_table_grows_to_the_tokenizer(tokenizer):
  original_config, original = pretrained.load_bert("minilm-l6")
  config, params = pretrained.load_or_create_bert("minilm-l6", {}, len(tokenizer))
  old_table = bert.word_embedding_matrix(original)
  table = bert.word_embedding_matrix(params)
  assert config.vocab_size == len(tokenizer) and table.shape == (len(tokenizer), config.hidden_size)
  np.testing.assert_array_equal(table[:original_config.vocab_size], old_table)  # Bit-identical.
  np.testing.assert_allclose(table[original_config.vocab_size:],
                             np.repeat(old_table.mean(axis=0, dtype=np.float64, keepdims=True), 2, axis=0), atol=1e-8)
  ids = tokenization.tokenize_texts(tokenizer, ["[COL] title [VAL] sony tv", "sony tv"], max_len=12)
  mask = (ids != tokenizer.pad_token_id).astype(np.int32)
  grown = bert.BertModel(config).apply({"params": params}, ids, mask).last_hidden_state
  before = bert.BertModel(original_config).apply({"params": original}, ids[1:], mask[1:]).last_hidden_state
  np.testing.assert_allclose(grown[1:], before, atol=1e-5)  # Text without markers: the same model.
  assert np.isfinite(grown).all()
  # Callers that pass the base vocabulary get the checkpoint unchanged.
  same_config, same = pretrained.load_or_create_bert("minilm-l6", {}, tokenizer.vocab_size)
  assert same_config == original_config and bert.word_embedding_matrix(same).shape == old_table.shape


def test_grown_vocabulary_keeps_the_tied_mlm_head():
  config = bert.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=16)
  ids = jnp.zeros((1, 4), jnp.int32)
  encoder_params = nn.unbox(bert.BertModel(config, add_pooler=False).init(jax.random.key(0), ids, ids)["params"])
  head = bert.BertMLMHead(config)
  hidden = np.random.default_rng(0).normal(size=(3, 16)).astype(np.float32)
  head_params = nn.unbox(head.init(jax.random.key(1), hidden, bert.word_embedding_matrix(encoder_params))["params"])
  head_params["bias"] = np.arange(50, dtype=np.float32)  # Distinct entries, so their mean is known: 24.5.
  params = {**encoder_params, pretrained.MLM_HEAD_KEY: head_params}
  grown_config, grown = pretrained.grow_vocabulary(config, params, 53)
  assert grown_config.vocab_size == 53
  np.testing.assert_array_equal(grown[pretrained.MLM_HEAD_KEY]["bias"], np.r_[np.arange(50), [24.5] * 3])
  logits = bert.BertMLMHead(grown_config).apply({"params": grown[pretrained.MLM_HEAD_KEY]}, hidden,
                                                bert.word_embedding_matrix(grown))
  before = head.apply({"params": params[pretrained.MLM_HEAD_KEY]}, hidden, bert.word_embedding_matrix(params))
  assert logits.shape == (3, 53)
  np.testing.assert_allclose(logits[:, :50], before, atol=1e-6)
  with pytest.raises(ValueError, match="Cannot shrink"):
    pretrained.grow_vocabulary(config, params, 49)

