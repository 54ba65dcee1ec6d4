"""Sequential spectral recovery and scaling laws for power-law targets (docs/theory.md
"Power-law targets"): the theory at one point and the exponents derived from a curve.

For a target with s_k ~ k^(-gamma) (:class:`~amp_attention.spec.PowerLawTarget`,
deterministic equivalent at the target's d), :func:`solve_point` solves the SE at one
alpha = n/d^2 (warm-started from a neighbour's fixed point when given) and records the
errors, the count k* of recovered modes (:func:`amp_attention.solvers.decomposition.outlier_structure`),
the four-way decomposition and the Bayes-optimal baseline (:func:`bayes_point`).  The
sweep along a grid of alpha (continuation, lam schedule, resumable point files) is
:mod:`amp_attention.experiments.scaling`.

Exponents.  The excess test error is fitted as e_test - e_0 = A n^(-f) by least
squares in log-log coordinates (:func:`fit_power_law`), with e_0 given or fitted.
The recovered-mode count predicts it: the energy left in unrecovered modes is

    E_under ~ sum_{k > k*} s_k^2 / d ~ k*^(1 - 2 gamma)      (2 gamma > 1),

so if k* ~ n^a then f_pred = a (2 gamma - 1), with a fitted on the SE's own
k*(n).  In the noise-limited regime (mode k is recovered once its signal
mh s_k beats the noise sqrt(qh), mh ~ alpha and qh ~ alpha at small lam, and
s_k^2 ~ d k^(-2 gamma)) a = 1/(2 gamma), so f = 1 - 1/(2 gamma)
(:func:`noise_limited_exponent`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from amp_attention.spec import Problem

from .decomposition import outlier_structure, predicted_decomposition
from .state_evolution import MonteCarloOptions, solve_state_evolution


def solve_point(problem: Problem, x0=None, mc: MonteCarloOptions | None = None, *,
                tol: float = 1e-10, max_iter: int = 200) -> dict:
    """SE, k* and the decomposition at one alpha (warm-started from x0 = (m, q, V))."""
    kw = {"mc": mc, "tol": tol, "max_iter": max_iter}
    r = solve_state_evolution(problem, x0=x0, **kw) if x0 is not None else \
        solve_state_evolution(problem, start="informative", **kw)
    d = problem.target.d
    row = {"alpha": problem.alpha, "n": problem.alpha * d * d, "lam": problem.learner.lam,
           **{k: getattr(r, k) for k in (
               "converged", "iterations", "residual", "m", "q", "V", "test_error",
               "train_error", "matrix_mse", "residual_kurtosis")}, "status": r.summary}
    row.update(bayes_point(problem))
    if not r.success:
        return row | {"k_star": None, "decomposition": None}
    struct = outlier_structure(problem, r)
    dec = predicted_decomposition(problem, r, structure=struct, mc=mc)
    return row | {"k_star": struct.count, "bulk_edge": struct.bulk_edge,
                  "decomposition": dec.to_dict()}


def bayes_point(problem: Problem) -> dict:
    """The Bayes-optimal test error and MMSE at one point (docs/theory.md "Bayes-optimal
    baseline"), for label noise > 0 and a channel side in closed form; None otherwise
    (noiseless labels: the MMSE vanishes from alpha_PR^BO on, below every window of
    interest here; Monte-Carlo channels: ~20 s a point)."""
    from .bayes_optimal import BayesStateEvolution, solve_bayes_optimal

    none = {"bayes_test_error": None, "bayes_matrix_mse": None}
    if problem.task.noise == 0:
        return none
    try:
        if BayesStateEvolution(problem).mc is not None:
            return none
    except ValueError:
        return none
    b = solve_bayes_optimal(problem)
    if not b.success:
        return none
    return {"bayes_test_error": b.test_error, "bayes_matrix_mse": b.matrix_mse}


@dataclass(frozen=True)
class PowerLawFit:
    """y - e0 = amplitude * x^(-exponent), fitted in log-log coordinates over
    ``points`` points; [ci_low, ci_high] is the ``level`` confidence interval of
    the exponent from the regression residuals (Student t; for a deterministic SE
    curve it measures how far the curve is from a pure power law, e.g. the
    staircase), ``e0_fitted`` whether e0 came from the fit."""

    exponent: float
    ci_low: float
    ci_high: float
    amplitude: float
    e0: float
    e0_fitted: bool
    points: int
    level: float
    #: rms of the residuals of log y about the fit
    rms_log_residual: float


def _loglog_fit(x: np.ndarray, y: np.ndarray, level: float) -> tuple[float, float, float, float]:
    lx, ly = np.log(x), np.log(y)
    res = stats.linregress(lx, ly)
    t = stats.t.ppf(0.5 + level / 2.0, df=max(1, lx.size - 2))
    rms = float(np.sqrt(np.mean((ly - (res.intercept + res.slope * lx)) ** 2)))
    return -res.slope, t * res.stderr, math.exp(res.intercept), rms


def fit_power_law(x, y, e0: float | None = 0.0, *, level: float = 0.95) -> PowerLawFit:
    """Fit y = e0 + A x^(-f).  ``e0=None`` fits e0 in [0, min y) by minimising the
    log-log residual (the interval is then conditional on the fitted e0)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 3 or np.any(x <= 0) or not np.all(np.isfinite(y)):
        raise ValueError("x and y must be finite arrays of one shape with >= 3 points, x > 0")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    if e0 is not None:
        if not np.all(y > e0):
            raise ValueError(f"every y must exceed e0 = {e0!r} for a log-log fit")
        f, half, A, rms = _loglog_fit(x, y - e0, level)
        return PowerLawFit(f, f - half, f + half, A, float(e0), False, x.size, level, rms)
    from scipy.optimize import minimize_scalar

    top = float(np.min(y))
    best = minimize_scalar(lambda t: _loglog_fit(x, y - t * top, level)[3], bounds=(0.0, 1.0 - 1e-6),
                           method="bounded", options={"xatol": 1e-10})
    e0v = float(best.x) * top
    f, half, A, rms = _loglog_fit(x, y - e0v, level)
    return PowerLawFit(f, f - half, f + half, A, e0v, True, x.size, level, rms)


def noise_limited_exponent(gamma: float) -> float:
    """f = 1 - 1/(2 gamma): k* ~ n^(1/(2 gamma)) and E_under ~ k*^(1 - 2 gamma) (module docstring)."""
    if not gamma > 0.5:
        raise ValueError(f"the power law needs gamma > 1/2 for a finite-energy tail exponent, got {gamma!r}")
    return 1.0 - 1.0 / (2.0 * gamma)


@dataclass(frozen=True)
class ModeExponentFit:
    """k* ~ n^a: the fitted a with its confidence interval, and the predicted exponent
    f = a (2 gamma - 1) of E_under with its interval (docs/theory.md "Power-law targets")."""

    a: float
    #: confidence interval of a
    a_ci: tuple[float, float]
    exponent: float
    #: confidence interval of the exponent
    exponent_ci: tuple[float, float]


def recovered_mode_exponent(n, k_star, gamma: float, *, level: float = 0.95) -> ModeExponentFit:
    """a from k* ~ n^a (log-log fit over the points with k* >= 1) and f_pred = a (2 gamma - 1)."""
    n = np.asarray(n, dtype=float)
    k = np.asarray(k_star, dtype=float)
    keep = k >= 1
    if np.count_nonzero(keep) < 3 or np.unique(k[keep]).size < 2:
        raise ValueError("need >= 3 points with k* >= 1 and at least two distinct k* to fit k* ~ n^a")
    res = stats.linregress(np.log(n[keep]), np.log(k[keep]))
    t = stats.t.ppf(0.5 + level / 2.0, df=max(1, int(keep.sum()) - 2))
    a, half = float(res.slope), float(t * res.stderr)
    s = 2.0 * gamma - 1.0
    return ModeExponentFit(a, (a - half, a + half), a * s, ((a - half) * s, (a + half) * s))


def recovery_alphas(rows: list[dict]) -> dict[int, float]:
    """alpha at which mode k is first recovered (k* >= k), from a curve: the first
    grid point with k* >= k (resolution: the grid spacing)."""
    out: dict[int, float] = {}
    for row in rows:
        k = row.get("k_star")
        if k is None:
            continue
        for j in range(1, k + 1):
            out.setdefault(j, row["alpha"])
    return out
