"""Reads the Google analogy sets, and derives phrase and sentence versions of the word questions.

questions-words.txt and questions-phrases.txt (Mikolov et al. 2013) hold `: <section>` headers, each
followed by questions `a b c d` (a is to b as c is to d), one a line; a multi-word item joins its words
with `_`. Sections whose name starts with `gram` are syntactic, the others semantic: the first five of
questions-words.txt and all five of questions-phrases.txt.

Li & Zhao's phrase and sentence analogy sets are not public. `phrase_and_sentence_versions` builds
stand-ins from the 14 word sections: each section has two phrase frames and two sentence frames. The first
pair of a question (a, b) goes into the first frame, the second pair (c, d) into the second, so a question
keeps its relation (Athens : Greece :: Baghdad : Iraq becomes 'a flight to Athens' : 'a flight to Greece' ::
'a postcard from Baghdad' : 'a postcard from Iraq'): b - a is taken in the first frame and added to c in
the second, so a relation counts only where it carries from one context to another. With one frame for all
four items, the frame would cancel in b - a + c against candidates in that same frame, leaving a word
analogy in one fixed context. Where the two words of a pair are different parts of speech or inflections
(adjective and adverb, infinitive and participle, country and nationality), no one frame fits both, so the
frames mention the word ('the word "calmly"').

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
    phrase: the two phrase frames: of a question's first pair (a, b) and of its second pair (c, d), e.g.
      ('a flight to {}', 'a postcard from {}').
    sentence: the two sentence frames, likewise.
    common_noun: how a lowercase item fills a frame, e.g. 'the {}'; a capitalised one (a proper noun) fills it bare.
    forms: items that fill a frame in another form: a pronoun's object case, a country name that takes 'the'.
  """
  phrase: tuple[str, str]
  sentence: tuple[str, str]
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


_WORD_MENTION = Template(phrase=('the word "{}"', 'the spelling of "{}"'),
                         sentence=('The teacher wrote the word "{}" on the board.',
                                   'Nobody in the class could spell "{}" correctly.'))
_TRAVEL = Template(phrase=("a flight to {}", "a postcard from {}"),
                   sentence=("She flew to {} last spring.", "Our neighbours sent us a postcard from {}."),
                   forms={"Bahamas": "the Bahamas", "Philippines": "the Philippines"})
_CHOICE = Template(phrase=("the {} one", "the {} choice"),
                   sentence=("She picked the {} one from the shelf.", "In the end we went with the {} option."))

# The 14 sections of questions-words.txt.
TEMPLATES: Mapping[str, Template] = {
    "capital-common-countries": _TRAVEL,
    "capital-world": _TRAVEL,
    # Countries take no article and currencies do: 'the future of Japan', 'the future of the yen'.
    "currency": Template(phrase=("the future of {}", "news about {}"),
                         sentence=("Analysts worry about the future of {}.",
                                   "The evening news had a long report on {}."),
                         common_noun="the {}", forms={"USA": "the USA"}),
    "city-in-state": Template(phrase=("a hotel in {}", "the weather in {}"),
                              sentence=("They opened a new office in {} last year.",
                                        "The weather in {} was mild all week.")),
    # 'his' and 'her' are determiners: they need a noun, which keeps them apart from 'him' and 'her' (he, she).
    "family": Template(phrase=("a photo of {}", "a letter from {}"),
                       sentence=("Everyone in the village knew {} well.", "We got a long letter from {} yesterday."),
                       common_noun="the {}", forms={"he": "him", "she": "her", "his": "his family",
                                                    "her": "her family"}),
    "gram1-adjective-to-adverb": _WORD_MENTION,
    "gram2-opposite": Template(phrase=("quite {}", "somewhat {}"), sentence=_WORD_MENTION.sentence),
    "gram3-comparative": _CHOICE,
    "gram4-superlative": _CHOICE,
    "gram5-present-participle": _WORD_MENTION,
    "gram6-nationality-adjective": _WORD_MENTION,
    "gram7-past-tense": _WORD_MENTION,
    "gram8-plural": Template(phrase=("a story about the {}", "a picture of the {}"),
                             sentence=("My grandmother told me a story about the {}.",
                                       "The children drew a picture of the {} in class.")),
    "gram9-plural-verbs": _WORD_MENTION,
}
# The levels of the analogy questions above the word, each a pair of frames of a `Template`.
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
  """Each word question with its items put in its section's phrase frames and sentence frames (`TEMPLATES`):
  a and b in the first frame of a level, c and d in the second.

  Raises:
    ValueError: a question of a section without a template (only questions-words.txt's sections have one).
  """
  unknown = sorted({question.section for question in words} - TEMPLATES.keys())
  if unknown:
    raise ValueError(f"No phrase and sentence templates for the sections {unknown}; there are templates for "
                     f"{list(TEMPLATES)}.")

  def version(question: AnalogyQuestion, level: str) -> AnalogyQuestion:
    return dataclasses.replace(question, items=tuple(item_version(question.section, item, level, position)
                                                     for position, item in enumerate(question.items)))

  return AlignedAnalogies(words=list(words), phrases=[version(q, "phrase") for q in words],
                          sentences=[version(q, "sentence") for q in words])


def item_version(section: str, item: str, level: str, position: int) -> str:
  """The text `item` becomes at `level` ('phrase' or 'sentence') in a question of `section` when it stands at
  `position` (0 to 3: a, b, c, d), as `phrase_and_sentence_versions` makes it: positions 0 and 1 take the
  level's first frame, 2 and 3 its second. A candidate answer stands at position 3."""
  if section not in TEMPLATES:
    raise ValueError(f"No phrase and sentence templates for the section {section!r}.")
  if level not in FRAMES:
    raise ValueError(f"Unknown level {level!r}; valid: {FRAMES}.")
  if position not in range(4):
    raise ValueError(f"An item stands at position 0 to 3 (a, b, c, d), not {position}.")
  template = TEMPLATES[section]
  return getattr(template, level)[position // 2].format(template.slot(item))
