"""Benchmark: one linear-channel SE point (Wishart target), our solver vs the
finite-size way (denoiser functionals averaged over sampled GOE matrices), both
against a high-precision (mpmath) reference of the same fixed point.

    python benchmarks/bench_se.py            # uses/creates benchmarks/data/se_reference.json
    python benchmarks/bench_se.py --regenerate-reference

Reference: amp_attention.reference (cubic for g_B, tanh-sinh quadrature at 30
digits, mpmath Newton on the fixed point) -- independent of freeprob.py.
Finite-size way: at every SE iteration draw S0 (Wishart) and Z (GOE) at
d = 400, apply the PSD soft-threshold map, average m = Tr(S0 Shat)/d,
q = Tr(Shat^2)/d and the exact divergence V over ``--goe-samples`` draws,
damped iteration for ``--goe-iters`` steps (Monte-Carlo noise prevents a
tight residual, so it runs a fixed budget).  Times are medians over repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from amp_attention.channels import LinearChannel
from amp_attention.denoisers import NuclearNormPSD
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.state_evolution import solve_state_evolution

POINT = dict(kappa0=0.5, L=1, noise=0.5, lam=0.1, alpha=0.5, kappa=1.0)
REF_PATH = Path(__file__).parent / "data" / "se_reference.json"
FIELDS = ("m", "q", "V", "matrix_mse", "train_error")


def problem() -> Problem:
    return Problem(Task("linear", L=POINT["L"], noise=POINT["noise"]), WishartTarget(POINT["kappa0"]),
                   Learner(POINT["kappa"], POINT["lam"]), alpha=POINT["alpha"])


def reference(regenerate: bool) -> dict:
    if REF_PATH.exists() and not regenerate:
        data = json.loads(REF_PATH.read_text())
        if data["point"] == POINT:
            return data
    import mpmath as mp

    from amp_attention.reference import linear_se_fixed_point

    start = solve_state_evolution(problem(), tol=1e-12)
    t0 = time.perf_counter()
    ref = linear_se_fixed_point(POINT["kappa0"], POINT["L"], POINT["noise"], POINT["lam"],
                                POINT["alpha"], (start.m, start.q, start.V), dps=30, tol=1e-24)
    data = {"point": POINT, "digits": 30, "seconds": time.perf_counter() - t0,
            "values": {k: mp.nstr(ref[k], 25) for k in FIELDS}}
    REF_PATH.write_text(json.dumps(data, indent=1))
    return data


def finite_size_se(d: int, samples: int, iters: int, damping: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    p = problem()
    ch = LinearChannel(POINT["L"], POINT["noise"])
    den = NuclearNormPSD(POINT["lam"], POINT["kappa"])
    Q0 = 1 + POINT["kappa0"]
    x = np.array([0.999 * Q0, Q0, 0.1])
    p0 = int(round(POINT["kappa0"] * d))
    for _ in range(iters):
        hat = ch.se(*x, Q0, p.alpha)
        acc = np.zeros(3)
        for _ in range(samples):
            W0 = rng.standard_normal((p0, d))
            S0 = W0.T @ W0 / math.sqrt(p0 * d)
            G = rng.standard_normal((d, d))
            Z = (G + G.T) / math.sqrt(2 * d)
            S, V = den.matrix_map(hat.m_hat * S0 + math.sqrt(hat.q_hat) * Z, hat.V_hat)
            acc += [np.sum(S0 * S) / d, np.sum(S * S) / d, V]
        x = (1 - damping) * x + damping * acc / samples
    hat = ch.se(*x, Q0, p.alpha)
    return {"m": x[0], "q": x[1], "V": x[2], "matrix_mse": Q0 - 2 * x[0] + x[1],
            "train_error": hat.train_error}


def timed(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regenerate-reference", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--goe-d", type=int, default=400)
    ap.add_argument("--goe-samples", type=int, default=2)
    ap.add_argument("--goe-iters", type=int, default=30)
    ap.add_argument("--goe-repeats", type=int, default=3)
    args = ap.parse_args(argv)

    ref = reference(args.regenerate_reference)
    refv = {k: float(v) for k, v in ref["values"].items()}
    solve_state_evolution(problem(), tol=1e-9)  # warm-up (imports, caches)
    rows = []
    t_ours, ours = timed(lambda: solve_state_evolution(problem(), tol=1e-9, start="informative"), args.repeats)
    rows.append(("ours (free prob., 1 start)", t_ours, {k: getattr(ours, k) for k in FIELDS}, ours.residual))
    t_both, both = timed(lambda: solve_state_evolution(problem(), tol=1e-9, start="both"), args.repeats)
    rows.append(("ours (free prob., 2 starts)", t_both, {k: getattr(both, k) for k in FIELDS}, both.residual))
    seeds = iter(range(1000))
    t_goe, goe = timed(lambda: finite_size_se(args.goe_d, args.goe_samples, args.goe_iters, 0.7, next(seeds)),
                       args.goe_repeats)
    rows.append((f"GOE sampling d={args.goe_d} x{args.goe_samples}, {args.goe_iters} it", t_goe, goe, float("nan")))

    print(f"point: {POINT}")
    print(f"reference: mpmath, {ref['digits']} digits (computed in {ref['seconds']:.0f} s)")
    print(f"{'method':44s} {'median s':>9s} {'residual':>9s} " + " ".join(f"{'err ' + k:>14s}" for k in FIELDS))
    for name, t, vals, res in rows:
        errs = " ".join(f"{abs(vals[k] - refv[k]) / abs(refv[k]):14.2e}" for k in FIELDS)
        print(f"{name:44s} {t:9.4f} {res:9.1e} {errs}")
    print(f"speed ratio GOE-sampling / ours(1 start) = {t_goe / t_ours:.0f}x; "
          f"/ ours(2 starts) = {t_goe / t_both:.0f}x")


if __name__ == "__main__":
    main()
