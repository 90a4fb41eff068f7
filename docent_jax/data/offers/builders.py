"""TFDS builders of product offers and labelled offer pairs for product matching (array_record output).

Every builder writes the same splits:
  offers                      index, source (int64, index into the metadata's source_names),
                              id, text (the serialized offer), product ('' when unknown)
  train, validation, test     left, right (offer indices), label (0 / 1)
TFDS needs one schema for all splits, so every feature is optional and each
split fills only its own fields. Examples keep their order, so example i of
`offers` has index i. The metadata holds `source_names` and the counts of what
was read.

Builders: `deepmatcher_directory` (any directory in the DeepMatcher layout; the
config names it, see `directory_config`), `abt_buy` (DeepMatcher's Abt-Buy, from
the manual directory or downloaded) and `wdc_computers` (WDC LSPC v2 Computers;
configs small / medium / large / xlarge name the training set size).
"""
import abc
import dataclasses
import hashlib
from typing import Any, Iterator

from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from docent_jax.data import io
from docent_jax.data import tfds_builder
from docent_jax.data.offers import files as offer_files

PAIR_SPLITS = offer_files.PAIR_SPLITS
WDC_SIZES = ("small", "medium", "large", "xlarge")


@dataclasses.dataclass(eq=False)
class OfferConfig(tfds.core.BuilderConfig):
  """What to read and how to serialize it.

  Attributes:
    attributes: the attributes serialized, in order (None: all the source has).
    max_words: (attribute, words kept) pairs (None: the format's default caps).
    directory: the source directory, for `deepmatcher_directory`.
    size: the WDC training set size, for `wdc_computers`.
  """
  attributes: tuple[str, ...] | None = None
  max_words: tuple[tuple[str, int], ...] | None = None
  directory: str | None = None
  size: str | None = None

  def word_caps(self) -> dict[str, int] | None:
    return None if self.max_words is None else dict(self.max_words)


class OfferBuilder(tfds_builder.Builder, skip_registration=True):
  """Writes the `OfferDataset` of `_read_offers` as the splits described above."""

  FEATURES = {
      "index": tfds_builder.integer(), "source": tfds_builder.integer(), "id": tfds_builder.text(),
      "text": tfds_builder.text(), "product": tfds_builder.text(), "left": tfds_builder.integer(),
      "right": tfds_builder.integer(), "label": tfds_builder.integer(),
  }

  @abc.abstractmethod
  def _read_offers(self, dl_manager: tfds.download.DownloadManager) -> offer_files.OfferDataset:
    """Reads (or downloads and reads) the offers and pairs."""

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator[Any]]:
    dataset = self._read_offers(dl_manager)
    self.info.metadata["source_names"] = list(dataset.source_names)
    self.info.metadata["counts"] = dataset.counts
    logging.info("%s/%s: %d offers; %s.", self.name, self.builder_config.name, len(dataset.offer_ids), dataset.counts)
    offers = zip(dataset.offer_source, dataset.offer_ids, dataset.offer_texts, dataset.offer_products)
    generators = {"offers": self._generate_examples(
        {"index": i, "source": source, "id": identifier, "text": text, "product": product}
        for i, (source, identifier, text, product) in enumerate(offers))}
    for split in PAIR_SPLITS:
      generators[split] = self._generate_examples(
          {"left": left, "right": right, "label": label} for left, right, label in dataset.pairs[split])
    return generators


class DeepmatcherDirectory(OfferBuilder):
  """Any directory in the DeepMatcher layout; the config names the directory (see `directory_config`)."""

  BUILDER_CONFIGS = []

  def _read_offers(self, dl_manager: tfds.download.DownloadManager) -> offer_files.OfferDataset:
    del dl_manager  # Reads the config's directory.
    config = self.builder_config
    return offer_files.read_deepmatcher(offer_files.deepmatcher_paths(config.directory), config.attributes,
                                        config.word_caps())


def directory_config(directory: epath.PathLike, attributes: tuple[str, ...] | None = None,
                     max_words: tuple[tuple[str, int], ...] | None = None) -> OfferConfig:
  """A `DeepmatcherDirectory` config named after the directory and its files, so a changed directory rebuilds."""
  # Serialization options, where given, as a hash: attribute names need not suit a config name.
  options_name = ("" if attributes is None and max_words is None
                  else hashlib.sha256(repr((attributes, max_words)).encode()).hexdigest()[:8])
  return tfds_builder.directory_config(OfferConfig, directory, kind="DeepMatcher", default_stem="offers",
                                      options_name=options_name, attributes=attributes, max_words=max_words)


