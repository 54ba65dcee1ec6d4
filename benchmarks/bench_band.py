"""The paper's small-lambda band and one of its ordinary points, against the calibration
workload (issue 56), idle and beside a CPU-bound neighbour, with thread counts and load.

    python benchmarks/bench_band.py                  # both, idle and beside a neighbour
    python benchmarks/bench_band.py --runs 2 --no-neighbour

Calibration (C): bench_softmax.calibration (three one-thread eigh of a 1000 x 1000 matrix).
Points (softmax L = 2, kappa0 0.5, logit_goe Delta 0.5, the CLI's defaults otherwise), each
run through ``amp_attention.cli.main`` in this process after a warm-up, at ``--mc-seed``
0 .. runs - 1 (median time; the relative Monte-Carlo error of the noisy test error, their
``test``, as the rms of the runs' own estimates):

1. the band: their lreg 1e-4 (lam 5e-5), alpha 0.2484, the paper's prox branch (teacher),
   where the prox minimiser jumps and the SE needs the Monte-Carlo rule of docs/theory.md
   16.9.  Targets: <= 20 C, relative error <= 1 %.
2. a paper point: their lreg 0.01 (lam 0.005), alpha 0.248, outside the band.  Targets:
   <= 3 C, relative error <= 1e-3.
"""

from __future__ import annotations

import argparse
import sys

from bench_softmax import calibration, se_point
from machine import describe, load, neighbour


#: the paper's setting (besides se --channel softmax --json, bench_softmax.se_point's own)
PAPER = ["--L", "2", "--kappa0", "0.5", "--noise", "0.5", "--noise-at", "logit_goe"]
POINTS = {
    "band (lreg 1e-4, alpha 0.2484, teacher)": (["--lam", "5e-05", "--alpha", "0.2484",
                                                  "--prox-branch", "teacher"], 20.0, 1e-2),
    "paper point (lreg 0.01, alpha 0.248)": (["--lam", "0.005", "--alpha", "0.248"], 3.0, 1e-3),
}


def run(label: str, runs: int) -> None:
    print(f"\n== {label}: {describe()}; {load()}", flush=True)
    se_point([*PAPER, "--lam", "0.005", "--alpha", "0.248"], 1)  # warm-up: Numba caches
    for name, (extra, t_target, e_target) in POINTS.items():
        C = calibration()
        t, e, r = se_point([*PAPER, *extra], runs, "test_error_noisy")
        print(f"{name}: {t:.1f} s = {t / C:.1f} C (target <= {t_target:g} C; C = {C:.3f} s); "
              f"rel. MC error of the noisy test error {e:.1e} (target <= {e_target:g}); "
              f"test {r['test_error_noisy']:.4f}, status {r['status']}; "
              f"{r['method'][:90]}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=4, help="runs per point at seeds 0 .. runs - 1")
    p.add_argument("--no-neighbour", action="store_true", help="idle only")
    args = p.parse_args()
    run("idle", args.runs)
    if not args.no_neighbour:
        with neighbour(True):
            run("beside a CPU-bound neighbour", args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
