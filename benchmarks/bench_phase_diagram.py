"""Benchmark: a 32 x 32 linear-channel phase diagram (issue 6 target: < 3 min on 2 cores).

    python benchmarks/bench_phase_diagram.py [--n 32] [--workers 2]

Problem: linear L = 1, Wishart kappa0 = 0.5, kappa = 1, Delta = 0.5; alpha in
[0.05, 1.5] (linear), lam in [1e-3, 1] (log), two continuation sweeps per lam
row (up and down in alpha), tol 1e-9.  Reference in the same run: a quarter of
the lam rows solved in this process with cold starts at every point (the SE as
one would call it point by point, ``start="both"``: informative and
uninformative), scaled to the full grid.  Prints wall times, seconds per
point, the ratio reference / ours, and the number of converged points.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amp_attention.spec import Learner, Problem, Task, WishartTarget  # noqa: E402
from amp_attention.experiments.phase_diagram import PhaseDiagramPlan, grid, run_phase_diagram  # noqa: E402
from amp_attention.solvers.state_evolution import solve_state_evolution  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    problem = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1))
    plan = PhaseDiagramPlan(problem, grid(0.05, 1.5, args.n, "linear"), grid(1e-3, 1.0, args.n, "log"))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        meta = run_phase_diagram(plan, Path(tmp), workers=args.workers)
        ours = time.perf_counter() - t0
    rows = range(0, args.n, 4)
    per_point = []
    t0 = time.perf_counter()
    for j in rows:
        for i in range(args.n):
            t1 = time.perf_counter()
            solve_state_evolution(plan.at(i, j), tol=plan.tol, max_iter=plan.max_iter)
            per_point.append(time.perf_counter() - t1)
    ref = (time.perf_counter() - t0) * args.n / len(rows)
    n_pts = args.n * args.n
    print(f"{args.n} x {args.n} grid ({n_pts} points, 2 sweeps each), {args.workers} worker(s)")
    print(f"  ours      : {ours:8.1f} s  ({ours / n_pts * 1e3:.1f} ms per point, wall)  "
          f"{meta['n_converged']}/{n_pts} converged, {meta['n_hysteresis']} hysteresis")
    print(f"  reference : {ref:8.1f} s  (cold start='both' per point, one process; median "
          f"{statistics.median(per_point) * 1e3:.1f} ms per point; {len(rows)}/{args.n} rows timed)")
    print(f"  ratio reference / ours: {ref / ours:.2f}   target: ours < 180 s -> "
          f"{'met' if ours < 180 else 'NOT met'}")


if __name__ == "__main__":
    main()
