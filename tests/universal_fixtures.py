"""Tiny NLI and PPDB data and a tiny universal-representations config over them, for objective tests."""
import json
import pathlib

import ml_collections

from configs import universal
import tiny_training

_ANIMALS = ["dog", "cat", "horse", "bird", "fish", "cow", "goat", "duck"]
_PLACES = ["park", "river", "kitchen", "garden", "street", "beach", "forest", "field"]
_WORDS = ["car", "house", "song", "table", "tree", "road", "coat", "lamp", "book", "door", "cup", "shoe"]


def write_nli(directory: pathlib.Path) -> pathlib.Path:
  """64 premise / hypothesis pairs: the same scene (entailment), another place (contradiction), an extra
  detail (neutral)."""
  directory.mkdir(parents=True, exist_ok=True)
  records = []
  for i, (animal, place) in enumerate((a, p) for a in _ANIMALS for p in _PLACES):
    premise = f"A {animal} is sleeping in the {place}."
    kind = ("entailment", "contradiction", "neutral")[i % 3]
    hypothesis = {"entailment": f"An animal rests in the {place}.",
                  "contradiction": f"The {animal} is running in the {_PLACES[(i + 3) % len(_PLACES)]}.",
                  "neutral": f"The {animal} in the {place} is old."}[kind]
    records.append({"premise": premise, "hypothesis": hypothesis, "label": kind})
  (directory / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  return directory


def write_ppdb_pack(directory: pathlib.Path) -> pathlib.Path:
  """A PPDB 2.0 pack of 30 pairs per kept relation (and some the paper drops)."""
  directory.mkdir(parents=True, exist_ok=True)
  lines = []
  for i, word in enumerate(_WORDS):
    other = _WORDS[(i + 5) % len(_WORDS)]
    for j in range(3):
      lines += [f"[NN] ||| {word} {j} ||| the {word} {j} ||| PPDB2.0Score=4 ||| 0-0 ||| Equivalence",
                f"[NN] ||| red {word} {j} ||| {word} {j} ||| PPDB2.0Score=3 ||| 0-0 ||| ForwardEntailment",
                f"[NN] ||| {other} {j} ||| blue {other} {j} {word} ||| PPDB2.0Score=3 ||| 0-0 ||| ReverseEntailment",
                f"[NN] ||| {word} {j} ||| {other} {j + 1} ||| PPDB2.0Score=1 ||| 0-0 ||| Independent",
                f"[NN] ||| hot {word} {j} ||| cold {word} {j} ||| PPDB2.0Score=1 ||| 0-0 ||| Exclusion"]
  path = directory / "ppdb-2.0-tiny-phrasal"
  path.write_text("\n".join(lines) + "\n")
  return path


_CAPITALS = [("Athens", "Greece"), ("Paris", "France"), ("Rome", "Italy"), ("Madrid", "Spain"), ("Oslo", "Norway")]
_COMPARATIVES = [("big", "bigger"), ("small", "smaller"), ("cold", "colder"), ("warm", "warmer")]


def write_evaluation_data(directory: pathlib.Path) -> pathlib.Path:
  """A manual directory with tiny analogy sets (analogy/) and a rated PPDB sample (ppdb/)."""
  (directory / "analogy").mkdir(parents=True, exist_ok=True)
  (directory / "ppdb").mkdir(parents=True, exist_ok=True)
  lines = []
  for section, pairs in (("capital-common-countries", _CAPITALS), ("gram3-comparative", _COMPARATIVES)):
    lines.append(f": {section}")
    lines += [f"{a} {b} {c} {d}" for a, b in pairs for c, d in pairs if a != c]
  (directory / "analogy" / "questions-words.txt").write_text("\n".join(lines) + "\n")
  papers = [("Boston", "Boston_Globe"), ("Chicago", "Chicago_Tribune"), ("Denver", "Denver_Post"),
            ("Houston", "Houston_Chronicle")]
  (directory / "analogy" / "questions-phrases.txt").write_text(
      ": newspapers\n" + "".join(f"{a} {b} {c} {d}\n" for a, b in papers for c, d in papers if a != c))
  rows = [f"{1 + i % 5}.0\t[NN]\t{word}\tthe {other}\t3.0,4.0" for i, (word, other) in
          enumerate(zip(_WORDS, _WORDS[::-1]))]
  (directory / "ppdb" / "ppdb-sample.tsv").write_text("\n".join(rows) + "\n")
  return directory


def tiny_config(nli_dir: pathlib.Path, pack: pathlib.Path, manual_dir: pathlib.Path,
                tfds_dir: pathlib.Path) -> ml_collections.ConfigDict:
  """Multi-task training of a small, freshly initialised BERT (the MiniLM tokenizer's vocabulary)."""
  config = tiny_training.shrink(universal.get_config(), tfds_dir, max_len=16)
  config.data.manual_dir = str(manual_dir)
  config.data.nli_sources = (str(nli_dir),)
  config.data.validation_fraction = 0.25
  config.data.ppdb_pack = str(pack)
  config.data.max_pairs_per_class = 0
  config.evals.validation.every_steps = 3
  config.evals.validation.max_pairs = 10  # Of 16 NLI and 11 phrase validation pairs.
  config.baselines = {name: config.baselines[name] for name in ("universal_nli", "pretrained", "static_wordpiece")}
  return config


_TOPICS = ["password", "account", "email", "photo", "invoice", "refund", "printer", "backup", "wifi", "calendar",
           "contacts", "language"]


def write_faq(directory: pathlib.Path) -> pathlib.Path:
  """A FAQ directory: 12 items, 3 queries each (2 train, 1 test), each query sharing its item's topic word."""
  directory.mkdir(parents=True, exist_ok=True)
  (directory / "faq.tsv").write_text("".join(f"f{i}\tHow do I change my {topic}?\tOpen the {topic} settings.\n"
                                             for i, topic in enumerate(_TOPICS)))
  queries = [(f"q{i}_{j}", text, f"f{i}", split) for i, topic in enumerate(_TOPICS) for j, (text, split) in enumerate(
      [(f"change {topic}", "train"), (f"where is the {topic} option", "train"), (f"my {topic} needs changing", "test")])]
  (directory / "queries.tsv").write_text("".join("\t".join(row) + "\n" for row in queries))
  return directory


def tiny_faq_config(faq_dir: pathlib.Path, tfds_dir: pathlib.Path) -> ml_collections.ConfigDict:
  """FAQ fine-tuning of a small, freshly initialised BERT: two seeds, beside the zero-shot encoder."""
  config = tiny_training.shrink(universal.get_config(f"faq_retrieved,{faq_dir}"), tfds_dir, max_len=16, num_steps=4,
                                checkpoint_every_steps=2)
  config.baselines = {"faq_zero_shot": config.baselines.faq_zero_shot}
  config.num_seeds = 2
  return config
