"""Writes the entity embeddings of a trained workdir: DIR/<model>/embeddings.npy and entity_ids.txt.

  python tools/export_embeddings.py --config=configs/default.py --workdir=workdir/default

Restores each model's reported params (the best checkpoint where kept, else the latest; onto whatever
devices this machine has) and encodes every entity of the config's dataset; nothing is trained.
Runs without entity vectors (e.g. a pair classifier) are skipped. WORKDIR may be a gs:// path.
"""
import pathlib
import sys

from absl import app
from absl import flags
from absl import logging
from etils import epath
import numpy as np
from ml_collections import config_flags

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from docent_jax import train  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line; defined only when run as a script, so one process can import several tools."""
  config_flags.DEFINE_config_file("config", None, "The config the workdir was trained with.", lock_config=True)
  flags.DEFINE_string("workdir", None, "A trained workdir.")
  flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
  del argv
  for model_config in train.model_configs(FLAGS.config):
    directory = epath.Path(FLAGS.workdir) / model_config.name
    trainer = train.Trainer(model_config, directory)
    try:
      entity_ids, embeddings = trainer.objective.export_embeddings(trainer.restore_params()[0])
    except NotImplementedError as error:
      logging.info("Skipping %s: %s", model_config.name, error)
      continue
    with (directory / "embeddings.npy").open("wb") as file:
      np.save(file, embeddings)
    (directory / "entity_ids.txt").write_text("\n".join(entity_ids) + "\n")
    logging.info("Wrote %s embeddings of shape %s to %s.", model_config.name, embeddings.shape, directory)


if __name__ == "__main__":
  define_flags()
  app.run(main)
