"""docent_jax: entity representations from text (BLP, DOCENT, supervised contrastive matching, universal
representations) in JAX/Flax. `docent_jax.load(run_dir)` gives a trained run as a model."""
from typing import Any

from docent_jax import cpu_flags

# Before JAX's CPU backend exists, which reads XLA_FLAGS once: every entry point (main, the tests, the tools, a
# notebook) imports this package first.
cpu_flags.apply()


def load(path: Any) -> Any:
  """The model of a trained run directory (`WORKDIR/<model>`, local or gs://); see `inference.protocol.Model`."""
  # Imported here: `import docent_jax.<module>` must not import the whole package.
  from docent_jax.inference import model  # pylint: disable=g-import-not-at-top
  return model.load(path)
