"""Shared definitions of the linear-channel SE-vs-ERM validation (issue 2).

The slow test (tests/test_validation_linear_slow.py) runs the whole protocol
and records the measured finite-size slopes in tests/data/linear_finite_size.json;
the fast test uses that record to set its d = 64 allowance.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.training import direct_erm
from solvers.extrapolation import fit_inverse_d
from solvers.state_evolution import solve_state_evolution

RECORD = Path(__file__).parent / "data" / "linear_finite_size.json"

# name: (L, kappa, kappa0, lam, noise, alpha, parameterisation)
POINTS = {
    "L1_k1_k0.5_lam0.1_D0.5_a0.5": (1, 1.0, 0.5, 0.1, 0.5, 0.5, "factorised"),
    "L1_k2_k0.2_lam0.01_D0.1_a0.4": (1, 2.0, 0.2, 0.01, 0.1, 0.4, "factorised"),
    "L1_k1_k01_lam0.3_D0.25_a1": (1, 1.0, 1.0, 0.3, 0.25, 1.0, "factorised"),
    "L1_k0.3_k0.5_lam0.05_D0.5_a0.6": (1, 0.3, 0.5, 0.05, 0.5, 0.6, "factorised"),
    "L2_k1_k0.5_lam0.1_D0.5_a0.3": (2, 1.0, 0.5, 0.1, 0.5, 0.3, "factorised"),
    "L2_k1.5_k0.2_lam0.3_D0_a0.6": (2, 1.5, 0.2, 0.3, 0.0, 0.6, "factorised"),
    "L2_k0.3_k0.6_lam0.05_D0.1_a0.4": (2, 0.3, 0.6, 0.05, 0.1, 0.4, "factorised"),
    "frob_L1_k0.5_lam0.1_D0.5_a0.5": (1, 1.0, 0.5, 0.1, 0.5, 0.5, "elementwise"),
    "frob_L2_k1_lam0.3_D0_a0.3": (2, 1.0, 1.0, 0.3, 0.0, 0.3, "elementwise"),
}
# d -> number of seeds: fluctuations shrink like 1/d, so fewer seeds at large d.
SEEDS = {48: 8, 64: 6, 96: 4, 128: 3, 192: 2}
QUANTITIES = ("matrix_mse", "train_error")


def problem_of(point) -> Problem:
    L, kappa, kappa0, lam, noise, alpha, par = point
    return Problem(Task("linear", L=L, noise=noise), WishartTarget(kappa0),
                   Learner(kappa, lam, par), alpha=alpha)


def run_point(name: str, seeds: dict[int, int] = SEEDS) -> dict:
    """SE prediction, per-seed ERM values at each d and the 1/d fits."""
    problem = problem_of(POINTS[name])
    se = solve_state_evolution(problem)
    assert se.converged, se.status
    rows = []
    for d, k in seeds.items():
        for seed in range(k):
            r = direct_erm(problem, d, seed, target_spectrum="quantile", keep_matrix=False)
            assert r.converged, (name, d, seed, r.residual)
            rows.append({"d": d, "seed": seed, **{q: getattr(r, q) for q in QUANTITIES}})
    out = {"name": name, "point": POINTS[name], "se": {q: getattr(se, q) for q in QUANTITIES},
           "rows": rows, "fits": {}}
    for q in QUANTITIES:
        fit = fit_inverse_d([r["d"] for r in rows], [r[q] for r in rows])
        per_d_std = {}
        for d in seeds:
            v = np.array([r[q] for r in rows if r["d"] == d])
            per_d_std[d] = float(np.std(v, ddof=1)) if v.size > 1 else math.nan
        out["fits"][q] = {"intercept": fit.intercept, "intercept_se": fit.intercept_se,
                          "slope": fit.slope, "slope_se": fit.slope_se,
                          "seed_std_by_d": per_d_std}
    return out


def load_record() -> dict:
    return json.loads(RECORD.read_text())
