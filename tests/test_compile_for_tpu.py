"""Ahead-of-time compiles for Cloud TPU topologies (libtpu's compile-only devices, no TPU): the report, and the
sharding regression checks that forced CPU devices cannot give: the HLO's collectives."""
import json
import math
import pathlib
import re
import subprocess
import sys

import jax
import ml_collections
import pytest

from configs import supcon as supcon_config
from docent_jax import compile_for_tpu
from docent_jax import experiment
from docent_jax import methods
from docent_jax import trainer as trainers
import kg_fixtures
import review_fixtures
import tiny_training
import universal_fixtures

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
NUM_ENTITIES = 812  # DOCENT's movies: they do not divide over 8 chips, the table's padded rows (896) do.


def _sharded_params(trainer: trainers.Trainer) -> dict[str, tuple[int, ...]]:
  """Path -> shape of every param the rules split over some mesh axis."""
  state = trainer.abstract_state()
  return {jax.tree_util.keystr(path): leaf.shape for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]
          if any(axes is not None for axes in leaf.sharding.spec)}


def _forms(shape: tuple[int, ...]) -> set[tuple[int, ...]]:
  """The shapes an array of `shape` may take in HLO, as sorted dims without 1s: adjacent dims merged (a reshape),
  in any order (a transpose)."""
  dims = tuple(d for d in shape if d != 1)
  forms = {tuple(sorted(dims))}
  for i in range(len(dims) - 1):
    forms |= _forms((*dims[:i], dims[i] * dims[i + 1], *dims[i + 2:]))
  return forms


def _gathered_params(step: dict, sharded: dict[str, tuple[int, ...]]) -> list[str]:
  """The sharded params of which a compiled step all-gathers a whole copy (in any of their `_forms`)."""
  gathered = {tuple(sorted(d for d in shape if d != 1)) for shape in _gathered(step)}
  return [path for path, shape in sharded.items() if _forms(shape) & gathered]


def _gathered(function: dict) -> list[tuple[int, ...]]:
  """The result shapes of a compiled function's all-gathers (one entry per kind of result)."""
  shapes = []
  for collective in function["collectives"]:
    if collective["op"] == "all-gather":
      shapes.extend(tuple(int(d) for d in dims.split(",") if d)
                    for dims in compile_for_tpu._ARRAY.findall(collective["shape"]) for dims in [dims[1]])
  return shapes


@pytest.mark.parametrize("negatives, topology, mesh_shape", [("full", "v5e:2x4", (4, 2)),
                                                             ("in_batch", "v4:2x2x1", (2, 2))])
