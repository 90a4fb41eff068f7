"""Config blocks every method shares: the optimizer, the training loop, the encoder, evaluator entries and the
device mesh."""
import ml_collections


def optimizer(learning_rate: float, warmup_steps: int, lr_multipliers: tuple = ()) -> ml_collections.ConfigDict:
  """AdamW with linear warm-up, then linear decay to zero (schedule "linear") or a constant rate ("constant");
  grad_clip_norm 0: no clipping; lr_multipliers: ((param path regex, multiplier), ...)."""
  return ml_collections.ConfigDict(dict(
      learning_rate=learning_rate, warmup_steps=warmup_steps, schedule="linear", weight_decay=0.01,
      grad_clip_norm=1.0, b1=0.9, b2=0.999, eps=1e-8, lr_multipliers=lr_multipliers))


def training(global_batch_size: int, num_steps: int, log_every_steps: int, checkpoint_every_steps: int,
             best_metric: str = "", best_mode: str = "max") -> ml_collections.ConfigDict:
  """best_metric (e.g. 'validation/mrr', from an evaluator with every_steps) picks the params a run reports, kept
  apart from the rolling checkpoints ("" = the last step's); best_mode 'max' or 'min'.

  early_stopping: the run ends once `patience` periodic evaluations in a row have not improved `metric` (default
  best_metric; mode default best_mode) by more than `min_delta`; patience 0: off.
  profile: a JAX profiler trace of steps start_step .. start_step + num_steps - 1 in `<run>/profile/<host>`;
  num_steps 0: off."""
  return ml_collections.ConfigDict(dict(
      global_batch_size=global_batch_size, num_steps=num_steps, log_every_steps=log_every_steps,
      checkpoint_every_steps=checkpoint_every_steps, keep_checkpoints=3, best_metric=best_metric,
      best_mode=best_mode, early_stopping=dict(metric="", mode="", patience=0, min_delta=0.0),
      profile=dict(start_step=1, num_steps=0)))


# Where a run reports its metrics, comma-separated: tensorboard (its run directory), wandb (Weights & Biases;
# offline without WANDB_API_KEY), mlflow (MLFLOW_TRACKING_URI, else a SQLite store in the workdir).
WRITERS = "tensorboard"


def mesh() -> ml_collections.ConfigDict:
  """(data, model) axes; -1 takes the remaining devices. fsdp: params and their optimizer state split over the data
  axis too (parallel.FSDP_RULES). rules override parallel.DEFAULT_RULES: ((logical axis, mesh axes), ...)."""
  return ml_collections.ConfigDict(dict(shape=(-1, 1), fsdp=False, rules=()))


def data(dataset: str, max_len: int) -> ml_collections.ConfigDict:
  """A registered dataset name or a directory; built under tfds_data_dir (TFDS's default when None) from
  manual_dir (downloaded when None and online); texts tokenized to max_len. Training batches are read
  `prefetch` ahead of the step by num_workers processes (0: a thread of the training process); neither
  changes the batches."""
  return ml_collections.ConfigDict(dict(
      dataset=dataset, max_len=max_len, num_workers=0, prefetch=2,
      tfds_data_dir=ml_collections.FieldReference(None, field_type=str),
      manual_dir=ml_collections.FieldReference(None, field_type=str)))


def bert_model(pretrained: str = "minilm-l6", inference_batch_size: int = 128) -> ml_collections.ConfigDict:
  """pretrained: an alias or a Hugging Face BERT or RoBERTa directory (tokenizer: the same directory, for
  RoBERTa); "" = a fresh BERT shaped by `bert`. dtype: what the encoder computes in (params and optimizer
  state stay float32); matmul_dtype: the operands of its matmuls, which accumulate in float32 ("auto": bfloat16
  on accelerators and on CPUs with bf16 matmul instructions, `cpu_flags.matmul_dtype`), while the rest stays in
  `dtype`; remat: recompute each layer's activations in the backward pass to save memory.
  inference_batch_size: texts encoded per call outside training (evaluators, a loaded model)."""
  return ml_collections.ConfigDict(dict(
      pretrained=pretrained, tokenizer="minilm-l6", dtype="float32", matmul_dtype="float32", remat=False,
      inference_batch_size=inference_batch_size,
      bert=dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)))


def evaluator(kind: str, every_steps: int = 0, **options) -> dict:
  """An entry of `config.evals`: a registered evaluator run every `every_steps` steps and at the end (0: at the
  end only). The key is always present so that `--config.evals.NAME.every_steps=N` can set it."""
  return dict(type=kind, every_steps=every_steps, **options)


def baseline(kind: str, report_as: str, **options) -> dict:
  """An entry of `config.evals` that scores an untrained baseline (BM25, TF-IDF, static word pieces, ...) at the
  end, reported as model `report_as`; evaluating another run on this config (`--trained_run`) leaves it out."""
  return dict(evaluator(kind, **options), report_as=report_as, baseline=True)
