"""Device mesh, sharding rules and multi-host helpers.

Sharding is declared once: parameters carry logical axis names (see `modules/`), and a config's
`mesh.rules` maps those names to mesh axes. Nothing else in the code base names mesh axes, except
batches, which are always split over the data axis.
"""
from collections.abc import Callable, Iterable, Iterator, Sequence
import contextlib
import contextvars
import inspect
import math
import time
from typing import Any
import weakref

from absl import logging
import flax.linen as nn
import jax
from jax.experimental import mesh_utils
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
import ml_collections
import numpy as np
import tqdm

from docent_jax import compilation_cache

DATA_AXIS = "data"
MODEL_AXIS = "model"
# A `map_batches` call longer than this logs its progress this often.
_PROGRESS_SECONDS = 30.0
# Whether `Progress` draws a bar on stderr (set by `progress_bars`): for a person at a console, not for logs.
_show_bars = contextvars.ContextVar("show_progress_bars", default=False)


@contextlib.contextmanager
def progress_bars(show: bool = True) -> Iterator[None]:
  """While open, every `Progress` (encoding texts, mapping batches) also draws a bar on stderr from its start."""
  token = _show_bars.set(show)
  try:
    yield
  finally:
    _show_bars.reset(token)


class Progress:
  """Logs `done / total <what> (rate, ETA)` of a long phase, at most every `_PROGRESS_SECONDS`; inside
  `progress_bars` it also draws a bar, updated every batch.

  With `total_cost`, the ETA follows the cost done (e.g. tokens) rather than the count, for phases whose items
  grow costlier as they go (texts encoded shortest first).
  """

  def __init__(self, total: int, what: str, total_cost: float | None = None):
    self.total, self.what, self.done = total, what, 0
    self.total_cost, self.cost = (total if total_cost is None else total_cost), 0.0
    self.started = self.reported = time.time()
    # The bar counts the cost (tokens), so that its ETA holds as texts grow longer; its label says what.
    self.bar = (tqdm.tqdm(total=self.total_cost, desc=f"encoding {total} {what}", unit="", unit_scale=True,
                          leave=False, bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")
                if _show_bars.get() and total else None)

  def advance(self, count: int, cost: float | None = None) -> None:
    """`count` more are done, at `cost` (by default `count`)."""
    self.done += count
    self.cost += count if cost is None else cost
    if self.bar is not None:
      self.bar.update(count if cost is None else cost)
      if self.done >= self.total:
        self.bar.close()
    now = time.time()
    if now - self.reported < _PROGRESS_SECONDS or not self.done:
      return
    self.reported = now
    rate = self.done / (now - self.started)
    speed = f"{rate:.0f} / s" if rate >= 1 else f"{1 / rate:.1f} s each"
    logging.info("%d / %d %s (%s, ETA %ds).", self.done, self.total, self.what, speed,
                 round((self.total_cost - self.cost) * (now - self.started) / max(self.cost, 1e-9)))


# Per object, the jitted forms of its methods that `map_batches` applied, held weakly: jax.jit keeps its
# compilations per function object, and every `obj.method` access makes a new bound method.
_jitted_methods: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# Logical axis name -> mesh axes. Tables of entities and relations are split along their rows over
# every device; BERT's feed-forward and attention projections are split over the model axis
# (tensor parallelism) and replicated over data.
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
    ("batch", DATA_AXIS),
    ("entity", (DATA_AXIS, MODEL_AXIS)),
    ("relation", (DATA_AXIS, MODEL_AXIS)),
    ("vocab", None),
    ("embed", None),
    ("mlp", MODEL_AXIS),
    ("heads", MODEL_AXIS),
    ("position", None),
    ("token_type", None),
    ("norm", None),
    ("features", None),
)


