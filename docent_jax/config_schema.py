"""The one place a config's values are checked, before anything is read, built or trained.

`check_config` rejects a value no run can use, naming its key: each numeric key with a valid range (wherever
it appears in a run's config), the valid values of `model.dtype`, `model.pooling` and `model.sentence_pooling`, what the mesh and the process count require of
batch sizes, a best metric that nothing reports, and the rules an objective adds (`Objective.config_rules`).
Types are not checked here: a config field keeps the type it was created with, and ml_collections refuses a value
of another (`--config.data.num_workers=1.5`); ranges and valid values are what neither its typed fields nor a
dataclass's annotations can say. `unknown_override_keys` names `--config.KEY=...` overrides that the
config lacks, with the nearest valid keys.
"""
from collections.abc import Callable, Iterable, Sequence
import difflib
import fnmatch
import importlib.util
import pathlib
from typing import Any

import jax
import ml_collections

from docent_jax import cpu_flags
from docent_jax import early_stopping
from docent_jax import parallel
from docent_jax import writers


class ConfigError(ValueError):
  """A config value no run can use; the message names its key."""


MODEL_DTYPES = ("float32", "bfloat16", "float16")
# A text encoder's vector of a text: the mean of its output states, or of its input word-piece vectors (the static
# baseline, which nothing trains: the objectives train the output states).
MODEL_POOLINGS = ("mean", "input_word_pieces")
# DOCENT-DUAL's and HYBRID's f(s): RELIC's [CLS], or the mean output (the bag-of-sentences baseline's default).
SENTENCE_POOLINGS = ("cls", "mean")

# (key pattern, valid, what is valid): a pattern matches dotted keys (fnmatch); numbers only (a bool is no number).
Rule = tuple[str, Callable[[float], bool], str]

at_least = lambda low: (lambda v: v >= low, f"must be at least {low}")
positive = (lambda v: v > 0, "must be greater than 0")
fraction = (lambda v: 0 <= v <= 1, "must be between 0 and 1")
open_fraction = (lambda v: 0 < v <= 1, "must be greater than 0 and at most 1")
below_one = (lambda v: 0 <= v < 1, "must be at least 0 and below 1")

