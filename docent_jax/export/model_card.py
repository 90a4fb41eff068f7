"""An exported model's README.md in the Hugging Face Hub's format: a YAML header, then what the model is, how it
was trained (its config and command), what it measured (its results.json) and the paper it implements."""
import json
from typing import Any

from docent_jax import methods
from docent_jax import run_dir as run_dirs
from docent_jax.modules import pretrained

# The Hub's pipeline tag and library of each format.
_HUB_TAGS = {"sentence-transformers": ("sentence-transformers", "sentence-similarity"),
             "cross-encoder": ("sentence-transformers", "text-ranking"),
             "huggingface": ("transformers", "feature-extraction"),
             "onnx": ("onnx", "feature-extraction"),
             "projector": ("tensorboard", "feature-extraction")}
# How each kind of directory is used, from its own path or Hub name (MODEL).
_USAGE = {
    "sentence-transformers": ['from sentence_transformers import SentenceTransformer',
                              'model = SentenceTransformer("MODEL")',
                              'vectors = model.encode(["a text", "another text"])',
                              'scores = model.similarity(vectors, vectors)'],
    "cross-encoder": ['from sentence_transformers import CrossEncoder',
                      'probabilities = CrossEncoder("MODEL").predict([("left offer", "right offer")])'],
    "huggingface": ['from transformers import AutoModel, AutoTokenizer',
                    'tokenizer, model = AutoTokenizer.from_pretrained("MODEL"), AutoModel.from_pretrained("MODEL")',
                    'states = model(**tokenizer(["a text"], truncation=True, return_tensors="pt")).last_hidden_state'],
    "onnx": ['import numpy as np, onnxruntime',
             'from transformers import AutoTokenizer',
             'tokenizer = AutoTokenizer.from_pretrained("MODEL")',
             'session = onnxruntime.InferenceSession("MODEL/model.onnx")',
             'batch = tokenizer(["a text"], truncation=True, padding=True, return_tensors="np", '
             'return_token_type_ids=True)',
             'outputs = session.run(None, {k: batch[k].astype(np.int64) for k in '
             '("input_ids", "attention_mask", "token_type_ids")})[0]'],
    "projector": ['# tensorboard --logdir MODEL, then the Projector tab.'],
}
# The base models the package ships (its `MODEL_ALIASES`): their Hub names and licences.
_BASE_MODELS = {"minilm-l6": ("sentence-transformers/all-MiniLM-L6-v2", "apache-2.0")}


def base_model(model_config: Any) -> tuple[str, str]:
  """(name, licence) of the pretrained encoder a run started from: an alias's Hub name, a directory's name and the
  licence its own card states (else 'other'), or 'none' for a freshly initialised one."""
  name = model_config.get("pretrained", "")
  if not name:
    return "none (randomly initialised)", "other"
  if name in _BASE_MODELS:
    return _BASE_MODELS[name]
  licence = "other"
  try:
    card = pretrained.resolve_model_dir(name) / "README.md"
    header = card.read_text(encoding="utf-8").split("---")[1] if card.is_file() else ""
    licence = next((line.split(":", 1)[1].strip() for line in header.splitlines() if line.startswith("license:")),
                   licence)
  except (FileNotFoundError, IndexError):
    pass
  return str(name), licence


def _yaml_list(values: list[str]) -> str:
  return "".join(f"\n- {json.dumps(value)}" for value in values)


def model_card(model: Any, kind: str, dim: int | None, notes: list[str]) -> str:
  """README.md of `model` (a loaded run, or any `inference.protocol.Model`) exported as `kind` (a format, or
  'cross-encoder'), vectors of width `dim`; `notes` say what the directory holds besides the encoder."""
  config = model.config
  library, pipeline = _HUB_TAGS[kind]
  base, licence = base_model(config.model)
  # A dataset by name (e.g. wn18rr) goes in the header; one read from a directory is named in the text only.
  dataset = str(config.data.get("dataset", ""))
  hub_datasets = [dataset] if dataset and "/" not in dataset else []
  run = model.run_dir
  results, commands = {}, []
  if run is not None:
    prefix = f"{run.name}/"
    results = {key[len(prefix):]: value for key, value in run.workdir.read_results().items() if key.startswith(prefix)}
    commands = run.workdir.commands()
  header = [f"library_name: {library}", f"pipeline_tag: {pipeline}",
            f"tags:{_yaml_list(['docent_jax', config.objective, library, pipeline])}",
            f"datasets:{_yaml_list(hub_datasets)}" if hub_datasets else "datasets: []",
            f"license: {licence}"]
  if base.count("/") == 1 and not base.startswith(("/", ".")):
    header.append(f"base_model: {base}")
  lines = ["---", *header, "---", "",
           f"# {run.name if run is not None else config.get('name', config.objective)}", "",
           f"A `{config.objective}` model trained with docent_jax, exported as {kind}. It implements "
           f"{methods.paper(config.objective)}.", "",
           f"- Base model: {base} (licence: {licence}).",
           f"- Trained on: {dataset or 'the config below'}; step {model.step} of {config.train.num_steps}"
           f"{' (the best kept by ' + config.train.best_metric + ')' if _kept_best(run) else ''}.",
           *_early_stop_line(run),
           *(f"- {note}" for note in notes)]
  if dim:
    lines.append(f"- Vectors: {dim} dimensions; texts longer than {config.data.max_len} tokens are truncated.")
  lines += ["", "## Usage", "", "```python", *_USAGE[kind], "```", "", "## Results", ""]
  if results:
    lines += ["| metric | value |", "|---|---|", *(f"| {key} | {value:.6g} |" for key, value in sorted(results.items()))]
  else:
    lines.append("No results.json entry for this run.")
  lines += ["", "## How it was trained", ""]
  if commands:
    lines += ["```bash", *commands, "```"]
  else:
    lines.append("The command was not recorded (the run predates recorded commands); its config is below.")
  lines += ["", "<details><summary>config</summary>", "", "```json",
            json.dumps(json.loads(config.to_json_best_effort()), indent=2, sort_keys=True), "```", "", "</details>",
            ""]
  return "\n".join(lines)


def _early_stop_line(run: run_dirs.RunDir | None) -> list[str]:
  stopped = None if run is None else run.early_stop()
  return [f"- Stopped early at step {stopped['step']}: {stopped['reason']}."] if stopped else []


def _kept_best(run: run_dirs.RunDir | None) -> bool:
  reported = None if run is None else run.reported_step()
  return bool(reported and reported[1])
