"""A method added from outside the package: one module of its own (tests/outside_method/) names its objective by
import path in `config.objective`; it trains, is evaluated by an existing evaluator, loads with `docent_jax.load`
and compiles for a TPU, with no file of docent_jax changed."""
import pathlib

import ml_collections
import pytest

from configs import common
from docent_jax import compile_for_tpu
from docent_jax import experiment
from docent_jax import methods
import kg_fixtures
import tiny_training

OUTSIDE = pathlib.Path(__file__).resolve().parent / "outside_method"
OBJECTIVE = "linked_descriptions:LinkedDescriptionsObjective"


@pytest.fixture
def outside_config(tmp_path, monkeypatch) -> ml_collections.ConfigDict:
  monkeypatch.syspath_prepend(str(OUTSIDE))  # As a user's installed package would be importable.
  config = kg_fixtures.tiny_config(kg_fixtures.write_tiny_kg(tmp_path / "kg"), tmp_path / "tfds")
  config.name = "linked"
  config.objective = OBJECTIVE
  config.evals = {"test": common.evaluator("entity_classification")}
  config.train.best_metric = ""  # Report the last step.
  return config


def test_the_method_is_one_module_outside_docent_jax():
  assert sorted(path.name for path in OUTSIDE.iterdir() if path.suffix == ".py") == ["linked_descriptions.py"]
  assert OBJECTIVE not in methods.METHODS


def test_a_method_from_outside_trains_is_evaluated_and_loads(outside_config, tmp_path):
  results = experiment.train_and_evaluate(outside_config, tmp_path / "work")
  assert 0.0 <= results["linked/test/classification_accuracy"] <= 1.0
  texts = ["red box number 1", "blue ball"]
  tiny_training.assert_loads_as_evaluated(tmp_path / "work" / "linked", tiny_training.entity_and_text_vectors(texts))
  assert methods.paper(OBJECTIVE).startswith("docent_jax's outside-method example")


def test_a_method_from_outside_compiles_for_a_v5e_8(outside_config):
  outside_config.mesh.shape = (4, 2)
  result = compile_for_tpu.report(outside_config, "v5e:2x4", 1, {"num_entities": 48})
  assert result["objective"] == OBJECTIVE
  assert result["functions"]["train_step"]["fits"] and result["functions"]["encode"]["fits"]
  assert result["functions"]["search_top_k"]["num_entities"] == 48


def test_an_outside_objective_that_cannot_be_imported_or_names_no_model_says_so(monkeypatch):
  monkeypatch.syspath_prepend(str(OUTSIDE))
  with pytest.raises(ValueError, match=r"config.objective='no_such_package:Objective': cannot import it"):
    methods.objective_class("no_such_package:Objective")
  with pytest.raises(ValueError, match=r"'linked_descriptions:SCALE'.*names no model_class"):
    methods.objective_class("linked_descriptions:SCALE")
  with pytest.raises(ValueError, match=r"Unknown objective 'relic'.*or 'package.module:Class'"):
    methods.objective_class("relic")
