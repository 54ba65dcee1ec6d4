"""Figure: SE vs Adam-trained layers after 1/d extrapolation (issue 5).

    python benchmarks/adam_validation_figure.py [--record tests/data/adam_validation.json]
                                                [--out docs/figures/adam_validation.png]

Reads the record of tests/test_validation_adam_slow.py (no new runs).  One row
per channel (linear L = 1, softmax L = 2): test error and train error against
alpha for both lam (SE lines, Adam means at the largest d, a + b/d
extrapolation with one standard error), and the relative deviation of the
extrapolation from the SE with the 5 % band of the acceptance.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUANTITIES = ("test_error", "train_error")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", default=str(ROOT / "tests" / "data" / "adam_validation.json"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "adam_validation.png"))
    args = ap.parse_args(argv)
    rec = json.loads(Path(args.record).read_text())
    channels = sorted({name.split("_lam")[0] for name in rec})
    fig, axes = plt.subplots(len(channels), 3, figsize=(14, 3.9 * len(channels)), squeeze=False)
    for row, ch in enumerate(channels):
        names = sorted(n for n in rec if n.startswith(ch + "_lam"))
        for k, name in enumerate(names):
            s = rec[name]
            p = s["params"]
            color = f"C{k}"
            label = f"lam = {p['lam']:g}"
            d_max = str(max(p["ds"]))
            for col, q in enumerate(QUANTITIES):
                ax = axes[row][col]
                ax.plot([t["alpha"] for t in s["theory"]], [t[q] for t in s["theory"]], "-",
                        color=color, lw=1.8, label=f"{label}: SE")
                pts = [r for r in s["table"] if r["d"] == d_max]
                ax.errorbar([r["alpha"] for r in pts], [r[q] for r in pts],
                            yerr=[r[q + "_stderr"] for r in pts], fmt="o", mfc="none", ms=5,
                            capsize=2, color=color, label=f"{label}: Adam d = {d_max}")
                inf = [r for r in s["table"] if r["d"] == "inf"]
                ax.errorbar([r["alpha"] for r in inf], [r[q] for r in inf],
                            yerr=[r[q + "_stderr"] for r in inf], fmt="*", ms=9, capsize=2,
                            color=color, mec="k", label=f"{label}: Adam, d -> inf")
                ax.set_xlabel(r"$\alpha = n/d^2$")
                ax.set_title(f"{ch} L={p['L']}: {q.replace('_', ' ')}", fontsize=10)
                ax.grid(alpha=0.3)
            ax = axes[row][2]
            for q, marker in zip(QUANTITIES, ("*", "o")):
                th = {r["alpha"]: r[q] for r in s["table"] if r["d"] == "theory"}
                inf = [r for r in s["table"] if r["d"] == "inf"]
                ax.errorbar([r["alpha"] + 0.01 * k for r in inf],
                            [100 * (r[q] - th[r["alpha"]]) / th[r["alpha"]] for r in inf],
                            yerr=[100 * r[q + "_stderr"] / th[r["alpha"]] for r in inf],
                            fmt=marker, ms=6, capsize=2, color=color,
                            label=f"{label}: {q.replace('_', ' ')}")
        ax = axes[row][2]
        ax.axhspan(-5, 5, color="0.85", zorder=0, label="5 % band")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel("(Adam d -> inf - SE) / SE  [%]")
        ax.set_title(f"{ch}: relative deviation after 1/d extrapolation", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        axes[row][0].legend(fontsize=7)
    p = rec[sorted(rec)[0]]["params"]
    fig.suptitle(f"kappa0 = {p['target']['kappa0']:g}, kappa = {p['kappa']:g}, Delta = {p['noise']:g}, "
                 f"beta = {p['beta']:g}; Adam at d = {', '.join(map(str, p['ds']))}, "
                 f"seeds per alpha: {p['seeds']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
