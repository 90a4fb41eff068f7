"""Siamese multi-task training (universal representations): task mixing, sharding invariance, an end-to-end run."""
import io
import json
import pathlib
import sys

import jax
import numpy as np
import pytest

from configs import universal
import docent_jax
from docent_jax import config_schema
from docent_jax import experiment
from docent_jax import parallel
from docent_jax import predict
from docent_jax import trainer as trainers
from docent_jax.data.universal import sampling
from docent_jax.evaluation import faq_retrieval
from docent_jax.evaluation import pair_tasks
from docent_jax.inference import search
import tiny_training
import universal_fixtures

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import faq_diagnostic  # pylint: disable=g-import-not-at-top


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
  root = tmp_path_factory.mktemp("universal")
  nli_dir = universal_fixtures.write_nli(root / "nli")
  pack = universal_fixtures.write_ppdb_pack(root / "ppdb")
  manual_dir = universal_fixtures.write_evaluation_data(root / "manual")
  return universal_fixtures.tiny_config(nli_dir, pack, manual_dir, root / "tfds")


@pytest.mark.parametrize("ratio, batch, expected", [
    ({"nli": 1, "phrase": 1}, 32, {"nli": 16, "phrase": 16}),
    ({"nli": 3, "phrase": 1}, 10, {"nli": 8, "phrase": 2}),
    ({"nli": 1, "phrase": 0}, 8, {"nli": 8}),
    ({"nli": 1, "phrase": 100}, 8, {"nli": 1, "phrase": 7}),
])
def test_rows_per_task_follow_the_ratio(ratio, batch, expected):
  assert sampling.rows_per_task(ratio, batch) == expected


@pytest.mark.parametrize("ratio, message", [({"nli": 0, "phrase": 0}, "No task has a positive share"),
                                            ({"nli": -1, "phrase": 1}, "must be >= 0")])
def test_bad_ratios_are_refused(ratio, message):
  with pytest.raises(ValueError, match=message):
    sampling.rows_per_task(ratio, 8)


def test_each_task_uses_all_its_pairs_once_per_pass_and_batches_depend_only_on_seed_and_index():
  sampler = sampling.TaskMixSampler({"nli": 10, "phrase": 7}, {"nli": 5, "phrase": 7}, seed=3)
  batches = [sampler(i) for i in range(4)]
  for task, (number, size) in {"nli": (0, 10), "phrase": (1, 7)}.items():
    stream = np.concatenate([pairs[tasks == number] for tasks, pairs in batches])
    for start in range(0, len(stream) - size + 1, size):
      assert sorted(stream[start:start + size]) == list(range(size)), task
  again = sampling.TaskMixSampler({"nli": 10, "phrase": 7}, {"nli": 5, "phrase": 7}, seed=3)
  for i in (3, 0):
    np.testing.assert_array_equal(again(i)[1], batches[i][1])
  assert not np.array_equal(sampling.TaskMixSampler({"nli": 10, "phrase": 7}, {"nli": 5, "phrase": 7},
                                                    seed=4)(0)[1], batches[0][1])


def test_multitask_loss_and_gradients_on_a_sharded_mesh_equal_one_device(tiny_config):
  def loss_and_grads(shape):
    config = tiny_config.copy_and_resolve_references()
    config.mesh.shape = shape
    config.model.bert.hidden_size = 64  # Divisible by 4: the model axis really splits the projections.
    config.model.bert.intermediate_size = 128
    trainer = trainers.Trainer(config, "unused")
    state = trainer.initial_state()
    batch = next(iter(trainer.objective.train_batches(0)))
    assert set(batch["task"].tolist()) == {0, 1}
    batch = parallel.global_batch(batch, trainer.mesh)
    (loss, metrics), grads = jax.jit(jax.value_and_grad(trainer.objective.loss, has_aux=True))(
        state.params, batch, jax.random.key(3))
    return float(loss), jax.device_get(metrics), jax.device_get(grads)

  loss_1, metrics_1, grads_1 = loss_and_grads((1, 1))
  loss_8, metrics_8, grads_8 = loss_and_grads((2, 4))
  assert loss_8 == pytest.approx(loss_1, rel=1e-5)
  # The batch's loss is the row-weighted mean of the two tasks' losses (4 rows each).
  assert loss_1 == pytest.approx((metrics_1["nli_loss"] + metrics_1["phrase_loss"]) / 2, rel=1e-5)
  for path, leaf in jax.tree_util.tree_flatten_with_path(grads_8)[0]:
    np.testing.assert_allclose(leaf, _leaf(grads_1, path), atol=1e-5, rtol=1e-4, err_msg=jax.tree_util.keystr(path))


