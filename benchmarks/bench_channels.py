"""Benchmark: non-linear channels -- time per proximal solve and per SE point.

    python benchmarks/bench_channels.py [--log2n N --replicas R --tol T]

Prints, for softmax (seq2seq) L = 2 and L = 3 and seq2lab L = 2 (beta = 1,
kappa0 = 0.5, kappa = 1, lam = 0.1, Delta = 0.1, alpha = 0.5):
* the time per prox call per sample (batch of 2^16 samples, after Numba
  compilation) and the failure count;
* the wall time of one SE point (informative start, two-level solve) and the
  relative Monte-Carlo standard error it achieves on the train and test errors
  -- the error of the fixed point, propagated by the delta method over the
  replicas (targets from issue 3: <= 1e-3 relative in <= 20 s for L = 2 and
  <= 60 s for L = 3).  Default sizes: 2^15 x 8 points for L = 2, 2^16 x 8 for
  L = 3; the fixed-point tolerance 1e-6 (relative residual) moves the errors by
  ~1e-5 relative, two orders below their Monte-Carlo error.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from amp_attention.channels import channel_for
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

CASES = [("softmax", 2, 15), ("softmax", 3, 16), ("seq2lab", 2, 15)]  # (channel, L, log2 n)


def prox_timing(channel, n: int = 2**16, seed: int = 0) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    q, m, Q0, V = 1.0, 0.8, 1.5, 0.7
    omega = math.sqrt(q) * rng.standard_normal((n, channel.K))
    ustar = (m / q) * omega + math.sqrt(Q0 - m * m / q) * rng.standard_normal((n, channel.K))
    y = channel.labels_from_noise(channel.h_from_u(ustar), rng.standard_normal((n, channel.noise_dim)))
    channel.prox_batch(y[:64], omega[:64], V)  # compile
    t0 = time.perf_counter()
    px = channel.prox_batch(y, omega, V)
    return (time.perf_counter() - t0) / n, int(px.n_failed)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log2n", type=int, default=None, help="points per replica, log2 "
                    "(default: 15 for L = 2, 16 for L = 3)")
    ap.add_argument("--cold", action="store_true",
                    help="no warm-started prox (MonteCarloOptions.warm_start=False)")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--tol", type=float, default=1e-6)
    args = ap.parse_args(argv)
    print(f"{'channel':10s} {'L':>2s} {'prox us/sample':>15s} {'failed':>7s} {'SE s':>7s} "
          f"{'iters':>5s} {'rel.err train':>13s} {'rel.err test':>12s} {'samples/eval':>12s}")
    for name, L, log2n in CASES:
        log2n = args.log2n or log2n
        p = Problem(Task(name, L=L, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)
        t_prox, failed = prox_timing(channel_for(p.task))
        mc = MonteCarloOptions(log2n, args.replicas, 0, warm_start=not args.cold)
        solve_state_evolution(p, start="informative", mc=MonteCarloOptions(6, 2, 0), max_iter=2)  # warm-up
        t0 = time.perf_counter()
        r = solve_state_evolution(p, start="informative", mc=mc, tol=args.tol)
        t_se = time.perf_counter() - t0
        print(f"{name:10s} {L:2d} {1e6 * t_prox:15.1f} {failed:7d} {t_se:7.1f} {r.iterations:5d} "
              f"{r.mc_stderr['train_error'] / r.train_error:13.1e} "
              f"{r.mc_stderr['test_error'] / r.test_error:12.1e} {args.replicas * 2**log2n:12d}"
              f"{'' if r.converged else '  NOT CONVERGED: ' + r.summary}")


if __name__ == "__main__":
    main()
