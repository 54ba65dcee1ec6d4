"""Interpolation with logit noise (issue 3): train error -> 0 below a threshold alpha.

Softmax seq2seq, L = 2, beta = 1, Wishart kappa0 = 0.5, kappa = 1, logit noise
Delta = 0.5 (labels stay inside the range of the softmax, so exact fits are
possible).  For lam in {1e-2, 1e-3, 1e-4} the SE train error is computed over an
alpha grid, and direct ERM at d = 64 (2 seeds, tol 1e-7) at a few alphas and
the smallest lam.  Writes docs/figures/softmax_interpolation.png and a JSON
table next to it.

    python benchmarks/softmax_interpolation.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from amp_attention.spec import Learner, Problem, Task, WishartTarget  # noqa: E402
from amp_attention.jsonsafe import json_safe  # noqa: E402
from amp_attention.erm import erm_statistics  # noqa: E402
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "figures" / "softmax_interpolation.png"
LAMS = (1e-2, 1e-3, 1e-4)
ALPHAS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7)
ERM_ALPHAS = (0.1, 0.2, 0.3, 0.5)


def problem(alpha: float, lam: float) -> Problem:
    return Problem(Task("softmax", L=2, beta=1.0, noise=0.5, noise_at="logit"), WishartTarget(0.5),
                   Learner(1.0, lam), alpha=alpha)


def main() -> None:
    table = {"se": [], "erm": []}
    for lam in LAMS:
        for a in ALPHAS:
            r = solve_state_evolution(problem(a, lam), start="informative",
                                      mc=MonteCarloOptions(11, 4, 0, coarse_log2_n=10), tol=1e-7, max_iter=400)
            table["se"].append({"lam": lam, "alpha": a, "train_error": r.train_error,
                                "train_error_mc_stderr": r.mc_stderr["train_error"],
                                "test_error": r.test_error, "V": r.V, "converged": r.converged})
            print("SE", lam, a, r.converged, r.train_error, r.V, flush=True)
    lam = LAMS[-1]
    for a in ERM_ALPHAS:
        st = erm_statistics(problem(a, lam), 64, [0, 1], restarts=1, keep_matrix=False,
                            max_iter=20000)
        table["erm"].append({"lam": lam, "alpha": a, "d": 64, "train_error": st.mean["train_error"],
                             "train_error_stderr": st.stderr["train_error"],
                             "all_converged": st.all_converged})
        print("ERM", a, st.mean["train_error"], st.all_converged, flush=True)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for lam in LAMS:
        rows = [r for r in table["se"] if r["lam"] == lam]
        ax.semilogy([r["alpha"] for r in rows], [max(r["train_error"], 1e-8) for r in rows], "-o",
                    ms=3, label=f"SE, lam = {lam:g}")
    e = table["erm"]
    ax.errorbar([r["alpha"] for r in e], [r["train_error"] for r in e],
                yerr=[r["train_error_stderr"] for r in e], fmt="s", color="k",
                label=f"ERM d = 64, lam = {LAMS[-1]:g}")
    ax.set_xlabel(r"$\alpha = n/d^2$")
    ax.set_ylabel("train error")
    ax.set_title("softmax L=2, logit noise Delta=0.5, kappa0=0.5", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT, dpi=120)
    OUT.with_suffix(".json").write_text(json.dumps(json_safe(table), indent=1, allow_nan=False))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