def create_mesh(config: ml_collections.ConfigDict, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds the (data, model) mesh over `devices` (default: every device); a -1 in `config.shape` takes the
  remaining devices."""
  devices = jax.devices() if devices is None else list(devices)
  shape = list(config.shape)
  num_devices = len(devices)
  if shape.count(-1) > 1:
    raise ValueError(f"mesh.shape {tuple(shape)} may hold at most one -1.")
  if -1 in shape:
    known = math.prod(s for s in shape if s != -1)
    if num_devices % known:
      raise ValueError(f"mesh.shape {tuple(shape)} does not divide {num_devices} devices.")
    shape[shape.index(-1)] = num_devices // known
  if math.prod(shape) > num_devices:
    raise ValueError(f"mesh.shape {tuple(shape)} needs {math.prod(shape)} devices; there are {num_devices}.")
  if math.prod(shape) < num_devices:
    logging.warning("mesh.shape %s uses %d of %d devices.", tuple(shape), math.prod(shape), num_devices)
  # Auto axes: XLA propagates shardings from the declared inputs and outputs of each jit.
  axis_types = (AxisType.Auto, AxisType.Auto)
  devices = devices[:math.prod(shape)]
  num_slices = len({getattr(device, "slice_index", 0) for device in devices})
  if num_slices > 1:  # Several TPU slices: the data axis spans them over the data-center network.
    if shape[0] % num_slices:
      raise ValueError(f"mesh.shape {tuple(shape)}: the data axis must split over the {num_slices} slices.")
    grid = mesh_utils.create_hybrid_device_mesh((shape[0] // num_slices, shape[1]), (num_slices, 1), devices)
    return Mesh(grid, (DATA_AXIS, MODEL_AXIS), axis_types=axis_types)
  return jax.make_mesh(tuple(shape), (DATA_AXIS, MODEL_AXIS), axis_types=axis_types, devices=devices)


# `mesh.fsdp`: every param's `embed` dimension (BERT's kernels and embeddings, projections) also split over the data
# axis, as MaxText's fsdp: params, gradients and Adam's moments are held once over the data shards instead of on
# every one of them, at the price of gathering each layer's params in the step.
FSDP_RULES: tuple[tuple[str, Any], ...] = (("embed", DATA_AXIS),)


def rules_from_config(config: ml_collections.ConfigDict) -> tuple[tuple[str, Any], ...]:
  """Default rules (with `FSDP_RULES` under `config.fsdp`), then any overrides from `config.rules` (a sequence of
  (name, mesh axes))."""
  fsdp = dict(FSDP_RULES) if config.get("fsdp", False) else {}
  overrides = {name: (tuple(axes) if isinstance(axes, list) else axes) for name, axes in config.get("rules", ())}
  overrides = {**fsdp, **overrides}
  return tuple((name, overrides.pop(name, axes)) for name, axes in DEFAULT_RULES) + tuple(overrides.items())


def param_shardings(abstract_variables: Any, mesh: Mesh, rules: Sequence[tuple[str, Any]]) -> Any:
  """NamedShardings for a (boxed, abstract) variable tree from its logical axis annotations.

  A dimension that does not divide evenly over its mesh axes is replicated instead, with a log line,
  so that small tables (e.g. 11 relations) still run on any mesh.
  """
  specs = nn.get_partition_spec(abstract_variables)
  shapes = nn.unbox(abstract_variables)
  mesh_specs = nn.logical_to_mesh(specs, rules)

  def fit(spec: PartitionSpec, shape: jax.ShapeDtypeStruct) -> NamedSharding:
    fitted, used = [], set()
    for dim, axes in zip(shape.shape, tuple(spec) + (None,) * (len(shape.shape) - len(spec))):
      names = (axes,) if isinstance(axes, str) else tuple(axes or ())
      size = math.prod(mesh.shape[a] for a in names)
      if used & set(names):  # E.g. an entity table's rows already split over every axis, under fsdp.
        axes, names = None, ()
      elif dim % size:
        logging.info("Replicating a dimension of size %d: it does not divide over %s (%d).", dim, axes, size)
        axes, names = None, ()
      used.update(names)
      fitted.append(axes)
    return NamedSharding(mesh, PartitionSpec(*fitted))

  return jax.tree.map(fit, mesh_specs, shapes, is_leaf=lambda x: isinstance(x, PartitionSpec))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) dimension split over the data axis, the rest replicated."""
  return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh,
                 shared_keys: Sequence[str] = ()) -> dict[str, jax.Array]:
  """Assembles global arrays from this process's part of the batch (every process calls this).

  Arrays under `shared_keys` are whole values of the batch that every process passes in full (e.g.
  candidate labels scored against every row); they are replicated instead of split over the data axis.
  """
  shardings = batch_entry_shardings(local_batch, mesh, shared_keys)
  return {k: jax.make_array_from_process_local_data(shardings[k], np.asarray(v)) for k, v in local_batch.items()}


