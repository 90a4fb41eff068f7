"""`train.profile`: a tiny run leaves a JAX profiler trace of the chosen steps that names the train step."""
from docent_jax import experiment
from docent_jax import run_dir as run_dirs
import kg_fixtures


def test_a_profiled_run_leaves_a_trace_naming_the_train_step(kg_dir, tfds_dir, tmp_path):
  config = kg_fixtures.tiny_config(kg_dir, tfds_dir)
  config.train.num_steps = 4
  config.evals.validation.every_steps = 0
  config.train.best_metric = ""
  config.train.profile.update(start_step=2, num_steps=2)
  experiment.train_and_evaluate(config, tmp_path / "run")
  traces = list(run_dirs.RunDir(tmp_path / "run" / config.name).profile_dir().glob(
      "process_0/plugins/profile/*/*.xplane.pb"))
  assert len(traces) == 1, traces
  trace = traces[0].read_bytes()
  # The step annotation (xprof's step markers) and the jitted step's own name.
  assert b"step_num" in trace and b"jit_train_step" in trace
