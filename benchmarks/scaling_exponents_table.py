"""Table and figure: fitted scaling exponents vs the k*-predicted ones (issue 7).

    python benchmarks/scaling_exponents_table.py [--out-dir /tmp/amp-scaling] [--d 400]

For gamma in {0.75, 1, 1.25, 1.5}: power-law target at d (deterministic
equivalent), linear L = 1, Delta = 0.5, lam = 0.05 fixed and lam ~ n^-1/2
(--lam-exponent 0.5), 40 alpha log-spaced over two decades [0.5, 50] -- what
``amp-attention scaling`` runs (curves resumable under --out-dir).  Prints a
markdown table: fitted exponent of e_test (e0 = 0) with its 95 % interval, the
exponent a of k* ~ n^a, the prediction a (2 gamma - 1) and the noise-limited
1 - 1/(2 gamma); writes docs/figures/scaling_exponents.json and .png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from amp_attention.spec import Learner, PowerLawTarget, Problem, Task  # noqa: E402
from solvers.scaling import (ScalingPlan, fit_power_law, noise_limited_exponent,  # noqa: E402
                             recovered_mode_exponent, run_scaling)

GAMMAS = (0.75, 1.0, 1.25, 1.5)
ELLS = (0.0, 0.5)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default="/tmp/amp-scaling")
    ap.add_argument("--d", type=int, default=400)
    ap.add_argument("--points", type=int, default=40)
    ap.add_argument("--json", default=str(ROOT / "docs" / "figures" / "scaling_exponents.json"))
    args = ap.parse_args(argv)
    alphas = tuple(np.geomspace(0.5, 50.0, args.points))
    table, curves = [], {}
    for ell in ELLS:
        for g in GAMMAS:
            p = Problem(Task("linear", L=1, noise=0.5), PowerLawTarget(g, d=args.d), Learner(1.0, 0.05),
                        alpha=1.0)
            rows = run_scaling(ScalingPlan(p, alphas, ell), Path(args.out_dir) / f"g{g:g}_ell{ell:g}_d{args.d}")
            ok = [r for r in rows if r["converged"]]
            n = [r["n"] for r in ok]
            fit = fit_power_law(n, [r["test_error"] for r in ok], 0.0)
            kfit = recovered_mode_exponent(n, [r["k_star"] for r in ok], g)
            row = {"gamma": g, "lam_exponent": ell, "converged": len(ok), "points": len(rows),
                   "fit": dataclasses.asdict(fit), "k_star_fit": kfit,
                   "k_star_range": [ok[0]["k_star"], ok[-1]["k_star"]],
                   "noise_limited": noise_limited_exponent(g)}
            table.append(row)
            curves[f"{g:g}_{ell:g}"] = {"n": n, "test_error": [r["test_error"] for r in ok],
                                       "k_star": [r["k_star"] for r in ok],
                                       "under": [r["decomposition"]["under"] for r in ok]}
    print("| gamma | lam ~ n^-ell | k* range | fitted f (e_test, e0 = 0) [95 %] | a (k* ~ n^a) | "
          "a (2 gamma - 1) [95 %] | 1 - 1/(2 gamma) |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        f, k = r["fit"], r["k_star_fit"]
        print(f"| {r['gamma']:g} | {r['lam_exponent']:g} | {r['k_star_range'][0]}-{r['k_star_range'][1]} | "
              f"{f['exponent']:.3f} [{f['ci_low']:.3f}, {f['ci_high']:.3f}] | {k['a']:.3f} | "
              f"{k['exponent']:.3f} [{k['exponent_ci'][0]:.3f}, {k['exponent_ci'][1]:.3f}] | "
              f"{r['noise_limited']:.3f} |")
    Path(args.json).write_text(json.dumps({"d": args.d, "alphas": list(alphas), "table": table},
                                          indent=1))
    fig, axes = plt.subplots(1, len(ELLS), figsize=(6.0 * len(ELLS), 4.4), squeeze=False)
    for ax, ell in zip(axes[0], ELLS):
        for j, g in enumerate(GAMMAS):
            c = curves[f"{g:g}_{ell:g}"]
            r = next(t for t in table if t["gamma"] == g and t["lam_exponent"] == ell)
            n = np.array(c["n"])
            ax.loglog(n, c["test_error"], "o", ms=2.5, color=f"C{j}",
                      label=rf"$\gamma$={g:g}: fit f={r['fit']['exponent']:.2f}, "
                            rf"$k^*$-pred {r['k_star_fit']['exponent']:.2f}")
            ax.loglog(n, r["fit"]["amplitude"] * n ** (-r["fit"]["exponent"]), "-", lw=1, color=f"C{j}")
        ax.set_xlabel(r"$n = \alpha d^2$")
        ax.set_ylabel(r"$e_{\rm test}$ (SE, deterministic equivalent)")
        ax.set_title(rf"d = {args.d}, $\Delta$ = 0.5, $\lambda$ = 0.05 $(\alpha/0.5)^{{-{ell:g}}}$", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    png = Path(args.json).with_suffix(".png")
    fig.savefig(png, dpi=130)
    print(f"wrote {args.json} and {png}", file=sys.stderr)


if __name__ == "__main__":
    main()
