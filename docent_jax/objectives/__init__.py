"""Registry of training objectives: `config.objective` names one of them."""
from docent_jax.objectives import blp
from docent_jax.objectives import docent_dual
from docent_jax.objectives import docent_full
from docent_jax.objectives import docent_hybrid
from docent_jax.objectives import faq_retrieval
from docent_jax.objectives import pair_matching
from docent_jax.objectives import supcon
from docent_jax.objectives import tag_finetuning
from docent_jax.objectives import universal
from docent_jax.objectives.base import Objective

OBJECTIVES: dict[str, type[Objective]] = {
    "blp": blp.BlpObjective,
    "cross_encoder": pair_matching.CrossEncoderObjective,
    "docent_dual": docent_dual.DocentDualObjective,
    "docent_full": docent_full.DocentFullObjective,
    "docent_hybrid": docent_hybrid.DocentHybridObjective,
    "faq_retrieval": faq_retrieval.FaqRetrievalObjective,
    "pair_matching": pair_matching.PairMatchingObjective,
    "supcon": supcon.SupconObjective,
    "tag_finetuning": tag_finetuning.TagFinetuningObjective,
    "universal": universal.UniversalObjective,
}


def get_objective(name: str) -> type[Objective]:
  if name not in OBJECTIVES:
    raise ValueError(f"Unknown objective {name!r}; valid objectives: {sorted(OBJECTIVES)}.")
  return OBJECTIVES[name]
