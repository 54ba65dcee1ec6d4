"""The gap between the quickstart's SE curve and its ERM points, against d.

The quickstart draws direct ERM at d = 48 (2 seeds) beside the SE.  Near the
interpolation threshold the ERM points lie visibly above the curve; this script
measures that gap at d = 32 ... 128 (6 seeds each) to show that it is a finite-size
effect shrinking like 1/d (the numbers quoted in README.md and in the note of the
quickstart figure).  About 3 minutes on one core:

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/quickstart_finite_size.py
"""

from __future__ import annotations

import time

from amp_attention.erm import erm_statistics
from amp_attention.experiments.quickstart import QuickstartConfig
from amp_attention.solvers import solve_state_evolution

DS = (32, 48, 64, 96, 128)
SEEDS = range(6)


def main() -> None:
    c = QuickstartConfig()
    for alpha in (0.35, 0.75):
        p = c.problem(alpha)
        se = solve_state_evolution(p)
        print(f"alpha = {alpha}: SE e_test = {se.test_error:.4f}, e_train = {se.train_error:.4f}")
        print(f"  {'d':>4} {'ERM e_test':>18} {'gap':>8} {'d x gap':>8} {'ERM e_train':>18}")
        for d in DS:
            t0 = time.perf_counter()
            st = erm_statistics(p, d, SEEDS, keep_matrix=False, tol=c.erm_tol,
                                max_iter=c.erm_max_iter)
            gap = st.mean["test_error"] - se.test_error
            print(f"  {d:>4} {st.mean['test_error']:>9.4f} +- {st.stderr['test_error']:<6.4f}"
                  f"{gap:>8.4f} {d * gap:>8.2f} {st.mean['train_error']:>9.4f} +- "
                  f"{st.stderr['train_error']:<6.4f} ({time.perf_counter() - t0:.0f} s"
                  f"{'' if st.all_converged else ', NOT converged'})", flush=True)


if __name__ == "__main__":
    main()
