"""Builds a docent_jax TFDS dataset when needed and reads its splits back, for every domain's loader."""
from collections.abc import Callable, Mapping
import contextlib
import dataclasses
import fcntl
from typing import Any, Iterator, Sequence

from absl import logging
from etils import epath
import numpy as np
import requests
import tensorflow_datasets as tfds
from tensorflow_datasets.proto import tf_example_pb2

from docent_jax import outputs
from docent_jax.data import tfds_builder

# Beside a dataset built from a manual directory: that directory's `tfds_builder.tree_fingerprint`.
SOURCE_FILE = "manual_dir_fingerprint.txt"


def default_data_dir() -> epath.Path:
  """TFDS's data directory when a config names none."""
  return epath.Path(tfds.core.constants.DATA_DIR)


def builder_kwargs(data_dir: epath.PathLike | None) -> dict[str, Any]:
  """Keyword arguments of every builder: the TFDS data directory (TFDS's default when None), array_record files."""
  return dict(data_dir=epath.Path(data_dir) if data_dir is not None else None, file_format="array_record")


@dataclasses.dataclass(frozen=True)
class BuilderRegistry:
  """One domain's TFDS builders: by registered name ('wn18rr', 'wn18rr/subgraph_3000'), or a directory of the
  domain's own files.

  Attributes:
    what: the domain's dataset in an error message ('knowledge graph').
    builders: the registered builders by name.
    config: (options, a directory or None) -> the builder config of those options: a directory's is named after the
      directory and its files, a registered builder's after the options.
    directory_builder: the builder of a directory; None where the domain reads no directory of its own files.
    parse_config_name: a registered builder's config name -> its options; None where the registered builders take
      only their predefined configs (the dataset names one, or none for the default).
    default_options: the options where neither the dataset's name nor the caller gives any.
    known_shapes: the counts of registered datasets (by the name a config gives, 'wn18rr/subgraph_3000') as their
      files hold them: num_entities, num_relations; what compiling for a TPU takes without reading the data.
  """
  what: str
  builders: Mapping[str, type[tfds.core.GeneratorBasedBuilder]]
  config: Callable[[Any, epath.PathLike | None], tfds.core.BuilderConfig]
  directory_builder: type[tfds.core.GeneratorBasedBuilder] | None = None
  parse_config_name: Callable[[str], Any] | None = None
  default_options: Any = None
  known_shapes: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)


def make_builder(registry: BuilderRegistry, dataset: str, *, data_dir: epath.PathLike | None = None,
                 options: Any = None) -> tfds.core.GeneratorBasedBuilder:
  """The TFDS builder of `dataset` (a registered name, with its config after a '/', or a directory) with `options`
  (the registry's default when None), writing under `data_dir`. A registered name is never read as a directory, so
  that a folder of that name in the working directory (e.g. a data root's 'faq/') does not change the dataset."""
  kwargs = builder_kwargs(data_dir)
  chosen = registry.default_options if options is None else options
  name, _, config_name = dataset.partition("/")
  if name not in registry.builders:
    if registry.directory_builder is None:
      raise ValueError(f"Unknown {registry.what} {dataset!r}: not one of {sorted(registry.builders)}.")
    if not epath.Path(dataset).is_dir():
      raise ValueError(f"Unknown {registry.what} {dataset!r}: not a directory and not one of "
                       f"{sorted(registry.builders)}.")
    return registry.directory_builder(config=registry.config(chosen, dataset), **kwargs)
  builder_class = registry.builders[name]
  if registry.parse_config_name is None:
    if config_name and config_name not in builder_class.builder_configs:
      raise ValueError(f"Unknown config {config_name!r} of {name}; valid: {sorted(builder_class.builder_configs)}.")
    return builder_class(config=config_name or None, **kwargs)
  if config_name:
    if chosen != registry.default_options:
      raise ValueError(f"{dataset!r} names its config; do not also pass options.")
    chosen = registry.parse_config_name(config_name)
  config = registry.config(chosen, None)
  # TFDS takes the name of a predefined config, and rejects an equal-named config object.
  return builder_class(config=config.name if config.name in builder_class.builder_configs else config, **kwargs)


def prepare(builder: tfds.core.DatasetBuilder, manual_dir: epath.PathLike | None) -> dict[str, Any]:
  """Builds the dataset if needed and returns the random-access data source of each split.

  A dataset built from a manual directory is built again when that directory's files have changed
  (another directory, or files edited since), so that one name never serves two versions of the data.

  Args:
    builder: the builder, writing array_record files (see `builder_kwargs`).
    manual_dir: the source files (the builder downloads them, or fails, when None).
  """
  if manual_dir is not None and not epath.Path(manual_dir).is_dir():
    raise FileNotFoundError(f"Manual directory {manual_dir} does not exist.")
  download_config = tfds.download.DownloadConfig(manual_dir=epath.Path(manual_dir) if manual_dir else None)
  record = epath.Path(builder.data_dir) / SOURCE_FILE
  source = tfds_builder.tree_fingerprint(epath.Path(manual_dir)) if manual_dir else None
  if source and record.exists() and record.read_text() != source:
    logging.warning("%s was built from other files than %s holds now; building it again.", builder.data_dir,
                    manual_dir)
    download_config.download_mode = tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS
  with _build_lock(builder):
    if not builder.info.splits and (epath.Path(builder.data_dir) / "dataset_info.json").exists():
      builder.info.read_from_directory(builder.data_dir)  # Built by another process since `builder` was made.
    try:
      builder.download_and_prepare(download_config=download_config)
    except requests.exceptions.ConnectionError as error:
      raise ConnectionError(
          f"{builder.name}: downloading its source files failed ({type(error).__name__}). Offline, set "
          "config.data.manual_dir to a directory that holds them (the builder says which files).") from error
    if source:
      outputs.write_atomically(record, source)
  return builder.as_data_source()


@contextlib.contextmanager
def _build_lock(builder: tfds.core.DatasetBuilder) -> Iterator[None]:
  """Holds an exclusive lock on the dataset's build, so that two first runs on one machine do not both build
  it (the second would fail to move its copy into place); the second then finds it built. A remote data
  directory is not locked."""
  data_dir = epath.Path(builder.data_dir)
  if "://" in str(data_dir):
    yield
    return
  data_dir.parent.mkdir(parents=True, exist_ok=True)
  with open(data_dir.parent / f".{data_dir.name}.build.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # Released when the file closes.
    yield


def read_columns(source: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
  """Reads whole columns of a TFDS array_record data source.

  Parses the stored tf.train.Example protos directly: TFDS decoding of each
  example is about ten times slower, which matters for 300k triples.
  """
  records = source.data_source.__getitems__(range(len(source)))
  columns: dict[str, list[Any]] = {name: [] for name in names}
  for record in records:
    feature = tf_example_pb2.Example.FromString(record).features.feature
    for name in names:
      value = feature[name]
      columns[name].append(value.int64_list.value[0] if value.HasField("int64_list") else
                           value.bytes_list.value[0].decode("utf-8"))
  return {name: np.asarray(values) if values and isinstance(values[0], int) else values
          for name, values in columns.items()}
