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
Each output line is the input line with the answer's keys added, in input order, in UTF-8; "results" are
[{"id": ..., "text": ..., "score": ...}, ...], best first ("text": the entity's text or name, where the run
recorded one). Every line is read and checked (a line that is not such a JSON object, or names a relation the run
has not, is an error naming its line number), and the flags and the output path too, before the model loads;
--output is written whole once every line is answered, so a failure leaves an earlier file as it was, and it may
not be the --input file. Encoding the run's entities, done once, is kept next to the run for the next call.
"""
from collections.abc import Iterable
import json
import sys
from typing import Any, TextIO

from absl import app
from absl import flags
from absl import logging
import ml_collections
import tqdm

from docent_jax import cli
from docent_jax import methods
from docent_jax import outputs
from docent_jax.data import io
from docent_jax.inference import link_prediction
from docent_jax.inference import model as inference_model
from docent_jax.inference import pair_matching
from docent_jax.inference import protocol
from docent_jax.inference import text_encoder

# Task -> (the string keys of its input lines, the model class that answers it).
TASKS = {"search": (("query",), protocol.Model), "link": (("text", "relation"), link_prediction.LinkPredictionModel),
         "match": (("left", "right"), pair_matching.OfferPairModel), "faq": (("query",), text_encoder.FaqModel)}
_ENTITY_TASKS = ("search", "link", "faq")  # Answered from the run's entity set.
_CHUNK = 256  # Lines encoded together.

Request = tuple[int, dict[str, Any]]  # (line number, the line's JSON object)


def read_requests(lines: Iterable[str], task: str, source: str) -> list[Request]:
  """(line number, request) of each non-blank line, all read before any is answered; a malformed one is an
  `io.DataFormatError` naming `source:line`."""
  if task not in TASKS:
    raise ValueError(f"--task={task}: valid tasks: {sorted(TASKS)}.")
  keys, _ = TASKS[task]
  requests = []
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      request = json.loads(line)
    except ValueError as error:
      raise io.DataFormatError(f"{source}:{number}: not JSON ({error}).") from None
    if not isinstance(request, dict) or any(not isinstance(request.get(key), str) for key in keys):
      raise io.DataFormatError(f"{source}:{number}: --task={task} needs a JSON object with string "
                               f"{' and '.join(keys)}.")
    requests.append((number, request))
  return requests


def check_task(task: str, config: ml_collections.ConfigDict, record: dict[str, Any], requests: list[Request],
               source: str, run: str) -> None:
  """Refuses, before the model loads, a run that cannot answer `task` (a usage error) and a request naming a
  relation the run has not (an error naming `source:line`)."""
  model_class = methods.model_class(config.objective)
  if not issubclass(model_class, TASKS[task][1]) or (task in _ENTITY_TASKS and "entity_ids" not in record):
    raise app.UsageError(f"--task={task}: {run} is a {config.objective} run, which cannot answer it.")
  if task == "link":
    relations = set(record["relation_ids"])
    for number, request in requests:
      if request["relation"] not in relations:
        raise io.DataFormatError(f"{source}:{number}: {run} has no relation {request['relation']!r} (it has "
                                 f"{len(relations)}, e.g. {sorted(relations)[:3]}).")


def answer(model: protocol.Model, task: str, requests: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
  """What is added to each request's line; ranked entities carry their text (or name) where the run has one."""
  if task == "match":
    probabilities = model.match([r["left"] for r in requests], [r["right"] for r in requests])
    return [{"probability": float(p), "match": bool(p > 0.5)} for p in probabilities]
  if task == "faq":
    return [{"results": items} for items in model.answer([r["query"] for r in requests], k)]
  texts = dict(zip(model.record["entity_ids"], model.entity_texts() or []))
  ranked = lambda rankings: [{"results": [{"id": i, **({"text": texts[i]} if i in texts else {}), "score": s}
                                          for i, s in ranking]} for ranking in rankings]
  if task == "search":
    return ranked(model.search([r["query"] for r in requests], k))
  rankings = [None] * len(requests)
  for heads in (False, True):  # One batch per direction.
    rows = [i for i, r in enumerate(requests) if bool(r.get("heads", False)) == heads]
    if rows:
      found = model.predict([requests[i]["text"] for i in rows], [requests[i]["relation"] for i in rows], k,
                            tails=not heads)
      for i, ranking in zip(rows, found):
        rankings[i] = ranking
  return ranked(rankings)


def predict(model: protocol.Model, task: str, requests: list[Request], output: TextIO, *, k: int = 10,
            progress: bool = False) -> int:
  """Answers every request into `output` as JSON lines (UTF-8, in order); returns how many. `progress` shows a
  bar with an ETA on stderr."""
  if not isinstance(model, TASKS[task][1]):
    raise ValueError(f"--task={task} needs a {TASKS[task][1].__name__}; {model.name} is a {model.config.objective} "
                     "run.")
  if task in _ENTITY_TASKS and requests:
    model.entities()  # Encoded (or read) before the first line, with its own bar.
  with tqdm.tqdm(total=len(requests), unit="line", disable=not progress, file=sys.stderr) as bar:
    for start in range(0, len(requests), _CHUNK):
      chunk = [request for _, request in requests[start:start + _CHUNK]]
      for request, added in zip(chunk, answer(model, task, chunk, k)):
        output.write(json.dumps({**request, **added}, ensure_ascii=False) + "\n")
      bar.update(len(chunk))
  return len(requests)


FLAGS = flags.FLAGS


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if FLAGS.k < 1:
    raise app.UsageError(f"--k={FLAGS.k}: must be at least 1.")
  # Everything cheap first: a bad flag, file or line costs no model load, and no output is touched.
  if FLAGS.output != "-":
    if FLAGS.input != "-" and outputs.same_file(FLAGS.input, FLAGS.output):
      raise app.UsageError(f"--output={FLAGS.output} is the --input file; answers never overwrite their requests.")
    outputs.check_writable(FLAGS.output, "--output")
  source = "<stdin>" if FLAGS.input == "-" else FLAGS.input
  if FLAGS.input == "-":
    requests = read_requests(sys.stdin, FLAGS.task, source)
  else:
    requests = read_requests((line for _, line in io.numbered_lines(FLAGS.input)), FLAGS.task, source)
  config, record = inference_model.read_run(FLAGS.run)
  check_task(FLAGS.task, config, record, requests, source, FLAGS.run)
  logging.info("%d requests in %s; loading %s.", len(requests), source, FLAGS.run)
  model = inference_model.load(FLAGS.run)
  if FLAGS.output == "-":
    count = predict(model, FLAGS.task, requests, sys.stdout, k=FLAGS.k, progress=sys.stderr.isatty())
  else:
    with outputs.atomic_writer(FLAGS.output) as output:  # The earlier file stays until every line is answered.
      count = predict(model, FLAGS.task, requests, output, k=FLAGS.k, progress=True)
  logging.info("Answered %d lines%s.", count, "" if FLAGS.output == "-" else f" into {FLAGS.output}")


if __name__ == "__main__":
  flags.DEFINE_string("run", None, "A trained run's directory, WORKDIR/<model> (local or gs://).")
  flags.DEFINE_enum("task", None, sorted(TASKS), "What to answer (see the module docstring).")
  flags.DEFINE_string("input", "-", "JSON lines to answer; - for stdin.")
  flags.DEFINE_string("output", "-", "Where the answers go; - for stdout. Written whole once every line is "
                      "answered: a failure leaves an earlier file as it was.")
  flags.DEFINE_integer("k", 10, "Results per line.")
  flags.mark_flags_as_required(["run", "task"])
  cli.run(main, "predict")
