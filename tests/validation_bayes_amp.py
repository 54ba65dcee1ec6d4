"""Bayes-optimal GAMP on data against the Bayes-optimal state evolution (issue 17).

Undamped BO-AMP from the prior mean on noiseless labels with quantile Wishart targets
(kappa0 = 0.5): the matrix MSE ||S_t - S0||_F^2 / d of the iterates t = 1..T against
the SE trajectory e_t = mmse(qhat(e_(t-1))) (bayes_se_iterates); the last iterate also
against the SE fixed point.

At each d the seeds give a mean and a standard error; a + b/d is fitted over d
(weighted least squares, solvers.extrapolation.fit_inverse_d) and the intercept is
compared with the SE.  The dimensions keep alpha d >= 19 at every alpha: the
denoiser's input noise (2/d) A*(g) is a sum of n = alpha d^2 rank-one terms whose
spectrum departs from the semicircle by O((alpha d)^(-1/2)) times the skewness of g,
and the Bayes-optimal eigenvalue map is tuned to the semicircle; at alpha d ~ 13
(softmax alpha = 0.05, d = 256) the undamped iteration falls into a period-2
oscillation, at d >= 384 it converges (measured; docs/validation.md).

``python tests/validation_bayes_amp.py`` runs everything (about 45 min on one core)
and writes tests/data/bayes_amp.json, case by case (a rerun skips finished cases);
tests/test_bayes_amp.py checks fresh seeds at d = 384 against the SE and against that
record's means.
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
T = 10
DS = (384, 512, 768)
SEEDS = 4
#: the finite-size allowance: BO-AMP's mean error at d within 2 standard errors plus
#: FINITE_SIZE / d of the SE's e_t (a round number above the largest d * excess measured at
#: the smallest d, 8.9; docs/validation.md)
FINITE_SIZE = 10.0

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


def run_case(name: str) -> dict:
    t0 = time.perf_counter()
    p = problem_of(name)
    se = bayes_se_iterates(p, T).tolist()
    fp = solve_bayes_optimal(p).matrix_mse
    runs = {d: [trajectory(name, d, s) for s in range(SEEDS)] for d in DS}
    fits = []
    for t in range(1, T + 1):
        by_d = {d: [r["mse"][t] for r in runs[d] if len(r["mse"]) > t] for d in DS}
        fits.append({"t": t, "se": se[t], **fit(by_d)})
    return {"se_trajectory": se, "se_fixed_point": fp, "trajectory_fits": fits,
            "runs": {d: [r["mse"] for r in runs[d]] for d in DS},
            "statuses": {d: [r["status"] for r in runs[d]] for d in DS},
            "seconds": time.perf_counter() - t0}


def within_allowance(case: dict) -> list[dict]:
    """Per iterate t and dimension d: the excess E mse_t - e_t, its standard error, and
    whether |excess| <= 2 stderr + FINITE_SIZE / d."""
    rows = []
    for f in case["trajectory_fits"]:
        for d, mean, err in zip(f["d"], f["mean"], f["stderr"]):
            excess = mean - f["se"]
            rows.append({"t": f["t"], "d": d, "excess": excess, "stderr": err,
                         "ok": abs(excess) <= 2.0 * err + FINITE_SIZE / d})
    return rows


def run_all() -> dict:
    from amp_attention.files import atomic_write_text

    protocol = {"T": T, "ds": list(DS), "seeds": SEEDS}
    out: dict = {**protocol, "cases": {}}
    if RECORD.exists():
        old = json.loads(RECORD.read_text())
        if {k: old.get(k) for k in protocol} == protocol:
            out = old
    for name in CASES:
        if name in out["cases"]:
            continue
        out["cases"][name] = case = run_case(name)
        atomic_write_text(RECORD, json.dumps(out, indent=1) + "\n")
        print(name, f"{case['seconds']:.0f} s, SE fixed point {case['se_fixed_point']:.4f}",
              flush=True)
        for f in case["trajectory_fits"]:
            z = (f["intercept"] - f["se"]) / f["intercept_se"]
            print(f"  t {f['t']:2d} SE {f['se']:.4f} d->inf {f['intercept']:.4f} +- "
                  f"{f['intercept_se']:.4f} (z {z:+.1f}) slope {f['slope']:.2f}", flush=True)
        rows = within_allowance(case)
        print(f"  within 2 stderr + {FINITE_SIZE:g}/d: {sum(r['ok'] for r in rows)}/{len(rows)}"
              + "".join(f"; t {r['t']} d {r['d']} excess {r['excess']:+.4f}"
                        for r in rows if not r["ok"]), flush=True)
    return out


if __name__ == "__main__":
    run_all()
    print("wrote", RECORD, file=sys.stderr)
