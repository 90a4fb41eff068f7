"""Batch predictions of a trained run: JSON lines in, JSON lines out.

  python -m docent_jax.predict --run=WORKDIR/<model> --task=search < queries.jsonl > answers.jsonl
  python -m docent_jax.predict --run=WORKDIR/<model> --task=link --input=triples.jsonl --output=tails.jsonl

Tasks and their input lines:
  search: {"query": "a text"}                          -> the nearest entities
  link:   {"text": "an entity's description", "relation": "a relation name", "heads": false}
                                                        -> the entities that best complete the triple
Each output line is the input line with "results": [{"id": ..., "score": ...}, ...] (best first), in input order.
A line that is not such a JSON object is an error naming its line number.
"""
from collections.abc import Iterator
import json
import sys
import time
from typing import Any, TextIO

from absl import app
from absl import flags
from absl import logging
from etils import epath

from docent_jax.inference import model as inference_model

TASKS = {"search": ("query",), "link": ("text", "relation")}
_CHUNK = 256  # Lines encoded together.
_PROGRESS_SECONDS = 10.0


def read_requests(lines: TextIO, task: str, source: str) -> Iterator[tuple[int, dict[str, Any]]]:
  """(line number, request) of each non-blank line; a malformed one is a ValueError naming `source:line`."""
  keys = TASKS[task]
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


def answer(model: inference_model.Model, task: str, requests: list[dict[str, Any]], k: int) -> list[list]:
  """The ranked (id, score) pairs of each request."""
  if task == "search":
    return model.search([r["query"] for r in requests], k)
  if not isinstance(model, inference_model.LinkPredictionModel):
    raise ValueError(f"--task=link needs a link prediction (BLP) run; {model.run_dir} is a "
                     f"{model.config.objective} run.")
  rankings = [None] * len(requests)
  for heads in (False, True):  # One batch per direction.
    rows = [i for i, r in enumerate(requests) if bool(r.get("heads", False)) == heads]
    if rows:
      found = model.predict([requests[i]["text"] for i in rows], [requests[i]["relation"] for i in rows], k,
                            tails=not heads)
      for i, ranking in zip(rows, found):
        rankings[i] = ranking
  return rankings


def predict(model: inference_model.Model, task: str, lines: TextIO, output: TextIO, *, k: int = 10,
            source: str = "<stdin>") -> int:
  """Answers every request of `lines` into `output`, in order; returns how many. Logs progress with an ETA."""
  if task not in TASKS:
    raise ValueError(f"--task={task}: valid tasks: {sorted(TASKS)}.")
  done, started, reported, chunk = 0, time.time(), time.time(), []

  def flush() -> None:
    nonlocal done, reported
    for request, ranking in zip(chunk, answer(model, task, chunk, k)):
      output.write(json.dumps({**request, "results": [{"id": i, "score": s} for i, s in ranking]}) + "\n")
    done += len(chunk)
    chunk.clear()
    if time.time() - reported > _PROGRESS_SECONDS:
      reported = time.time()
      logging.info("%d lines answered, %.1f lines/s.", done, done / (reported - started))

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
  lines = sys.stdin if source == "-" else epath.Path(source).open()
  output = sys.stdout if FLAGS.output == "-" else epath.Path(FLAGS.output).open("w")
  try:
    count = predict(model, FLAGS.task, lines, output, k=FLAGS.k, source="<stdin>" if source == "-" else source)
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