def batch_entry_shardings(keys: Iterable[str], mesh: Mesh, shared_keys: Sequence[str] = ()) -> dict[str, NamedSharding]:
  """Each batch entry's sharding: rows split over the data axis, or replicated for `shared_keys` (`global_batch`)."""
  rows, shared = batch_sharding(mesh), replicated(mesh)
  return {k: shared if k in shared_keys else rows for k in keys}


def fetch(tree: Any) -> Any:
  """Host (numpy) copies of a pytree's arrays, whole on every process: an array split over processes, which
  `jax.device_get` refuses, is gathered from all of them (every process must call this)."""
  def get(x: Any) -> np.ndarray:
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)

  return jax.tree.map(get, tree)


def shard_rows(array: np.ndarray, mesh: Mesh) -> jax.Array:
  """A host array (the same on every process) with its rows split over every device of `mesh`, as the trainer
  splits entity tables; replicated when the rows do not divide evenly (logged)."""
  array = np.asarray(array)
  spec = PartitionSpec(mesh.axis_names)
  if len(array) % mesh.size:
    logging.info("Replicating %d rows: they do not divide over %d devices.", len(array), mesh.size)
    spec = PartitionSpec()
  return jax.make_array_from_callback(array.shape, NamedSharding(mesh, spec), lambda index: array[index])


