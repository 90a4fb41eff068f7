"""docent_jax: entity representations from text (BLP, DOCENT, supervised contrastive matching, universal
representations) in JAX/Flax. `docent_jax.load(run_dir)` gives a trained run as a model."""
from typing import Any

from docent_jax import cpu_flags
from docent_jax import host_memory

# Before JAX's CPU backend exists, which reads XLA_FLAGS once and starts the threads that allocate: every entry
# point (main, the tests, the tools, a notebook) imports this package first.
cpu_flags.apply()
host_memory.reuse_freed_memory()


def load(path: Any) -> Any:
  """The model of a trained run directory (`WORKDIR/<model>`, local or gs://); see `inference.protocol.Model`."""
  # Imported here: `import docent_jax.<module>` must not import the whole package.
  from docent_jax.inference import model  # pylint: disable=g-import-not-at-top
  return model.load(path)
