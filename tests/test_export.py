"""A trained model outside docent_jax: exported as sentence-transformers, Hugging Face, ONNX and Projector
directories, read by those libraries (sentence-transformers 6.3 on PyTorch, onnxruntime, transformers), which give
the run's own vectors and scores; BLP's relation table reproduces the run's test MRR in NumPy; an exported
directory comes back as a pretrained encoder and fine-tunes; bad input is one line and writes nothing."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"  # Nothing here may reach a hub.

import jax
import ml_collections
import numpy as np
import pytest

import docent_jax
from docent_jax import experiment
from docent_jax import methods
from docent_jax import trainer as trainers
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.export import writer
from docent_jax.inference import protocol
from docent_jax.modules import pretrained
import kg_fixtures
import review_fixtures
import test_reliability
import test_roberta
import test_supcon
import tiny_training
import universal_fixtures

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tools"))
import export_link_prediction  # pylint: disable=g-import-not-at-top,wrong-import-position  # docs/export.md's recipe.
_WORDS = ("red blue green camera lens river song account password the a of quick brown fox jumps over lazy dog "
          "acme x101 digital model number fruit tool city").split()


def mixed_texts(count: int = 64, seed: int = 0) -> list[str]:
  """`count` texts of 0 to 60 words: many longer than every tiny run's truncation, one empty."""
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(_WORDS, size=n)) for n in rng.integers(0, 61, size=count)]


def _encoder_only(config: ml_collections.ConfigDict, num_steps: int = 3) -> ml_collections.ConfigDict:
  """`config` trained `num_steps` steps with no evaluator, baseline or fine-tuning stage: a model to export."""
  config.train.num_steps = num_steps
  config.train.best_metric = ""
  config.evals = {}
  config.baselines = {}
  config.finetune = {}
  return config


def _train(config: ml_collections.ConfigDict, workdir: pathlib.Path, runs: tuple[str, ...] = ()) -> pathlib.Path:
  experiment.train_and_evaluate(config, workdir, runs=list(runs))
  return workdir


@pytest.fixture(scope="module")
def kg_data(tmp_path_factory) -> tuple[pathlib.Path, pathlib.Path]:
  root = tmp_path_factory.mktemp("kg_data")
  return kg_fixtures.write_tiny_kg(root / "kg"), root / "tfds"


@pytest.fixture(scope="module")
def blp_run(kg_data, tmp_path_factory) -> pathlib.Path:
  """A tiny BLP-TransE run, evaluated (its results.json has the test MRR)."""
  config = kg_fixtures.tiny_config(*kg_data)
  config.train.num_steps = 4
  return _train(config, tmp_path_factory.mktemp("blp")) / "blp_transe"


@pytest.fixture(scope="module")
def runs(blp_run, kg_data, tmp_path_factory) -> dict[str, pathlib.Path]:
  """A tiny run of every method with a BERT or RoBERTa encoder, by name."""
  root = tmp_path_factory.mktemp("runs")
  found = {"blp_transe": blp_run}
  mean = kg_fixtures.tiny_config(*kg_data)
  mean.model.encoder = "bert_mean"
  found["blp_bert_mean"] = _train(_encoder_only(mean), root / "blp_mean") / "blp_transe"
  reviews = review_fixtures.write_tiny_reviews(root / "reviews")
  for variant in ("dual", "hybrid"):
    config = _encoder_only(review_fixtures.tiny_config(reviews, root / "reviews_tfds", variant=variant))
    found[f"docent_{variant}"] = _train(config, root / variant) / f"docent_{variant}"
  products = test_supcon.write_products(root / "products")
  supcon = test_supcon.tiny_config(products, root / "products_tfds")
  supcon.evals = {}
  for stage in ("trained", "head"):
    supcon.finetune[stage].evals = {}
    supcon.finetune[stage].train.best_metric = ""
  supcon.baselines = {"cross_encoder": supcon.baselines.cross_encoder}
  supcon.baselines.cross_encoder.evals = {}
  supcon.baselines.cross_encoder.train.best_metric = ""
  supcon_dir = _train(supcon, root / "supcon", runs=("supcon", "supcon_trained", "cross_encoder"))
  found.update({name: supcon_dir / name for name in ("supcon", "supcon_trained", "cross_encoder")})
  roberta = _encoder_only(test_supcon.tiny_config(products, root / "roberta_tfds"))
  roberta.model.pretrained = roberta.model.tokenizer = str(test_roberta.TINY_ROBERTA)
  found["supcon_roberta"] = _train(roberta, root / "roberta") / "supcon"
  universal_dir = root / "universal"
  universal = universal_fixtures.tiny_config(
      universal_fixtures.write_nli(universal_dir / "nli"), universal_fixtures.write_ppdb_pack(universal_dir / "ppdb"),
      universal_fixtures.write_evaluation_data(universal_dir / "eval"), universal_dir / "tfds")
  found["universal_multitask"] = _train(_encoder_only(universal), universal_dir / "work") / "universal_multitask"
  faq = _encoder_only(universal_fixtures.tiny_faq_config(universal_fixtures.write_faq(root / "faq"), root / "faq_tfds"))
  faq.num_seeds = 1
  found["faq_retrieved"] = _train(faq, root / "faq_work") / "faq_retrieved"
  return found


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _onnx_outputs(directory: pathlib.Path, first: list[str], second: list[str] | None = None) -> np.ndarray:
  """onnxruntime's output of the exported graph, on inputs of the tokenizer exported beside it."""
  import onnxruntime  # pylint: disable=g-import-not-at-top
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = AutoTokenizer.from_pretrained(str(directory))
  encoded = tokenizer(first, *([second] if second else []), truncation=True, padding=True, return_tensors="np",
                      return_token_type_ids=True)
  session = onnxruntime.InferenceSession(str(directory / "model.onnx"), providers=["CPUExecutionProvider"])
  return session.run(None, {name: encoded[name].astype(np.int64)
                            for name in ("input_ids", "attention_mask", "token_type_ids")})[0]


