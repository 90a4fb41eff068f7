"""Writes a model as a directory that other libraries load: sentence-transformers (a SentenceTransformer, or a
CrossEncoder for a cross-encoder), Hugging Face (the transformer alone), ONNX (the whole text encoder as one graph),
or TensorBoard's Projector (the entity vectors). Each is written whole into a temporary directory beside the target,
then renamed into place: a failure leaves nothing half-written and an earlier directory as it was."""
from collections.abc import Callable
import csv
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

from etils import epath
import numpy as np
from safetensors.numpy import save

from docent_jax import outputs
from docent_jax import parallel
from docent_jax.export import encoder as encoders
from docent_jax.export import model_card

FORMATS = ("sentence-transformers", "huggingface", "onnx", "projector")

# The sentence-transformers module types, by the names every release since 2.0 resolves.
_TRANSFORMER, _POOLING = "sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling"
_DENSE, _NORMALIZE = "sentence_transformers.models.Dense", "sentence_transformers.models.Normalize"
_IDENTITY, _SIGMOID = "torch.nn.modules.linear.Identity", "torch.nn.modules.activation.Sigmoid"
# What the bi-encoder's pair head reads: the features of the two offers' vectors u and v, in this order.
PAIR_FEATURES = ("u", "v", "|u - v|", "u * v")
MATCH_THRESHOLD = 0.5  # A pair is a match when its probability is above this (its logit above 0).


class ExportError(ValueError):
  """An export that cannot be done as asked (the message names the run or directory and says why)."""


def _save_tensors(path: pathlib.Path, tensors: dict[str, np.ndarray]) -> None:
  # "pt": the format tag that transformers and sentence-transformers expect of a safetensors file. Serialised in
  # memory, then written, so that a failed write is an OSError naming its cause.
  path.write_bytes(save({name: np.ascontiguousarray(value, np.float32) for name, value in tensors.items()},
                        metadata={"format": "pt"}))


def _write_json(path: pathlib.Path, value: Any) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")


def _write_transformer(encoder: encoders.ExportedEncoder, directory: pathlib.Path) -> None:
  """The BERT as Hugging Face's `AutoModel` reads it (config.json, model.safetensors) and its tokenizer, which
  truncates to the run's length."""
  from docent_jax.modules import pretrained  # pylint: disable=g-import-not-at-top
  _write_json(directory / "config.json", pretrained.hf_config_dict(encoder.layout.bert_config))
  _save_tensors(directory / "model.safetensors", encoder.state_dict)
  _save_tokenizer(encoder, directory)


def _save_tokenizer(encoder: encoders.ExportedEncoder, directory: pathlib.Path) -> None:
  """The tokenizer, truncating to the run's length by default (`model_max_length`)."""
  tokenizer = encoder.tokenizer
  kept = tokenizer.model_max_length
  tokenizer.model_max_length = encoder.layout.max_len
  try:
    tokenizer.save_pretrained(str(directory))
  finally:
    tokenizer.model_max_length = kept


def _write_dense(directory: pathlib.Path, weight: np.ndarray, bias: np.ndarray, **names: str) -> None:
  """A sentence-transformers Dense module without activation (`names`: its input and output feature names)."""
  _write_json(directory / "config.json", {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]),
                                          "bias": True, "activation_function": _IDENTITY, **names})
  _save_tensors(directory / "model.safetensors", {"linear.weight": weight, "linear.bias": bias})


