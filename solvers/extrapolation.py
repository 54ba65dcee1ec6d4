"""Finite-size extrapolation y(d) = a + b/d (THEORY 9).

Per-seed values at several d are fitted by weighted least squares with
Var(y_i) = sigma^2 / d_i^2: seed-to-seed fluctuations of self-averaging
quantities such as the matrix MSE shrink like 1/d.  The intercept ``a`` is the
d -> infinity estimate; its standard error comes from the fitted residual
variance (t-free, as the number of seeds is what it is).
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


def fit_inverse_d(ds, values) -> InverseDFit:
    """Fit values = a + b/d over per-seed points (ds[i], values[i])."""
    d = np.asarray(ds, dtype=float).ravel()
    y = np.asarray(values, dtype=float).ravel()
    if d.shape != y.shape or d.size < 3:
        raise ValueError("need at least 3 (d, value) points of equal length")
    if np.unique(d).size < 2:
        raise ValueError("need at least two distinct d values")
    if not (np.all(np.isfinite(y)) and np.all(d > 0)):
        raise ValueError("values must be finite and d > 0")
    X = np.stack([np.ones_like(d), 1.0 / d], axis=1)
    w = d * d
    XtW = X.T * w
    cov_unscaled = np.linalg.inv(XtW @ X)
    beta = cov_unscaled @ (XtW @ y)
    resid = y - X @ beta
    dof = max(d.size - 2, 1)
    sigma2 = float(np.sum(w * resid**2) / dof)
    cov = cov_unscaled * sigma2
    return InverseDFit(float(beta[0]), math.sqrt(cov[0, 0]), float(beta[1]), math.sqrt(cov[1, 1]),
                       int(d.size), sigma2)