ENCODERS = ("blp_transe", "blp_bert_mean", "docent_dual", "docent_hybrid", "supcon", "supcon_trained",
            "supcon_roberta", "universal_multitask", "faq_retrieved")


@pytest.mark.parametrize("name", ENCODERS)
def test_sentence_transformers_and_onnxruntime_encode_as_the_run_does(runs, name, tmp_path):
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  model = docent_jax.load(runs[name])
  texts = mixed_texts()
  expected = model.encode(texts)
  model.save_pretrained(tmp_path / "st")
  exported = SentenceTransformer(str(tmp_path / "st"), device="cpu")
  assert exported.max_seq_length == model.config.data.max_len
  assert exported.similarity_fn_name == ("cosine" if model.cosine_search else "dot")
  assert np.min(_cosines(exported.encode(texts), expected)) >= 0.99999
  model.save_pretrained(tmp_path / "onnx", format="onnx")
  assert np.min(_cosines(_onnx_outputs(tmp_path / "onnx", texts), expected)) >= 0.99999
  card = (tmp_path / "st" / "README.md").read_text()
  assert card.startswith("---\nlibrary_name: sentence-transformers\npipeline_tag: sentence-similarity\n")
  assert methods.paper(model.config.objective) in card and '"train": {' in card


def test_the_cross_encoder_scores_as_the_run_through_sentence_transformers_and_onnxruntime(runs, tmp_path):
  from sentence_transformers import CrossEncoder  # pylint: disable=g-import-not-at-top
  model = docent_jax.load(runs["cross_encoder"])
  left, right = mixed_texts(32, seed=1), mixed_texts(32, seed=2)
  expected = model.match(left, right)
  model.save_pretrained(tmp_path / "ce")
  modules = json.loads((tmp_path / "ce" / "modules.json").read_text())
  assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Dense"]  # The first token's output, no pooler.
  scores = CrossEncoder(str(tmp_path / "ce"), device="cpu").predict(list(zip(left, right)))
  np.testing.assert_allclose(scores, expected, atol=1e-5, rtol=0)
  model.save_pretrained(tmp_path / "onnx", format="onnx")
  logits = _onnx_outputs(tmp_path / "onnx", left, right)
  np.testing.assert_allclose(1 / (1 + np.exp(-logits)), expected, atol=1e-5, rtol=0)


def test_the_pair_classifier_scores_as_the_run_through_the_numpy_recipe(runs, tmp_path):
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  model = docent_jax.load(runs["supcon_trained"])
  left, right = mixed_texts(32, seed=3), mixed_texts(32, seed=4)
  expected = model.match(left, right)
  directory = model.save_pretrained(tmp_path / "pair")
  # docs/export.md's recipe.
  encoder = SentenceTransformer(str(directory), device="cpu")
  head = load_file(str(directory / "pair_head.safetensors"))
  threshold = json.loads((directory / "pair_head.json").read_text())["threshold"]
  u, v = encoder.encode(left), encoder.encode(right)
  features = np.concatenate([u, v, np.abs(u - v), u * v], axis=1)
  probability = 1 / (1 + np.exp(-(features @ head["weight"] + head["bias"])))
  np.testing.assert_allclose(probability, expected, atol=1e-5, rtol=0)
  np.testing.assert_array_equal(probability > threshold, expected > 0.5)


