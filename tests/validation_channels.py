"""Shared definitions of the non-linear channel SE-vs-ERM validation (issue 3).

Points: softmax seq2seq L = 2 and L = 3, seq2lab L = 2; kappa0 = 0.5, beta = 1,
output noise Delta = 0.1, kappa = 1; alpha in {0.25, 0.5, 1}; lam in {0.05, 0.2}
(softmax) or {0.01, 0.05} (seq2lab).
ERM (erm.direct_erm, 1 random restart + the small start,
test error on max(n, 100000) fresh samples) at d in {48, 64, 96, 128}, 6 seeds
each; for kappa0 = 0.5 and even d the quantile target has exactly d/2 zero
eigenvalues, so no integer-rank shift arises (cf. the linear validation).
Train and test errors are fitted as a + b/d with the variance exponent
estimated from the per-d seed spread (the test error carries the d-independent
noise of its finite test set, so Var ~ 1/d^2 would overweight the largest d).
The intercept must agree with the SE (RQMC 2^14 x 8, Monte-Carlo error
propagated through the fixed point) within max(5 %, 2 sqrt(se_fit^2 + se_mc^2)).

Finished ERM runs and SE solutions are cached as one JSON file each in
$AMP_VALIDATION_CACHE (if set; written atomically), so an interrupted run
resumes and the points can be spread over several processes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from recording import cached_json

from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.erm import erm_statistics
from amp_attention.solvers.extrapolation import fit_inverse_d
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

RECORD = Path(__file__).parent / "data" / "channels_finite_size.json"
QUANTITIES = ("train_error", "test_error")
SEEDS = {48: 6, 64: 6, 96: 6, 128: 6}
MC = MonteCarloOptions(log2_n=14, replicas=8, seed=0, coarse_log2_n=10)
N_TEST_MIN = 100_000

# seq2lab's single scalar label carries little signal: at lam = 0.2 its SE fixed
# point is Shat = 0 (trivial), so it is validated at smaller lam.
LAMS = {"softmax": (0.05, 0.2), "seq2lab": (0.01, 0.05)}
POINTS = {
    f"{ch}_L{L}_a{a}_lam{lam}": (ch, L, a, lam)
    for ch, L in (("softmax", 2), ("softmax", 3), ("seq2lab", 2))
    for a in (0.25, 0.5, 1.0)
    for lam in LAMS[ch]
}


def problem_of(point) -> Problem:
    ch, L, alpha, lam = point
    return Problem(Task(ch, L=L, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, lam),
                   alpha=alpha)


def _cached(key: str, compute):
    """compute() once per key, kept in $AMP_VALIDATION_CACHE (see recording.cached_json)."""
    return cached_json("channels_v2_" + key, compute)


def tolerance(theory: float, fit: dict, mc_stderr: float) -> float:
    return max(0.05 * abs(theory), 2.0 * math.hypot(fit["intercept_se"], mc_stderr))


def run_point(name: str, seeds: dict[int, int] = SEEDS) -> dict:
    problem = problem_of(POINTS[name])

    def se_solve() -> dict:
        se = solve_state_evolution(problem, start="informative", mc=MC, tol=1e-8)
        assert se.converged, se.status
        return {"se": {q: getattr(se, q) for q in QUANTITIES},
                "se_mc_stderr": {q: se.mc_stderr[q] for q in QUANTITIES},
                "se_mc_error_method": se.mc_error_method}

    def erm_run(d: int, seed: int) -> dict:
        st = erm_statistics(problem, d, [seed], target_spectrum="quantile", restarts=1,
                            keep_matrix=False, n_test=max(N_TEST_MIN, round(problem.alpha * d * d)))
        assert st.all_converged, (name, d, st.not_converged)
        r = st.results[0]
        return {"d": d, "seed": r.seed, **{q: getattr(r, q) for q in QUANTITIES},
                "test_error_stderr": r.test_error_stderr,
                "restart_loss_spread": max(r.restart_losses) - min(r.restart_losses)}

    se = _cached(f"{name}_se_{MC.log2_n}x{MC.replicas}", se_solve)
    rows = [_cached(f"{name}_d{d}_s{s}", lambda d=d, s=s: erm_run(d, s))
            for d, k in seeds.items() for s in range(k)]
    fits = {}
    for q in QUANTITIES:
        fit = fit_inverse_d([r["d"] for r in rows], [r[q] for r in rows], variance_exponent=None)
        fits[q] = {"intercept": fit.intercept, "intercept_se": fit.intercept_se,
                   "slope": fit.slope, "slope_se": fit.slope_se,
                   "variance_exponent": fit.variance_exponent,
                   "seed_std_by_d": {d: float(np.std([r[q] for r in rows if r["d"] == d], ddof=1))
                                     if seeds[d] > 1 else math.nan for d in seeds}}
    return {"name": name, "point": POINTS[name], **se, "rows": rows, "fits": fits}


def load_record() -> dict:
    return json.loads(RECORD.read_text())


def markdown_table(record: dict) -> str:
    """The docs/validation.md table of a record: SE, extrapolated ERM, deviation, tolerance."""
    lines = ["| point | SE train | ERM train (d->inf) | rel. | SE test | ERM test (d->inf) | rel. | tol. |",
             "|---|---|---|---|---|---|---|---|"]
    for name in sorted(record):
        res = record[name]
        cells = [name]
        tols = []
        for q in QUANTITIES:
            th, fit = res["se"][q], res["fits"][q]
            cells += [f"{th:.5f}", f"{fit['intercept']:.5f}+-{fit['intercept_se']:.5f}",
                      f"{100 * (fit['intercept'] / th - 1):+.1f}%"]
            tols.append(100 * tolerance(th, fit, res["se_mc_stderr"][q]) / abs(th))
        cells.append("/".join(f"{t:.1f}%" for t in tols))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table(load_record()))
