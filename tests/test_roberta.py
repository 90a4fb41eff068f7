"""The Flax encoder as RoBERTa: against PyTorch transformers (live, or through the committed tiny RoBERTa and its
golden outputs), its loader and byte-level BPE tokenizer, and SupCon product matching with a RoBERTa encoder."""
import importlib.util
import json
import pathlib

import ml_collections
import numpy as np
import pytest

from docent_jax import experiment
from docent_jax import trainer as trainers
from docent_jax.data import tokenization
from docent_jax.modules import bert
from docent_jax.modules import pretrained
import golden_checks
import test_supcon

GOLDEN_DIR = pathlib.Path(__file__).resolve().parent / "golden"
TINY_ROBERTA = GOLDEN_DIR / "tiny_roberta"
GOLDEN_PATH = GOLDEN_DIR / "tiny_roberta_golden.npz"
PAD, BOS, EOS, MASK = 1, 0, 2, 4  # RoBERTa's ids of <pad>, <s>, </s> and <mask>.


@pytest.fixture(scope="module")
def tiny_roberta() -> tuple[bert.BertConfig, dict]:
  return pretrained.load_bert(str(TINY_ROBERTA))


@pytest.fixture(scope="module")
def tokenizer():
  return pretrained.load_tokenizer(str(TINY_ROBERTA))


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
  return dict(np.load(GOLDEN_PATH))


