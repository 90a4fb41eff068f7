"""The one registry of methods: each `config.objective` name -> its objective (how it trains) and its model (the
`inference.protocol.Model` that the trainer's evaluators score and that `docent_jax.load` gives a user).

Entries are import paths, imported on first use: loading a run imports its model's code, not every method's
training code (data readers, pipelines).

A method from outside the package needs no entry: `config.objective = "package.module:ObjectiveClass"` names its
objective (an `objectives.base.Objective`), whose class attributes `model_class` and `paper` name its model and its
paper (`loadable = False` where its runs do not load alone).
"""
import dataclasses
import importlib
from typing import Any


# The papers the methods implement, as an exported model's card cites them.
BLP = "Daza, Cochez & Groth, Inductive Entity Representations from Text via Link Prediction (WWW 2021)"
DOCENT = ("Zemlyanskiy et al., Learning Self-Supervised Entity Representations from Large Document Collections "
          "(EACL 2021)")
SUPCON = "Peeters & Bizer, Supervised Contrastive Learning for Product Matching (WWW 2022 companion)"
UNIVERSAL = "Li & Zhao, Learning Universal Representations from Word to Sentence"


@dataclasses.dataclass(frozen=True)
class Method:
  objective: str  # "module:Class" of its `objectives.base.Objective`.
  model: str  # "module:Class" of its `inference.protocol.Model`.
  paper: str  # The paper it implements.
  loadable: bool = True  # False where a run's model needs more than its own params (tag scorers: their parent's).


METHODS: dict[str, Method] = {
    "blp": Method("docent_jax.objectives.blp:BlpObjective",
                  "docent_jax.inference.link_prediction:LinkPredictionModel", BLP),
    "cross_encoder": Method("docent_jax.objectives.pair_matching:CrossEncoderObjective",
                            "docent_jax.inference.pair_matching:CrossEncoderModel", SUPCON),
    "docent_dual": Method("docent_jax.objectives.docent_dual:DocentDualObjective",
                          "docent_jax.inference.movies:DualMovieModel", DOCENT),
    "docent_full": Method("docent_jax.objectives.docent_full:DocentFullObjective",
                          "docent_jax.inference.movies:FullMovieModel", DOCENT),
    "docent_hybrid": Method("docent_jax.objectives.docent_hybrid:DocentHybridObjective",
                            "docent_jax.inference.movies:DualMovieModel", DOCENT),
    "faq_retrieval": Method("docent_jax.objectives.faq_retrieval:FaqRetrievalObjective",
                            "docent_jax.inference.text_encoder:FaqModel", UNIVERSAL),
    "pair_matching": Method("docent_jax.objectives.pair_matching:PairMatchingObjective",
                            "docent_jax.inference.pair_matching:PairMatchingModel", SUPCON),
    "supcon": Method("docent_jax.objectives.supcon:SupconObjective",
                     "docent_jax.inference.text_encoder:TextEncoderModel", SUPCON),
    "tag_finetuning": Method("docent_jax.objectives.tag_finetuning:TagFinetuningObjective",
                             "docent_jax.inference.movies:TagModel", DOCENT, loadable=False),
    "universal": Method("docent_jax.objectives.universal:UniversalObjective",
                        "docent_jax.inference.text_encoder:UniversalModel", UNIVERSAL),
}


def _imported(path: str) -> Any:
  module, _, name = path.partition(":")
  return getattr(importlib.import_module(module), name)


def _method(name: str) -> Method:
  """The package's entry of `name`, or the method that `name` = "package.module:ObjectiveClass" defines."""
  if name in METHODS:
    return METHODS[name]
  module, _, class_name = name.partition(":")
  if not (module and class_name.isidentifier()):
    raise ValueError(f"Unknown objective {name!r}; valid objectives: {sorted(METHODS)}, or 'package.module:Class' "
                     "for an objective defined outside docent_jax.")
  try:
    objective = _imported(name)
  except (ImportError, AttributeError) as error:
    raise ValueError(f"config.objective={name!r}: cannot import it ({error}).") from None
  model = getattr(objective, "model_class", None)
  if model is None:
    raise ValueError(f"config.objective={name!r}: {class_name} names no model_class (its inference.protocol.Model).")
  return Method(name, f"{model.__module__}:{model.__qualname__}", getattr(objective, "paper", ""),
                getattr(objective, "loadable", True))


def objective_class(name: str) -> type:
  """The objective class of `config.objective` = `name`; an unknown name is an error listing the valid ones."""
  return _imported(_method(name).objective)


def model_class(name: str) -> type:
  """The model class of `name`'s runs (the one the trainer evaluates and `docent_jax.load` returns)."""
  return _imported(_method(name).model)


def loadable(name: str) -> bool:
  """Whether a run of objective `name` loads from its own directory (`docent_jax.load`)."""
  return _method(name).loadable


def paper(name: str) -> str:
  """The paper that objective `name` implements."""
  return _method(name).paper


def loadable_objectives() -> list[str]:
  return sorted(name for name, method in METHODS.items() if method.loadable)
