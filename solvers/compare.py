"""ERM against the Bayes-optimal baseline at one alpha (docs/theory.md "Bayes-optimal
baseline"; ``amp-attention compare``).

Three estimators on the same problem:

* ERM at the user's lam (the problem's learner);
* ERM at the best lam: the SE's test error minimised over log10 lam in a range
  (bounded Brent, ``LAM_XATOL`` in log10 lam), same width kappa;
* the Bayes-optimal estimator (the MMSE; its test error is that of the Bayes
  predictor).

The gaps: ``lam_gap`` = ERM(lam) - ERM(best lam) (the price of a badly tuned
lam), ``estimator_gap`` = ERM(best lam) - BO (the price of the estimator:
factorised weight decay instead of the posterior mean), ``data_gap`` = BO (the
price of the data: what no estimator can remove).  All three are >= 0 up to
Monte-Carlo error; a negative estimator gap beyond it would contradict the
optimality of the posterior mean and is flagged.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from amp_attention.jsonsafe import json_safe
from amp_attention.spec import Problem

from .bayes_channel_integrals import BayesMonteCarloOptions
from .bayes_optimal import solve_bayes_optimal
from .state_evolution import MonteCarloOptions, solve_state_evolution

#: resolution of the best-lam search in log10 lam (2.3 % in lam)
LAM_XATOL = 0.01
#: the quantities compared
QUANTITIES = ("test_error", "matrix_mse")


def _erm(problem: Problem, lam: float, *, tol: float, mc: MonteCarloOptions | None, x0=None):
    p = dataclasses.replace(problem, learner=dataclasses.replace(problem.learner, lam=lam))
    return solve_state_evolution(p, tol=tol, mc=mc, x0=x0)


def best_lam(problem: Problem, lam_range: tuple[float, float], *, tol: float = 1e-9,
             mc: MonteCarloOptions | None = None, quantity: str = "test_error",
             xatol: float = LAM_XATOL) -> tuple[float, Any, int, bool]:
    """(lam*, its SE result, SE solves, lam* on a bound of the range) minimising the SE's
    ``quantity`` (an SEResult field: "test_error", "test_error_noisy", "matrix_mse")
    over lam in ``lam_range`` (bounded Brent in log10 lam to ``xatol``; points whose SE
    does not converge count as +inf).  Each solve is warm-started from the converged
    fixed point at the nearest lam already solved (continuation); the result at lam*
    is solved again from both starts, so that it is the SE's reported point there."""
    from scipy.optimize import minimize_scalar

    if quantity not in ("test_error", "test_error_noisy", "matrix_mse"):
        raise ValueError("quantity must be 'test_error', 'test_error_noisy' or 'matrix_mse', "
                         f"got {quantity!r}")
    if not (lam_range[0] > 0 and lam_range[1] > lam_range[0]):
        raise ValueError(f"lam_range must satisfy 0 < lo < hi, got {lam_range!r}")
    if not xatol > 0:
        raise ValueError(f"xatol must be > 0 (log10 lam), got {xatol!r}")
    lo, hi = (math.log10(v) for v in lam_range)
    cache: dict[float, Any] = {}

    def objective(x: float) -> float:
        near = [k for k in cache if cache[k].success]
        x0 = None
        if near:
            r0 = cache[min(near, key=lambda k: abs(k - x))]
            x0 = (r0.m, r0.q, r0.V)
        r = _erm(problem, 10.0 ** x, tol=tol, mc=mc, x0=x0)
        if x0 is not None and not r.success:
            r = _erm(problem, 10.0 ** x, tol=tol, mc=mc)
        cache[x] = r
        v = getattr(r, quantity)
        return v if r.success and math.isfinite(v) else math.inf

    # the bounded method never evaluates the end points: compare them explicitly
    objective(hi)
    minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
    objective(lo)
    x_best = min(cache, key=lambda x: (not cache[x].success, getattr(cache[x], quantity)))
    at_bound = min(abs(x_best - lo), abs(x_best - hi)) <= 2 * xatol
    final = _erm(problem, 10.0 ** x_best, tol=tol, mc=mc)
    return 10.0 ** x_best, final, len(cache) + 1, at_bound


def compare_point(problem: Problem, lam_range: tuple[float, float], *, tol: float = 1e-9,
                  mc: MonteCarloOptions | None = None,
                  bayes_mc: BayesMonteCarloOptions | None = None) -> dict[str, Any]:
    """One alpha: ERM at the problem's lam, ERM at the best lam, BO, and the gaps
    (module docstring), as a plain-JSON row."""
    user = _erm(problem, problem.learner.lam, tol=tol, mc=mc)
    lam_star, best, n_solves, at_bound = best_lam(problem, lam_range, tol=tol, mc=mc)
    bo = solve_bayes_optimal(problem, tol=min(tol, 1e-10), mc=bayes_mc)
    row: dict[str, Any] = {"alpha": problem.alpha, "lam": problem.learner.lam,
                           "best_lam": lam_star, "best_lam_at_bound": at_bound,
                           "best_lam_solves": n_solves}
    for name, r in (("erm", user), ("erm_best", best), ("bayes", bo)):
        for qty in QUANTITIES:
            row[f"{name}_{qty}"] = getattr(r, qty)
            err = (r.mc_stderr or {}).get(qty)
            row[f"{name}_{qty}_stderr"] = 0.0 if err is None else float(err)
        row[f"{name}_converged"] = bool(r.converged)
    row["bayes_perfect_recovery"] = bool(bo.perfect_recovery)
    warnings = []
    for qty in QUANTITIES:
        row[f"lam_gap_{qty}"] = row[f"erm_{qty}"] - row[f"erm_best_{qty}"]
        gap = row[f"erm_best_{qty}"] - row[f"bayes_{qty}"]
        row[f"estimator_gap_{qty}"] = gap
        row[f"data_gap_{qty}"] = row[f"bayes_{qty}"]
        sigma = math.hypot(row[f"erm_best_{qty}_stderr"], row[f"bayes_{qty}_stderr"])
        if gap < -4 * sigma - 1e-9 * max(1.0, row[f"bayes_{qty}"]):
            warnings.append(f"ERM's {qty} {row[f'erm_best_{qty}']:.6g} is below the Bayes-optimal "
                            f"{row[f'bayes_{qty}']:.6g} by more than 4 standard errors")
    row["warnings"] = warnings
    return json_safe(row)