def _leaf(tree, path):
  for key in path:
    tree = tree[key.key]
  return tree


def test_training_reports_tasks_analogies_and_similarity_for_every_model(tiny_config, tmp_path):
  results = experiment.train_and_evaluate(tiny_config, tmp_path)
  for model, tasks in {"universal_multitask": ("nli", "phrase"), "universal_nli": ("nli",), "pretrained": ()}.items():
    for task in tasks:
      assert 0.0 <= results[f"{model}/validation/{task}_accuracy"] <= 1.0, (model, task)
    assert not [key for key in results if key.startswith(f"{model}/") and
                any(f"{task}_accuracy" in key for task in {"nli", "phrase"} - set(tasks))]
  for model in ("universal_multitask", "universal_nli", "pretrained", "static_wordpiece"):
    for key in ("analogy_word/accuracy", "analogy_phrase/accuracy", "analogy_sentence/accuracy",
                "analogy_word/gram3-comparative/accuracy", "analogy_phrase_set/accuracy"):
      assert 0.0 <= results[f"{model}/{key}"] <= 1.0, (model, key)
    assert -1.0 <= results[f"{model}/ppdb_sample/spearman"] <= 1.0, model
  # The static baseline is its own run: the shipped encoder's input word-piece rows, averaged.
  static, shipped = docent_jax.load(tmp_path / "static_wordpiece"), docent_jax.load(tmp_path / "pretrained")
  table = np.asarray(shipped.params["bert"]["embeddings"]["word_embeddings"]["embedding"], np.float64)
  pieces = shipped.tokenizer(["a dog runs"], add_special_tokens=False)["input_ids"][0]
  np.testing.assert_allclose(static.encode(["a dog runs"])[0], table[pieces].mean(axis=0), rtol=1e-12)
  assert not np.allclose(static.encode("a dog runs"), shipped.encode("a dog runs"), atol=1e-3)
  # Candidates are made once, beside the TFDS data, and every model answers among them.
  assert sorted(p.name for p in (pathlib.Path(tiny_config.data.tfds_data_dir) / "analogy_candidates").iterdir()) == [
      "phrases_minilm-l6.json", "words_minilm-l6.json"]
  # The loaded multi-task run's heads classify the held-out pairs as its evaluation did.
  model = docent_jax.load(tmp_path / "universal_multitask")
  tiny_training.assert_loads_as_evaluated(tmp_path / "universal_multitask",
                                          tiny_training.entity_and_text_vectors(["a dog runs", "the cat sleeps"]))
  sources = trainers.Trainer(tiny_config, "unused").objective.evaluation_data()
  max_pairs = tiny_config.evals.validation.max_pairs
  assert pair_tasks.classify_held_out_pairs(model, sources, "validation", max_pairs) == pytest.approx(
      {key.removeprefix("universal_multitask/"): value for key, value in results.items()
       if key.startswith("universal_multitask/validation/")}, abs=1e-6)
  nli = sources.tasks["nli"]
  logits = model.classify_pairs("nli", nli.first["validation"][:2], nli.second["validation"][:2])
  assert logits.shape == (2, len(model.tasks["nli"]))


@pytest.fixture(scope="module")
def faq_config(tmp_path_factory):
  root = tmp_path_factory.mktemp("faq")
  return universal_fixtures.tiny_faq_config(universal_fixtures.write_faq(root / "faq"), root / "tfds")