def _write_sentence_transformer(model: Any, encoder: encoders.ExportedEncoder, directory: pathlib.Path) -> list[str]:
  """The sentence-transformers directory of `encoder`; returns the card's notes on what else it holds."""
  layout = encoder.layout
  cross_encoder = layout.head == "cross_encoder"
  _write_transformer(encoder, directory)
  sentence_bert = {"max_seq_length": layout.max_len, "do_lower_case": False}
  if cross_encoder:  # sentence-transformers 6 reads a CrossEncoder's transformer for its token outputs.
    sentence_bert["transformer_task"] = "feature-extraction"
  _write_json(directory / "sentence_bert_config.json", sentence_bert)
  modules = [(_TRANSFORMER, "")]
  pooling = f"{len(modules)}_Pooling"
  _write_json(directory / pooling / "config.json", {
      "word_embedding_dimension": encoder.hidden_size, "pooling_mode_cls_token": layout.pooling == "cls",
      "pooling_mode_mean_tokens": layout.pooling == "mean", "pooling_mode_max_tokens": False,
      "pooling_mode_mean_sqrt_len_tokens": False})
  modules.append((_POOLING, pooling))
  if encoder.projection is not None:
    dense = f"{len(modules)}_Dense"
    _write_dense(directory / dense, *encoder.projection)
    modules.append((_DENSE, dense))
  if cross_encoder:  # The logit of the pair from its first token's output; the CrossEncoder's sigmoid follows.
    dense = f"{len(modules)}_Dense"
    _write_dense(directory / dense, *encoder.head, module_input_name="sentence_embedding", module_output_name="scores")
    modules.append((_DENSE, dense))
  if layout.normalize:
    normalize = f"{len(modules)}_Normalize"
    (directory / normalize).mkdir()
    modules.append((_NORMALIZE, normalize))
  _write_json(directory / "modules.json", [{"idx": i, "name": str(i), "path": path, "type": kind}
                                           for i, (kind, path) in enumerate(modules)])
  settings = {"__version__": {"docent_jax": "0.1.0"}, "prompts": {}, "default_prompt_name": None}
  if cross_encoder:
    settings.update(model_type="CrossEncoder", activation_fn=_SIGMOID)
  else:
    settings.update(model_type="SentenceTransformer", similarity_fn_name=encoder.similarity)
  _write_json(directory / "config_sentence_transformers.json", settings)
  notes = []
  if layout.head == "pair_features":
    _save_tensors(directory / "pair_head.safetensors", {"weight": encoder.head[0][0], "bias": encoder.head[1]})
    _write_json(directory / "pair_head.json", {"features": list(PAIR_FEATURES), "threshold": MATCH_THRESHOLD})
    notes.append("A pair classifier: `pair_head.safetensors` scores the features [u, v, |u - v|, u * v] of two "
                 f"offers' vectors; sigmoid(weight . features + bias) > {MATCH_THRESHOLD} is a match "
                 "(`pair_head.json`).")
  notes += _write_tables(model, directory)
  return notes


def _table_text(text: Any) -> str:
  return "" if text is None else str(text)


def _write_tables(model: Any, directory: pathlib.Path) -> list[str]:
  """The model's entity vectors and, for link prediction, its relation table, beside the encoder."""
  notes = []
  if "entity_ids" in model.record:
    ids, vectors = model.entities()
    texts = model.entity_texts() or [None] * len(ids)
    _save_tensors(directory / "entities.safetensors", {"vectors": vectors})
    with open(directory / "entity_ids.tsv", "w", encoding="utf-8", newline="") as file:
      writer = csv.writer(file, delimiter="\t", lineterminator="\n")
      writer.writerow(["id", "text"])
      writer.writerows([entity, _table_text(text)] for entity, text in zip(ids, texts))
    notes.append(f"`entities.safetensors` (`vectors`, [{len(ids)}, {vectors.shape[1]}]) holds the entities' vectors "
                 "as the model scores them, in the order of `entity_ids.tsv` (id, text).")
  relation_ids = getattr(model, "relation_ids", None)
  if relation_ids:
    table = parallel.fetch(model.params["relations"]["embedding"])
    _save_tensors(directory / "relations.safetensors", {"relations": table})
    _write_json(directory / "relations.json", {"scoring": model.config.model.scoring, "relation_ids": relation_ids})
    notes.append(f"`relations.safetensors` (`relations`, {list(table.shape)}) holds the relation embeddings in the "
                 f"order of `relations.json`, scored with {model.config.model.scoring} (docs/export.md has the "
                 "NumPy recipe).")
  return notes


def _write_projector(model: Any, directory: pathlib.Path) -> list[str]:
  if "entity_ids" not in model.record:
    raise ExportError(f"{model.name}: a {model.config.objective} model has no entity set to show in the Projector.")
  ids, vectors = model.entities()
  texts = model.entity_texts() or [""] * len(ids)
  np.savetxt(directory / "vectors.tsv", np.asarray(vectors, np.float32), delimiter="\t", fmt="%.7g")
  # The Projector reads one line a row and a tab between columns: whitespace in texts becomes single spaces.
  clean = lambda value: " ".join(_table_text(value).split())
  (directory / "metadata.tsv").write_text(
      "id\ttext\n" + "".join(f"{clean(entity)}\t{clean(text)}\n" for entity, text in zip(ids, texts)),
      encoding="utf-8")
  (directory / "projector_config.pbtxt").write_text(
      'embeddings {\n  tensor_name: "%s"\n  tensor_path: "vectors.tsv"\n  metadata_path: "metadata.tsv"\n}\n'
      % model.name.replace('"', "'"), encoding="utf-8")
  return [f"`vectors.tsv` ({len(ids)} x {vectors.shape[1]}) and `metadata.tsv` (id, text): "
          "`tensorboard --logdir DIR` shows them in its Projector."]


