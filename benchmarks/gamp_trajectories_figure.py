"""Figure: GAMP's per-iteration overlaps against the SE iterates (issue 4).

    python benchmarks/gamp_trajectories_figure.py [--record tests/data/gamp_trajectories.json]
                                                  [--out docs/figures/gamp_trajectories.png]

Reads the record of tests/test_validation_gamp_slow.py (no new runs) and draws,
for the linear L = 1 and softmax L = 2 cases, m_t and q_t of GAMP (seed mean
+- one standard error, one colour per d) over the SE iterates (black), and
the t-averaged relative deviation against 1/d.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", default=str(ROOT / "tests" / "data" / "gamp_trajectories.json"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "gamp_trajectories.png"))
    args = ap.parse_args(argv)
    rec = json.loads(Path(args.record).read_text())
    names = list(rec)
    fig, axes = plt.subplots(len(names), 3, figsize=(13, 3.6 * len(names)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, name in enumerate(names):
        r = rec[name]
        se = np.array(r["se"])
        t = np.arange(se.shape[0])
        for col, (j, label) in enumerate(((0, "m_t = Tr(S0 Shat^t)/d"), (1, "q_t = Tr(Shat^t^2)/d"))):
            ax = axes[row, col]
            ax.plot(t, se[:, j], "k-", lw=2, label="SE iterates (d -> inf)", zorder=5)
            for c, (d, v) in enumerate(r["by_d"].items()):
                runs = np.array(v["m" if j == 0 else "q"])
                mean = runs.mean(axis=0)
                err = runs.std(axis=0, ddof=1) / np.sqrt(runs.shape[0])
                ax.errorbar(t + 0.08 * (c - 1.5), mean, yerr=err, fmt="o", ms=3.5, capsize=2,
                            color=colors[c], label=f"GAMP d = {d} ({v['seeds']} seeds)")
            ax.set_xlabel("iteration t")
            ax.set_title(f"{name}: {label}", fontsize=10)
            if col == 0:
                ax.legend(fontsize=7)
        ax = axes[row, 2]
        ds = np.array([int(d) for d in r["by_d"]], dtype=float)
        dev = np.array([v["mean_abs"] for v in r["by_d"].values()])
        ax.plot(1 / ds, 100 * dev, "o", label="GAMP vs SE, mean over t of |rel. dev.|")
        xs = np.linspace(0, 1 / ds.min() * 1.05, 50)
        ax.plot(xs, 100 * r["c_over_d"] * xs, "--", label=f"c / d, c = {r['c_over_d']:.2f}")
        ax.set_xlabel("1/d")
        ax.set_ylabel("%")
        ax.set_xlim(0, None)
        ax.set_ylim(0, None)
        ax.legend(fontsize=7)
        ax.set_title(f"{name}: deviation of m_t, q_t (t = 1..8)", fontsize=10)
    fig.suptitle("GAMP on data (undamped, Shat^0 = 0, V^0 = 1) vs SE iterates from (0, 0, 1)")
    fig.tight_layout()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
