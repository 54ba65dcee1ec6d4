"""Figure: interpolation and perfect-recovery thresholds from the lam -> 0+ SE (issue 6).

    python benchmarks/thresholds_figure.py [--out docs/figures/thresholds.png]

Left: alpha_interp against the label-noise variance Delta (linear L = 1 with
kappa0 = 0.5 and 1, linear L = 2, softmax L = 2 with logit noise; kappa = 1),
with the pure-noise limits 1/(4 r) (statistical dimension of the PSD cone per
equation).  Middle: alpha_interp against the learner width kappa (linear L = 1,
kappa0 = 0.5, Delta = 0.5).  Right: alpha_PR against the target rank kappa0
(linear L = 1 and L = 2, softmax L = 2, kappa = 1), with the parameter count
2 kappa0 - kappa0^2 of rank-kappa0 d PSD matrices per d^2/2 (divided by 2 r) for
reference.  Writes the numbers next to the figure (.json).
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
import numpy as np  # noqa: E402

from amp_attention.spec import Learner, Problem, Task, WishartTarget  # noqa: E402
from amp_attention.jsonsafe import json_safe  # noqa: E402
from amp_attention.solvers.thresholds import interpolation_threshold, perfect_recovery_threshold  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures" / "thresholds.png"))
    args = ap.parse_args(argv)
    noises = np.geomspace(1e-3, 1e3, 25)
    cases = {"linear L=1, kappa0=0.5": ("linear", 1, "output", 0.5, 1),
             "linear L=1, kappa0=1": ("linear", 1, "output", 1.0, 1),
             "linear L=2, kappa0=0.5": ("linear", 2, "output", 0.5, 3),
             "softmax L=2 (logit noise), kappa0=0.5": ("softmax", 2, "logit", 0.5, 2)}
    rec: dict = {"interp_vs_noise": {}, "interp_vs_kappa": {}, "pr_vs_kappa0": {}}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for k, (label, (ch, L, at, k0, r)) in enumerate(cases.items()):
        vals = [interpolation_threshold(Problem(Task(ch, L=L, noise=D, noise_at=at), WishartTarget(k0),
                                                Learner(1.0, 0.1))).alpha for D in noises]
        rec["interp_vs_noise"][label] = {"noise": noises.tolist(), "alpha_interp": vals}
        axes[0].plot(noises, vals, "-", color=f"C{k}", label=label)
        axes[0].axhline(1 / (4 * r), color=f"C{k}", ls=":", lw=1)
    axes[0].set_xscale("log")
    axes[0].set_xlabel(r"label noise $\Delta$")
    axes[0].set_ylabel(r"$\alpha_{\rm interp}$")
    axes[0].set_title(r"interpolation threshold (dotted: pure-noise limit $1/(4r)$)", fontsize=9)
    axes[0].legend(fontsize=7)
    kappas = np.linspace(0.1, 2.0, 20)
    for k, D in enumerate((0.1, 0.5, 5.0)):
        vals = [interpolation_threshold(Problem(Task("linear", L=1, noise=D), WishartTarget(0.5),
                                                Learner(float(kp), 0.1))).alpha for kp in kappas]
        rec["interp_vs_kappa"][f"Delta={D:g}"] = {"kappa": kappas.tolist(), "alpha_interp": vals}
        axes[1].plot(kappas, vals, "o-", ms=3, color=f"C{k}", label=rf"$\Delta$ = {D:g}")
    axes[1].set_xlabel(r"learner width $\kappa = p/d$")
    axes[1].set_ylabel(r"$\alpha_{\rm interp}$")
    axes[1].set_title("linear L=1, kappa0=0.5", fontsize=9)
    axes[1].legend(fontsize=7)
    kappa0s = np.linspace(0.05, 1.0, 14)
    for k, (label, ch, L, r) in enumerate((("linear L=1", "linear", 1, 1), ("linear L=2", "linear", 2, 3),
                                           ("softmax L=2", "softmax", 2, 2))):
        vals = [perfect_recovery_threshold(Problem(Task(ch, L=L, noise=0.0), WishartTarget(float(k0)),
                                                   Learner(1.0, 0.1))).alpha for k0 in kappa0s]
        rec["pr_vs_kappa0"][label] = {"kappa0": kappa0s.tolist(), "alpha_PR": vals}
        axes[2].plot(kappa0s, vals, "o-", ms=3, color=f"C{k}", label=label)
        axes[2].plot(kappa0s, (2 * kappa0s - kappa0s**2) / (2 * r), ":", color=f"C{k}", lw=1)
    axes[2].set_xlabel(r"target rank $\kappa_0$")
    axes[2].set_ylabel(r"$\alpha_{\rm PR}$")
    axes[2].set_title(r"perfect recovery, $\Delta = 0$ (dotted: parameter count / (2r))", fontsize=9)
    axes[2].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    plt.close(fig)
    Path(args.out).with_suffix(".json").write_text(json.dumps(json_safe(rec), indent=1,
                                                             allow_nan=False))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
