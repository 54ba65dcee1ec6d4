"""Benchmark: a 40-point scaling curve at d = 400 (issue 7 target: < 1 min on this machine).

    python benchmarks/bench_scaling.py [--d 400] [--points 40] [--ref-points 4]

Problem: power-law target gamma = 1 at d = 400 (deterministic equivalent: 400
atoms), linear L = 1, Delta = 0.5, lam = 0.05, alpha log-spaced in [0.5, 50];
what ``amp-attention scaling`` runs per point (warm-started SE, k*, the
four-way decomposition).  Reference in the same run: the SE of the first
``--ref-points`` points with the target's Stieltjes sums done by NumPy
broadcasting over (nodes x atoms) -- the implementation before the compiled
kernel -- against the same points with the kernel; median seconds per point
and the ratio.  (The other speed-up of the same change, panel breaks only at
nearly split gaps, is in both columns.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from amp_attention import targets  # noqa: E402
from amp_attention.spec import Learner, PowerLawTarget, Problem, Task  # noqa: E402
from amp_attention.experiments.scaling import ScalingPlan, run_scaling  # noqa: E402
from amp_attention.solvers.state_evolution import solve_state_evolution  # noqa: E402


class _NumpyStieltjes:
    """Context manager: DiscreteMeasure's Stieltjes sums by NumPy broadcasting."""

    def __enter__(self):
        cls = targets.DiscreteMeasure
        self._saved = (cls.stieltjes, cls.stieltjes_derivatives)

        def stieltjes(self, w):
            w = np.asarray(w, dtype=complex)
            return np.sum(self.weights / (w[..., None] - self.points), axis=-1)

        def stieltjes_derivatives(self, w):
            w = np.asarray(w, dtype=complex)
            r = 1.0 / (w[..., None] - self.points)
            r2 = r * r
            return (np.sum(self.weights * r, axis=-1), -np.sum(self.weights * r2, axis=-1),
                    2.0 * np.sum(self.weights * r2 * r, axis=-1))

        cls.stieltjes, cls.stieltjes_derivatives = stieltjes, stieltjes_derivatives
        return self

    def __exit__(self, *exc):
        targets.DiscreteMeasure.stieltjes, targets.DiscreteMeasure.stieltjes_derivatives = self._saved


def _per_point(problem: Problem, alphas) -> list[float]:
    times = []
    for a in alphas:
        p = Problem(problem.task, problem.target, problem.learner, alpha=float(a))
        t = time.perf_counter()
        r = solve_state_evolution(p, start="informative")
        times.append(time.perf_counter() - t)
        assert r.converged, r.status
    return times


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=400)
    ap.add_argument("--points", type=int, default=40)
    ap.add_argument("--ref-points", type=int, default=4)
    args = ap.parse_args(argv)
    problem = Problem(Task("linear", L=1, noise=0.5), PowerLawTarget(1.0, d=args.d),
                      Learner(1.0, 0.05), alpha=1.0)
    alphas = tuple(np.geomspace(0.5, 50.0, args.points))
    _per_point(problem, alphas[:1])                       # compile / warm caches
    t0 = time.perf_counter()
    rows = run_scaling(ScalingPlan(problem, alphas))
    total = time.perf_counter() - t0
    ok = sum(r["converged"] for r in rows)
    print(f"scaling curve: {args.points} points at d = {args.d}: {total:.1f} s "
          f"({total / args.points:.2f} s/point), {ok}/{args.points} converged, "
          f"k* {rows[0]['k_star']} -> {rows[-1]['k_star']}  (target < 60 s)")
    sub = alphas[:: max(1, args.points // args.ref_points)][: args.ref_points]
    ours = _per_point(problem, sub)
    with _NumpyStieltjes():
        ref = _per_point(problem, sub)
    m_ours, m_ref = statistics.median(ours), statistics.median(ref)
    print(f"cold SE per point, median of {len(sub)}: compiled {m_ours:.2f} s, NumPy reference "
          f"{m_ref:.2f} s, ratio reference/ours = {m_ref / m_ours:.2f}")


if __name__ == "__main__":
    main()
