"""Reads the Google analogy sets, and derives phrase and sentence versions of the word questions.

questions-words.txt and questions-phrases.txt (Mikolov et al. 2013) hold `: <section>` headers, each
followed by questions `a b c d` (a is to b as c is to d), one a line; a multi-word item joins its words
with `_`. Sections whose name starts with `gram` are syntactic, the others semantic: the first five of
questions-words.txt and all five of questions-phrases.txt.

Li & Zhao's phrase and sentence analogy sets are not public. `phrase_and_sentence_versions` builds
stand-ins from the 14 word sections: each section has one phrase frame and one sentence frame, and all
four items of a question go into the same frame, so a question keeps its relation (Athens : Greece ::
Baghdad : Iraq becomes 'a flight to Athens' : 'a flight to Greece' :: ...). Where the two words of a
pair are different parts of speech or inflections (adjective and adverb, infinitive and participle,
country and nationality), no one frame fits both, so the frame mentions the word ('the word "calmly"').

Both files are public in the word2vec repository,
https://raw.githubusercontent.com/tmikolov/word2vec/20c129af10659f7c50e86e3be406df663beff438/<file name>.
"""
import dataclasses
from typing import Mapping, Sequence

from etils import epath

from docent_jax.data import io


@dataclasses.dataclass(frozen=True)
class AnalogyQuestion:
  """items[0] is to items[1] as items[2] is to items[3]; items keep the file's case, `_` read as a space."""
  section: str
  items: tuple[str, str, str, str]
  semantic: bool


@dataclasses.dataclass(frozen=True)
class Template:
  """A section's phrase and sentence frames; `{}` marks where an item goes.

  Attributes:
    phrase: the phrase frame, e.g. 'a flight to {}'.
    sentence: the sentence frame, e.g. 'She flew to {} last spring.'.
    common_noun: how a lowercase item fills a frame, e.g. 'the {}'; a capitalised one (a proper noun) fills it bare.
    forms: items that fill a frame in another form: a pronoun's object case, a country name that takes 'the'.
  """
  phrase: str
  sentence: str
  common_noun: str = "{}"
  forms: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def slot(self, item: str) -> str:
    """The text `item` puts in a frame."""
    if item in self.forms:
      return self.forms[item]
    return self.common_noun.format(item) if item[:1].islower() else item


@dataclasses.dataclass(frozen=True)
class AlignedAnalogies:
  """Question i of each list is one question: its words, its phrases and its sentences."""
  words: list[AnalogyQuestion]
  phrases: list[AnalogyQuestion]
  sentences: list[AnalogyQuestion]


_WORD_MENTION = Template(phrase='the word "{}"', sentence='The teacher wrote the word "{}" on the board.')
_FLIGHT = Template(phrase="a flight to {}", sentence="She flew to {} last spring.",
                   forms={"Bahamas": "the Bahamas", "Philippines": "the Philippines"})
_CHOICE = Template(phrase="the {} one", sentence="She picked the {} one from the shelf.")

# The 14 sections of questions-words.txt.
TEMPLATES: Mapping[str, Template] = {
    "capital-common-countries": _FLIGHT,
    "capital-world": _FLIGHT,
    # Countries take no article and currencies do: 'the future of Japan', 'the future of the yen'.
    "currency": Template(phrase="the future of {}", sentence="Analysts worry about the future of {}.",
                         common_noun="the {}", forms={"USA": "the USA"}),
    "city-in-state": Template(phrase="a hotel in {}", sentence="They opened a new office in {} last year."),
    # 'his' and 'her' are determiners: they need a noun, which keeps them apart from 'him' and 'her' (he, she).
    "family": Template(phrase="a photo of {}", sentence="Everyone in the village knew {} well.", common_noun="the {}",
                       forms={"he": "him", "she": "her", "his": "his family", "her": "her family"}),
    "gram1-adjective-to-adverb": _WORD_MENTION,
    "gram2-opposite": Template(phrase="quite {}", sentence=_WORD_MENTION.sentence),
    "gram3-comparative": _CHOICE,
    "gram4-superlative": _CHOICE,
    "gram5-present-participle": _WORD_MENTION,
    "gram6-nationality-adjective": _WORD_MENTION,
    "gram7-past-tense": _WORD_MENTION,
    "gram8-plural": Template(phrase="a story about the {}", sentence="My grandmother told me a story about the {}."),
    "gram9-plural-verbs": _WORD_MENTION,
}
# The frames of a `Template`, each a level of the analogy questions above the word.
FRAMES = ("phrase", "sentence")


def read_analogies(path: epath.PathLike) -> list[AnalogyQuestion]:
  """The questions of an analogy file, in file order.

  Raises:
    io.DataFormatError: a question before any section header, an empty section name, or a line without
      exactly four items.
  """
  questions = []
  section = None
  for number, line in io.row_lines(path):
    if line.startswith(":"):
      section = line[1:].strip()
      if not section:
        raise io.DataFormatError(f"{path}:{number}: a section header without a name.")
      continue
    items = line.split()
    if len(items) != 4:
      raise io.DataFormatError(f"{path}:{number}: expected 4 items (a b c d), found {len(items)}: {line[:100]!r}")
    if section is None:
      raise io.DataFormatError(f"{path}:{number}: a question before the first section header (': name').")
    questions.append(AnalogyQuestion(section=section, items=tuple(item.replace("_", " ") for item in items),
                                     semantic=not section.startswith("gram")))
  return questions


def phrase_and_sentence_versions(words: Sequence[AnalogyQuestion]) -> AlignedAnalogies:
  """Each word question with its items put in its section's phrase frame and sentence frame (`TEMPLATES`).

  Raises:
    ValueError: a question of a section without a template (only questions-words.txt's sections have one).
  """
  unknown = sorted({question.section for question in words} - TEMPLATES.keys())
  if unknown:
    raise ValueError(f"No phrase and sentence templates for the sections {unknown}; there are templates for "
                     f"{list(TEMPLATES)}.")

  def version(question: AnalogyQuestion, frame: str) -> AnalogyQuestion:
    return dataclasses.replace(question, items=tuple(item_version(question.section, item, frame)
                                                     for item in question.items))

  return AlignedAnalogies(words=list(words), phrases=[version(q, "phrase") for q in words],
                          sentences=[version(q, "sentence") for q in words])


def item_version(section: str, item: str, frame: str) -> str:
  """The text `item` becomes in the `frame` ('phrase' or 'sentence') version of a question of `section`, as
  `phrase_and_sentence_versions` makes it; e.g. a candidate answer put in the frame of its question."""
  if section not in TEMPLATES:
    raise ValueError(f"No phrase and sentence templates for the section {section!r}.")
  if frame not in FRAMES:
    raise ValueError(f"Unknown frame {frame!r}; valid: {FRAMES}.")
  template = TEMPLATES[section]
  return getattr(template, frame).format(template.slot(item))
