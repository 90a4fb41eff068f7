"""The held-out accuracy of each pair-task head of a universal-representation model (its model selection)."""
from typing import Any

import numpy as np

from docent_jax.data.universal import corpus as universal_corpus
from docent_jax.evaluation import registry


@registry.register("pair_tasks")
def classify_held_out_pairs(model: Any, sources: universal_corpus.EvaluationSources, split: str = "validation",
                            max_pairs: int = 0) -> dict[str, float]:
  """`<split>/<task>_accuracy` of each trained task's head on its held-out pairs, and their mean
  (`<split>/accuracy`). `max_pairs` > 0 scores that many pairs of each task, evenly spaced over the split
  (frequent model selection on a long run without encoding thousands of pairs each time)."""
  results = {}
  for name, task in sources.tasks.items():
    rows = np.arange(len(task.labels[split]))
    if 0 < max_pairs < len(rows):
      rows = np.linspace(0, len(rows) - 1, max_pairs).round().astype(int)
    logits = model.classify_pairs(name, [task.first[split][i] for i in rows], [task.second[split][i] for i in rows])
    results[f"{split}/{name}_accuracy"] = float(np.mean(logits.argmax(-1) == task.labels[split][rows]))
  results[f"{split}/accuracy"] = float(np.mean(list(results.values())))
  return results
