"""One Bayes-optimal SE point against one ERM SE point of the same channel (issue 17:
the BO point must cost no more), side by side in one run, medians over repeats.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_bayes_se.py            # all cases
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_bayes_se.py --one bayes linear
                                                  # one solve, for whole-process timers

Cases (CLI defaults for the Monte-Carlo settings of each estimator):
  linear        L = 1, Delta = 0.5, kappa0 = 0.5, alpha = 0.5, lam = 0.1 (both closed form)
  softmax0      softmax L = 2, noiseless, alpha = 0.1, lam = 0.1 (BO closed form, ERM RQMC)
  softmax       softmax L = 2, Delta = 0.1 on the outputs, alpha = 0.5, lam = 0.2
                (BO nested RQMC 2^12 x 2^7, ERM RQMC 2^14; both 8 replicas)
The BLAS threads, the load average and the CPU count are printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.solvers.state_evolution import solve_state_evolution
from amp_attention.spec import Learner, Problem, Task, WishartTarget

CASES = {
    "linear": (Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1),
                       alpha=0.5), 20),
    "softmax0": (Problem(Task("softmax", L=2, noise=0.0), WishartTarget(0.5), Learner(1.0, 0.1),
                         alpha=0.1), 3),
    "softmax": (Problem(Task("softmax", L=2, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.2),
                        alpha=0.5), 3),
}


def solve(estimator: str, case: str):
    p = CASES[case][0]
    return solve_bayes_optimal(p) if estimator == "bayes" else solve_state_evolution(p)


def timed(estimator: str, case: str) -> tuple[float, object]:
    t0 = time.perf_counter()
    r = solve(estimator, case)
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", nargs=2, metavar=("ESTIMATOR", "CASE"),
                    help="solve one point (erm|bayes, a case) and exit")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = ap.parse_args()
    if args.one:
        r = solve(*args.one)
        print(args.one, r.status.value, r.matrix_mse)
        return
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    for case in args.cases:
        reps = CASES[case][1]
        timed("bayes", case), timed("erm", case)  # warm-up: compilation, caches
        tb, te, ratios = [], [], []
        for _ in range(reps):  # interleaved: drift of the machine's speed cancels in the ratio
            b, rb = timed("bayes", case)
            e, re_ = timed("erm", case)
            tb.append(b)
            te.append(e)
            ratios.append(b / e)
        print(f"{case:<9} BO {statistics.median(tb):8.3f} s  ERM {statistics.median(te):8.3f} s  "
              f"BO/ERM median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}, {reps} pairs)  MMSE {rb.matrix_mse:.4g} <= ERM "
              f"{re_.matrix_mse:.4g}; load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
