"""StackFAQ with overlapping items: a FAQ directory where every thread is two items with the same answer.

  python tools/stackfaq_twins.py --stackfaq=DATA/faq/stackfaq --output=DATA/faq/stackfaq_twins

StackFAQ's threads hold two groups of paraphrases of their information need (`*` separates them). Here each thread
becomes two FAQ items that share its answer, as in a FAQ where one answer was filed under two wordings: the thread's
question, asked by the first group's paraphrases, and the first paraphrase of the second group as a question, asked
by that group's other paraphrases. The two items ask nearly the same question, so a retriever ranks each one's twin
among the first candidates of the other's queries: the false negatives that positive-aware mining drops
(`objectives/faq_negatives.py`). The directory is in the project's FAQ layout (faq.tsv, queries.tsv without
splits: `configs/universal.py:faq,DIR` draws them with its seed).
"""
import pathlib
import string
import sys

from absl import app
from absl import flags
from etils import epath

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from docent_jax import outputs  # pylint: disable=g-import-not-at-top
from docent_jax.data.universal import faq  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  flags.DEFINE_string("stackfaq", None, "The directory of stackExchange-FAQ.xml.")
  flags.DEFINE_string("output", None, "The FAQ directory to write (faq.tsv, queries.tsv).")
  flags.mark_flags_as_required(["stackfaq", "output"])


def twin_rows(threads: list[faq.StackFaqThread]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
  """(faq.tsv rows, queries.tsv rows): a thread's first item is its question, asked by its first paraphrase group;
  each further group of two or more paraphrases is one more item, its first paraphrase the question, asked by
  the others. Items are `<thread><a, b, ...>`."""
  items, queries = [], []
  for number, thread in enumerate(threads, 1):
    first, *rest = thread.paraphrase_groups
    groups = [(thread.question, first)] + [(group[0][1], group[1:]) for group in rest if len(group) > 1]
    for letter, (question, asking) in zip(string.ascii_lowercase, groups):
      items.append((f"{number}{letter}", question, thread.answer))
      queries.extend((f"{number}-{index}", text, f"{number}{letter}") for index, text in asking)
  return items, queries


def main(argv: list[str]) -> None:
  del argv
  threads, _ = faq.read_stackfaq_threads(epath.Path(FLAGS.stackfaq) / faq.STACKFAQ_FILE)
  items, queries = twin_rows(threads)
  output = epath.Path(FLAGS.output)
  output.mkdir(parents=True, exist_ok=True)
  tsv = lambda rows: "".join("\t".join(row) + "\n" for row in rows)
  outputs.write_atomically(output / faq.FAQ_FILE, tsv([faq.FAQ_COLUMNS, *items]))
  outputs.write_atomically(output / faq.QUERY_FILE, tsv([faq.QUERY_COLUMNS[:3], *queries]))
  print(f"{output}: {len(items)} items ({len(threads)} threads), {len(queries)} queries.")


if __name__ == "__main__":
  define_flags()
  app.run(main)