def pad_to_multiple(array: np.ndarray, multiple: int) -> tuple[np.ndarray, int]:
  """Pads the leading axis with zeros to a multiple; returns the padded array and the true length."""
  n = len(array)
  padded = -(-n // multiple) * multiple
  if padded == n:
    return array, n
  pad = np.zeros((padded - n,) + array.shape[1:], dtype=array.dtype)
  return np.concatenate([array, pad]), n


def initialize_distributed(coordinator_address: str | None, num_processes: int | None,
                           process_id: int | None) -> None:
  """Joins a multi-process runtime: explicit (e.g. local CPU processes) or auto-detected (TPU pods)."""
  if coordinator_address:
    # CPU processes need a collectives backend; accelerators ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id)
  else:
    jax.distributed.initialize()
  compilation_cache.off_for_cpu_collectives()
  logging.info("Process %d of %d; %d local / %d global devices.", jax.process_index(), jax.process_count(),
               jax.local_device_count(), jax.device_count())



def map_batches(fn: Callable[[Any, jax.Array], Any], params: Any, inputs: np.ndarray, *, batch_size: int,
                mesh: Mesh, what: str = "rows", progress: Progress | None = None) -> Any:
  """`fn(params, batch)` over `inputs` in fixed-size batches split over the data axis; results (an array or a
  pytree of arrays) on host.

  The last batch is padded (one compilation for all) and the padding's outputs are dropped. Every
  process passes the whole of `inputs` and gets the whole result. Compilations are kept per function:
  a method of one object, or one function object, compiles once per shape however often it is mapped
  (a new lambda per call compiles again). A long run logs its progress with an ETA (`Progress`), counting `what`.
  """
  padded, num_rows = pad_to_multiple(np.asarray(inputs), batch_size)
  sharding = batch_sharding(mesh)
  apply = _jit_replicated(fn, mesh)
  if not num_rows:  # No rows, no work: the outputs' shapes and types, with no rows.
    shapes = jax.eval_shape(apply, params, jax.ShapeDtypeStruct((batch_size, *padded.shape[1:]), padded.dtype))
    return jax.tree.map(lambda shape: np.zeros((0, *shape.shape[1:]), shape.dtype), shapes)
  outputs = []
  row_cost = math.prod(padded.shape[1:])  # Tokens per row, for token inputs.
  progress = progress or Progress(num_rows, what, total_cost=num_rows * row_cost)
  for start in range(0, len(padded), batch_size):
    chunk = padded[start:start + batch_size]
    global_chunk = jax.make_array_from_callback(chunk.shape, sharding, lambda index, c=chunk: c[index])
    outputs.append(jax.tree.map(np.asarray, apply(params, global_chunk)))
    rows = min(batch_size, num_rows - start)
    progress.advance(rows, rows * row_cost)
  return jax.tree.map(lambda *parts: np.concatenate(parts)[:num_rows], *outputs)


def length_buckets(tokens: np.ndarray, pad_id: int, buckets: Sequence[int] = ()) -> list[tuple[int, np.ndarray]]:
  """(row length, indices of the rows it holds) for right-padded token rows, each row in the shortest bucket that
  holds its text; buckets without rows are left out.

  Args:
    tokens: int [n, width] token ids, padding (`pad_id`) only after the text.
    buckets: row lengths to cut to; the width is always one. Empty: every multiple of 8 below the width.
  """
  width = tokens.shape[1]
  lengths = (tokens != pad_id).sum(axis=1)
  groups, shorter = [], -1
  for bucket in sorted({*(b for b in (buckets or range(8, width, 8)) if b < width), width}):
    rows = np.flatnonzero((lengths > shorter) & (lengths <= bucket))
    shorter = bucket
    if len(rows):
      groups.append((bucket, rows))
  return groups


def map_token_batches(fn: Callable[[Any, jax.Array], Any], params: Any, tokens: np.ndarray, *, pad_id: int,
                      batch_size: int, mesh: Mesh, buckets: Sequence[int] = (), what: str = "rows") -> np.ndarray:
  """`map_batches` over right-padded token rows, each row cut to its `length_buckets` length.

  Text encoders spend their time per token, and most texts are shorter than the table's width: encoding them in
  shorter rows gives the same vectors for less compute, at one compilation per bucket. `fn` must ignore trailing
  padding (an attention mask, a masked mean), which every encoder here does.
  """
  tokens = np.asarray(tokens)
  groups = length_buckets(tokens, pad_id, buckets)
  if len(groups) > 1 and len(tokens) <= batch_size:  # One batch either way: one call (and compilation), not one each.
    groups = [(groups[-1][0], np.arange(len(tokens)))]
  if not groups:  # No rows: the output's shape comes from the full width.
    return map_batches(fn, params, tokens, batch_size=batch_size, mesh=mesh, what=what)
  # One count over every bucket; the ETA by tokens, as the buckets run shortest first.
  outputs, progress = None, Progress(len(tokens), what, total_cost=sum(bucket * len(rows) for bucket, rows in groups))
  for bucket, rows in groups:
    vectors = map_batches(fn, params, tokens[rows, :bucket], batch_size=batch_size, mesh=mesh, progress=progress)
    if outputs is None:
      outputs = np.zeros((len(tokens), *vectors.shape[1:]), vectors.dtype)
    outputs[rows] = vectors
  return outputs


def _jit_replicated(fn: Callable, mesh: Mesh) -> Callable:
  """jax.jit of `fn` with replicated outputs, made once per function (per object and function for a method)."""
  if not inspect.ismethod(fn):
    return jax.jit(fn, out_shardings=replicated(mesh))  # jax.jit's own cache is keyed by the function object.
  methods = _jitted_methods.setdefault(fn.__self__, {})
  key = (fn.__func__, mesh)
  if key not in methods:
    method = weakref.WeakMethod(fn)  # A strong one would keep the object alive through its own entry.
    apply = lambda *args: method()(*args)
    apply.__name__ = apply.__qualname__ = fn.__name__  # Compilation logs name the method.
    methods[key] = jax.jit(apply, out_shardings=replicated(mesh))
  return methods[key]
