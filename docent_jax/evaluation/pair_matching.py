"""Fine-tuning and scoring of pair classifiers for product matching (Peeters & Bizer's protocol).

Protocol (the released code's fine-tuning step, on Hugging Face's Trainer):
  * Binary cross-entropy on one logit per labelled training pair; AdamW (weight decay 0.01 on
    matrices, gradient clipping at global norm 1), learning rate warmed up linearly over the first
    5% of the step budget, then decayed linearly to 0 at its end; batches of 64 pairs, shuffled
    anew each epoch (seeded). The step budget is `max_epochs` (50) epochs, or `max_steps` when
    smaller, so that methods can be compared at equal budgets.
  * After every epoch, the loss on the validation pairs. The params of the epoch with the lowest
    validation loss are kept and returned; training stops after `patience` (10) epochs without a
    lower one, or when the budget is spent (after a validation of the partial last epoch).
  * A pair is predicted a match when sigmoid(logit) > 0.5, i.e. logit > 0; reported are
    precision, recall and F1 of the match class, and the mean loss.
One loop serves every model: a `PairMatcher` says how its model reads offer pairs (`BiEncoderMatcher`
for `PairClassifier`, frozen encoder or not; `CrossEncoderMatcher` for `CrossEncoder`). With a
frozen encoder only the head is trained, on offer vectors computed once before the first epoch.
Training runs in one process, its batches split over the mesh's data axis.
"""
import abc
from collections.abc import Callable, Mapping, Sequence
import dataclasses
import functools
import math
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
import ml_collections
import numpy as np
import optax

from docent_jax import parallel
from docent_jax.data import tokenization
from docent_jax.evaluation import metrics
from docent_jax.models import bert
from docent_jax.models import pair_classifier

_TOKENIZER_CHUNK = 4096  # Pairs per tokenizer call: batched for speed, bounded for memory.


@dataclasses.dataclass(frozen=True)
class FitOptions:
  """Optimisation and stopping of `fit_pair_classifier`; defaults are Peeters & Bizer's."""
  max_epochs: int = 50
  patience: int = 10
  max_steps: int | None = None
  batch_size: int = 64
  learning_rate: float = 5e-5
  weight_decay: float = 0.01
  warmup_ratio: float = 0.05
  grad_clip_norm: float = 1.0
  eval_batch_size: int = 256
  seed: int = 0
  # (regex over param paths, factor): e.g. (('^head/', 20.0),) lets a fresh head learn faster than
  # the pre-trained encoder it sits on.
  lr_multipliers: tuple[tuple[str, float], ...] = ()

  def __post_init__(self):
    counts = [self.max_epochs, self.patience, self.batch_size, self.eval_batch_size]
    if self.max_steps is not None:
      counts.append(self.max_steps)
    if min(counts) < 1:
      raise ValueError(f"max_epochs, patience, batch_size, eval_batch_size and max_steps must be positive: {self}.")
    if not 0.0 <= self.warmup_ratio < 1.0:
      raise ValueError(f"warmup_ratio must be in [0, 1); got {self.warmup_ratio}.")


@dataclasses.dataclass(frozen=True)
class FitResult:
  """The best epoch's params (the whole model's, on the host) and how training went.

  Epochs are numbered from 1; `epochs_run` counts a last epoch cut short by `max_steps`.
  `train_losses` and `validation_losses` hold one mean loss per epoch run.
  """
  params: Any
  best_epoch: int
  epochs_run: int
  steps_run: int
  train_losses: list[float]
  validation_losses: list[float]

  def summary(self) -> dict[str, float | int]:
    """Flat numbers for a results file: best epoch and its validation loss, epochs and steps run."""
    return {"best_epoch": self.best_epoch, "best_validation_loss": self.validation_losses[self.best_epoch - 1],
            "epochs_run": self.epochs_run, "steps_run": self.steps_run}