def test_docents_entity_table_and_every_sharded_param_stay_sharded_on_a_v5e_8_and_a_v4_8(negatives, topology,
                                                                                         mesh_shape):
  config = review_fixtures.tiny_config(pathlib.Path("unread"), pathlib.Path("unread"), negatives=negatives)
  # Data and model axes: BERT's FFN and heads over the model axis, the entity table over every chip.
  config.mesh.shape = mesh_shape
  config.train.global_batch_size = 8
  chip, devices = compile_for_tpu.topology_devices(topology)
  objective = compile_for_tpu.build_objective(config, devices, {"num_entities": NUM_ENTITIES})
  trainer = trainers.Trainer(config, "unused", objective=objective)
  sharded = _sharded_params(trainer)
  assert "['entities']['embedding']" in "".join(sharded)
  # Adam's moments are sharded as their params are.
  state = trainer.abstract_state()
  moments = state.opt_state[1][0]
  for params, mu in zip(jax.tree.leaves(state.params), jax.tree.leaves(moments.mu)):
    assert mu.sharding.spec == params.sharding.spec
  step = compile_for_tpu.analyse(compile_for_tpu.compile_train_step(trainer, 8), chip)
  gathered = _gathered(step)
  table = NUM_ENTITIES * config.model.bert.hidden_size
  assert all(math.prod(shape) < table for shape in gathered), gathered  # Neither the table nor its shards.
  assert not _gathered_params(step, sharded), step["collectives"]
  assert {c["op"] for c in step["collectives"]} <= {"all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                                                  "collective-permute"}
  assert step["fits"] and step["flops"] > 0 and step["step_seconds_lower_bound"] > 0


def test_blps_step_on_a_v4_8_is_data_parallel_and_the_report_holds_every_figure(tmp_path):
  config = kg_fixtures.tiny_config(pathlib.Path("unread"), pathlib.Path("unread"))
  config.mesh.shape = (-1, 1)  # Every chip on the data axis, as configs/blp.py has it.
  result = compile_for_tpu.report(config, "v4:2x2x1", 1, {"num_entities": 50, "num_relations": 3})
  assert result["devices"] == 4 and result["hosts"] == 1 and result["mesh"] == {"data": 4, "model": 1}
  step = result["functions"]["train_step"]
  for key in ("hbm_bytes_per_device", "hbm_capacity_bytes", "fits", "flops", "step_seconds_lower_bound",
              "collectives", "projected_seconds"):
    assert key in step
  assert step["hbm_capacity_bytes"] == 32 << 30 and step["fits"]
  assert step["projected_seconds"] == pytest.approx(step["step_seconds_lower_bound"] * config.train.num_steps)
  ops = {c["op"] for c in step["collectives"]}
  assert "all-reduce" in ops  # The gradients, summed over the data axis.
  assert ops <= {"all-gather", "all-reduce", "all-to-all", "collective-permute"}
  # BLP's params are replicated on a data-only mesh: nothing of them is gathered; the batch's entity vectors
  # (the in-batch negatives) are.
  widths = {shape[-1] for shape in _gathered(step)}
  assert widths <= {config.model.dim}, step["collectives"]
  assert result["functions"]["search_top_k"]["fits"]
  # An evaluation batch of descriptions encoded: split over the chips, and only the vectors gathered at the end.
  encode = result["functions"]["encode"]
  assert encode["fits"] and encode["flops"] > 0 and encode["batch_size"] == config.model.inference_batch_size
  assert [c["op"] for c in encode["collectives"]] == ["all-gather"], encode["collectives"]
  assert [math.prod(shape) for shape in _gathered(encode)] == [config.model.inference_batch_size * config.model.dim]
  # The evaluator's ranking: 50 entities padded to split over the 4 chips, each chip ranking its own rows; only
  # the counts are summed, nothing is gathered.
  ranking = result["functions"]["block_ranking"]
  assert ranking["fits"] and ranking["flops"] > 0 and ranking["queries"] == config.evals.test.query_batch_size
  assert {c["op"] for c in ranking["collectives"]} == {"all-reduce"}, ranking["collectives"]


def test_the_largest_fitting_batch_is_checked_by_the_third_compile_from_a_line_through_two():
  calls = []

  def needs(batch):  # 1 GiB of params and state, 1 MiB per example.
    calls.append(batch)
    return (1 << 30) + batch * (1 << 20)

  capacity = 16 << 30  # 15,360 examples fit; 95% of it holds 14,540.
  for start in (64, 1 << 20):  # From below (the config's batch fits: --search_batch) and from far above.
    calls.clear()
    assert compile_for_tpu.largest_fitting_batch(needs, start, 8, capacity) == 14536
    assert len(calls) == 3 and calls[0] == start
  assert compile_for_tpu.largest_fitting_batch(lambda batch: capacity + 1, 1024, 8, capacity) is None
  # Memory that grows half as fast again above 12,000 examples (14,336 fit): more compiles come closer.
  steeper = lambda batch: (1 << 30) + batch * (1 << 20) + max(0, batch - 12000) * (1 << 19)
  found = [compile_for_tpu.largest_fitting_batch(steeper, 1 << 20, 8, capacity, limit=limit) for limit in (3, 8)]
  assert all(steeper(batch) <= capacity for batch in found) and 10000 <= found[0] <= found[1] <= 14336
  assert found[1] > 13500


def test_a_batch_that_does_not_fit_exits_1_with_one_line_naming_the_need_and_the_chip(tmp_path):
  # A billion relations: their embeddings and Adam's moments need tens of GiB per chip at any batch. One compile
  # is spent on finding a batch that fits (the search itself is tested above).
  values = {"model.pretrained": "", "model.bert.hidden_size": 64, "model.bert.num_hidden_layers": 1,
            "model.bert.num_attention_heads": 4, "model.bert.intermediate_size": 256, "model.dim": 16,
            "data.max_len": 16, "train.global_batch_size": 64}
  command = [sys.executable, "-m", "docent_jax.compile_for_tpu", "--config=configs/blp.py:wn18rr",
             "--topology=v5e:2x2", "--batch_compiles=1", "--num_entities=1024", "--num_relations=1000000000",
             f"--output={tmp_path / 'r.json'}",
             *[f"--config.{k}={v}" for k, v in values.items()]]
  run = subprocess.run(command, cwd=REPO_ROOT, env=tiny_training.subprocess_env(1), capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 1, run.stderr[-3000:]
  lines = [line for line in run.stderr.splitlines() if line.startswith("train_step needs")]
  assert len(lines) == 1, run.stderr[-3000:]
  line = lines[0]
  assert re.fullmatch(r"train_step needs \d+\.\d GiB of 16 GiB per v5e chip at batch 64: none of the batches "
                      r"tried fits \(down to 64; --batch_compiles tries more\)", line), line
  step = json.loads((tmp_path / "r.json").read_text())["functions"]["train_step"]
  assert not step["fits"] and step["hbm_bytes_per_device"] > 16 << 30
  # The misfit is answered after the batch search alone: nothing of the evaluation is compiled.
  assert list(json.loads((tmp_path / "r.json").read_text())["functions"]) == ["train_step"]


def test_supcons_step_compiles_from_shapes_alone_with_replicated_params_never_gathered():
  config = tiny_training.shrink(supcon_config.get_config("unread"), pathlib.Path("unread"), max_len=16,
                                global_batch_size=4)
  config.mesh.shape = (-1, 1)
  result = compile_for_tpu.report(config, "v4:2x2x1", 1, {})
  step = result["functions"]["train_step"]
  assert step["fits"] and step["flops"] > 0 and "search_top_k" not in result["functions"]
  # Anchors and partners (8 rows) over 4 chips: only the batch's offer vectors are gathered, for the loss.
  assert {shape[-1] for shape in _gathered(step)} <= {config.model.bert.hidden_size}, step["collectives"]


def test_shapes_come_from_the_benchmark_then_the_configs_shapes_block():
  config = kg_fixtures.tiny_config(pathlib.Path("unread"), pathlib.Path("unread"))
  config.data.dataset = "wn18rr"
  assert compile_for_tpu.config_shapes(config) == {"num_entities": 40943, "num_relations": 11}
  config.shapes = {"num_entities": 5_000_000}  # A graph of its own, with WN18RR's relations.
  assert compile_for_tpu.config_shapes(config) == {"num_entities": 5_000_000, "num_relations": 11}
  config.shapes = {"num_nodes": 3}
  with pytest.raises(Exception, match="config.shapes.num_nodes: not a shape"):
    compile_for_tpu.config_shapes(config)


def test_fsdp_splits_params_and_adams_moments_over_the_data_axis_on_a_v4_8():
  config = kg_fixtures.tiny_config(pathlib.Path("unread"), pathlib.Path("unread"))
  config.mesh.shape = (-1, 1)
  chip, devices = compile_for_tpu.topology_devices("v4:2x2x1")
  steps = {}
  for fsdp in (False, True):
    config.mesh.fsdp = fsdp
    objective = compile_for_tpu.build_objective(config, devices, {"num_relations": 3})
    trainer = trainers.Trainer(config, "unused", objective=objective)
    kernel = trainer.abstract_state().params["encoder"]["bert"]["layer_0"]["intermediate"]["kernel"]
    assert kernel.sharding.spec[0] == ("data" if fsdp else None)  # [embed, mlp]: embed over the 4 data shards.
    steps[fsdp] = compile_for_tpu.analyse(compile_for_tpu.compile_train_step(trainer, 8), chip)
  # Params, gradients and moments held once over the 4 chips instead of on each (the batch and step counts stay).
  assert steps[True]["argument_bytes"] < steps[False]["argument_bytes"] / 2
  assert steps[True]["fits"] and "all-gather" in {c["op"] for c in steps[True]["collectives"]}


def test_tpu_compiles_bypass_the_persistent_cache_which_stays_on_for_the_rest(tmp_path):
  """A compile-only TPU executable cannot be read back from JAX's persistent cache; the tool neither writes nor
  looks it up there, and the cache works as before for what compiles after it."""
  from jax.experimental.compilation_cache import compilation_cache  # pylint: disable=g-import-not-at-top
  kept = {name: getattr(jax.config, name) for name in ("jax_compilation_cache_dir",
                                                        "jax_persistent_cache_min_compile_time_secs")}
  compilation_cache.reset_cache()
  jax.config.update("jax_compilation_cache_dir", str(tmp_path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  try:
    chip, devices = compile_for_tpu.topology_devices("v5e:2x2")
    mesh = jax.sharding.Mesh(devices, ("data",))
    report = compile_for_tpu.analyse(compile_for_tpu.compile_search(mesh, 64, 8), chip)
    assert report["hbm_bytes_per_device"] > 0 and report["flops"] > 0
    assert not list(tmp_path.iterdir())
    jax.jit(lambda x: x * 3 + 1)(jax.numpy.arange(7.0)).block_until_ready()  # On the CPU: cached.
    assert any(path.name.endswith("-cache") for path in tmp_path.iterdir())
  finally:
    for name, value in kept.items():
      jax.config.update(name, value)
    compilation_cache.reset_cache()


def test_an_objective_built_from_shapes_names_a_missing_shape_and_reads_no_data():
  config = review_fixtures.tiny_config(pathlib.Path("unread"), pathlib.Path("unread"))
  chip, devices = compile_for_tpu.topology_devices("v5e:2x2")
  config.mesh.shape = (-1, 1)
  with pytest.raises(Exception, match=r"config.objective='docent_dual' built from shapes needs num_entities \(set "
                                      r"config.shapes.num_entities\)"):
    compile_for_tpu.build_objective(config, devices, {})
  objective = compile_for_tpu.build_objective(config, devices, {"num_entities": 12})
  with pytest.raises(ValueError, match=r"built from shapes alone \({'num_entities': 12}\): it has no data"):
    objective.train_batches(0)


def _tiny_runs() -> dict[str, ml_collections.ConfigDict]:
  """One tiny run config of each method (the first run of that objective among the tiny configs' runs)."""
  unread = pathlib.Path("unread")
  configs = [kg_fixtures.tiny_config(unread, unread),
             tiny_training.shrink(supcon_config.get_config(str(unread)), unread, max_len=16),
             universal_fixtures.tiny_config(unread, unread, unread, unread),
             tiny_training.shrink(universal_fixtures.tiny_faq_config(unread, unread), unread, max_len=16),
             *(review_fixtures.tiny_config(unread, unread, variant=variant) for variant in ("dual", "full", "hybrid"))]
  runs = {}
  for config in configs:
    for run in experiment.model_configs(config):
      runs.setdefault(run.objective, run)
  return runs


TINY_RUNS = _tiny_runs()


def test_every_method_has_a_tiny_run_to_compile():
  assert sorted(TINY_RUNS) == sorted(methods.METHODS)


@pytest.mark.parametrize("objective", sorted(methods.METHODS))
def test_every_methods_step_compiles_for_a_v5e_8_without_gathering_a_sharded_param(objective):
  config = ml_collections.ConfigDict(TINY_RUNS[objective].to_dict())
  config.mesh.shape = (4, 2)  # Data and model axes: BERT's FFN and heads over the model axis, tables over every chip.
  config.train.global_batch_size = 8
  chip, devices = compile_for_tpu.topology_devices("v5e:2x4")
  built = compile_for_tpu.build_objective(config, devices, {"num_entities": NUM_ENTITIES, "num_relations": 3})
  trainer = trainers.Trainer(config, "unused", objective=built)
  sharded = _sharded_params(trainer)
  assert sharded  # Every method's BERT has params split over the model axis.
  step = compile_for_tpu.analyse(compile_for_tpu.compile_train_step(trainer, 8), chip)
  assert not _gathered_params(step, sharded), step["collectives"]
  assert step["fits"] and step["flops"] > 0


def test_run_picks_one_run_of_a_config_by_name():
  config = supcon_config.get_config("abt_buy")
  assert compile_for_tpu.chosen_run(config, "").objective == "supcon"
  assert compile_for_tpu.chosen_run(config, "cross_encoder").objective == "cross_encoder"
  trained = compile_for_tpu.chosen_run(config, "supcon_trained")
  assert trained.objective == "pair_matching" and trained.model_init == "supcon"
  with pytest.raises(Exception, match="--run=nope: not a run of this config; its runs: supcon, supcon_head"):
    compile_for_tpu.chosen_run(config, "nope")