def _write_format(model: Any, format: str, directory: pathlib.Path) -> None:  # pylint: disable=redefined-builtin
  dim = None
  if format == "projector":
    kind, notes = format, _write_projector(model, directory)
  else:
    encoder = encoders.exported_encoder(model)
    dim = None if encoder.layout.head == "cross_encoder" else encoder.dim
    if format == "sentence-transformers":
      kind = "cross-encoder" if encoder.layout.head == "cross_encoder" else format
      notes = _write_sentence_transformer(model, encoder, directory)
    elif format == "huggingface":
      kind = format
      _write_transformer(encoder, directory)
      notes = [f"The transformer alone: the model's vectors are its {encoder.layout.pooling} pooling"
               + (", then a linear map" if encoder.projection is not None else "")
               + (", L2-normalised" if encoder.layout.normalize else "")
               + "; the sentence-transformers format holds them all."]
    else:
      from docent_jax.export import onnx_graph  # pylint: disable=g-import-not-at-top
      kind = format
      onnx_graph.save_onnx(encoder, directory / "model.onnx")
      _save_tokenizer(encoder, directory)
      output = "logits" if encoder.layout.head == "cross_encoder" else "sentence_embedding"
      notes = [f"`model.onnx`: inputs input_ids, attention_mask, token_type_ids (int64 [batch, sequence]), output "
               f"{output}; tokenize with the tokenizer here, truncating to {encoder.layout.max_len} tokens."]
  (directory / "README.md").write_text(model_card.model_card(model, kind, dim, notes), encoding="utf-8")


def save_pretrained(model: Any, directory: str | os.PathLike, format: str = "sentence-transformers",  # pylint: disable=redefined-builtin
                    overwrite: bool = False) -> epath.Path:
  """Writes `model` (an `inference.protocol.Model` over params, e.g. `docent_jax.load(run)`) to `directory` in
  `format` (one of `FORMATS`), whole or not at all; an existing non-empty `directory` is replaced only with
  `overwrite`. Returns the directory."""
  target = checked_target(directory, format, overwrite)
  _write_whole(target, lambda path: _write_format(model, format, path))
  return target


def checked_target(directory: str | os.PathLike, format: str, overwrite: bool) -> epath.Path:  # pylint: disable=redefined-builtin
  """`directory` as a path, once `format` is known and `directory` is free (missing, empty, or `overwrite`): checked
  before a model is loaded, so that a bad choice is one line at once."""
  if format not in FORMATS:
    raise ExportError(f"Unknown export format {format!r}; valid: {', '.join(FORMATS)}.")
  target = outputs.as_path(directory)
  if target.exists() and (not target.is_dir() or any(target.iterdir())) and not overwrite:
    raise ExportError(f"{target} exists and is not empty; choose another --output or pass --overwrite.")
  return target


def _write_whole(target: epath.Path, fill: Callable[[pathlib.Path], None]) -> None:
  """Fills a new local directory (beside `target` where that is local), then puts it in `target`'s place."""
  remote = "://" in os.fspath(target)
  if not remote:
    target.parent.mkdir(parents=True, exist_ok=True)
  try:
    partial = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial",
                                            dir=None if remote else target.parent))
  except OSError as error:
    raise ExportError(f"{target}: not written ({outputs.cause(error)}).") from error
  try:
    fill(partial)
    if remote:
      _copy_tree(partial, target)
      return
    if target.exists():
      previous = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".previous", dir=target.parent))
      os.replace(target, previous / target.name)
      os.replace(partial, target)
      shutil.rmtree(previous, ignore_errors=True)
    else:
      os.replace(partial, target)
  except OSError as error:
    raise ExportError(f"{target}: not written ({outputs.cause(error)}); an earlier directory there, if any, "
                      "is unchanged.") from error
  finally:
    shutil.rmtree(partial, ignore_errors=True)


def _copy_tree(source: pathlib.Path, target: epath.Path) -> None:
  """A local directory copied file by file to a remote one (gs://), which has no rename of directories."""
  if target.exists():
    target.rmtree()
  for path in sorted(source.rglob("*")):
    destination = target / path.relative_to(source).as_posix()
    if path.is_dir():
      destination.mkdir(parents=True, exist_ok=True)
    else:
      destination.parent.mkdir(parents=True, exist_ok=True)
      destination.write_bytes(path.read_bytes())