@dataclasses.dataclass
class EarlyStopping:
  """Keeps the epoch of the lowest loss so far; stops after `patience` epochs without a lower one."""
  patience: int
  best_loss: float = math.inf
  best_epoch: int = 0
  epochs_without_improvement: int = 0

  def update(self, epoch: int, loss: float) -> bool:
    """Records the loss of `epoch`; True when it is strictly lower than every earlier one."""
    if not math.isfinite(loss):
      raise FloatingPointError(f"The validation loss of epoch {epoch} is {loss}: training diverged.")
    if loss < self.best_loss:
      self.best_loss, self.best_epoch, self.epochs_without_improvement = loss, epoch, 0
      return True
    self.epochs_without_improvement += 1
    return False

  @property
  def should_stop(self) -> bool:
    return self.epochs_without_improvement >= self.patience


def check_pairs(pairs: np.ndarray, num_offers: int, split: str) -> np.ndarray:
  """`pairs` as int64 [m, 3] (left, right, label), m > 0, after checking offer indices and 0/1 labels."""
  pairs = np.asarray(pairs)
  if pairs.ndim != 2 or pairs.shape[1] != 3 or not len(pairs) or not np.issubdtype(pairs.dtype, np.integer):
    raise ValueError(f"{split} pairs: expected a non-empty int array [m, 3] (left, right, label); got "
                     f"{pairs.dtype} {pairs.shape}.")
  bad_offer = ((pairs[:, :2] < 0) | (pairs[:, :2] >= num_offers)).any(axis=1)
  if bad_offer.any():
    row = int(np.flatnonzero(bad_offer)[0])
    raise ValueError(f"{split} pairs row {row}: offer indices {pairs[row, :2].tolist()} are outside "
                     f"[0, {num_offers}) ({int(bad_offer.sum())} such rows).")
  bad_label = ~np.isin(pairs[:, 2], (0, 1))
  if bad_label.any():
    row = int(np.flatnonzero(bad_label)[0])
    raise ValueError(f"{split} pairs row {row}: label {pairs[row, 2]} is not 0 or 1 "
                     f"({int(bad_label.sum())} such rows).")
  return pairs.astype(np.int64)


def tokenize_pairs(tokenizer: Any, left: Sequence[str], right: Sequence[str], max_len: int) -> np.ndarray:
  """Token ids and token types of `[CLS] left [SEP] right [SEP]`, int32 [m, 2, max_len].

  Padded with the tokenizer's pad id; too long pairs lose tokens from the longer text first
  (Hugging Face's 'longest_first'), so that neither offer is cut away entirely.
  """
  if len(left) != len(right):
    raise ValueError(f"{len(left)} left texts but {len(right)} right texts.")
  if max_len < 3:
    raise ValueError(f"max_len must leave room for [CLS] and two [SEP]; got {max_len}.")
  if tokenizer.pad_token_id is None:
    raise ValueError(f"Tokenizer {tokenizer.name_or_path!r} has no pad token.")
  rows = [np.zeros((0, 2, max_len), np.int32)]
  for start in range(0, len(left), _TOKENIZER_CHUNK):
    end = start + _TOKENIZER_CHUNK
    encoded = tokenizer(list(left[start:end]), list(right[start:end]), max_length=max_len, padding="max_length",
                        truncation="longest_first", return_attention_mask=False, return_token_type_ids=True)
    rows.append(np.stack([np.asarray(encoded["input_ids"], np.int32),
                          np.asarray(encoded["token_type_ids"], np.int32)], axis=1))
  return np.concatenate(rows)


