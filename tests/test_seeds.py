"""Results over seeds: mean and standard deviation of a model and its `_seed<N>` baselines."""
import numpy as np
import pytest

from docent_jax.evaluation import seeds


def test_mean_and_std_over_seeds():
  per_seed = [{"top1": 0.5, "mrr": 0.6}, {"top1": 0.7, "mrr": 0.65}, {"mrr": 0.9, "top1": 0.4}]
  top1, mrr = np.array([0.5, 0.7, 0.4]), np.array([0.6, 0.65, 0.9])
  assert seeds.mean_and_std(per_seed) == pytest.approx({
      "top1": top1.mean(), "top1_std": top1.std(ddof=1), "mrr": mrr.mean(), "mrr_std": mrr.std(ddof=1)})
  assert seeds.mean_and_std(per_seed[:1]) == {"top1": 0.5, "top1_std": 0.0, "mrr": 0.6, "mrr_std": 0.0}


@pytest.mark.parametrize("per_seed, message", [
    ([], "at least one seed"),
    ([{"top1": 0.5, "mrr": 0.6}, {"top1": 0.5}], "Seed 1 has keys"),
    ([{"mrr": 0.5, "mrr_std": 0.1}], "would clash"),
])
def test_mean_and_std_rejects_bad_input(per_seed, message):
  with pytest.raises(ValueError, match=message):
    seeds.mean_and_std(per_seed)


def test_summary_groups_a_model_with_its_seeds_only():
  results = {"faq/test/top1": 0.5, "faq/test/num_queries": 10.0,
             "faq_seed1/test/top1": 0.7, "faq_seed1/test/num_queries": 10.0,
             "faq_seed2/test/top1": 0.4, "faq_seed2/test/num_queries": 10.0,
             "faq_seed2/validation/top1": 0.9,  # Only one seed has it: left out.
             "bm25/test/top1": 0.3,  # No seeds.
             "other_seed1/test/top1": 0.1}  # No model 'other': not a group.
  summary = seeds.summarize(results)
  assert summary == pytest.approx({
      "faq@seeds/test/top1": np.mean([0.5, 0.7, 0.4]), "faq@seeds/test/top1_std": np.std([0.5, 0.7, 0.4], ddof=1),
      "faq@seeds/test/num_queries": 10.0, "faq@seeds/test/num_queries_std": 0.0, "faq@seeds/test/num_seeds": 3.0})
  assert seeds.summarize({"faq/test/top1": 0.5, "bm25/test/top1": 0.3}) == {}
