"""The in-memory offer corpus (serialized offers, their sources and products, labelled pairs), loaded from TFDS."""
import dataclasses

from absl import logging
from etils import epath
import numpy as np

from docent_jax.data import fingerprint
from docent_jax.data import tfds_loading
from docent_jax.data.offers import builders as offer_builders
from docent_jax.data.offers import files as offer_files

PAIR_SPLITS = offer_files.PAIR_SPLITS
# The registered builders take their predefined configs only ('wdc_computers/small').
BUILDERS = tfds_loading.BuilderRegistry(
    what="offer dataset",
    builders={"abt_buy": offer_builders.AbtBuy, "wdc_computers": offer_builders.WdcComputers},
    directory_builder=offer_builders.DeepmatcherDirectory,
    config=lambda options, directory: offer_builders.directory_config(directory))


@dataclasses.dataclass(frozen=True)
class OfferCorpus:
  """Product offers and labelled offer pairs.

  Attributes:
    texts: the serialized offers ('[COL] name [VAL] ...'); list position is the offer index.
    source: int32 [num_offers], each offer's index into `source_names`.
    source_names: the sources, e.g. ('tableA', 'tableB'); WDC offers have one, ('offers',).
    product_ids: each offer's product (WDC cluster id), '' where the data has none.
    pairs: 'train' / 'validation' / 'test' -> int64 [m, 3]: left offer, right offer, label (0/1).
    ids: each offer's id in its source (empty when the corpus was built by hand).
    name: the dataset name with its config, e.g. 'abt_buy/default'.
    counts: what the builder read (rows, pairs, positives, merged duplicates).
  """
  texts: list[str]
  source: np.ndarray
  source_names: tuple[str, ...]
  product_ids: list[str]
  pairs: dict[str, np.ndarray]
  ids: list[str] = dataclasses.field(default_factory=list)
  name: str = ""
  counts: dict[str, int] = dataclasses.field(default_factory=dict)

  @property
  def num_offers(self) -> int:
    return len(self.texts)

  def fingerprint(self) -> fingerprint.Fingerprint:
    """Counts and digests of the offers, their sources and products, and the pairs (see `data.fingerprint`)."""
    return {"offers": self.num_offers, "offer_ids_digest": fingerprint.digest(self.ids),
            "offer_texts_digest": fingerprint.digest(self.texts),
            "sources_digest": fingerprint.digest([*self.source_names, np.asarray(self.source)]),
            "products_digest": fingerprint.digest(self.product_ids),
            **{f"pairs/{split}": len(p) for split, p in sorted(self.pairs.items())},
            "pairs_digest": fingerprint.digest(p for _, p in sorted(self.pairs.items()))}


def load_offer_corpus(dataset: str, *, data_dir: epath.PathLike | None = None,
                      manual_dir: epath.PathLike | None = None) -> OfferCorpus:
  """Builds the dataset if needed (array_record under `data_dir`) and loads it.

  Args:
    dataset: 'abt_buy' or 'wdc_computers', optionally with a config
      ('wdc_computers/medium', 'wdc_computers/small_all'; the first config when
      none), or a directory in the DeepMatcher layout.
    data_dir: the TFDS data directory (TFDS's default when None).
    manual_dir: the source files (downloaded when None).

  Returns:
    The corpus.
  """
  builder = tfds_loading.make_builder(BUILDERS, dataset, data_dir=data_dir)
  sources = tfds_loading.prepare(builder, manual_dir)
  offer_columns = tfds_loading.read_columns(sources["offers"], ("source", "id", "text", "product"))
  pairs = {}
  for split in PAIR_SPLITS:
    columns = tfds_loading.read_columns(sources[split], ("left", "right", "label"))
    pairs[split] = np.stack([columns["left"], columns["right"], columns["label"]], axis=1).astype(np.int64)
  corpus = OfferCorpus(
      texts=offer_columns["text"],
      source=np.asarray(offer_columns["source"], np.int32).reshape(-1),
      source_names=tuple(builder.info.metadata["source_names"]),
      product_ids=offer_columns["product"],
      pairs=pairs,
      ids=offer_columns["id"],
      name=f"{builder.name}/{builder.builder_config.name}",
      counts=dict(builder.info.metadata.get("counts", {})))
  logging.info("Loaded %s: %d offers from %s; pairs %s.", corpus.name, corpus.num_offers, corpus.source_names,
               {split: len(p) for split, p in pairs.items()})
  return corpus
