"""Report of the linear-channel SE-vs-ERM validation (issue 2).

Reads tests/data/linear_finite_size.json (written by
`AMP_RECORD=1 python -m pytest -m slow tests/test_validation_linear_slow.py`),
prints a Markdown table (SE value, 1/d-extrapolated ERM value +- standard
error after removing the SE's own finite-d parameter shift SE_d - SE_inf,
relative difference, tolerance, slope, and the raw extrapolation without the
shift) and draws docs/figures/linear_se_vs_erm.png: per point and quantity, the
shifted per-seed ERM values against 1/d, the weighted fit a + b/d with its
intercept (+- 2 standard errors) and SE_inf at 1/d = 0.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "data" / "linear_finite_size.json"
FIG = ROOT / "docs" / "figures" / "linear_se_vs_erm.png"
LABELS = {"matrix_mse": "matrix MSE", "train_error": "train error"}


def main() -> None:
    rec = json.loads(RECORD.read_text())
    print("| point (L, kappa, kappa0, lam, Delta, alpha, learner) | quantity | SE | ERM, d->inf | rel. diff | tolerance | slope b | raw fit (rel. diff) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rec.items():
        for q, fit in r["fits"].items():
            th = r["se"][q]
            tol = max(0.03 * abs(th), 2 * fit["intercept_se"])
            rel = (fit["intercept"] - th) / abs(th)
            print(f"| {tuple(r['point'])} | {q} | {th:.5f} | {fit['intercept']:.5f} +- {fit['intercept_se']:.5f} "
                  f"| {rel:+.2%} | {tol / abs(th):.1%} | {fit['slope']:+.3f} +- {fit['slope_se']:.3f} "
                  f"| {r['fits_raw'][q]['intercept']:.5f} ({(r['fits_raw'][q]['intercept'] - th) / abs(th):+.2%}) |")
    n = len(rec)
    ncols = 3
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(2 * nrows, ncols, figsize=(3.4 * ncols, 2.4 * 2 * nrows), squeeze=False)
    for ax in axes.ravel()[2 * n:]:
        ax.axis("off")
    for k, (name, r) in enumerate(rec.items()):
        for i, q in enumerate(("matrix_mse", "train_error")):
            ax = axes[2 * (k // ncols) + i, k % ncols]
            j = k % ncols
            shift = {int(d): v[q] - r["se"][q] for d, v in r["se_by_d"].items()}
            ds = np.array([row["d"] for row in r["rows"]], float)
            ys = np.array([row[q] - shift[row["d"]] for row in r["rows"]], float)
            ax.plot(1 / ds, ys, "o", ms=3, alpha=0.6, color="C0", label="ERM - (SE_d - SE)")
            fit = r["fits"][q]
            xx = np.linspace(0, 1 / ds.min() * 1.05, 50)
            ax.plot(xx, fit["intercept"] + fit["slope"] * xx, "-", color="C0", lw=1, label="fit a + b/d")
            ax.errorbar([0], [fit["intercept"]], yerr=[2 * fit["intercept_se"]], fmt="s", color="C0", ms=4)
            ax.plot([0], [r["se"][q]], "*", color="C3", ms=10, label="SE")
            ax.set_xlabel("1/d")
            if j == 0:
                ax.set_ylabel(LABELS[q])
            if i == 0:
                ax.set_title(name.replace("_", " "), fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    FIG.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIG, dpi=110)
    print(f"\nfigure: {FIG.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
