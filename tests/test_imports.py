"""The import graph of the package: no cycles, and evaluation/ imports no trainer, objective or data loader."""
import ast
import json
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "docent_jax"
# evaluation/ turns a model and a dataset into metrics: it may name the datasets' types (a knowledge graph, a
# corpus), but not depend on how a model is trained or how data is built and read.
EVALUATION_MAY_NOT_IMPORT = ("docent_jax.trainer", "docent_jax.experiment", "docent_jax.objectives",
                             "docent_jax.data.tfds_loading", "docent_jax.data.pipeline",
                             *(f"docent_jax.data.{domain}.{stage}" for domain in ("kg", "reviews", "offers", "universal")
                               for stage in ("builders", "files", "pipeline", "sampling")))


def _module_name(path: pathlib.Path) -> str:
  name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
  return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
  """Module -> the package's modules it imports (`from a import b` counts b when b is a module)."""
  modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
  graph = {}
  for name, path in modules.items():
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, ast.Import):
        targets |= {alias.name for alias in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module:
        submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
        targets |= submodules or {node.module}
    graph[name] = {t for t in targets if t in modules and t != name}
  return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import cycle (a list of modules, first = last), or None."""
  state = {}

  def visit(module, stack):
    state[module] = "active"
    for target in sorted(graph[module]):
      if state.get(target) == "active":
        return stack[stack.index(target):] + [target]
      if target not in state:
        cycle = visit(target, stack + [target])
        if cycle:
          return cycle
    state[module] = "done"
    return None

  for module in sorted(graph):
    if module not in state:
      cycle = visit(module, [module])
      if cycle:
        return cycle
  return None


def test_the_package_has_no_import_cycle():
  assert find_cycle(import_graph()) is None


def test_find_cycle_finds_one():
  assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
  assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_evaluation_imports_no_trainer_objective_or_data_loader():
  graph = import_graph()
  wrong = sorted((module, target) for module, targets in graph.items() if module.startswith("docent_jax.evaluation")
                 for target in targets if target.startswith(EVALUATION_MAY_NOT_IMPORT))
  assert not wrong


def test_the_command_line_imports_no_tensorflow_until_a_run_writes_summaries():
  # TensorFlow (through CLU's writers) costs seconds and ~600 MiB: --help or a
  # run that fails its config checks must not pay for it.
  code = ("import sys, docent_jax.main; "
          "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'clu'}))")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=PACKAGE.parent)
  assert result.stdout.strip() == "[]", result.stdout


_START_UP = """
import json, sys
from docent_jax.evaluation import registry
from docent_jax.modules import pretrained
import ml_collections
tokenizer = pretrained.load_tokenizer("minilm-l6")
registry.specs(ml_collections.ConfigDict({"name": "m", "evals": {"test": {"type": "link_prediction"}}}))
print(json.dumps({"tokenizer": type(tokenizer).__name__, "torch": "torch" in sys.modules,
                  "evaluators": sorted(m for m in sys.modules if m.startswith("docent_jax.evaluation."))}))
"""


def test_loading_a_tokenizer_and_naming_an_evaluator_import_neither_pytorch_nor_every_evaluator():
  # AutoTokenizer imports PyTorch where it is installed, and every evaluator module together takes 1.5 s: a process
  # that loads a model pays for neither (docs/scaling.md, "The cache and the test suite").
  completed = subprocess.run([sys.executable, "-c", _START_UP], cwd=PACKAGE.parent, capture_output=True, text=True,
                             check=True)
  report = json.loads(completed.stdout.splitlines()[-1])
  assert report["tokenizer"] == "BertTokenizer" and not report["torch"], report
  assert "docent_jax.evaluation.link_prediction" in report["evaluators"], report
  assert "docent_jax.evaluation.movie_search" not in report["evaluators"], report