def test_faq_negatives_never_hold_the_right_item_and_retrieved_ones_follow_the_pretrained_encoder(faq_config):
  retrieved = trainers.Trainer(faq_config, "unused").objective
  negatives = retrieved.negatives()
  relevant = retrieved.faq.relevant["train"]
  assert negatives.shape == (len(relevant), 4)
  assert not (negatives == relevant[:, None]).any()
  config = faq_config.copy_and_resolve_references()
  config.loss.negatives = "random"
  random = trainers.Trainer(config, "unused").objective.negatives()
  assert not (random == relevant[:, None]).any()
  # Retrieved negatives are the wrong items the encoder as shipped scores highest for the query.
  shipped = faq_config.copy_and_resolve_references()
  shipped.model.pretrained = "minilm-l6"
  trainer = trainers.Trainer(shipped, "unused")
  params = trainer.initial_state().params
  scores = search.cosine_scores(trainer.objective.vectors(params, retrieved.query_tokens["train"]),
                                       trainer.objective.vectors(params, retrieved.question_tokens))
  for query, chosen in enumerate(negatives):
    others = np.setdiff1d(np.arange(scores.shape[1]), [*chosen, relevant[query]])
    assert scores[query, chosen].min() >= scores[query, others].max() - 1e-6, query
  assert not all((scores[q, random[q]].min() >= scores[q, np.setdiff1d(np.arange(scores.shape[1]),
                                                                        [*random[q], relevant[q]])].max())
                 for q in range(len(relevant)))


def test_retrieved_negatives_never_hold_an_item_with_the_right_answer(tmp_path):
  faq_dir = universal_fixtures.write_faq(tmp_path / "faq")
  # A twin of f0: its question asked in other words, the same answer; the retriever ranks it first for f0's queries.
  with open(faq_dir / "faq.tsv", "a") as faq_file:
    faq_file.write("f12\tHow can I change my password?\tOpen the password settings.\n")
  config = universal_fixtures.tiny_faq_config(faq_dir, tmp_path / "tfds")
  objective = trainers.Trainer(config, "unused").objective
  twin_of = {0: 12, 12: 0}
  queries = [q for q, item in enumerate(objective.faq.relevant["train"]) if item in twin_of]
  assert queries and config.loss.mining.exclude_same_answer
  negatives = objective.negatives()
  assert not any(twin_of[objective.faq.relevant["train"][q]] in negatives[q] for q in queries)
  config.loss.mining.exclude_same_answer = False  # The plain top 4: the twin is among them.
  plain = trainers.Trainer(config, "unused").objective.negatives()
  assert all(twin_of[objective.faq.relevant["train"][q]] in plain[q] for q in queries)


def test_the_mining_config_holds_out_validation_queries_and_never_reads_the_test_ones(tmp_path):
  faq_dir = universal_fixtures.write_faq(tmp_path / "faq")
  config = universal_fixtures.tiny_faq_config(faq_dir, tmp_path / "tfds")
  full = trainers.Trainer(config, "unused").objective.faq
  mining = universal.get_config(f"faq_mining,{faq_dir}")
  assert {name: dict(entry) for name, entry in mining.evals.items()} == {
      "validation": {"type": "faq_retrieval", "every_steps": 0, "split": "validation"}}
  runs = {run.name: run for run in experiment.model_configs(mining)}
  assert {run.loss.negatives for run in runs.values()} == {"retrieved", "random"}
  assert runs["faq_mined_plain"].loss.mining.exclude_same_answer is False
  assert runs["faq_mined_margin"].loss.mining.relative_margin > 0 and runs["faq_mined_window"].loss.mining.range_min
  config.data.validation_query_fraction = mining.data.validation_query_fraction
  held_out = trainers.Trainer(config, "unused").objective.faq
  # A fifth of the 24 training queries (with their items) move to validation; test is untouched.
  assert (len(held_out.queries["validation"]), len(held_out.queries["train"])) == (5, 19)
  pairs = lambda faq, split: set(zip(faq.queries[split], faq.relevant[split].tolist()))
  assert pairs(held_out, "validation") | pairs(held_out, "train") == pairs(full, "train")
  assert not pairs(held_out, "validation") & pairs(held_out, "train")
  assert pairs(held_out, "test") == pairs(full, "test")
  assert held_out.fingerprint() != full.fingerprint()
  config.data.validation_query_fraction = 1.0
  with pytest.raises(config_schema.ConfigError, match="validation_query_fraction"):
    trainers.Trainer(config, "unused")


