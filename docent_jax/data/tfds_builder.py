"""What every docent_jax TFDS builder shares: one optional-field schema for all splits, in file order, and
the source directories it reads (the manual directory, or a directory named by a config)."""
from collections.abc import Iterator
import hashlib
import os
import re
from typing import Any

from etils import epath
import numpy as np
import tensorflow_datasets as tfds


class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Splits share the schema `FEATURES` (every field optional; a split fills only its own fields).

  TFDS allows one feature set per dataset, so splits of different kinds (triples, entities,
  sentences, labels) share one schema; examples are keyed by position, so example i of a split is
  row i of what the builder read.
  """

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Initial release."}
  FEATURES: dict[str, tfds.features.FeatureConnector] = {}

  @tfds.core.utils.classproperty
  @classmethod
  def _checksums_path(cls) -> None:
    # No recorded download checksums. Also skips TFDS's lookup of the builder's
    # code path, which imports `importlib_resources` (absent on Python >= 3.9).
    return None

  def _info(self) -> tfds.core.DatasetInfo:
    # DatasetInfo directly (not dataset_info_from_configs): no metadata files to look up.
    return tfds.core.DatasetInfo(
        builder=self,
        description=(self.__doc__ or "").strip(),
        features=tfds.features.FeaturesDict(self.FEATURES),
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict())

  def _generate_examples(self, examples: Iterator[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Keys examples by position; fields a split does not use are None."""
    empty = dict.fromkeys(self.FEATURES)
    for key, example in enumerate(examples):
      yield key, {**empty, **example}


def integer() -> tfds.features.Scalar:
  return tfds.features.Scalar(np.int64, optional=True)


def text() -> tfds.features.Text:
  return tfds.features.Text(optional=True)


def manual_dir(dl_manager: tfds.download.DownloadManager) -> epath.Path | None:
  """The manual directory, None when there is none to read."""
  try:
    return epath.Path(dl_manager.manual_dir)
  except AssertionError:  # TFDS's signal for a missing or empty manual directory.
    return None


def source_directory(directory: epath.PathLike, kind: str) -> epath.Path:
  """The absolute form of a directory a config names; FileNotFoundError when it is not a directory.

  A local path has its symbolic links resolved, so that two ways to name one directory give one config.
  """
  directory = epath.Path(directory)
  if _is_local(directory):
    directory = epath.Path(os.path.realpath(directory))
  if not directory.is_dir():
    raise FileNotFoundError(f"{kind} directory {directory} does not exist.")
  return directory


def directory_config_name(directory: epath.Path, default_stem: str) -> str:
  """'<directory name>_<fingerprint>', the start of a config name that changes when the directory's files do.

  Args:
    directory: a directory from `source_directory`.
    default_stem: the stem when the directory's name has no letter or digit.
  """
  stem = re.sub(r"[^a-z0-9]+", "_", directory.name.lower()).strip("_") or default_stem
  return f"{stem}_{directory_fingerprint(directory)}"


def directory_fingerprint(directory: epath.Path) -> str:
  """A short hash of a directory's path and its files' names, sizes and modification times."""
  return _files_fingerprint(directory, [path for path in directory.iterdir() if path.is_file()])


def tree_fingerprint(directory: epath.Path) -> str:
  """`directory_fingerprint` over every file below the directory, subdirectories included."""
  return _files_fingerprint(directory, [epath.Path(parent) / name for parent, _, names in directory.walk()
                                        for name in names])


def _files_fingerprint(directory: epath.Path, files: list[epath.Path]) -> str:
  """A short hash of `directory` and its `files`' paths (relative to it), sizes and modification times."""
  digest = hashlib.sha256(str(directory).encode())
  for path in sorted(files):
    size, mtime = _size_and_mtime(path)
    digest.update(f"{path.relative_to(directory)}:{size}:{mtime}".encode())
  return digest.hexdigest()[:10]


def _is_local(path: epath.Path) -> bool:
  return "://" not in str(path)


def _size_and_mtime(path: epath.Path) -> tuple[int, int]:
  """Size in bytes and modification time: nanoseconds for a local file, seconds for a remote one.

  epath's stat() has whole seconds only; nanoseconds also see a rewrite within the second, and keep
  the config names of local directories, and so the datasets already built for them, as they were.
  """
  if _is_local(path):
    stat = os.stat(path)
    return stat.st_size, stat.st_mtime_ns
  stat = path.stat()
  return stat.length, stat.mtime
