"""Every point of the existing validation plans, for the Bayes-optimal bounds (issue 17).

At each point the ERM state evolution must sit above the Bayes-optimal one: matrix
MSE >= MMSE and test error >= the Bayes predictor's test error, up to Monte-Carlo
error.  These are theorems (the posterior mean minimises the matrix MSE, the
Bayes predictor the test error), so a violation is a bug somewhere in the engine.

``points()`` collects the problems of tests/validation_{linear,channels,adam,gamp,
thresholds,powerlaw}.py; ``check(name, problem, ...)`` solves both SEs.
``python tests/validation_bayes.py`` prints the table of docs/validation.md.
"""

from __future__ import annotations

import math
import time

from amp_attention.solvers.bayes_channel_integrals import BayesMonteCarloOptions
from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.solvers.state_evolution import (MonteCarloOptions,
                                                   solve_state_evolution)
from amp_attention.spec import Problem


def points(thresholds: bool = True) -> dict[str, Problem]:
    """name -> problem at every point of the validation plans (alpha and lam included);
    ``thresholds=False`` leaves out :func:`threshold_points`."""
    import dataclasses

    import validation_adam
    import validation_channels
    import validation_gamp
    import validation_linear
    import validation_powerlaw as pl

    out: dict[str, Problem] = {}
    for name, pt in validation_linear.POINTS.items():
        out[f"linear/{name}"] = validation_linear.problem_of(pt)
    for name, pt in validation_channels.POINTS.items():
        out[f"channels/{name}"] = validation_channels.problem_of(pt)
    for name, plan in validation_adam.PLANS.items():
        for a in validation_adam.ALPHAS:
            out[f"adam/{name}_a{a:g}"] = dataclasses.replace(plan.problem, alpha=a)
    for name, p in validation_gamp.CASES.items():
        out[f"gamp/{name}"] = p
    if thresholds:
        out.update(threshold_points())
    out["powerlaw/fixed_law_k1"] = pl.se_problem("fixed_law", pl.D_LAW)
    out["powerlaw/fixed_law_cap"] = pl.se_problem("fixed_law", pl.D_LAW, pl.KAPPA_CAP)
    for a in pl.ALPHA_SCAN:
        out[f"powerlaw/per_d200_a{a:g}"] = pl.se_problem("per_d", 200, 1.0, a)
    out["powerlaw/rank1_fixed_law"] = pl.se_problem("fixed_law", pl.RANK1_D_LAW,
                                                    pl.RANK1_KAPPA, pl.RANK1_ALPHA)
    return out


def threshold_points() -> dict[str, Problem]:
    """The threshold protocols' points: alpha = factor x threshold at lam -> 0 (the
    thresholds are computed here: ~40 s)."""
    import validation_thresholds as vt

    out = {}
    for name in vt.CASES:
        a_c = vt.threshold_of(name)
        for f in vt.FACTORS:
            for lam in vt.LAMS[vt.CASES[name][0]]:
                out[f"thresholds/{name}_f{f:g}_lam{lam:g}"] = vt.problem_of(name, f * a_c, lam)
    return out


def erm_settings(name: str) -> dict:
    """The ERM SE settings of the plan a point comes from: the softmax threshold points
    (lam = 1e-5, 1e-6, where the default two starts at 2^14 x 8 points can iterate for
    tens of minutes) are solved as their protocol solves them (validation_thresholds.MC,
    from the informative start); :func:`check` falls back to the defaults where that
    does not converge (three points, as in the protocol's record)."""
    if name.startswith("thresholds/softmax"):
        import validation_thresholds as vt

        return {"mc": vt.MC, "start": "informative"}
    return {}


def check(name: str, problem: Problem, *, erm_mc: MonteCarloOptions | None = None,
          bayes_mc: BayesMonteCarloOptions | None = None) -> dict:
    """Both SEs at one point: values, Monte-Carlo errors and the two margins in units of
    their combined standard error (negative: a violation).  ``erm_mc`` overrides the
    plan's Monte-Carlo settings (:func:`erm_settings`)."""
    t0 = time.perf_counter()
    settings = erm_settings(name)
    if erm_mc is not None:
        settings["mc"] = erm_mc
    erm = solve_state_evolution(problem, **settings)
    if not erm.converged and settings and erm_mc is None:
        erm = solve_state_evolution(problem)
    t1 = time.perf_counter()
    bo = solve_bayes_optimal(problem, mc=bayes_mc)
    t2 = time.perf_counter()
    row = {"name": name, "alpha": problem.alpha, "erm_converged": erm.converged,
           "bayes_converged": bo.success,  # perfect recovery is a success (MMSE = 0)
           "erm_seconds": t1 - t0, "bayes_seconds": t2 - t1}
    for q in ("matrix_mse", "test_error"):
        e_err = (erm.mc_stderr or {}).get(q) or 0.0
        b_err = (bo.mc_stderr or {}).get(q) or 0.0
        sigma = math.hypot(e_err, b_err)
        row.update({f"erm_{q}": getattr(erm, q), f"bayes_{q}": getattr(bo, q),
                    f"{q}_sigma": sigma,
                    f"{q}_margin": getattr(erm, q) - getattr(bo, q)})
    return row


def main() -> None:
    for name, p in points().items():
        r = check(name, p)
        print(f"{name:<45} mse {r['erm_matrix_mse']:.5g} >= {r['bayes_matrix_mse']:.5g} "
              f"(sigma {r['matrix_mse_sigma']:.1e}); test {r['erm_test_error']:.5g} >= "
              f"{r['bayes_test_error']:.5g} (sigma {r['test_error_sigma']:.1e}); "
              f"{r['erm_seconds']:.1f} s + {r['bayes_seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