def test_blps_exported_encoder_and_relation_table_reproduce_its_test_mrr_in_numpy(blp_run, kg_data, tmp_path):
  from sentence_transformers import SentenceTransformer  # pylint: disable=g-import-not-at-top
  kg_dir, tfds_dir = kg_data
  directory = pathlib.Path(str(docent_jax.load(blp_run).save_pretrained(tmp_path / "blp")))
  _, texts, saved, relations, _ = export_link_prediction.export_tables(directory)
  assert relations["scoring"] == "transe"
  # The entities' vectors as the exported encoder gives them are those saved beside it.
  encoded = SentenceTransformer(str(directory), device="cpu").encode(texts)
  assert np.min(_cosines(encoded, saved)) >= 0.99999
  graph = knowledge_graph.load_knowledge_graph(str(kg_dir), data_dir=tfds_dir)
  results = json.loads((blp_run.parent / "results.json").read_text())
  mrr = export_link_prediction.split_mrr(directory, graph, "test", encode=False)
  assert abs(mrr - results["blp_transe/test/mrr"]) <= 1e-4


def test_an_exported_directory_imports_as_it_was_and_fine_tunes(blp_run, kg_data, tmp_path):
  model = docent_jax.load(blp_run)
  texts = mixed_texts(16, seed=5)
  exported = model.save_pretrained(tmp_path / "exported")
  config = kg_fixtures.tiny_config(*kg_data)
  config.model.pretrained = config.model.tokenizer = str(exported)
  config.train.num_steps = 2
  config.evals = {}
  config.train.best_metric = ""
  trainer = trainers.Trainer(config, tmp_path / "imported" / "blp_transe")
  start = trainer.objective.model(jax.device_get(trainer.initial_state().params))
  # Export -> import: the encoder's params, its linear map included, bit for bit; so encode gives the same vectors
  # (on another mesh than `load`'s, to float rounding).
  jax.tree.map(np.testing.assert_array_equal, start.params["encoder"], model.params["encoder"])
  np.testing.assert_allclose(start.with_params(model.params).encode(texts), start.encode(texts), rtol=0, atol=0)
  np.testing.assert_allclose(start.encode(texts), model.encode(texts), rtol=1e-6, atol=1e-6)
  experiment.train_and_evaluate(config, tmp_path / "imported")
  tuned = docent_jax.load(tmp_path / "imported" / "blp_transe")
  assert tuned.step == 2 and not np.allclose(tuned.encode(texts), model.encode(texts))


def test_huggingface_and_projector_directories(runs, tmp_path):
  import transformers  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  model = docent_jax.load(runs["supcon"])
  directory = model.save_pretrained(tmp_path / "hf", format="huggingface")
  hf = transformers.AutoModel.from_pretrained(str(directory))
  tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
  texts = mixed_texts(8, seed=6)
  batch = tokenizer(texts, truncation=True, padding=True, return_tensors="pt")
  with torch.no_grad():
    hidden = hf(**batch).last_hidden_state.numpy()
  mask = batch["attention_mask"].numpy()[..., None]
  mean = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)
  assert np.min(_cosines(mean, model.encode(texts))) >= 0.99999
  faq = docent_jax.load(runs["faq_retrieved"])
  projector = faq.save_pretrained(tmp_path / "projector", format="projector")
  ids, vectors = faq.entities()
  np.testing.assert_allclose(np.loadtxt(projector / "vectors.tsv", delimiter="\t", ndmin=2), vectors, rtol=1e-6)
  metadata = (projector / "metadata.tsv").read_text().splitlines()
  assert metadata[0] == "id\ttext" and [line.split("\t")[0] for line in metadata[1:]] == ids
  assert 'tensor_path: "vectors.tsv"' in (projector / "projector_config.pbtxt").read_text()


def _export_command(run: pathlib.Path, output: pathlib.Path, *flags: str) -> list[str]:
  return [sys.executable, "-m", "docent_jax.export", f"--run={run}", f"--output={output}", *flags]


def _error_lines(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if line.startswith("E")]