def _golden_maker():
  """tests/golden/make_roberta_golden.py as a module (it needs torch)."""
  pytest.importorskip("torch")
  spec = importlib.util.spec_from_file_location("make_roberta_golden", GOLDEN_DIR / "make_roberta_golden.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _apply(config: bert.BertConfig, params: dict, input_ids: np.ndarray, attention_mask: np.ndarray) -> bert.BertOutput:
  return bert.BertModel(config, add_pooler="pooler" in params).apply({"params": params}, input_ids, attention_mask)


def test_config_reads_the_model_type():
  config = bert.BertConfig.from_hf_dict({"model_type": "roberta", "pad_token_id": 1, "type_vocab_size": 1})
  assert (config.model_type, config.first_position) == ("roberta", 2)
  assert bert.BertConfig().first_position == 0
  with pytest.raises(ValueError, match="Unsupported model_type 'xlnet'"):
    bert.BertConfig.from_hf_dict({"model_type": "xlnet"})


def test_golden_values_without_torch(tiny_roberta, golden):
  """Model against torch's outputs stored in tests/golden/ (see make_roberta_golden.py)."""
  config, params = tiny_roberta
  assert (config.model_type, config.pad_token_id, config.type_vocab_size) == ("roberta", PAD, 1)
  assert golden["attention_mask"].min() == 0  # Padded rows: padding takes position row pad_token_id.
  out = _apply(config, params, golden["input_ids"], golden["attention_mask"])
  np.testing.assert_allclose(out.last_hidden_state, golden["last_hidden_state"], atol=1e-4, rtol=0)
  np.testing.assert_allclose(out.pooler_output, golden["pooler_output"], atol=1e-4, rtol=0)


def test_tokenizer_reproduces_the_golden_ids_of_text_pairs(tokenizer, golden):
  first, second = list(golden["first_texts"]), list(golden["second_texts"])
  tokens = tokenizer(first, second, padding=True, return_tensors="np")
  np.testing.assert_array_equal(tokens["input_ids"], golden["input_ids"])
  np.testing.assert_array_equal(tokens["attention_mask"], golden["attention_mask"])
  assert (tokenizer.pad_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id) == (
      PAD, BOS, EOS, MASK)
  assert len(tokenizer) == tokenizer.vocab_size == 320
  # The project's pair tokenization: `<s> a </s></s> b </s>`, padded with <pad>, every token type 0.
  rows = tokenization.tokenize_pairs(tokenizer, first, second, golden["input_ids"].shape[1] + 2)
  np.testing.assert_array_equal(rows[:, 0], np.pad(golden["input_ids"], ((0, 0), (0, 2)), constant_values=PAD))
  assert not rows[:, 1].any()
  a, b = (tokenizer(text, add_special_tokens=False)["input_ids"] for text in (first[0], second[0]))
  expected = [BOS, *a, EOS, EOS, *b, EOS]
  assert rows[0, 0, :len(expected)].tolist() == expected and (rows[0, 0, len(expected):] == PAD).all()
  texts = tokenization.tokenize_texts(tokenizer, first, 8)
  short = tokenizer(first[1], add_special_tokens=False)["input_ids"]
  assert texts[1].tolist() == [BOS, *short, EOS] + [PAD] * (8 - len(short) - 2)
  assert texts[0, 0] == BOS and texts[0, -1] == EOS and PAD not in texts[0]  # Truncated.
  with pytest.raises(ValueError, match="room for the tokenizer's 4 special tokens"):
    tokenization.tokenize_pairs(tokenizer, first, second, 3)


def test_tokenizer_loads_from_tokenizer_json_alone_and_adds_special_tokens(tokenizer, golden, tmp_path):
  tokenizer.save_pretrained(str(tmp_path))
  for name in ("vocab.json", "merges.txt"):
    (tmp_path / name).unlink(missing_ok=True)
  assert (tmp_path / "tokenizer.json").is_file()
  reloaded = pretrained.load_tokenizer(str(tmp_path), extra_special_tokens=("[COL]", "[VAL]"))
  pairs = reloaded(list(golden["first_texts"]), list(golden["second_texts"]), padding=True, return_tensors="np")
  np.testing.assert_array_equal(pairs["input_ids"], golden["input_ids"])
  assert len(reloaded) == 322 and reloaded.pad_token_id == PAD
  ids = reloaded("[COL] name [VAL] acme camera")["input_ids"]
  assert ids[0] == BOS and ids[1] == 320 and 321 in ids and ids[-1] == EOS


def test_padding_changes_nothing_and_long_inputs_are_refused(tiny_roberta, golden):
  config, params = tiny_roberta
  out = _apply(config, params, golden["input_ids"], golden["attention_mask"])
  padded = _apply(config, params, np.pad(golden["input_ids"], ((0, 0), (0, 5)), constant_values=PAD),
                  np.pad(golden["attention_mask"], ((0, 0), (0, 5))))
  real = golden["attention_mask"].astype(bool)
  np.testing.assert_allclose(np.asarray(padded.last_hidden_state)[:, :real.shape[1]][real],
                             np.asarray(out.last_hidden_state)[real], atol=1e-5)
  np.testing.assert_allclose(padded.pooler_output, out.pooler_output, atol=1e-5)
  ids = np.full((1, config.max_position_embeddings - 1), 7, np.int32)  # 63 tokens: positions 2 ... 64.
  with pytest.raises(ValueError, match="exceeds the model's 62 positions"):
    _apply(config, params, ids, np.ones_like(ids))


def test_golden_files_match_current_torch(golden, tmp_path):
  """The committed model and outputs are still what the seeded script makes."""
  make_roberta_golden = _golden_maker()
  make_roberta_golden.save_tiny_roberta(tmp_path)
  for name in ("vocab.json", "merges.txt"):
    assert (tmp_path / name).read_text() == (TINY_ROBERTA / name).read_text(), name
  read_config = lambda d: {k: v for k, v in json.loads((d / "config.json").read_text()).items()
                           if k != "transformers_version"}
  assert read_config(tmp_path) == read_config(TINY_ROBERTA)
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  fresh, committed = (load_file(str(d / "model.safetensors")) for d in (tmp_path, TINY_ROBERTA))
  assert sorted(fresh) == sorted(committed)
  for name, value in fresh.items():
    np.testing.assert_array_equal(value, committed[name], err_msg=name)
  golden_checks.assert_match_committed(make_roberta_golden.golden_arrays(tmp_path), golden)


def test_parity_with_transformers(tmp_path):
  """Final hidden states and pooler within 1e-4 of transformers.RobertaModel, on padded pairs and single texts."""
  torch = pytest.importorskip("torch")
  make_roberta_golden = _golden_maker()
  torch_model = make_roberta_golden.save_tiny_roberta(tmp_path, seed=1)
  config, params = pretrained.load_bert(str(tmp_path))
  tokenizer = pretrained.load_tokenizer(str(tmp_path))
  first, second = make_roberta_golden.FIRST, make_roberta_golden.SECOND
  for tokens in (tokenizer(first, second, padding=True, return_tensors="np"),
                 tokenizer(first + second, padding=True, return_tensors="np")):
    assert tokens["attention_mask"].min() == 0
    with torch.no_grad():
      expected = torch_model(**{name: torch.from_numpy(value) for name, value in tokens.items()})
    out = _apply(config, params, tokens["input_ids"], tokens["attention_mask"])
    hidden_diff = np.abs(np.asarray(out.last_hidden_state) - expected.last_hidden_state.numpy()).max()
    pooler_diff = np.abs(np.asarray(out.pooler_output) - expected.pooler_output.numpy()).max()
    assert hidden_diff <= 1e-4 and pooler_diff <= 1e-4, (hidden_diff, pooler_diff)


def test_loads_masked_lm_checkpoint_with_roberta_prefix(golden, tmp_path):
  """'roberta.' encoder names and the 'lm_head.' head (decoder tied to the word embeddings, exact GELU)."""
  torch = pytest.importorskip("torch")
  torch_model = _golden_maker().save_tiny_roberta(tmp_path, seed=2, masked_lm=True)
  config, params = pretrained.load_bert(str(tmp_path))
  assert "pooler" not in params
  head = params.pop(pretrained.MLM_HEAD_KEY)
  ids, mask = golden["input_ids"], golden["attention_mask"]
  with torch.no_grad():
    expected = torch_model(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long())
  hidden = _apply(config, params, ids, mask).last_hidden_state
  logits = bert.BertMLMHead(config).apply({"params": head}, hidden, bert.word_embedding_matrix(params))
  np.testing.assert_allclose(logits, expected.logits.numpy(), atol=1e-4, rtol=0)


def test_supcon_product_matching_runs_with_a_roberta_encoder(tmp_path, tiny_roberta):
  """configs/supcon.py:abt_buy, shrunk, on a tiny products directory with the tiny RoBERTa as its model:
  pre-training, the frozen encoder's probe, fine-tuning and the cross-encoder baseline all train and report."""
  config = test_supcon.tiny_config(test_supcon.write_products(tmp_path / "products"), tmp_path / "tfds")
  config.model.pretrained = config.model.tokenizer = str(TINY_ROBERTA)
  config.train.num_steps = 2
  config.finetune = ml_collections.ConfigDict({"trained": config.finetune.trained})
  config.finetune.trained.train.num_steps = 2
  config.baselines = ml_collections.ConfigDict({"cross_encoder": config.baselines.cross_encoder})
  config.baselines.cross_encoder.train.num_steps = 2

  runs = {run.name: run for run in experiment.model_configs(config)}
  pretraining = trainers.Trainer(runs["supcon"], tmp_path / "check")
  objective = pretraining.objective
  assert objective.bert_config.model_type == "roberta" and objective.tokenizer.pad_token_id == PAD
  params = pretraining.initial_state().params
  np.testing.assert_array_equal(params["bert"]["layer_0"]["attention"]["qkv_kernel"],
                                tiny_roberta[1]["layer_0"]["attention"]["qkv_kernel"])

  results = experiment.train_and_evaluate(config, tmp_path / "run")
  for model in ("supcon_frozen", "supcon_trained", "cross_encoder"):
    for split in ("validation", "test"):
      assert 0.0 <= results[f"{model}/{split}/f1"] <= 1.0, (model, split)