def test_the_faq_diagnostic_finds_the_twin_and_what_the_rules_drop(tmp_path):
  faq_dir = universal_fixtures.write_faq(tmp_path / "faq")
  with open(faq_dir / "faq.tsv", "a") as faq_file:  # f0's twin: the same question and answer, in other case.
    faq_file.write("f12\thow do i change my PASSWORD?\topen the password settings\n")
  config = universal_fixtures.tiny_faq_config(faq_dir, tmp_path / "tfds")
  found = faq_diagnostic.diagnose(trainers.Trainer(config, "unused").objective, near_duplicate=0.99)
  assert (found["items"], found["items_sharing_an_answer"], found["answers_shared"]) == (13, 2, 1)
  assert found["near_duplicate_question_pairs"] == 1
  assert found["near_duplicate_examples"][0][:2] == ["How do I change my password?", "how do i change my PASSWORD?"]
  # f0's 2 training queries each had the twin among their plain top 4; the rule dropped it both times.
  assert found["plain_top_k"]["share_the_right_answer"] == 2 == found["mined"]["same_answer"]
  assert found["plain_top_k"]["near_duplicate_of_the_right_question"] == 2


def test_faq_fine_tuning_reports_every_model_and_the_lexical_baselines(faq_config, tmp_path):
  results = experiment.train_and_evaluate(faq_config, tmp_path)
  for model in ("faq_retrieved", "faq_zero_shot", "tfidf", "bm25"):
    for metric in ("top1", "mrr"):
      assert 0.0 <= results[f"{model}/test/{metric}"] <= 1.0, (model, metric)
  # Each query shares its item's topic word: the lexical baselines find it.
  assert results["bm25/test/top1"] == 1.0 and results["tfidf/test/top1"] == 1.0
  for metric in ("top1", "mrr"):
    per_seed = [results[f"{model}/test/{metric}"] for model in ("faq_retrieved", "faq_retrieved_seed1")]
    assert results[f"faq_retrieved@seeds/test/{metric}"] == pytest.approx(np.mean(per_seed))
    assert results[f"faq_retrieved@seeds/test/{metric}_std"] == pytest.approx(np.std(per_seed, ddof=1))
  assert results["faq_retrieved@seeds/test/num_seeds"] == 2
  assert json.loads((tmp_path / "results.json").read_text()) == results
  # A loaded FAQ run ranks the FAQ as its evaluation did, and answers questions from its own FAQ, data gone.
  faq = trainers.Trainer(faq_config, "unused").objective.evaluation_data()
  tiny_training.assert_loads_as_evaluated(tmp_path / "faq_retrieved",
                                          tiny_training.entity_and_text_vectors(faq.queries["test"][:3]))
  model = docent_jax.load(tmp_path / "faq_retrieved")
  assert faq_retrieval.rank_faq(model, faq) == pytest.approx(
      {key.removeprefix("faq_retrieved/"): value for key, value in results.items()
       if key.startswith("faq_retrieved/test/")}, abs=1e-6)
  output = io.StringIO()
  lines = io.StringIO(json.dumps({"query": faq.queries["test"][0]}) + "\n")
  predict.predict(model, "faq", predict.read_requests(lines, "faq", "<test>"), output, k=2)
  answer = json.loads(output.getvalue())["results"]
  assert [item["answer"] for item in answer] == [faq.answers[int(item["id"])] for item in answer]
  assert answer[0]["score"] >= answer[1]["score"]


def test_the_static_baseline_is_never_trained_and_pooling_names_its_valid_values():
  config = universal.get_config("multitask")
  mesh = parallel.create_mesh(config.mesh)
  static = {run.name: run for run in experiment.model_configs(config)}["static_wordpiece"]
  config_schema.check_config(static, mesh)
  static.train.num_steps = 10  # The objectives train the output states: nothing would train its vectors.
  with pytest.raises(config_schema.ConfigError, match="config.model.pooling = 'input_word_pieces': .*num_steps=0"):
    config_schema.check_config(static, mesh)
  config.model.pooling = "max"
  with pytest.raises(config_schema.ConfigError, match=r"config.model.pooling = 'max': valid: \['mean', 'input_word"):
    config_schema.check_config(config, mesh)
