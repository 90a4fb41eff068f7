"""Every script under tools/ imports beside the others in one process, as pytest imports them, and lets the
package choose JAX's platform before JAX starts."""
import ast
import json
import pathlib
import subprocess
import sys

TOOLS = pathlib.Path(__file__).resolve().parent.parent / "tools"


def test_all_tools_import_together_without_flag_clashes():
  names = sorted(path.stem for path in TOOLS.glob("*.py"))
  assert {"plot_curves", "profile_entity_encoding", "profile_train_step", "export_embeddings"} <= set(names)
  # A fresh interpreter: modules this pytest process already imported would hide a clash.
  script = f"import sys; sys.path.insert(0, {str(TOOLS)!r})\n" + "".join(f"import {name}\n" for name in names)
  completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]


def _imported_packages(statement: ast.stmt) -> set[str]:
  """The top-level packages an import statement imports (none for any other statement)."""
  if isinstance(statement, ast.Import):
    return {alias.name.split(".")[0] for alias in statement.names}
  if isinstance(statement, ast.ImportFrom):
    return {(statement.module or "").split(".")[0]}
  return set()


def _chooses_the_platform(statement: ast.stmt) -> bool:
  """`import docent_jax` (or from it), which sets JAX_PLATFORMS where no accelerator is attached, or a statement
  that sets JAX_PLATFORMS itself."""
  return "docent_jax" in _imported_packages(statement) or isinstance(statement, ast.Expr) and any(
      isinstance(node, ast.Constant) and node.value == "JAX_PLATFORMS" for node in ast.walk(statement))


def test_every_tool_lets_the_package_choose_the_platform_before_importing_jax():
  # JAX reads JAX_PLATFORMS when it is imported; imported first, it would start libtpu on a CPU-only machine,
  # which logs errors about missing TPU workers.
  late = []
  for path in sorted(TOOLS.glob("*.py")):
    body = ast.parse(path.read_text(encoding="utf-8")).body
    jax_import = next((statement.lineno for statement in body if "jax" in _imported_packages(statement)), None)
    if jax_import is None:
      continue
    chosen = next((statement.lineno for statement in body if _chooses_the_platform(statement)), None)
    if chosen is None or chosen > jax_import:
      late.append(f"{path.name}:{jax_import}")
  assert not late, late


def test_sharded_steps_queued_on_forced_devices_finish_on_the_thread_pool_docent_jax_sizes():
  # 199 steps in flight over 8 forced devices deadlock on XLA's default pool of one thread per core (docs/scaling.md);
  # with `cpu_flags.size_thread_pool`'s they finish, as does one step in flight.
  completed = subprocess.run([sys.executable, str(TOOLS / "cpu_collective_hang.py"), "--in_flight=1,199",
                              "--steps=100", "--devices=8", "--timeout=90"], capture_output=True, text=True, check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  report = json.loads(completed.stdout.splitlines()[-1])
  assert report["devices"] == 8 and report["steps"] == 100 and report["threads"] == 16
  assert set(report["seconds_or_hung_by_in_flight"]) == {"1", "199"}
  assert all(isinstance(seconds, float) and seconds > 0 for seconds in report["seconds_or_hung_by_in_flight"].values())


def test_the_step_profile_sorts_each_op_by_its_product_form():
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
  import profile_encoder_step  # pylint: disable=g-import-not-at-top
  hlo = """%fused_dot (param_0: bf16[8,4], param_1: bf16[4,3]) -> f32[8,3] {
  %param_0 = bf16[8,4]{1,0} parameter(0)
  %param_1 = bf16[4,3]{1,0} parameter(1)
  ROOT %dot.1 = f32[8,3]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/jvp(BertModel)/dot_general"}
}

%fused_grad (param_0: f32[8,4], param_1: f32[8,3]) -> f32[4,3] {
  %param_0 = f32[8,4]{1,0} parameter(0)
  %param_1 = f32[8,3]{1,0} parameter(1)
  ROOT %dot.2 = f32[4,3]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/transpose(jvp(BertModel))/dot_general"}
}

ENTRY %main (a: bf16[8,4]) -> f32[8,3] {
  %ynn_fusion = f32[8,3]{1,0} fusion(%a, %b), kind=kCustom, calls=%fused_dot
  %ynn_fusion.1 = f32[4,3]{1,0} fusion(%c, %d), kind=kCustom, calls=%fused_grad
  %wrapped_reduce-window.2 = f32[1,2]{1,0} fusion(%e), kind=kLoop, calls=%rw
  %convert_add_fusion = f32[8]{0} fusion(%f), kind=kLoop, calls=%add
}
"""
  computations = profile_encoder_step._computations(hlo)
  entry = computations["main"]
  kinds = [profile_encoder_step._kind(op, entry, computations)
           for op in ("ynn_fusion", "ynn_fusion.1", "wrapped_reduce-window.2", "convert_add_fusion", "copy.3")]
  assert kinds == ["product, forward, bf16 operands, last axis contracted",
                   "product, backward, f32 operands, leading axis contracted",
                   "reduce-window (bias gradients)", "fusion with converts", "other ops"]
