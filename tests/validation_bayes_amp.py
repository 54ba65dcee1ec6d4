"""Bayes-optimal GAMP on data against the Bayes-optimal state evolution (issue 17).

Two protocols, both on noiseless labels with quantile Wishart targets (kappa0 = 0.5)
and the matrix MSE ||S_t - S0||_F^2 / d of the iterates:

* trajectory: undamped BO-AMP from the prior mean, iterations t = 1..T, against the
  SE trajectory e_t = mmse(qhat(e_(t-1))) (bayes_se_iterates);
* fixed point: BO-AMP with damping 0.7 (undamped BO-AMP at d <= 128 can grow
  exponentially after ~5 iterations for the softmax channel: a finite-size
  instability, measured), run to a stationary point, against the SE fixed point.

At each d the seeds give a mean and a standard error; a + b/d is fitted over d
(weighted least squares, amp_attention.solvers.extrapolation.fit_inverse_d) and the
intercept is compared with the SE.  ``python tests/validation_bayes_amp.py`` runs
everything and writes tests/data/bayes_amp.json (the fast test reads its slopes).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from amp_attention.gamp import GAMPOptions, bayes_gamp_on_problem
from amp_attention.solvers.bayes_optimal import bayes_se_iterates, solve_bayes_optimal
from amp_attention.solvers.extrapolation import fit_inverse_d
from amp_attention.spec import Learner, Problem, Task, WishartTarget

RECORD = Path(__file__).parent / "data" / "bayes_amp.json"
T = 4
DS = (96, 128, 192, 256)
SEEDS = 4
FIXED_POINT_DS = (64, 96, 128, 192)
FIXED_POINT_SEEDS = 3
DAMPING = 0.7

CASES = {f"{ch}_a{a:g}": (ch, L, a) for ch, L, alphas in (("linear", 1, (0.15, 0.25, 0.35)),
                                                          ("softmax", 2, (0.05, 0.1, 0.15)))
         for a in alphas}


def problem_of(name: str) -> Problem:
    ch, L, a = CASES[name]
    return Problem(Task(ch, L=L, noise=0.0), WishartTarget(0.5), Learner(), alpha=a)


def mse_history(run) -> list[float]:
    S0 = run.data.S0
    d = S0.shape[0]
    Q0 = float(np.sum(S0 * S0)) / d
    return [Q0 - 2.0 * h.m + h.q for h in run.result.history]


def trajectory(name: str, d: int, seed: int, n_iter: int = T) -> dict:
    run = bayes_gamp_on_problem(problem_of(name), d, seed, target_spectrum="quantile",
                                options=GAMPOptions(max_iter=n_iter, tol=1e-300, adaptive=False))
    return {"mse": mse_history(run)[:n_iter + 1], "status": run.result.status.value}


def fixed_point(name: str, d: int, seed: int) -> dict:
    run = bayes_gamp_on_problem(problem_of(name), d, seed, target_spectrum="quantile",
                                options=GAMPOptions(max_iter=300, tol=1e-6, damping=DAMPING,
                                                    adaptive=False))
    mse = mse_history(run)
    # the iterates fluctuate at the 1e-4 level at small d: average the last 20
    return {"mse": float(np.mean(mse[-20:])), "status": run.result.status.value,
            "iterations": run.result.iterations}


def fit(by_d: dict[int, list[float]]) -> dict:
    """Per-d mean and standard error of the finite values, and the a + b/d fit over the
    per-seed points; ``excluded`` counts non-finite (diverged) runs."""
    import dataclasses

    ds = sorted(by_d)
    vals = {d: [v for v in by_d[d] if math.isfinite(v) and v < 1e6] for d in ds}
    means = [float(np.mean(vals[d])) for d in ds]
    errs = [float(np.std(vals[d], ddof=1) / math.sqrt(len(vals[d]))) if len(vals[d]) > 1
            else math.nan for d in ds]
    xs = [d for d in ds for _ in vals[d]]
    ys = [v for d in ds for v in vals[d]]
    f = dataclasses.asdict(fit_inverse_d(xs, ys))
    return {"d": ds, "mean": means, "stderr": errs,
            "excluded": sum(len(by_d[d]) - len(vals[d]) for d in ds), **f}


def run_all() -> dict:
    out: dict = {"T": T, "ds": DS, "seeds": SEEDS, "fixed_point_ds": FIXED_POINT_DS,
                 "fixed_point_seeds": FIXED_POINT_SEEDS, "damping": DAMPING, "cases": {}}
    for name in CASES:
        t0 = time.perf_counter()
        p = problem_of(name)
        se = bayes_se_iterates(p, T).tolist()
        fp = solve_bayes_optimal(p).matrix_mse
        runs = {d: [trajectory(name, d, s) for s in range(SEEDS)] for d in DS}
        fits = []
        for t in range(1, T + 1):
            by_d = {d: [r["mse"][t] for r in runs[d] if len(r["mse"]) > t] for d in DS}
            fits.append({"t": t, "se": se[t], **fit(by_d)})
        fps = {d: [fixed_point(name, d, s) for s in range(FIXED_POINT_SEEDS)]
               for d in FIXED_POINT_DS}
        fp_fit = fit({d: [r["mse"] for r in fps[d]] for d in FIXED_POINT_DS})
        out["cases"][name] = {
            "se_trajectory": se, "se_fixed_point": fp, "trajectory_fits": fits,
            "statuses": {d: [r["status"] for r in runs[d]] for d in DS},
            "fixed_point_fit": {"se": fp, **fp_fit},
            "fixed_point_statuses": {d: [r["status"] for r in fps[d]] for d in FIXED_POINT_DS},
            "seconds": time.perf_counter() - t0}
        print(name, json.dumps(out["cases"][name]["fixed_point_fit"]), flush=True)
        for f in fits:
            print("  t", f["t"], "se", round(f["se"], 4), "inf", round(f["intercept"], 4), "+-",
                  round(f["intercept_se"], 4), "slope", round(f["slope"], 3), flush=True)
    return out


if __name__ == "__main__":
    record = run_all()
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print("wrote", RECORD, file=sys.stderr)
