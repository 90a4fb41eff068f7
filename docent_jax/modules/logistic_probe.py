"""The L2-regularised logistic regression that probes frozen vectors (scikit-learn's L-BFGS), fit to its optimum.

Each fit runs L-BFGS to a tight tolerance: at scikit-learn's default (1e-4) it stops dozens of iterations
short of the optimum at large C, where the decision boundary, the validation score and so the chosen C then
depend on the CPU's floating-point path. The L2-regularised problem has one optimum, which a tight
tolerance reaches on every machine. A fit that runs out of iterations is logged.

A grid of C values (`fit_each`) is fit in parallel, one fit per core, each on one BLAS thread: on features of
probe size ([32,755, 128] for WN18RR's entities) OpenBLAS's own threads cost more than they give (BLP's six C
values: 76 s with two BLAS threads, 25 s with one, 12 s two fits at a time; docs/blp.md), and one thread per
fit makes the result independent of the number of cores.
"""
from collections.abc import Sequence
from concurrent import futures
import os
import warnings

from absl import logging
import numpy as np
from sklearn import exceptions
from sklearn import linear_model
from sklearn import pipeline
from sklearn import preprocessing
import threadpoolctl

from docent_jax import parallel

LBFGS_TOLERANCE = 1e-8  # Far below scikit-learn's 1e-4; see the module docstring.
MAX_ITER = 10_000


def fit(x: np.ndarray, y: np.ndarray, c: float, *, task: str, standardize: bool = False, max_iter: int = MAX_ITER,
        tol: float = LBFGS_TOLERANCE) -> pipeline.Pipeline:
  """Logistic regression (multinomial for more than two labels) of `y` on `x` at inverse regularisation `c`.

  Args:
    task: names the probe in the warning logged when L-BFGS runs out of iterations.
    standardize: scale each feature to zero mean and unit variance first.
  """
  steps = [preprocessing.StandardScaler()] if standardize else []
  model = pipeline.make_pipeline(*steps, linear_model.LogisticRegression(C=c, max_iter=max_iter, tol=tol))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", exceptions.ConvergenceWarning)  # Reported below, through absl's log.
    model.fit(x, y)
  if int(np.max(model[-1].n_iter_)) >= max_iter:
    logging.warning("%s: C=%g stopped at max_iter=%d before reaching tol=%g; its result depends on where L-BFGS "
                    "stopped.", task, c, max_iter, tol)
  return model


def fit_each(x: np.ndarray, y: np.ndarray, c_values: Sequence[float], *, task: str, standardize: bool = False,
             max_iter: int = MAX_ITER, tol: float = LBFGS_TOLERANCE) -> list[pipeline.Pipeline]:
  """`fit` at each of `c_values` (in their order), one fit per core at a time on one BLAS thread, with progress."""
  progress = parallel.Progress(len(c_values), f"{task}: probe fits (one per C)")

  def fit_one(c: float) -> pipeline.Pipeline:
    model = fit(x, y, c, task=task, standardize=standardize, max_iter=max_iter, tol=tol)
    progress.advance(1)
    return model

  # The BLAS thread limit is process-wide, so it is set once around all the fits.
  with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
    with futures.ThreadPoolExecutor(max_workers=max(1, min(len(c_values), len(os.sched_getaffinity(0))))) as pool:
      return list(pool.map(fit_one, c_values))
