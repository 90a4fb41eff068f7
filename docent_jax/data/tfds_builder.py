"""What every docent_jax TFDS builder shares: one optional-field schema for all splits, in file order, the
source directories it reads (the manual directory, or a directory named by a config), and config names that
hold a directory's fingerprint or a config's options."""
from collections.abc import Iterator
import dataclasses
import hashlib
import os
import re
from typing import Any, TypeVar

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


ConfigT = TypeVar("ConfigT", bound=tfds.core.BuilderConfig)


def name_stem(text: str) -> str:
  """`text` as a config-name part: lower case, each run of other characters than letters and digits one '_'."""
  return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def directory_config(config_class: type[ConfigT], directory: epath.PathLike, *, kind: str, default_stem: str,
                     options_name: str = "", **fields: Any) -> ConfigT:
  """A config that reads `directory`, named '<directory name>_<fingerprint>[_<options_name>]': the name changes when
  the directory's files do, so that changed files build a new dataset instead of reusing the old one.

  Args:
    config_class: the builder's config class; it has a `directory` field.
    directory: the source directory; FileNotFoundError, naming `kind`, when it is not one.
    kind: the directory in that error ('Review').
    default_stem: the name's stem when the directory's name has no letter or digit.
    options_name: the options' part of the name ('': none).
    **fields: the config's other fields.
  """
  directory = source_directory(directory, kind)
  name = f"{name_stem(directory.name) or default_stem}_{directory_fingerprint(directory)}"
  return config_class(name=f"{name}_{options_name}" if options_name else name, directory=str(directory), **fields)


@dataclasses.dataclass(frozen=True)
class OptionNames:
  """Config names that hold a config's options: after a base name, '_'-joined, '<token><value>' for each number and
  '<token>' for each flag that differs from its default. `parse` reads a name back, so one name is one set of options.

  A number whose default is a float is written in the shortest form ('0.2') and read as a float; other numbers are
  integers.

  Attributes:
    what: the configs in an error message ('Review').
    defaults: the options (a dataclass) that a name leaves out.
    numbers: (field, token) of each number, in the name's order.
    flags: (field, token) of each boolean, after the numbers.
    empty: the name of the defaults where there is no base name.
  """
  what: str
  defaults: Any
  numbers: tuple[tuple[str, str], ...]
  flags: tuple[tuple[str, str], ...] = ()
  empty: str = ""

  def name(self, options: Any, base: str = "") -> str:
    """'<base>_<part>_<part>…' of `options` (a dataclass like `defaults`), e.g. 'wordnet_max1000_seed1'."""
    parts = [f"{token}{_number_text(getattr(options, field))}" for field, token in self.numbers
             if getattr(options, field) != getattr(self.defaults, field)]
    parts += [token for field, token in self.flags if getattr(options, field) != getattr(self.defaults, field)]
    return "_".join([base, *parts] if base else parts) or self.empty

  def parse(self, name: str, base: str = "") -> Any:
    """Inverse of `name`: the options of a config name; ValueError naming the part that is none of the tokens."""
    if base and name != base and not name.startswith(f"{base}_"):
      raise ValueError(f"{self.what} config name {name!r}: {self._grammar(base)}.")
    rest = name[len(base) + 1:] if base else ("" if name == self.empty else name)
    values: dict[str, Any] = {}
    for part in rest.split("_") if rest else []:
      flag = next((field for field, token in self.flags if part == token), None)
      number = re.fullmatch(r"([a-z]+)(\d[\d.e+-]*)", part)
      field = next((field for field, token in self.numbers if number and number.group(1) == token), None)
      if flag is not None:
        values[flag] = not getattr(self.defaults, flag)
      elif field is not None and (value := self._read_number(field, number.group(2))) is not None:
        values[field] = value
      else:
        raise ValueError(f"{self.what} config name {name!r}: unknown part {part!r}; {self._grammar(base)}.")
    return dataclasses.replace(self.defaults, **values)

  def _grammar(self, base: str) -> str:
    """What a name is, for an error message."""
    tokens = [f"{token}<N>" for _, token in self.numbers] + [token for _, token in self.flags]
    if base:
      return f"a name is {base!r}, optionally followed by '_'-joined {tokens}"
    return f"parts are {self.empty!r} or '_'-joined {tokens}"

  def _read_number(self, field: str, text: str) -> int | float | None:
    """The number `text` writes, None where it is no number of the field's kind."""
    try:
      return float(text) if isinstance(getattr(self.defaults, field), float) else int(text)
    except ValueError:
      return None


def _number_text(value: int | float) -> str:
  return f"{value:g}" if isinstance(value, float) else str(value)


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
