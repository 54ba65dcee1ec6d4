"""Shared definitions of the linear-channel SE-vs-ERM validation (issue 2).

The slow test (tests/test_validation_linear_slow.py) runs the whole protocol
and records the measured finite-size slopes in tests/data/linear_finite_size.json;
the fast test uses that record to set its d = 64 allowance.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from amp_attention.spec import CustomTarget, Learner, Problem, Task, WishartTarget
from amp_attention.targets import target_measure
from amp_attention.erm import direct_erm
from amp_attention.solvers.extrapolation import fit_inverse_d
from amp_attention.solvers.state_evolution import solve_state_evolution

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
    # the symmetric (non-PSD) nuclear norm, where it keeps negative eigenvalues
    "sym_L1_k1_k0.5_lam0.02_D0.1_a0.4": (1, 1.0, 0.5, 0.02, 0.1, 0.4, "symmetric"),
    "sym_L2_k1_k0.2_lam0.05_D0_a0.5": (2, 1.0, 0.2, 0.05, 0.0, 0.5, "symmetric"),
}
# d -> number of seeds: fluctuations shrink like 1/d, so fewer seeds at large d.
SEEDS = {48: 8, 64: 8, 96: 6, 128: 4, 192: 4}
QUANTITIES = ("matrix_mse", "train_error")


def problem_of(point) -> Problem:
    L, kappa, kappa0, lam, noise, alpha, par = point
    return Problem(Task("linear", L=L, noise=noise), WishartTarget(kappa0),
                   Learner(kappa, lam, par), alpha=alpha)


def finite_d_problem(problem: Problem, d: int) -> Problem:
    """The same problem with the finite-d parameters ERM actually sees at dimension d:
    the target's d eigenvalues (MP quantiles, so rank(S0) = a whole number) and the
    rank cap p/d with p = max(1, round(kappa d)).  Its SE is the deterministic part
    of the finite-d correction: rounding kappa0 d and kappa d jumps non-smoothly with
    d (e.g. kappa0_eff = 0.203 at d = 128 but 0.198 at d = 96, 192 for kappa0 = 0.2),
    which a plain a + b/d fit would mistake for noise."""
    ev = target_measure(problem.target).quantiles(d)
    learner = problem.learner
    if learner.rank_capped:
        learner = dataclasses.replace(learner, kappa=max(1, round(learner.kappa * d)) / d)
    return dataclasses.replace(problem, target=CustomTarget(eigenvalues=tuple(float(v) for v in ev)),
                               learner=learner)


def se_values(problem: Problem) -> dict[str, float]:
    se = solve_state_evolution(problem)
    assert se.converged, se.status
    return {q: getattr(se, q) for q in QUANTITIES}


def _fit(rows, q, shift=None) -> dict:
    ds = [r["d"] for r in rows]
    ys = [r[q] - (shift[r["d"]] if shift else 0.0) for r in rows]
    fit = fit_inverse_d(ds, ys)
    per_d_std = {}
    for d in sorted(set(ds)):
        v = np.array([r[q] for r in rows if r["d"] == d])
        per_d_std[d] = float(np.std(v, ddof=1)) if v.size > 1 else math.nan
    return {"intercept": fit.intercept, "intercept_se": fit.intercept_se,
            "slope": fit.slope, "slope_se": fit.slope_se, "seed_std_by_d": per_d_std}


def analyse(rows: list[dict], se_inf: dict, se_by_d: dict) -> tuple[dict, dict]:
    """(corrected fits, raw fits).  Corrected: ERM(d) - [SE_d - SE_inf] fitted as a + b/d,
    i.e. the theory's own finite-d parameter shift removed before extrapolating."""
    fits, raw = {}, {}
    for q in QUANTITIES:
        shift = {int(d): v[q] - se_inf[q] for d, v in se_by_d.items()}
        fits[q] = _fit(rows, q, shift)
        raw[q] = _fit(rows, q)
    return fits, raw


def run_point(name: str, seeds: dict[int, int] = SEEDS) -> dict:
    """SE predictions (d -> infinity and at each d's finite parameters), per-seed ERM
    values at each d, and the 1/d fits."""
    problem = problem_of(POINTS[name])
    se_inf = se_values(problem)
    se_by_d = {d: se_values(finite_d_problem(problem, d)) for d in seeds}
    rows = []
    for d, k in seeds.items():
        for seed in range(k):
            r = direct_erm(problem, d, seed, target_spectrum="quantile", keep_matrix=False)
            assert r.converged, (name, d, seed, r.residual)
            rows.append({"d": d, "seed": seed, **{q: getattr(r, q) for q in QUANTITIES}})
    fits, raw = analyse(rows, se_inf, se_by_d)
    return {"name": name, "point": POINTS[name], "se": se_inf, "se_by_d": se_by_d,
            "rows": rows, "fits": fits, "fits_raw": raw}


def load_record() -> dict:
    return json.loads(RECORD.read_text())