class AbtBuy(OfferBuilder):
  """Abt-Buy (DeepMatcher's textual benchmark): Abt (tableA) and Buy (tableB) offers and their pair splits.

  Serialized like Peeters & Bizer: name, price, then the description cut to
  100 words (last, so that truncation to a token budget cuts the description).
  """

  # Their serialization also holds an always-empty brand; it is left out.
  BUILDER_CONFIGS = [OfferConfig(name="default", attributes=("name", "price", "description"),
                                 max_words=(("description", 100),))]
  URL = "https://pages.cs.wisc.edu/~anhai/data1/deepmatcher_data/Textual/Abt-Buy/exp_data/"
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put DeepMatcher's Abt-Buy files (tableA.csv, tableB.csv, train.csv, valid.csv, test.csv; any may
  be gzipped) in the manual directory. Without one, they are downloaded from the DeepMatcher site.
  """

  def _read_offers(self, dl_manager: tfds.download.DownloadManager) -> offer_files.OfferDataset:
    manual_dir = tfds_builder.manual_dir(dl_manager)
    if manual_dir is not None:
      paths = offer_files.deepmatcher_paths(manual_dir)
    else:
      logging.info("%s: no manual directory; downloading the DeepMatcher files.", self.name)
      names = {**offer_files.DEEPMATCHER_TABLES, **offer_files.DEEPMATCHER_PAIRS}
      downloaded = dl_manager.download({key: self.URL + name for key, name in names.items()})
      paths = {key: epath.Path(path) for key, path in downloaded.items()}
    return offer_files.read_deepmatcher(paths, self.builder_config.attributes, self.builder_config.word_caps())


def _wdc_configs() -> list[OfferConfig]:
  configs = [OfferConfig(name=size, size=size, attributes=("title",)) for size in WDC_SIZES]
  configs += [OfferConfig(name=f"{size}_all", size=size, attributes=offer_files.WDC_ATTRIBUTES) for size in WDC_SIZES]
  return configs


class WdcComputers(OfferBuilder):
  """WDC LSPC v2 Computers: a training set of the config's size, its validation set, the gold standard as test.

  Config `<size>` serializes the title only (as Ditto's pair files hold it);
  `<size>_all` serializes brand, title, description and specTableContent, as
  Peeters & Bizer's code does (needs the original json files). The manual
  directory holds either the original files (computers_train_<size>.json.gz,
  computers_valid_<size>.csv, computers_gs.json.gz), whose offers carry ids and
  cluster ids, or Ditto's pair files (train.txt.<size>, valid.txt.<size>,
  test.txt), whose offers carry neither. Without a manual directory the
  original files are downloaded.
  """

  BUILDER_CONFIGS = _wdc_configs()
  URLS = {
      "train": "https://data.dws.informatik.uni-mannheim.de/largescaleproductcorpus/data/v2/trainsets/"
               "computers_train.zip",
      "validation": "https://data.dws.informatik.uni-mannheim.de/largescaleproductcorpus/data/v2/validationsets/"
                    "computers_valid.zip",
      "test": "https://data.dws.informatik.uni-mannheim.de/largescaleproductcorpus/data/v2/goldstandards/"
              "computers_gs.json.gz",
  }
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put the WDC LSPC v2 Computers files (computers_train_<size>.json.gz, computers_valid_<size>.csv,
  computers_gs.json.gz) or Ditto's pair files (train.txt.<size>, valid.txt.<size>, test.txt) in
  the manual directory. Without one, the original files are downloaded from the WDC site.
  """

  def _json_names(self) -> dict[str, str]:
    size = self.builder_config.size
    return {"train": f"computers_train_{size}.json.gz", "validation": f"computers_valid_{size}.csv",
            "test": "computers_gs.json.gz"}

  def _pair_file_names(self) -> dict[str, str]:
    size = self.builder_config.size
    return {"train": f"train.txt.{size}", "validation": f"valid.txt.{size}", "test": "test.txt"}

  def _read_json(self, paths: dict[str, epath.Path]) -> offer_files.OfferDataset:
    return offer_files.read_wdc_json(paths["train"], paths["validation"], paths["test"],
                                     self.builder_config.attributes, self.builder_config.word_caps())

  def _read_offers(self, dl_manager: tfds.download.DownloadManager) -> offer_files.OfferDataset:
    manual_dir = tfds_builder.manual_dir(dl_manager)
    if manual_dir is None:
      logging.info("%s: no manual directory; downloading the WDC LSPC files.", self.name)
      extracted = dl_manager.download_and_extract({key: self.URLS[key] for key in ("train", "validation")})
      test = epath.Path(dl_manager.download(self.URLS["test"]))
      names = self._json_names()
      paths = {key: _find_in(epath.Path(extracted[key]), names[key]) for key in extracted}
      return self._read_json({**paths, "test": test})
    json_paths = _find_all(manual_dir, self._json_names())
    if json_paths is not None:
      return self._read_json(json_paths)
    pair_paths = _find_all(manual_dir, self._pair_file_names())
    if pair_paths is not None:
      return offer_files.read_wdc_pair_files(pair_paths, self.builder_config.attributes,
                                             self.builder_config.word_caps())
    raise FileNotFoundError(f"{manual_dir}: holds neither all of {sorted(self._json_names().values())} nor all "
                            f"of {sorted(self._pair_file_names().values())}.")


def _find_all(directory: epath.Path, names: dict[str, str]) -> dict[str, epath.Path] | None:
  """key -> `directory/name` (or name.gz) for every name, None when one is missing."""
  paths = {key: io.find_file(directory, name) for key, name in names.items()}
  return paths if all(paths.values()) else None


def _find_in(directory: epath.Path, name: str) -> epath.Path:
  """The file `name` anywhere under an extracted archive."""
  # Walked, not globbed: epath does not glob recursively.
  found = sorted(root / name for root, _, files in directory.walk() if name in files)
  if not found:
    raise FileNotFoundError(f"{directory}: the downloaded archive holds no {name}.")
  return found[0]
