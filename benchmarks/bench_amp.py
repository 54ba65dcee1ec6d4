"""Benchmark: GAMP iteration against the machine's GEMM rate and a dense reference.

    python benchmarks/bench_amp.py [--d 128 256] [--alpha 1] [--L 2] [--iters 6]

For each d (alpha = 1, L = 2 by default; kappa0 = 0.5, kappa = 1, lam = 0.1):

* GEMM rate: numpy matmul of the two products one GAMP iteration needs,
  (nL x d) @ (d x d) and (d x nL) @ (nL x d), timed alone in the same run
  (best of 10 each: the throughput the machine can deliver) -> GFLOP/s;
* one GAMP iteration (median over ``--iters`` after two warm-up iterations,
  linear and softmax seq2seq channels) and the fraction of GEMM throughput it
  achieves: (GEMM flops of one iteration / t_iteration) / GEMM rate, i.e. the
  share of the iteration the two GEMMs would take at the machine's best rate
  (target from issue 4: >= 50 %);
* peak memory of a GAMP run (tracemalloc, separate short run: the sensing
  operator with its work buffer, and everything GAMP allocates) relative to
  the size of the data X and y;
* the naive dense formulation -- an explicit (n K) x N sensing matrix on the
  coordinates of Sym(d), as simple reference codes build it -- at the largest
  d whose matrix fits in a quarter of the RAM (at most the largest --d): its
  GAMP iteration time, and the ratio dense / ours on the same data.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc

import numpy as np

from amp_attention.channels import channel_for
from amp_attention.denoisers import denoiser_for
from amp_attention.data import generate_dataset
from amp_attention.gamp import DenseSensing, GAMPOptions, TokenSensing, gamp
from amp_attention.jsonsafe import json_safe
from amp_attention.spec import Learner, Problem, Task, WishartTarget


def timings(f, repeats: int) -> list[float]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return ts


def gemm_times(X: np.ndarray) -> tuple[float, float, float]:
    """(t_forward, t_adjoint, GFLOP/s) of the two products of one iteration."""
    n, L, d = X.shape
    X2 = X.reshape(n * L, d)
    rng = np.random.default_rng(0)
    S = rng.standard_normal((d, d))
    M2 = rng.standard_normal((n * L, d))
    t_f = min(timings(lambda: X2 @ S, 10))
    t_a = min(timings(lambda: X2.T @ M2, 10))
    flops = 2 * 2.0 * n * L * d * d
    return t_f, t_a, flops / (t_f + t_a) / 1e9


def problem(channel: str, L: int, alpha: float) -> Problem:
    return Problem(Task(channel, L=L, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.1),
                   alpha=alpha)


def iteration_time(sensing, y, ch, den, iters: int) -> float:
    stamps: list[float] = []
    gamp(sensing, y, ch, den, options=GAMPOptions(max_iter=iters + 2, tol=1e-300),
         callback=lambda row: stamps.append(time.perf_counter()))
    return float(np.median(np.diff(stamps[1:])))  # drop the first (warm-up) interval


def peak_memory(X, y, ch, den) -> int:
    tracemalloc.start()
    gamp(TokenSensing(X), y, ch, den, options=GAMPOptions(max_iter=3, tol=1e-300))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def total_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--L", type=int, default=2)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--json", metavar="FILE", default=None, help="also write the numbers as JSON")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'d':>4s} {'n':>7s} {'GEMM GF/s':>9s} {'channel':>8s} {'iter s':>7s} "
          f"{'GEMM frac':>9s} {'peak/data':>9s}")
    tokens = {}
    for d in args.d:
        for name in ("linear", "softmax"):
            p = problem(name, args.L, args.alpha)
            ch = channel_for(p.task)
            data = generate_dataset(p, d, 0, channel=ch)
            sensing = TokenSensing(data.X)
            if name == "linear":
                t_f, t_a, rate = gemm_times(sensing.X)
                tokens[d] = (data, sensing)
            den = denoiser_for(p.learner)
            gamp(sensing, data.y, ch, den, options=GAMPOptions(max_iter=1))  # compile
            t_it = iteration_time(sensing, data.y, ch, den, args.iters)
            data_bytes = data.X.nbytes + data.y.nbytes
            peak = peak_memory(data.X, data.y, ch, den)
            frac = (t_f + t_a) / t_it
            rows.append({"d": d, "n": data.n, "L": args.L, "alpha": args.alpha, "channel": name,
                         "gemm_forward_s": t_f, "gemm_adjoint_s": t_a, "gemm_gflops": rate,
                         "iteration_s": t_it, "gemm_fraction": frac, "peak_bytes": peak,
                         "data_bytes": data_bytes})
            print(f"{d:4d} {data.n:7d} {rate:9.1f} {name:>8s} {t_it:7.3f} {100 * frac:8.0f}% "
                  f"{peak / data_bytes:9.2f}")
    # Dense reference: the largest d whose sensing matrix fits in a quarter of the RAM.
    K = args.L * (args.L + 1) // 2
    budget = total_ram() / 4
    fits = [d for d in (48, 64, 96, 128, 160, 192, 256)
            if d <= max(args.d) and round(args.alpha * d * d) * K * d * (d + 1) / 2 * 8 <= budget]
    if not fits:
        print("dense reference: does not fit at any d")
    else:
        d = fits[-1]
        p = problem("linear", args.L, args.alpha)
        ch = channel_for(p.task)
        data = generate_dataset(p, d, 0, channel=ch)
        den = denoiser_for(p.learner)
        t0 = time.perf_counter()
        dense = DenseSensing(data.X)
        t_build = time.perf_counter() - t0
        t_dense = iteration_time(dense, data.y, ch, den, args.iters)
        t_ours = iteration_time(TokenSensing(data.X), data.y, ch, den, args.iters)
        print(f"dense reference at d = {d} (matrix {dense.A.nbytes / 2**30:.2f} GiB, built in "
              f"{t_build:.1f} s): iteration {t_dense:.3f} s vs ours {t_ours:.3f} s -> "
              f"ratio {t_dense / t_ours:.1f}x")
        rows.append({"dense_d": d, "dense_bytes": dense.A.nbytes, "dense_build_s": t_build,
                     "dense_iteration_s": t_dense, "ours_iteration_s": t_ours,
                     "ratio": t_dense / t_ours})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(json_safe(rows), fh, indent=1, allow_nan=False)


if __name__ == "__main__":
    main()