RANGES: tuple[Rule, ...] = tuple((pattern, *check) for pattern, check in (
    ("train.num_steps", at_least(0)),
    ("train.log_every_steps", at_least(1)),
    ("train.checkpoint_every_steps", at_least(1)),
    ("train.keep_checkpoints", at_least(1)),
    ("train.early_stopping.patience", at_least(0)),
    ("train.early_stopping.min_delta", at_least(0)),
    ("train.profile.start_step", at_least(1)),
    ("train.profile.num_steps", at_least(0)),
    ("train.global_batch_size", at_least(1)),
    ("optim.learning_rate", positive),  # A negative rate ascends the loss.
    ("optim.warmup_steps", at_least(0)),
    ("optim.weight_decay", at_least(0)),
    ("optim.grad_clip_norm", at_least(0)),
    ("optim.b1", below_one),
    ("optim.b2", below_one),
    ("optim.eps", positive),
    ("loss.margin", positive),  # At 0 or below, a hinge is already satisfied by equal scores: nothing is learned.
    ("loss.num_negatives", at_least(1)),
    ("loss.num_retrieved", at_least(0)),
    ("loss.temperature", positive),
    ("loss.scale", positive),
    ("loss.correspondence_fraction", open_fraction),
    ("loss.entity_mask_rate", fraction),
    ("loss.mlm_rate", open_fraction),
    ("loss.mlm_weight", at_least(0)),
    ("loss.mining.range_min", at_least(0)),
    ("loss.mining.range_max", at_least(0)),  # 0: no end.
    ("loss.mining.relative_margin", below_one),
    ("data.max_len", at_least(4)),
    ("data.num_workers", at_least(0)),
    ("data.prefetch", at_least(0)),
    ("data.augmentation_probability", fraction),
    ("data.validation_fraction", open_fraction),
    ("data.test_fraction", open_fraction),
    ("data.validation_query_fraction", below_one),  # 0: no validation queries.
    ("data.train_entity_fraction", open_fraction),
    ("data.max_pairs_per_class", at_least(0)),  # 0: no cap.
    ("data.task_ratio.*", at_least(0)),
    ("model.dim", at_least(0)),  # 0: the encoder's own width, no projection.
    ("model.short_half_width", at_least(0)),  # 0: off.
    ("model.scale", positive),
    ("model.entity_init_sentences", at_least(1)),
    ("model.entity_rows_multiple", at_least(1)),
    ("model.bert.*_size", at_least(1)),
    ("model.bert.num_*", at_least(1)),
    ("model.inference_batch_size", at_least(1)),
    ("tags.learning_rate", positive),
    ("tags.finetune_steps", at_least(0)),
    ("tags.items_per_step", at_least(1)),
    ("tags.tags_per_step", at_least(1)),
    ("tags.weight_decay", at_least(0)),
    ("tags.sentences_per_movie", at_least(1)),
    ("evals.*.every_steps", at_least(0)),
    ("evals.*.max_pairs", at_least(1)),
    ("evals.*.query_batch_size", at_least(1)),
    ("evals.*.sentences_per_movie", at_least(1)),
    ("tags.vocabulary_fraction", open_fraction),
))


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
  """{'a.b': value} of a nested dict; a dict-valued key is also listed (as '<key>.')."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat[f"{prefix}{key}."] = value
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def _is_number(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_config(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh, rows_per_example: int = 1,
                 rules: Sequence[Rule] = ()) -> None:
  """Raises ConfigError naming the first key whose value no run can use.

  `rows_per_example`: batch rows per unit of `train.global_batch_size` (the objective's); the rows are
  split over the mesh's data shards. `rules`: the objective's own, checked like `RANGES`.
  """
  values = {k: v for k, v in flatten(config.to_dict()).items() if not k.endswith(".")}
  checks = [(key, value, ok(value), message) for pattern, ok, message in (*RANGES, *rules)
            for key, value in values.items() if fnmatch.fnmatchcase(key, pattern) and _is_number(value)]
  for key, value, ok, message in checks:
    if not ok:
      raise ConfigError(f"config.{key} = {value!r}: {message}.")
  train, data_shards = config.train, mesh.shape[parallel.DATA_AXIS]
  if (train.get("best_metric") and train.num_steps > 0
      and not any(entry.get("every_steps", 0) for entry in config.get("evals", {}).values())):
    raise ConfigError(f"config.train.best_metric = {train.best_metric!r}: no evaluator runs during training to "
                      "report it; give its entry in config.evals every_steps > 0, or set train.best_metric to '' "
                      "(report the last step).")
  if "writers" in config:
    try:
      writers.check(config.writers)
    except ValueError as error:
      raise ConfigError(str(error)) from None
  stopping = early_stopping.from_config(train)  # Its metric and mode with their defaults filled in.
  if stopping is not None:
    if not stopping.metric:
      raise ConfigError("config.train.early_stopping.metric: empty, and so is config.train.best_metric; name the "
                        "metric to watch (e.g. 'validation/loss').")
    if stopping.mode not in ("max", "min"):
      raise ConfigError(f"config.train.early_stopping.mode = {train.early_stopping.mode!r}: must be 'max', 'min' or "
                        "'' (that of train.best_mode).")
    if train.num_steps > 0 and not any(entry.get("every_steps", 0) for entry in config.get("evals", {}).values()):
      raise ConfigError("config.train.early_stopping: no evaluator runs during training to report "
                        f"{stopping.metric!r}; give its entry in config.evals every_steps > 0.")
  batch_sizes = [("train.global_batch_size", train.global_batch_size, rows_per_example)]
  if "inference_batch_size" in config.model:
    batch_sizes.append(("model.inference_batch_size", config.model.inference_batch_size, 1))
  for key, value, rows in batch_sizes:
    shards = f"must split evenly over the mesh's {data_shards} data shards"
    shards += f" ({rows} rows each)" if rows > 1 else ""
    checks.append((key, value, value * rows % data_shards == 0, shards))
  processes = jax.process_count()
  checks.append(("train.global_batch_size", train.global_batch_size, train.global_batch_size % processes == 0,
                 f"must split evenly over the {processes} processes"))
  if "dtype" in config.get("model", {}):
    dtype = config.model.dtype
    checks.append(("model.dtype", dtype, dtype in MODEL_DTYPES, f"valid: {list(MODEL_DTYPES)}"))
  if "matmul_dtype" in config.get("model", {}):
    setting = config.model.matmul_dtype
    checks.append(("model.matmul_dtype", setting, setting in cpu_flags.MATMUL_DTYPE_SETTINGS,
                   f"valid: {list(cpu_flags.MATMUL_DTYPE_SETTINGS)}"))
  if "pooling" in config.get("model", {}):
    pooling = config.model.pooling
    checks.append(("model.pooling", pooling, pooling in MODEL_POOLINGS, f"valid: {list(MODEL_POOLINGS)}"))
    checks.append(("model.pooling", pooling, pooling == "mean" or train.num_steps == 0,
                   "the static word-piece model is not trained (set train.num_steps=0)"))
  if "sentence_pooling" in config.get("model", {}):
    pooling = config.model.sentence_pooling
    checks.append(("model.sentence_pooling", pooling, pooling in SENTENCE_POOLINGS,
                   f"valid: {list(SENTENCE_POOLINGS)}"))
  for key, value, ok, message in checks:
    if not ok:
      raise ConfigError(f"config.{key} = {value!r}: {message}.")


def load_config_file(spec: str) -> ml_collections.ConfigDict:
  """The config of `configs/X.py[:arg]`, as `--config` loads it."""
  path, _, arg = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def unknown_override_keys(config: ml_collections.ConfigDict, argv: Iterable[str]) -> list[str]:
  """One line per `--config.KEY[=VALUE]` of `argv` whose KEY the config lacks, with the nearest valid keys."""
  known = [key.rstrip(".") for key in flatten(config.to_dict())]
  problems = []
  for argument in argv:
    if not argument.startswith("--config."):
      continue
    key = argument[len("--config."):].split("=", 1)[0]
    if key in known:
      continue
    block = key.rsplit(".", 1)[0] if "." in key else ""
    siblings = sorted(k for k in known if block and k.startswith(block + ".") and k.count(".") == key.count("."))
    nearest = list(dict.fromkeys(difflib.get_close_matches(key, known, n=3, cutoff=0.6) + siblings))[:8]
    problems.append(f"--config.{key}: no such key in the config; nearest valid keys: "
                    f"{', '.join(nearest) if nearest else 'none (see the config file)'}.")
  return problems
