"""Batch predictions of a trained run: JSON lines in, JSON lines out.

  python -m docent_jax.predict --run=WORKDIR/<model> --task=search < queries.jsonl > answers.jsonl
  python -m docent_jax.predict --run=WORKDIR/<model> --task=link --input=triples.jsonl --output=tails.jsonl

Tasks, the runs that answer them, and their input lines:
  search (any run with an entity set): {"query": "a text"}   -> "results": the nearest entities
  link (BLP):  {"text": "an entity's description", "relation": "a relation name", "heads": false}
                                                               -> "results": the entities that complete the triple
  match (a pair classifier): {"left": "an offer", "right": "an offer"}
                                                               -> "probability" of one product, "match" (p > 0.5)
  faq (FAQ retrieval): {"query": "a question"}                 -> "results": the nearest FAQ items with answers
Each output line is the input line with the answer's keys added, in input order; "results" are
[{"id": ..., "score": ...}, ...], best first. A line that is not such a JSON object is an error naming its line
number. A file input shows a progress bar.
"""
from collections.abc import Iterator
import json
import sys
from typing import Any, TextIO

from absl import app
from absl import flags
from absl import logging
from etils import epath
import tqdm

from docent_jax.inference import link_prediction
from docent_jax.inference import model as inference_model
from docent_jax.inference import pair_matching
from docent_jax.inference import protocol
from docent_jax.inference import text_encoder

# Task -> (the string keys of its input lines, the model class that answers it).
TASKS = {"search": (("query",), protocol.Model), "link": (("text", "relation"), link_prediction.LinkPredictionModel),
         "match": (("left", "right"), pair_matching.PairMatchingModel), "faq": (("query",), text_encoder.FaqModel)}
_CHUNK = 256  # Lines encoded together.


def read_requests(lines: TextIO, task: str, source: str) -> Iterator[tuple[int, dict[str, Any]]]:
  """(line number, request) of each non-blank line; a malformed one is a ValueError naming `source:line`."""
  keys, _ = TASKS[task]
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      request = json.loads(line)
    except ValueError as error:
      raise ValueError(f"{source}:{number}: not JSON ({error}).") from None
    if not isinstance(request, dict) or any(not isinstance(request.get(key), str) for key in keys):
      raise ValueError(f"{source}:{number}: --task={task} needs a JSON object with string {' and '.join(keys)}.")
    yield number, request


def answer(model: protocol.Model, task: str, requests: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
  """What is added to each request's line."""
  ranked = lambda rankings: [{"results": [{"id": i, "score": s} for i, s in ranking]} for ranking in rankings]
  if task == "search":
    return ranked(model.search([r["query"] for r in requests], k))
  if task == "match":
    probabilities = model.match([r["left"] for r in requests], [r["right"] for r in requests])
    return [{"probability": float(p), "match": bool(p > 0.5)} for p in probabilities]
  if task == "faq":
    return [{"results": items} for items in model.answer([r["query"] for r in requests], k)]
  rankings = [None] * len(requests)
  for heads in (False, True):  # One batch per direction.
    rows = [i for i, r in enumerate(requests) if bool(r.get("heads", False)) == heads]
    if rows:
      found = model.predict([requests[i]["text"] for i in rows], [requests[i]["relation"] for i in rows], k,
                            tails=not heads)
      for i, ranking in zip(rows, found):
        rankings[i] = ranking
  return ranked(rankings)


def predict(model: protocol.Model, task: str, lines: TextIO, output: TextIO, *, k: int = 10,
            source: str = "<stdin>", total: int | None = None) -> int:
  """Answers every request of `lines` into `output`, in order; returns how many. With `total` (the number of
  lines), shows a progress bar with an ETA on stderr."""
  if task not in TASKS:
    raise ValueError(f"--task={task}: valid tasks: {sorted(TASKS)}.")
  if not isinstance(model, TASKS[task][1]):
    raise ValueError(f"--task={task} needs a {TASKS[task][1].__name__}; {model.name} is a {model.config.objective} "
                     "run.")
  chunk, done = [], 0
  with tqdm.tqdm(total=total, unit="line", disable=total is None, file=sys.stderr) as progress:

    def flush() -> None:
      nonlocal done
      for request, added in zip(chunk, answer(model, task, chunk, k)):
        output.write(json.dumps({**request, **added}) + "\n")
      progress.update(len(chunk))
      done += len(chunk)
      chunk.clear()

    for _, request in read_requests(lines, task, source):
      chunk.append(request)
      if len(chunk) == _CHUNK:
        flush()
    if chunk:
      flush()
  return done


FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  model = inference_model.load(FLAGS.run)
  source = FLAGS.input
  total = None if source == "-" else sum(1 for line in epath.Path(source).open() if line.strip())
  lines = sys.stdin if source == "-" else epath.Path(source).open()
  output = sys.stdout if FLAGS.output == "-" else epath.Path(FLAGS.output).open("w")
  try:
    count = predict(model, FLAGS.task, lines, output, k=FLAGS.k, source="<stdin>" if source == "-" else source,
                    total=total)
  except (ValueError, KeyError) as error:  # A malformed line, or an unknown relation: named in the message.
    logging.error("%s", error.args[0] if error.args else error)
    sys.exit(1)
  finally:
    if output is not sys.stdout:
      output.close()
  logging.info("Answered %d lines.", count)


if __name__ == "__main__":
  flags.DEFINE_string("run", None, "A trained run's directory, WORKDIR/<model> (local or gs://).")
  flags.DEFINE_enum("task", None, sorted(TASKS), "What to answer (see the module docstring).")
  flags.DEFINE_string("input", "-", "JSON lines to answer; - for stdin.")
  flags.DEFINE_string("output", "-", "Where the answers go; - for stdout.")
  flags.DEFINE_integer("k", 10, "Results per line.")
  flags.mark_flags_as_required(["run", "task"])
  app.run(main)