class PairMatcher(abc.ABC):
  """A pair model and how it reads offer pairs: all that `fit_pair_classifier` and `evaluate_pairs` need.

  Subclasses set `model` (one logit per row of [B, 2, ...] inputs) and define `pair_inputs`; with
  a frozen encoder they also narrow `trainable` and `method`.
  """
  model: nn.Module
  # The model method that maps `pair_inputs`' rows to logits (None: __call__).
  method: str | None = None

  def __init__(self, tokenizer: Any, *, max_len: int):
    # The models take token id 0 for padding, as every BERT reader here does.
    if tokenizer.pad_token_id != 0:
      raise ValueError(f"Tokenizer {tokenizer.name_or_path!r} pads with id {tokenizer.pad_token_id}; the pair "
                       "models need padding id 0.")
    self.tokenizer = tokenizer
    self.max_len = max_len
    # One function object for every inference call, so that `parallel.map_batches` compiles once.
    self.predict_fn = functools.partial(self.logits, deterministic=True)

  @abc.abstractmethod
  def pair_inputs(self, params: Any, texts: Sequence[str], pairs: Mapping[str, np.ndarray], *, mesh: Mesh,
                  batch_size: int) -> dict[str, np.ndarray]:
    """Per split, the model's input rows [m, 2, ...] of pairs [m, >= 2] (left, right offer indices)."""

  def init_params(self, key: jax.Array, bert_params: dict[str, Any] | None = None) -> Any:
    """Fresh params of the model; its 'bert' from `bert_params` (e.g. pretrained) when given."""
    # Imported here: the trainer imports the objectives, and they import this module.
    from docent_jax import train  # pylint: disable=g-import-not-at-top
    params = nn.unbox(self.model.init(key, jnp.zeros((1, 2, 2), jnp.int32))["params"])
    if bert_params is None:
      return params
    return train.overwrite_params(params, {"bert": bert_params})

  def abstract_trainable(self, mesh: Mesh, rules: Sequence[tuple[str, Any]] = parallel.DEFAULT_RULES) -> Any:
    """Shapes, dtypes and shardings on `mesh` (from the logical axis names) of the trainable params."""
    abstract = jax.eval_shape(self.model.init, jax.random.key(0), jnp.zeros((1, 2, 2), jnp.int32))["params"]
    shardings = parallel.param_shardings(abstract, mesh, rules)
    return self.trainable(jax.tree.map(lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                                       nn.unbox(abstract), shardings))

  def place_trainable(self, params: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]] = parallel.DEFAULT_RULES) -> Any:
    """A copy of the trainable part of `params` on `mesh`, sharded by the params' logical axis names.

    Always a copy, so that training may donate it and the caller's params stay valid.
    """
    # Copied first: device_put may reuse a buffer already on one of the devices, even with may_alias=False.
    return jax.tree.map(lambda x, abstract: jax.device_put(jnp.array(x, copy=True), abstract.sharding),
                        self.trainable(params), self.abstract_trainable(mesh, rules))

  def trainable(self, params: Any) -> Any:
    """The part of `params` (or of a tree shaped like them) that training updates."""
    return params

  def with_trained(self, params: Any, trained: Any) -> Any:
    """`params` with the trainable part replaced by `trained`."""
    del params
    return trained

  def logits(self, trained: Any, inputs: jax.Array, *, deterministic: bool, rng: jax.Array | None = None) -> jax.Array:
    """[B] logits of input rows [B, 2, ...] under the trainable params (`rng`: dropout key)."""
    return self.model.apply({"params": trained}, inputs, deterministic=deterministic,
                            rngs={} if rng is None else {"dropout": rng}, method=self.method)