def test_bad_input_is_one_line_and_writes_nothing(blp_run, tmp_path):
  env = tiny_training.subprocess_env(1)
  occupied = tmp_path / "occupied"
  occupied.mkdir()
  (occupied / "keep.txt").write_text("mine")
  run = subprocess.run(_export_command(blp_run, occupied), cwd=REPO_ROOT, env=env, capture_output=True, text=True)
  assert run.returncode == 1 and len(_error_lines(run.stderr)) == 1, run.stderr[-2000:]
  assert "exists and is not empty; choose another --output or pass --overwrite" in run.stderr
  assert [p.name for p in occupied.iterdir()] == ["keep.txt"]
  # An unfinished run: its config asks for more steps than it saved.
  unfinished = pathlib.Path(shutil.copytree(blp_run, tmp_path / "unfinished" / "blp_transe"))
  config = json.loads((unfinished / "config.json").read_text())
  config["train"]["num_steps"] = 40
  (unfinished / "config.json").write_text(json.dumps(config))
  run = subprocess.run(_export_command(unfinished, tmp_path / "out"), cwd=REPO_ROOT, env=env, capture_output=True,
                       text=True)
  assert run.returncode == 1 and "an unfinished run (step 4 of 40)" in run.stderr, run.stderr[-2000:]
  # A damaged run: its reported params cannot be read.
  damaged = pathlib.Path(shutil.copytree(blp_run, tmp_path / "damaged" / "blp_transe"))
  for path in (damaged / "best").rglob("*"):
    if path.is_file() and path.stat().st_size > 1000:
      path.write_bytes(b"\0" * 16)
  run = subprocess.run(_export_command(damaged, tmp_path / "out"), cwd=REPO_ROOT, env=env, capture_output=True,
                       text=True)
  assert run.returncode == 1 and len(_error_lines(run.stderr)) == 1, run.stderr[-2000:]
  # A full disk: no file beyond 64 KiB (the weights are larger); neither the target nor a partial directory stays.
  full = test_reliability._run_with_file_size_limit(  # pylint: disable=protected-access
      "from docent_jax.export import __main__ as export\nexport.export_run(*__import__('sys').argv[1:3])\n",
      64 * 1024, args=(str(blp_run), str(tmp_path / "full")))
  assert full.returncode != 0 and "not written (File too large)" in full.stderr, full.stderr[-2000:]
  assert not [p for p in tmp_path.iterdir() if p.name.startswith((".full", "full"))]
  assert not (tmp_path / "out").exists()


def test_a_model_without_a_pooled_bert_is_refused_in_one_line_saying_why(blp_run, tmp_path):
  model = docent_jax.load(blp_run)
  for encoder, reason in (("bow", "BE-BOW averages input word-piece vectors"), ("cnn", "DKRL's encoder")):
    config = ml_collections.ConfigDict(model.config.to_dict())
    config.model.encoder = encoder
    other = type(model)(config, model.record, None, tokenizer=model.tokenizer)
    with pytest.raises(protocol.NotExportableError, match=reason):
      other.save_pretrained(tmp_path / encoder)
    assert not (tmp_path / encoder).exists()
  with pytest.raises(writer.ExportError, match="Unknown export format 'tflite'"):
    model.save_pretrained(tmp_path / "x", format="tflite")


def test_a_sentence_transformers_directory_reads_its_modules_and_names_what_it_cannot(tmp_path):
  shipped = pretrained.sentence_transformer_modules("minilm-l6")  # The package ships one, in the 2.0 format.
  assert (shipped.pooling, shipped.dense, shipped.normalize, shipped.max_seq_length) == ("mean", (), True, 256)
  assert pretrained.resolve_model_dir("minilm-l6") == shipped.transformer_dir
  modules = tmp_path / "modules.json"
  modules.write_text(json.dumps([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                                 {"idx": 1, "path": "1_LSTM", "type": "sentence_transformers.models.LSTM"}]))
  with pytest.raises(ValueError, match=r"modules.json: not a sentence-transformers model this package reads "
                                       r"\(module 'sentence_transformers.models.LSTM' is none of"):
    pretrained.load_bert(str(tmp_path))
  modules.write_text("[{")
  with pytest.raises(ValueError, match=r"modules.json: not a sentence-transformers model this package reads"):
    pretrained.load_tokenizer(str(tmp_path))


def test_a_model_of_the_local_hub_cache_loads_by_its_hub_name(blp_run, tmp_path, monkeypatch):
  import huggingface_hub  # pylint: disable=g-import-not-at-top
  exported = docent_jax.load(blp_run).save_pretrained(tmp_path / "exported")
  # The Hub cache's layout: the snapshot of the commit that refs/main names.
  repo = tmp_path / "hub" / "models--acme--blp-transe"
  shutil.copytree(exported, repo / "snapshots" / "0123abc")
  (repo / "refs").mkdir()
  (repo / "refs" / "main").write_text("0123abc")
  monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
  config, params = pretrained.load_bert("acme/blp-transe")
  assert config == pretrained.load_bert(str(exported))[0]
  jax.tree.map(np.testing.assert_array_equal, params, pretrained.load_bert(str(exported))[1])
  with pytest.raises(FileNotFoundError, match="nor a model of the local Hugging Face cache"):
    pretrained.load_bert("acme/not-cached")
