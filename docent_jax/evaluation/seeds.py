"""Results over seeds: a model `<name>` and its baselines `<name>_seed<N>` (the same config with another seed)
are summarised as `<name>@seeds/<split>/<metric>` (the mean) and `<name>@seeds/<split>/<metric>_std` (the
sample standard deviation), with `<name>@seeds/<split>/num_seeds`."""
from collections.abc import Mapping
from collections.abc import Sequence
import re

import numpy as np

_SEED_MODEL = re.compile(r"(?P<base>.+)_seed(?P<seed>\d+)")


def mean_and_std(values_per_seed: Sequence[Mapping[str, float]]) -> dict[str, float]:
  """'<key>' the mean and '<key>_std' the sample standard deviation (ddof=1) of each key over seeds.

  With a single seed the standard deviation is reported as 0.0 (it is undefined for ddof=1).

  Raises:
    ValueError: no seed, seeds with different keys, or an input key that is another key's '_std'.
  """
  if not values_per_seed:
    raise ValueError("Need the results of at least one seed.")
  keys = list(values_per_seed[0])
  for seed, values in enumerate(values_per_seed):
    if set(values) != set(keys):
      raise ValueError(f"Seed {seed} has keys {sorted(values)}; seed 0 has {sorted(keys)}.")
  clashes = sorted(key for key in keys if f"{key}_std" in keys)
  if clashes:
    raise ValueError(f"Keys {[f'{key}_std' for key in clashes]} would clash with the standard deviations.")
  table = np.array([[values[key] for key in keys] for values in values_per_seed], np.float64)  # [seeds, keys]
  means = table.mean(axis=0)
  stds = table.std(axis=0, ddof=1) if len(table) > 1 else np.zeros(len(keys))
  result = {}
  for key, mean, std in zip(keys, means, stds):
    result[key] = float(mean)
    result[f"{key}_std"] = float(std)
  return result


def summarize(results: Mapping[str, float]) -> dict[str, float]:
  """The `<name>@seeds` entries of every model in `results` (`<model>/<split>/<metric>` keys) that has at
  least one `<name>_seed<N>` beside it; the seeds' own entries stay as they are."""
  by_model: dict[str, dict[str, float]] = {}
  for key, value in results.items():
    model, _, rest = key.partition("/")
    by_model.setdefault(model, {})[rest] = value
  seeds_of: dict[str, list[tuple[int, str]]] = {}
  for model in by_model:
    match = _SEED_MODEL.fullmatch(model)
    if match and match["base"] in by_model:
      seeds_of.setdefault(match["base"], [(0, match["base"])]).append((int(match["seed"]), model))
  summary = {}
  for base, seeds in sorted(seeds_of.items()):
    runs = [by_model[model] for _, model in sorted(seeds)]
    # Metrics every seed has (counts such as num_queries included); a seed's extra evaluations are left out.
    shared = set.intersection(*(set(run) for run in runs))
    aggregated = mean_and_std([{key: run[key] for key in shared} for run in runs])
    for key, value in aggregated.items():
      summary[f"{base}@seeds/{key}"] = value
    for split in sorted({key.split("/")[0] for key in shared}):
      summary[f"{base}@seeds/{split}/num_seeds"] = float(len(runs))
  return summary