class BiEncoderMatcher(PairMatcher):
  """`PairClassifier` on tokenized offers or, with `freeze_encoder`, on offer vectors computed once.

  A frozen encoder is never differentiated nor updated: only the 'head' params are trained, and the
  'bert' params of `fit_pair_classifier`'s result are the very ones it was given.
  """

  def __init__(self, config: bert.BertConfig, tokenizer: Any, *, max_len: int, freeze_encoder: bool = False):
    super().__init__(tokenizer, max_len=max_len)
    self.model = pair_classifier.PairClassifier(config)
    self.freeze_encoder = freeze_encoder
    self.method = "classify" if freeze_encoder else None
    self._encode_fn = lambda params, tokens: self.model.apply({"params": params}, tokens, method="encode")

  def pair_inputs(self, params: Any, texts: Sequence[str], pairs: Mapping[str, np.ndarray], *, mesh: Mesh,
                  batch_size: int) -> dict[str, np.ndarray]:
    """Token ids [m, 2, max_len] of each pair's offers, or their vectors [m, 2, d] when frozen.

    Each offer is tokenized (and encoded) once, however many pairs it is in.
    """
    columns = {split: np.asarray(p)[:, :2] for split, p in pairs.items()}
    offers, inverse = np.unique(np.concatenate([c.ravel() for c in columns.values()]), return_inverse=True)
    table = tokenization.tokenize_texts(self.tokenizer, [texts[i] for i in offers], self.max_len)
    if self.freeze_encoder:
      encoder_params = jax.device_put(params, parallel.replicated(mesh))
      table = parallel.map_batches(self._encode_fn, encoder_params, table, batch_size=batch_size, mesh=mesh)
    sizes = np.cumsum([0] + [c.size for c in columns.values()])
    return {split: table[inverse[sizes[i]:sizes[i + 1]]].reshape(len(c), 2, *table.shape[1:])
            for i, (split, c) in enumerate(columns.items())}

  def trainable(self, params: Any) -> Any:
    return {"head": params["head"]} if self.freeze_encoder else params

  def with_trained(self, params: Any, trained: Any) -> Any:
    return {**params, "head": trained["head"]} if self.freeze_encoder else trained


class CrossEncoderMatcher(PairMatcher):
  """`CrossEncoder` on `[CLS] left [SEP] right [SEP]`, encoder and head trained together."""

  def __init__(self, config: bert.BertConfig, tokenizer: Any, *, max_len: int):
    super().__init__(tokenizer, max_len=max_len)
    self.model = pair_classifier.CrossEncoder(config)

  def pair_inputs(self, params: Any, texts: Sequence[str], pairs: Mapping[str, np.ndarray], *, mesh: Mesh,
                  batch_size: int) -> dict[str, np.ndarray]:
    """Token ids and token types [m, 2, max_len] of each pair (see `tokenize_pairs`)."""
    del params, mesh, batch_size
    return {split: tokenize_pairs(self.tokenizer, [texts[i] for i in p[:, 0]], [texts[i] for i in p[:, 1]],
                                  self.max_len)
            for split, p in pairs.items()}


def pair_loss(logits: jax.Array | np.ndarray, labels: jax.Array | np.ndarray) -> float:
  """Mean binary cross-entropy of logits against 0/1 labels."""
  return float(jnp.mean(optax.sigmoid_binary_cross_entropy(jnp.asarray(logits, jnp.float32),
                                                           jnp.asarray(labels, jnp.float32))))


def _check_batch_size(batch_size: int, mesh: Mesh, what: str) -> None:
  data = mesh.shape[parallel.DATA_AXIS]
  if batch_size % data:
    raise ValueError(f"{what} {batch_size} does not split over the mesh's {data} data shards.")


def _predict(matcher: PairMatcher, trained: Any, inputs: np.ndarray, *, mesh: Mesh, batch_size: int) -> np.ndarray:
  """[m] logits of input rows, in batches over the mesh's data axis (`trained` already on the mesh)."""
  return parallel.map_batches(matcher.predict_fn, trained, inputs, batch_size=batch_size, mesh=mesh)


