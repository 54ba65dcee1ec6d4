"""Finite-size extrapolation y(d) = a + b/d (docs/validation.md).

Per-seed values at several d are fitted by weighted least squares with
Var(y_i) = sigma^2 / d_i^gamma.  gamma = 2 (the default) is the law of
self-averaging quantities such as the matrix MSE, whose seed-to-seed
fluctuations shrink like 1/d.  Quantities with an extra d-independent noise --
a test error estimated on a test set of fixed size, say -- fluctuate more
slowly; ``variance_exponent=None`` then estimates gamma from the per-d sample
variances (see :func:`estimate_variance_exponent`).  A wrong gamma does not bias the
intercept, but it misweights the points and misstates the intercept's
standard error.  The intercept ``a`` is the d -> infinity estimate; its
standard error comes from the fitted residual variance (t-free, as the number
of seeds is what it is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InverseDFit:
    intercept: float
    intercept_se: float
    slope: float
    slope_se: float
    n_points: int
    reduced_chi2: float
    variance_exponent: float = 2.0


def estimate_variance_exponent(d: np.ndarray, y: np.ndarray, lo: float = 0.0, hi: float = 2.0) -> float:
    """gamma of Var(y | d) ~ d^(-gamma), from the per-d sample variances.

    log s_d^2 is regressed on log d with weights (k_d - 1), the degrees of
    freedom of each variance (d values with a single seed are skipped); the
    result is clipped to [lo, hi] (between a d-independent noise and 1/d
    fluctuations).  Needs two d values with >= 2 seeds and non-zero spread.
    """
    logs, logv, dof = [], [], []
    for dv in np.unique(d):
        sel = y[d == dv]
        if sel.size >= 2 and np.var(sel, ddof=1) > 0:
            logs.append(math.log(dv))
            logv.append(math.log(np.var(sel, ddof=1)))
            dof.append(sel.size - 1)
    if len(logs) < 2:
        raise ValueError("estimating the variance exponent needs >= 2 seeds at >= 2 values of d")
    x, v, w = np.array(logs), np.array(logv), np.array(dof, dtype=float)
    xm = np.sum(w * x) / np.sum(w)
    slope = np.sum(w * (x - xm) * v) / np.sum(w * (x - xm) ** 2)
    return float(np.clip(-slope, lo, hi))


def fit_inverse_d(ds, values, variance_exponent: float | None = 2.0) -> InverseDFit:
    """Fit values = a + b/d over per-seed points (ds[i], values[i]), weights d^gamma.

    ``variance_exponent`` is gamma (default 2), or None to estimate it from the
    data (:func:`estimate_variance_exponent`)."""
    d = np.asarray(ds, dtype=float).ravel()
    y = np.asarray(values, dtype=float).ravel()
    if d.shape != y.shape or d.size < 3:
        raise ValueError("need at least 3 (d, value) points of equal length")
    if np.unique(d).size < 2:
        raise ValueError("need at least two distinct d values")
    if not (np.all(np.isfinite(y)) and np.all(d > 0)):
        raise ValueError("values must be finite and d > 0")
    if variance_exponent is None:
        gamma = estimate_variance_exponent(d, y)
    else:
        gamma = float(variance_exponent)
        if not (math.isfinite(gamma) and 0.0 <= gamma <= 4.0):
            raise ValueError(f"variance_exponent must lie in [0, 4] or be None, got {variance_exponent!r}")
    X = np.stack([np.ones_like(d), 1.0 / d], axis=1)
    w = d**gamma
    XtW = X.T * w
    cov_unscaled = np.linalg.inv(XtW @ X)
    beta = cov_unscaled @ (XtW @ y)
    resid = y - X @ beta
    dof = max(d.size - 2, 1)
    sigma2 = float(np.sum(w * resid**2) / dof)
    cov = cov_unscaled * sigma2
    return InverseDFit(float(beta[0]), math.sqrt(cov[0, 0]), float(beta[1]), math.sqrt(cov[1, 1]),
                       int(d.size), sigma2, gamma)

