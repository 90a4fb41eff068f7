"""What every docent_jax TFDS builder shares: one optional-field schema for all splits, in file order."""
from collections.abc import Iterator
from typing import Any

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
