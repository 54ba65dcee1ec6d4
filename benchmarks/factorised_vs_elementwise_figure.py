"""Figure: factorised vs element-wise learner at a low-rank target, theory and Adam (issue 5).

    python benchmarks/factorised_vs_elementwise_figure.py [--cache DIR] [--out docs/figures/factorised_vs_elementwise.png]

Linear channel L = 1, Wishart target kappa0 = 0.1 (rank d/10), Delta = 0.1,
lam = 0.05 for both learners: the factorised W (kappa = 1, weight decay =
nuclear norm lam d Tr S) and the element-wise S (penalty lam d ||S||_F^2 / 2).
For each learner ``amp_attention.experiments.validate.run_validation`` solves the SE along alpha
and trains Adam (lr 0.03, full batch) at d in {48, 64, 96}, 3 seeds; runs are
cached in --cache (resumable).  Draws the test error against alpha (SE lines,
Adam points at each d and the a + b/d extrapolation) and writes the numbers
next to the figure (same stem, .json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from amp_attention.adam import AdamOptions  # noqa: E402
from amp_attention.jsonsafe import json_safe  # noqa: E402
from amp_attention.spec import Learner, Problem, Task, WishartTarget  # noqa: E402
from amp_attention.experiments.validate import ValidationPlan, run_validation  # noqa: E402

ALPHAS = (0.15, 0.3, 0.5, 0.75, 1.0)
DS = (48, 64, 96)
SEEDS = 3
LAM = 0.05
KAPPA0 = 0.1


def plan(parameterisation: str) -> ValidationPlan:
    problem = Problem(Task("linear", L=1, noise=0.1), WishartTarget(KAPPA0),
                      Learner(1.0, LAM, parameterisation), alpha=0.5)
    return ValidationPlan(problem, ALPHAS, DS, SEEDS, "quantile", AdamOptions(lr=0.03),
                          theory_points=40)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default="/tmp/amp-factorised-vs-elementwise")
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "factorised_vs_elementwise.png"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    fig, ax = plt.subplots(1, 1, figsize=(6.4, 4.4))
    record = {}
    for par, color in (("factorised", "C0"), ("elementwise", "C3")):
        s = run_validation(plan(par), Path(args.cache) / par)
        th = s["theory"]
        ax.plot([t["alpha"] for t in th], [t["test_error"] for t in th], "-", color=color, lw=2,
                label=f"{par}: SE")
        for k, (d, marker) in enumerate(zip(DS, ("^", "s", "D"))):
            rows = [r for r in s["table"] if r["d"] == str(d)]
            ax.errorbar([r["alpha"] for r in rows], [r["test_error"] for r in rows],
                        yerr=[r["test_error_stderr"] for r in rows], fmt=marker, ms=4, capsize=2,
                        color=color, alpha=0.35 + 0.2 * k, label=f"{par}: Adam d = {d}")
        rows = [r for r in s["table"] if r["d"] == "inf"]
        ax.errorbar([r["alpha"] for r in rows], [r["test_error"] for r in rows],
                    yerr=[r["test_error_stderr"] for r in rows], fmt="*", ms=10, capsize=2,
                    color=color, mec="k", label=f"{par}: Adam, a + b/d at d -> inf")
        record[par] = {"params": s["params"], "all_converged": s["all_converged"],
                       "table": s["table"],
                       "theory_at_alphas": [t for t in th if t["alpha"] in ALPHAS]}
    ax.set_yscale("log")
    ax.set_xlabel(r"$\alpha = n/d^2$")
    ax.set_ylabel(r"test error $e_{\rm test}$")
    ax.set_title(f"linear L=1, rank-{KAPPA0:g}d target, lam={LAM:g}, Delta=0.1", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6.5, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    out.with_suffix(".json").write_text(json.dumps(json_safe(record), indent=1, allow_nan=False))
    print(f"wrote {out} and {out.with_suffix('.json')}")
    for par in record:
        for r in record[par]["table"]:
            if r["d"] in ("inf", "theory"):
                print(f"  {par:<12} alpha={r['alpha']:<5g} {r['d']:<7} test_error={r['test_error']:.4f}"
                      f" +- {r['test_error_stderr']:.2g}")


if __name__ == "__main__":
    main()