def _train_step(trained: Any, opt_state: Any, inputs: jax.Array, labels: jax.Array, weights: jax.Array,
                rng: jax.Array, *, matcher: PairMatcher,
                optimizer: optax.GradientTransformation) -> tuple[Any, Any, jax.Array]:
  """One AdamW step on the weighted mean loss (weight 0: padding of an epoch's last batch)."""
  def loss_fn(trained):
    logits = matcher.logits(trained, inputs, deterministic=False, rng=rng)
    losses = optax.sigmoid_binary_cross_entropy(logits, labels.astype(jnp.float32))
    return jnp.sum(weights * losses) / jnp.maximum(jnp.sum(weights), 1.0)

  loss, grads = jax.value_and_grad(loss_fn)(trained)
  updates, opt_state = optimizer.update(grads, opt_state, trained)
  return optax.apply_updates(trained, updates), opt_state, loss


@dataclasses.dataclass(frozen=True)
class _Training:
  """Jitted functions that create the optimizer state and take one training step."""
  init: Callable[[Any], Any]
  step: Callable[..., tuple[Any, Any, jax.Array]]


@functools.lru_cache(maxsize=16)
def _training(matcher: PairMatcher, options: FitOptions, num_steps: int, mesh: Mesh,
              rules: tuple[tuple[str, Any], ...]) -> _Training:
  """The trainer's AdamW schedule (`train.create_optimizer`) over `num_steps`, and the step that applies it.

  The state's shardings are pinned, so that one compilation serves every step; cached, so that fits
  with equal arguments share it.
  """
  from docent_jax import train  # pylint: disable=g-import-not-at-top  # See `PairMatcher.init_params`.
  optimizer = train.create_optimizer(ml_collections.ConfigDict(dict(
      learning_rate=options.learning_rate, warmup_steps=round(options.warmup_ratio * num_steps),
      weight_decay=options.weight_decay, grad_clip_norm=options.grad_clip_norm, b1=0.9, b2=0.999, eps=1e-8,
      lr_multipliers=options.lr_multipliers)), num_steps)
  abstract = matcher.abstract_trainable(mesh, rules)
  shardings = jax.tree.map(lambda x: x.sharding, abstract)
  replicated, batch = parallel.replicated(mesh), parallel.batch_sharding(mesh)
  # As in the trainer: the optimizer state follows the params' shardings, its scalars are replicated.
  opt_shardings = jax.tree.map(lambda s: s if s.device_set == replicated.device_set else replicated,
                               jax.jit(optimizer.init).lower(abstract).compile().output_shardings)
  step = jax.jit(functools.partial(_train_step, matcher=matcher, optimizer=optimizer),
                 in_shardings=(shardings, opt_shardings, batch, batch, batch, replicated),
                 out_shardings=(shardings, opt_shardings, replicated), donate_argnums=(0, 1))
  return _Training(jax.jit(optimizer.init, out_shardings=opt_shardings), step)


