"""Numba's OpenMP threads against OpenBLAS's threads: active vs passive waiting.

A softmax ERM alternates Numba parallel kernels (the loss and its gradient over
the samples) with BLAS calls (GEMMs, eigendecompositions).  Both thread pools
spin for a while after each region; with the default of one BLAS thread per core
on a 2-core machine they take the cores from each other.  ``amp_attention`` sets
``OMP_WAIT_POLICY=PASSIVE`` unless the user set it; this script times the same
workload under both policies, alternately in fresh processes (A B A B ...), and
prints the medians and the pair-wise ratio:

    python benchmarks/bench_thread_pools.py [--pairs 3] [--busy]

Workload: four ERM fits of softmax L = 2 (logit noise 0.5, kappa = 1, kappa0 =
0.5) at d = 40, 2 seeds, alpha in {0.1, 0.4}, lam in {1e-3, 1e-4} (the ERM half of
tests/test_softmax_interpolation.py).  ``--busy`` keeps one core busy with a
spinning process during the measurement (a busy neighbour).  BLAS and Numba
thread counts are whatever the environment gives; they are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from machine import neighbour

WORKLOAD = """
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.erm import erm_statistics
for alpha, lam in [(0.1, 1e-3), (0.1, 1e-4), (0.4, 1e-3), (0.4, 1e-4)]:
    p = Problem(Task("softmax", L=2, beta=1.0, noise=0.5, noise_at="logit"),
                WishartTarget(0.5), Learner(1.0, lam), alpha=alpha)
    assert erm_statistics(p, 40, [0, 1], restarts=1, keep_matrix=False).all_converged
"""


def run(policy: str) -> float:
    env = dict(os.environ, OMP_WAIT_POLICY=policy)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", WORKLOAD], env=env, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="A/B pairs to time (after one warm-up pair)")
    ap.add_argument("--busy", action="store_true", help="keep one core busy while measuring")
    args = ap.parse_args()
    import numba

    print(f"cores {os.cpu_count()}, NUMBA_NUM_THREADS {numba.config.NUMBA_NUM_THREADS}, "
          f"OPENBLAS_NUM_THREADS {os.environ.get('OPENBLAS_NUM_THREADS', 'unset (one per core)')}, "
          f"load {os.getloadavg()[0]:.2f}")
    with neighbour(args.busy):
        run("PASSIVE"), run("ACTIVE")   # warm-up: Numba's on-disk cache
        passive, active = [], []
        for _ in range(args.pairs):
            passive.append(run("PASSIVE"))
            active.append(run("ACTIVE"))
            print(f"  passive {passive[-1]:7.1f} s   active {active[-1]:7.1f} s", flush=True)
    ratios = [a / b for a, b in zip(passive, active)]
    print(f"median wall: passive {statistics.median(passive):.1f} s, active "
          f"{statistics.median(active):.1f} s; passive/active {statistics.median(ratios):.3f} "
          f"(pairs {', '.join(f'{r:.3f}' for r in ratios)}); busy neighbour: {args.busy}")


if __name__ == "__main__":
    main()
