"""Figures of the head-diversity toolkit (matplotlib, Agg backend, one PNG per call).

Shared by ``amp-attention heads`` and benchmarks/heads_figure.py.  Each
function takes plain dicts/rows (the JSON the callers write), saves one PNG,
closes the figure and returns the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

from ..files import atomic_save_figure  # noqa: E402
from ..plotting import FIGURE_DPI, save_figure  # noqa: E402  (one title/layout/save convention for every figure)


def plot_rotation(curves: Mapping[str, Sequence[dict]], path: str | Path,
                  title: str | None = None) -> Path:
    """Ensemble MSE vs HDI per configuration, then one decomposition panel per configuration.

    ``curves[label]`` is a list of RotationPoint.to_dict() rows (keys hdi, mse,
    mse_stderr, bias2, variance, covariance, head_mse).
    """
    path = Path(path)
    k = len(curves)
    fig, axes = plt.subplots(1, k + 1, figsize=(4.3 * (k + 1), 3.7), squeeze=False)
    ax0 = axes[0, 0]
    for i, (label, rows) in enumerate(curves.items()):
        x = np.array([r["hdi"] for r in rows])
        ax0.errorbar(x, [r["mse"] for r in rows],
                     yerr=[r.get("paired_stderr", r["mse_stderr"]) for r in rows],
                     fmt="-o", ms=3, capsize=2, color=f"C{i}", label=f"ensemble, {label}")
        ax0.plot(x, [np.mean(r["head_mse"]) for r in rows], "--", color=f"C{i}", lw=1,
                 label=f"mean single head, {label}")
    ax0.set_xlabel("head diversity index HDI")
    ax0.set_ylabel("test MSE vs clean target")
    ax0.set_ylim(bottom=0.0)
    ax0.set_title("ensemble MSE vs HDI (bars: SE paired with HDI = 0)", fontsize=9)
    ax0.legend(fontsize=6.5)
    ax0.grid(alpha=0.3)
    for ax, (label, rows) in zip(axes[0, 1:], curves.items()):
        x = np.array([r["hdi"] for r in rows])
        ax.plot(x, [r["mse"] for r in rows], "-o", ms=3, color="k", label="MSE (measured)")
        ax.plot(x, [r["bias2"] for r in rows], "-", color="C3", label=r"bias$^2$")
        ax.plot(x, [r["variance"] for r in rows], "-", color="C2",
                label=r"$\sum_h w_h^2 \mathrm{Var}_h$")
        ax.plot(x, [r["covariance"] for r in rows], "-", color="C1",
                label=r"$\sum_{h\neq h'} w_h w_{h'} \mathrm{Cov}_{hh'}$")
        ax.plot(x, [np.mean(r["head_bias2"]) for r in rows], ":", color="C3",
                label=r"mean single-head bias$^2$")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_xlabel("HDI")
        ax.set_title(f"decomposition, {label}", fontsize=9)
        ax.legend(fontsize=6.5)
        ax.grid(alpha=0.3)
    return save_figure(fig, path, title)


def plot_allocation(panels: Mapping[str, Sequence[dict]], path: str | Path, *,
                    intrinsic_dim: int, replicates: Mapping[str, Sequence[Sequence[dict]]]
                    | None = None, title: str | None = None) -> Path:
    """MSE vs H at fixed D = H d_k (one panel per configuration, one line per n), then
    the argmin d_k* against n with the law d_k* ~ (log n)^(2/(4+s)) overlaid.

    ``panels[label]`` is a list of AllocationResult.to_dict() (one per n); error
    bars are the paired standard errors of the difference from the argmin, and the
    MSE axes start at 0 (no truncated axis exaggerates a difference).
    ``replicates[label]`` (default: ``[panels[label]]``) holds the same sweep for
    several seeds: the last panel shows each seed's argmin d_k (a bar spans the d_k
    within 2 paired SE of it), and the law through the geometric mean of the
    argmins at the smallest n (the law has no constant).
    """
    path = Path(path)
    k = len(panels)
    fig, axes = plt.subplots(1, k + 1, figsize=(4.0 * (k + 1), 3.7), squeeze=False)
    for ax, (label, results) in zip(axes[0], panels.items()):
        for i, res in enumerate(results):
            Hs = [r["H"] for r in res["rows"]]
            ax.errorbar(Hs, [r["mse"] for r in res["rows"]],
                        yerr=[r["paired_stderr"] for r in res["rows"]], fmt="-o", ms=3,
                        capsize=2, color=f"C{i}", label=f"n = {res['n']}")
            best = res["rows"][Hs.index(res["argmin_H"])]
            ax.plot([res["argmin_H"]], [best["mse"]], "*", ms=12, color=f"C{i}", mec="k")
        D = results[0]["D"]
        Hs = [r["H"] for r in results[0]["rows"]]
        ax.set_xscale("log")
        ax.set_xticks(Hs)
        ax.set_xticklabels([f"{h}\n({D // h})" for h in Hs], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel(f"heads H (d_k = D/H in brackets), D = {D}")
        ax.set_ylabel("ensemble test MSE")
        ax.set_ylim(bottom=0.0, top=1.08 * max(r["mse"] + r["paired_stderr"]
                                                for res in results for r in res["rows"]))
        ax.set_title(f"{label} (star: argmin; bars: paired SE)", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    ax = axes[0, k]
    replicates = replicates or {label: [results] for label, results in panels.items()}
    ns_all: list[int] = []
    for i, (label, reps) in enumerate(replicates.items()):
        for j, sweeps in enumerate(reps):
            ns = np.array([s["n"] for s in sweeps], dtype=float)
            ns_all.extend(ns)
            dodge = 1.13 ** (j - (len(reps) - 1) / 2) * 1.04 ** (i - (len(replicates) - 1) / 2)
            dk = np.array([s["argmin_dk"] for s in sweeps], dtype=float)
            tied = [[s["D"] // h for h in s["tied_H"]] or [s["argmin_dk"]] for s in sweeps]
            lo = dk - np.array([min(t) for t in tied])
            hi = np.array([max(t) for t in tied]) - dk
            ax.errorbar(ns * dodge, dk, yerr=[lo, hi], fmt="o:", ms=4, lw=0.8, capsize=2,
                        color=f"C{i}", alpha=0.85,
                        label=f"{label}: argmin, {len(reps)} seed{'s' * (len(reps) > 1)}"
                        if j == 0 else None)
        first = [sweeps[0]["argmin_dk"] for sweeps in reps]
        anchor = float(np.exp(np.mean(np.log(first))))
        n0 = min(s["n"] for s in reps[0])
        grid = np.geomspace(n0, max(s["n"] for s in reps[0]), 50)
        law = anchor * (np.log(grid) / np.log(n0)) ** (2.0 / (4.0 + intrinsic_dim))
        ax.plot(grid, law, "--", color=f"C{i}", lw=1.5,
                label=f"{label}: law (log n)$^{{2/(4+s)}}$, x{law[-1] / law[0]:.3f}")
    D = next(iter(panels.values()))[0]["D"]
    divisors = [q for q in range(1, D + 1) if D % q == 0]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_yticks(divisors)
    ax.set_yticklabels([str(q) for q in divisors])
    ax.minorticks_off()
    ax.set_ylim(0.7, 1.3 * D)
    ns_unique = sorted(set(int(n) for n in ns_all))
    ax.set_xticks(ns_unique)
    ax.set_xticklabels([str(n) for n in ns_unique])
    ax.set_xlim(ns_unique[0] / 1.4, ns_unique[-1] * 1.4)
    ax.set_xlabel("training points n")
    ax.set_ylabel("best head width d_k*")
    ax.set_title("argmin d_k* vs n (bars: d_k within 2 paired SE)", fontsize=9)
    ax.legend(fontsize=6.5, loc="lower right")
    ax.grid(alpha=0.3)
    return save_figure(fig, path, title)


def plot_weighting_schemes(weighting: Mapping[str, Mapping[str, dict]], path: str | Path,
                           title: str | None = None) -> Path:
    """Bars of the ensemble MSE per weighting scheme, one panel per configuration
    (``weighting[label][scheme]`` = MSEDecomposition.to_dict()); axes start at 0."""
    path = Path(path)
    fig, axes = plt.subplots(1, len(weighting), figsize=(4.0 * len(weighting), 3.5),
                             squeeze=False)
    for ax, (label, schemes) in zip(axes[0], weighting.items()):
        names = list(schemes)
        vals = [schemes[s]["mse"] for s in names]
        errs = [schemes[s]["mse_stderr"] for s in names]
        ax.bar(names, vals, yerr=errs, color=[f"C{i}" for i in range(len(names))], capsize=3)
        for x, (v, e) in enumerate(zip(vals, errs)):
            ax.text(x, v + e, f"{v:.3f}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0.0, 1.15 * max(v + e for v, e in zip(vals, errs)))
        ax.set_ylabel("ensemble test MSE (bars: SE)")
        ax.set_title(f"weighting schemes, {label}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path, title)


def plot_weighting(schemes: Mapping[str, dict], path: str | Path,
                   title: str | None = None) -> Path:
    """Bars of the ensemble MSE per weighting scheme, with its bias^2/variance/covariance split."""
    path = Path(path)
    names = list(schemes)
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 3.7))
    axes[0].bar(names, [schemes[s]["mse"] for s in names],
                yerr=[schemes[s]["mse_stderr"] for s in names], capsize=3,
                color=[f"C{i}" for i in range(len(names))])
    axes[0].set_ylabel("ensemble test MSE")
    axes[0].set_title("MSE by weighting scheme", fontsize=9)
    x = np.arange(len(names))
    for j, (key, lab) in enumerate((("bias2", "bias^2"), ("variance", "sum w^2 Var"),
                                    ("covariance", "sum w w' Cov"))):
        axes[1].bar(x + (j - 1) * 0.27, [schemes[s][key] for s in names], width=0.27, label=lab)
    axes[1].set_xticks(x)
    axes[1].set_xticklabels(names)
    axes[1].set_yscale("symlog", linthresh=1e-3)
    axes[1].set_title("decomposition", fontsize=9)
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path, title)


def plot_overlaps(overlaps: np.ndarray, path: str | Path, title: str | None = None) -> Path:
    """Heat map of the pairwise overlaps ||G_hh'||_F^2 (1 - overlap is the pair's diversity)."""
    path = Path(path)
    O = np.asarray(overlaps, dtype=float)
    fig, ax = plt.subplots(figsize=(4.6, 3.9))
    im = ax.imshow(O, cmap="viridis", vmin=0.0, vmax=max(1.0, float(O.max())))
    fig.colorbar(im, ax=ax, label=r"$\|G_{hh'}\|_F^2$")
    ax.set_xlabel("head h'")
    ax.set_ylabel("head h")
    ax.set_title(title or "pairwise subspace overlaps", fontsize=9)
    fig.tight_layout()
    atomic_save_figure(fig, path, dpi=FIGURE_DPI)
    plt.close(fig)
    return path