def fit_pair_classifier(matcher: PairMatcher, params: Any, texts: Sequence[str], pairs: Mapping[str, np.ndarray], *,
                        options: FitOptions = FitOptions(), mesh: Mesh,
                        rules: Sequence[tuple[str, Any]] = parallel.DEFAULT_RULES) -> FitResult:
  """Trains `matcher`'s model from `params` on pairs['train'], early-stopped on pairs['validation'].

  Args:
    matcher: the model and how it reads pairs.
    params: the model's initial params (e.g. `matcher.init_params` with a pretrained encoder).
    texts: the serialized offers; pairs index into them.
    pairs: 'train' and 'validation' int [m, 3] (left, right, label); other splits are ignored.
    options: optimisation, budget and stopping.
    mesh: batches are split over its data axis; params are placed by their logical axis names.
    rules: logical axis name -> mesh axes.

  Returns:
    The params of the epoch with the lowest validation loss, and the course of training.
  """
  if jax.process_count() > 1:
    raise NotImplementedError(f"Pair classifier training runs in one process; there are {jax.process_count()}.")
  for split in ("train", "validation"):
    if split not in pairs:
      raise ValueError(f"Pair classifier training needs a {split!r} split; got {sorted(pairs)}.")
  _check_batch_size(options.batch_size, mesh, "batch_size")
  _check_batch_size(options.eval_batch_size, mesh, "eval_batch_size")
  checked = {split: check_pairs(pairs[split], len(texts), split) for split in ("train", "validation")}
  inputs = matcher.pair_inputs(params, texts, checked, mesh=mesh, batch_size=options.eval_batch_size)
  train_inputs, train_labels = inputs["train"], checked["train"][:, 2]
  if not train_labels.any():
    logging.warning("Pair classifier: none of the %d training pairs is a match.", len(train_labels))

  num_train = len(train_labels)
  budget = options.max_epochs * -(-num_train // options.batch_size)
  if options.max_steps is not None:
    budget = min(budget, options.max_steps)
  training = _training(matcher, options, budget, mesh, tuple(rules))
  trained = matcher.place_trainable(params, mesh, rules)
  opt_state = training.init(trained)

  rng = np.random.default_rng(options.seed)
  key = jax.random.key(options.seed)
  stopping = EarlyStopping(options.patience)
  best, step, train_losses, validation_losses = None, 0, [], []
  for epoch in range(1, options.max_epochs + 1):
    order = rng.permutation(num_train)
    step_losses, step_sizes = [], []
    for start in range(0, num_train, options.batch_size):
      if step == budget:
        break
      rows = order[start:start + options.batch_size]
      # The last batch is filled up to the batch size with weight-0 rows: one shape, one compilation.
      weights = (np.arange(options.batch_size) < len(rows)).astype(np.float32)
      rows = np.pad(rows, (0, options.batch_size - len(rows)))
      trained, opt_state, loss = training.step(trained, opt_state, train_inputs[rows], train_labels[rows],
                                               weights, jax.random.fold_in(key, step))
      step_losses.append(loss)
      step_sizes.append(weights.sum())
      step += 1
    train_losses.append(float(np.average(jax.device_get(step_losses), weights=step_sizes)))
    logits = _predict(matcher, trained, inputs["validation"], mesh=mesh, batch_size=options.eval_batch_size)
    validation_losses.append(pair_loss(logits, checked["validation"][:, 2]))
    if stopping.update(epoch, validation_losses[-1]):
      best = jax.tree.map(np.array, trained)  # A host copy: the next step donates `trained`.
    logging.info("Pair classifier epoch %d (step %d): train loss %.4f, validation loss %.4f%s.", epoch, step,
                 train_losses[-1], validation_losses[-1], " (best)" if stopping.best_epoch == epoch else "")
    if stopping.should_stop or step == budget:
      break
  logging.info("Pair classifier: %d epochs, %d steps (budget %d); best epoch %d, validation loss %.4f.",
               epoch, step, budget, stopping.best_epoch, stopping.best_loss)
  return FitResult(params=matcher.with_trained(params, best), best_epoch=stopping.best_epoch, epochs_run=epoch,
                   steps_run=step, train_losses=train_losses, validation_losses=validation_losses)


def evaluate_pairs(matcher: PairMatcher, params: Any, texts: Sequence[str], pairs: np.ndarray, *, mesh: Mesh,
                   batch_size: int = 256, split: str = "evaluation",
                   rules: Sequence[tuple[str, Any]] = parallel.DEFAULT_RULES) -> dict[str, float]:
  """{'precision', 'recall', 'f1', 'loss'} of the model on labelled pairs [m, 3] (left, right, label).

  A pair is predicted a match when sigmoid(logit) > 0.5. `split` names the pairs in errors.
  """
  _check_batch_size(batch_size, mesh, "batch_size")
  pairs = check_pairs(pairs, len(texts), split)
  inputs = matcher.pair_inputs(params, texts, {split: pairs}, mesh=mesh, batch_size=batch_size)[split]
  logits = _predict(matcher, matcher.place_trainable(params, mesh, rules), inputs, mesh=mesh, batch_size=batch_size)
  labels = pairs[:, 2]
  return {**metrics.precision_recall_f1(labels, logits > 0.0), "loss": pair_loss(logits, labels)}
