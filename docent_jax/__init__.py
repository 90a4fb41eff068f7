"""docent_jax: entity representations from text (BLP, DOCENT, supervised contrastive matching, universal
representations) in JAX/Flax. `docent_jax.load(run_dir)` gives a trained run as a model."""
import os
from typing import Any

# Libraries' start-up notices, before any of them is imported: TensorFlow (the TFDS and CLU writers' backend) logs
# its C++ start-up at INFO, and its oneDNN notice before its log level is read (oneDNN's TensorFlow ops are off: no
# model computes in TensorFlow here, JAX does); transformers (tokenizers only) warns that PyTorch is absent.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from docent_jax import compilation_cache  # pylint: disable=g-import-not-at-top
from docent_jax import cpu_flags  # pylint: disable=g-import-not-at-top
from docent_jax import host_memory  # pylint: disable=g-import-not-at-top

# Before JAX's CPU backend exists, which reads XLA_FLAGS once and starts the threads that allocate: every entry
# point (main, the tests, the tools, a notebook) imports this package first.
cpu_flags.only_cpu()
cpu_flags.apply()
cpu_flags.size_thread_pool()
host_memory.reuse_freed_memory()
compilation_cache.enable()


def load(path: Any) -> Any:
  """The model of a trained run directory (`WORKDIR/<model>`, local or gs://); see `inference.protocol.Model`."""
  # Imported here: `import docent_jax.<module>` must not import the whole package.
  from docent_jax.inference import model  # pylint: disable=g-import-not-at-top
  return model.load(path)
