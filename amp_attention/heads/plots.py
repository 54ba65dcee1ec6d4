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

from ..plotting import save_figure  # noqa: E402  (one title/layout/save convention for every figure)


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
        ax0.errorbar(x, [r["mse"] for r in rows], yerr=[r["mse_stderr"] for r in rows],
                     fmt="-o", ms=3, color=f"C{i}", label=f"ensemble, {label}")
        ax0.plot(x, [np.mean(r["head_mse"]) for r in rows], "--", color=f"C{i}", lw=1,
                 label=f"mean single head, {label}")
    ax0.set_xlabel("head diversity index HDI")
    ax0.set_ylabel("test MSE vs clean target")
    ax0.set_title("ensemble MSE vs HDI", fontsize=9)
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


def plot_allocation(panels: Mapping[str, Sequence[dict]], path: str | Path,
                    weighting: Mapping[str, Mapping[str, dict]] | None = None,
                    title: str | None = None) -> Path:
    """MSE vs H at fixed D = H d_k, one panel per configuration, one line per n.

    ``panels[label]`` is a list of AllocationResult.to_dict(); error bars are
    the paired standard errors of the difference from the argmin.  Optional
    ``weighting[label][scheme]`` (MSEDecomposition.to_dict()) adds a bar panel
    per configuration.
    """
    path = Path(path)
    extra = len(weighting) if weighting else 0
    k = len(panels) + extra
    fig, axes = plt.subplots(1, k, figsize=(4.3 * k, 3.7), squeeze=False)
    for ax, (label, results) in zip(axes[0], panels.items()):
        for i, res in enumerate(results):
            Hs = [r["H"] for r in res["rows"]]
            ax.errorbar(Hs, [r["mse"] for r in res["rows"]],
                        yerr=[r["paired_stderr"] for r in res["rows"]], fmt="-o", ms=3,
                        color=f"C{i}", label=f"n = {res['n']}")
            best = res["rows"][Hs.index(res["argmin_H"])]
            ax.plot([res["argmin_H"]], [best["mse"]], "*", ms=12, color=f"C{i}", mec="k")
        D = results[0]["D"]
        Hs = [r["H"] for r in results[0]["rows"]]
        ax.set_xscale("log")
        ax.set_xticks(Hs)
        ax.set_xticklabels([f"{h}\n({D // h})" for h in Hs], fontsize=7)
        ax.set_xlabel(f"heads H (d_k = D/H), D = {D}")
        ax.set_ylabel("ensemble test MSE")
        ax.set_title(f"allocation, {label} (star: argmin)", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    if weighting:
        for ax, (label, schemes) in zip(axes[0, len(panels):], weighting.items()):
            names = list(schemes)
            vals = [schemes[s]["mse"] for s in names]
            errs = [schemes[s]["mse_stderr"] for s in names]
            ax.bar(names, vals, yerr=errs, color=[f"C{i}" for i in range(len(names))], capsize=3)
            lo = min(v - 4 * e for v, e in zip(vals, errs))
            hi = max(v + 4 * e for v, e in zip(vals, errs))
            pad = 0.15 * (hi - lo)
            ax.set_ylim(lo - pad, hi + pad)
            ax.set_ylabel("ensemble test MSE")
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
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
