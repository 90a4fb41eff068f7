"""What a FAQ set holds that can make retrieved negatives false ones, before any training:

  python tools/faq_diagnostic.py --config=configs/universal.py:faq,/data/my_faq
  python tools/faq_diagnostic.py --config=configs/universal.py:faq,stackfaq --config.data.manual_dir=DATA

It prints, as JSON: the items that share an answer (`data/universal/faq.normalize_answer`), the pairs of questions whose
cosine under the retriever of the negatives (the encoder as shipped) is at least --near_duplicate, and, of the
plain top-k retrieved negatives of the training queries (k = `loss.num_negatives`), how many share the right
item's answer, ask a near-duplicate of its question, lie outside the config's rank window or within its relative
margin; then what `loss.mining`'s rules do to them (`faq_negatives.mine`). --output also writes the JSON.
"""
import dataclasses
import json
import pathlib
import sys

from absl import app
from absl import flags
from etils import epath
from ml_collections import config_flags
import numpy as np
import tensorflow_datasets as tfds

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # configs/, as docent_jax.main finds it.
from docent_jax import trainer as trainers  # pylint: disable=g-import-not-at-top
from docent_jax.data.universal import faq as faq_files  # pylint: disable=g-import-not-at-top
from docent_jax.inference import search  # pylint: disable=g-import-not-at-top
from docent_jax.objectives import faq_negatives  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
EXAMPLES = 5  # Examples printed of each finding.


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  config_flags.DEFINE_config_file("config", None, "A FAQ config (configs/universal.py:faq,SOURCE).",
                                  lock_config=False)
  flags.DEFINE_float("near_duplicate", 0.9, "Questions at this cosine or above are near-duplicates.")
  flags.DEFINE_string("output", None, "Also write the JSON here.")
  flags.mark_flags_as_required(["config"])


def diagnose(objective, near_duplicate: float) -> dict:
  """The findings of the module docstring for a `faq_retrieval` objective's FAQ set and config."""
  faq, config = objective.faq, objective.config
  groups = faq_files.answer_groups(faq.answers)
  shared = [np.flatnonzero(groups == g).tolist() for g in np.unique(groups) if np.count_nonzero(groups == g) > 1]
  question_vectors = objective.retriever_vectors(objective.question_tokens)
  question_cosines = search.cosine_scores(question_vectors, question_vectors)
  first, second = np.nonzero(np.triu(question_cosines >= near_duplicate, k=1))
  relevant, k = faq.relevant["train"], config.loss.num_negatives
  scores = search.cosine_scores(objective.retriever_vectors(objective.query_tokens["train"]), question_vectors)
  rng = np.random.default_rng(config.seed)
  plain, _ = faq_negatives.mine(scores, relevant, [str(i) for i in range(len(groups))], k,
                                faq_negatives.MiningRules(), rng)
  rules = objective.mining_rules()
  rank = np.arange(k)[None, :]
  outside = (rank < rules.range_min) | ((rank >= rules.range_max) if rules.range_max else False)
  positive_scores = scores[np.arange(len(relevant)), relevant][:, None]
  negative_scores = np.take_along_axis(scores, plain, axis=1)
  _, counts = faq_negatives.mine(scores, relevant, faq.answers, k, rules, rng)
  return {
      "faq": faq.name, "items": len(faq.questions), "training_queries": len(relevant),
      "items_sharing_an_answer": sum(len(g) for g in shared), "answers_shared": len(shared),
      "shared_answer_examples": [[faq.questions[i] for i in g] for g in shared[:EXAMPLES]],
      "near_duplicate_threshold": near_duplicate, "near_duplicate_question_pairs": len(first),
      "near_duplicate_examples": [[faq.questions[a], faq.questions[b], round(float(question_cosines[a, b]), 3)]
                                  for a, b in list(zip(first, second))[:EXAMPLES]],
      "plain_top_k": {
          "negatives": int(plain.size),
          "share_the_right_answer": int(np.count_nonzero(groups[plain] == groups[relevant][:, None])),
          "near_duplicate_of_the_right_question": int(np.count_nonzero(
              question_cosines[relevant[:, None], plain] >= near_duplicate)),
          "outside_the_rank_window": int(np.count_nonzero(np.broadcast_to(outside, plain.shape))),
          "within_the_relative_margin": int(np.count_nonzero(
              negative_scores > (1 - rules.relative_margin) * positive_scores)) if rules.relative_margin else 0,
      },
      "mining_rules": dataclasses.asdict(rules), "mined": counts,
  }


def main(argv: list[str]) -> None:
  del argv
  tfds.disable_progress_bar()
  objective = trainers.Trainer(FLAGS.config, "unused").objective
  found = diagnose(objective, FLAGS.near_duplicate)
  text = json.dumps(found, indent=1)
  print(text)
  if FLAGS.output:
    epath.Path(FLAGS.output).write_text(text + "\n")


if __name__ == "__main__":
  define_flags()
  app.run(main)
