"""Sweeps over config values: a grid, or an Optuna search; each trial is a run of its own, and a killed sweep goes on.

  python -m docent_jax.sweep --config=configs/default.py --workdir=workdir/lr_grid \\
      --sweep=optim.learning_rate=1e-5,2e-5,5e-5 --sweep=seed=0,1
  python -m docent_jax.sweep --config=configs/blp.py:wn18rr --workdir=workdir/lr_search \\
      --sweep=optim.learning_rate=1e-5:1e-4:log --sweep=loss.margin=1,2,4 --trials=12

`--sweep=KEY=V1,V2,...` is an axis of values; `KEY=LOW:HIGH[:log]` a range, for `--trials`. Without `--trials`
every combination of the axes runs, in order; with it, Optuna's TPE sampler draws that many trials.
`seed` is an axis like any other (grid sweeps): the table gives the mean ± std over a setting's seeds. Each trial
reports `--metric` (default `train.best_metric`) of `--run` (default the config's main model) after every periodic
evaluation, and Optuna's median pruner stops a trial below the median of the earlier trials at the same step
(from the third trial, and from `--prune_warmup_steps` on; `--noprune`: never).

The workdir holds the study in Optuna's journal (`study.journal`, written through epath, so gs:// works), one
workdir per trial (`trials/<number>/`: its results.json and run directories, which `docent_jax.load` reads), and
the summary: `sweep.json`, a table on the console, and `sweep.png` (the metric against each swept value). Run the
same command again after a kill: finished trials are kept, the one that was running resumes from its checkpoint.
Trials run one after another in this process, without the config's baselines.
"""
