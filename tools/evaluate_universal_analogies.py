"""Word, phrase and sentence analogies (Li & Zhao) of the universal-representation models that need no training,
and of trained runs, without training anything: writes `<model>/analogy_<level>/<metric>` as results.json does.

  python tools/evaluate_universal_analogies.py --manual_dir=DATA --output=docs/results/universal_analogies.json
  python tools/evaluate_universal_analogies.py --manual_dir=DATA --output=OUT.json \
      --run_dirs=WORKDIR/universal_multitask

Models: `static_wordpiece` (the reference's input word pieces, averaged: `model.pooling=input_word_pieces`),
`pretrained` (the encoder of `configs/universal.py:multitask` as shipped) and each of --run_dirs
(`docent_jax.load`, reported under its directory's name). Every model is scored by the `analogies` evaluator
of that config, among the candidates kept under --candidates_dir (default: beside the TFDS data, where a training
run keeps them).
"""
import json
import pathlib
import sys
import time

from absl import app
from absl import flags
from absl import logging
from etils import epath
import ml_collections

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
import docent_jax  # pylint: disable=g-import-not-at-top
from configs import universal  # pylint: disable=g-import-not-at-top
from docent_jax import outputs  # pylint: disable=g-import-not-at-top
from docent_jax.data import tfds_loading  # pylint: disable=g-import-not-at-top
from docent_jax.data.universal import corpus as universal_corpus  # pylint: disable=g-import-not-at-top
from docent_jax.evaluation import registry  # pylint: disable=g-import-not-at-top
from docent_jax.inference import text_encoder  # pylint: disable=g-import-not-at-top
from docent_jax.modules import pretrained  # pylint: disable=g-import-not-at-top
from docent_jax.objectives import universal as universal_objective  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
STATIC_MODEL, PRETRAINED_MODEL = "static_wordpiece", "pretrained"


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  flags.DEFINE_string("manual_dir", None, "The directory holding analogy/questions-words.txt and "
                      "analogy/questions-phrases.txt.")
  flags.DEFINE_string("output", None, "The JSON file the results are written to.")
  flags.DEFINE_string("candidates_dir", "", "Where the analogy candidates are kept (default: beside the TFDS data).")
  flags.DEFINE_list("run_dirs", [], "Trained run directories (WORKDIR/<model>) to evaluate as well.")
  flags.mark_flags_as_required(["manual_dir", "output"])


def pretrained_encoders(config: ml_collections.ConfigDict) -> dict[str, text_encoder.TextEncoderModel]:
  """The encoder of `config.model` with its pretrained weights, as a run of 0 steps reports it: static (the mean
  of its input word pieces) and pretrained (the mean of its outputs)."""
  tokenizer = pretrained.load_tokenizer(config.model.tokenizer)
  bert_config, bert_params = pretrained.load_model_bert(config.model, len(tokenizer))
  params = {"bert": pretrained.pretrained_or_fixed_bert(bert_params, bert_config, config.seed)}
  encoders = {}
  for name, pooling in ((STATIC_MODEL, "input_word_pieces"), (PRETRAINED_MODEL, "mean")):
    model_config = ml_collections.ConfigDict(config.to_dict())
    model_config.name, model_config.model.pooling = name, pooling
    encoders[name] = text_encoder.TextEncoderModel(model_config, {}, params, tokenizer=tokenizer)
  return encoders


def main(argv: list[str]) -> None:
  del argv
  config = universal.get_config("multitask")
  candidates_dir = epath.Path(FLAGS.candidates_dir
                              or tfds_loading.default_data_dir() / universal_objective.CANDIDATES_DIR)
  sources = universal_corpus.EvaluationSources(tasks={}, manual_dir=FLAGS.manual_dir, candidates_dir=candidates_dir,
                                               reference=config.model.pretrained, tokenizer=config.model.tokenizer)
  [analogies] = registry.specs(ml_collections.ConfigDict({"name": PRETRAINED_MODEL,
                                                          "evals": {"analogies": config.evals.analogies}}))
  evaluations = [(name, lambda encoder=encoder: encoder) for name, encoder in pretrained_encoders(config).items()]
  evaluations += [(epath.Path(run_dir).name, lambda run_dir=run_dir: docent_jax.load(run_dir))
                  for run_dir in FLAGS.run_dirs]
  results = {}
  for name, model in evaluations:
    started = time.time()
    results.update({f"{name}/{key}": value for key, value in analogies.run(model(), sources).items()})
    logging.info("%s: word %.3f, phrase %.3f, sentence %.3f, Mikolov phrases %.3f (%.0f s).", name,
                 results[f"{name}/analogy_word/accuracy"], results[f"{name}/analogy_phrase/accuracy"],
                 results[f"{name}/analogy_sentence/accuracy"], results[f"{name}/analogy_phrase_set/accuracy"],
                 time.time() - started)
  output = epath.Path(FLAGS.output)
  outputs.write_atomically(output, json.dumps(results, indent=2, sort_keys=True) + "\n")
  logging.info("Wrote %d results to %s.", len(results), output)


if __name__ == "__main__":
  define_flags()
  app.run(main)
