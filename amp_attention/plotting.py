"""Figures for the command line: state-evolution curves and learned-weight spectra.

Small pure functions: each takes arrays, writes one PNG and returns its path.
Matplotlib runs with the non-interactive Agg backend (selected here, before
pyplot is imported), so the functions work on headless machines; every figure
is closed after saving.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

#: axis labels of the quantities plot_se_curve knows by name
LABELS = {
    "test_error": r"test error $e_{\rm test}$",
    "train_error": r"train error $e_{\rm train}$",
    "matrix_mse": r"matrix MSE $\|\hat S - S_0\|_F^2/d$",
    "loss": r"loss $R/n$",
    "rank_fraction": r"rank fraction of $\hat S$",
    "m": r"$m = {\rm Tr}(S_0 \hat S)/d$",
    "q": r"$q = {\rm Tr}(\hat S^2)/d$",
}


def plot_se_curve(
    alphas: Sequence[float],
    theory: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    fields: Sequence[str] = ("test_error", "train_error", "matrix_mse"),
    erm: Mapping[str, object] | None = None,
    converged: Sequence[bool] | None = None,
    title: str | None = None,
) -> Path:
    """One panel per field: SE prediction vs alpha = n/d^2, optional ERM points.

    ``theory[field]`` holds the SE values at ``alphas``. ``erm`` (optional) is
    ``{"alpha": [...], "mean": {field: [...]}, "stderr": {field: [...]},
    "label": str}``; its points are drawn with error bars of one standard
    error. ``converged`` (optional, one flag per alpha) marks SE points that did
    not converge with red crosses.
    """
    path = Path(path)
    a = np.asarray(alphas, dtype=float)
    fig, axes = plt.subplots(1, len(fields), figsize=(4.2 * len(fields), 3.6), squeeze=False)
    for ax, name in zip(axes[0], fields):
        y = np.asarray(theory[name], dtype=float)
        ax.plot(a, y, "-", color="C0", lw=1.8, label="state evolution (d = inf)")
        if converged is not None:
            bad = ~np.asarray(converged, dtype=bool)
            if np.any(bad):
                ax.plot(a[bad], y[bad], "x", color="red", ms=8, label="SE not converged")
        if erm is not None:
            ea = np.asarray(erm["alpha"], dtype=float)
            em = np.asarray(erm["mean"][name], dtype=float)  # type: ignore[index]
            es = np.asarray(erm["stderr"][name], dtype=float)  # type: ignore[index]
            ax.errorbar(ea, em, yerr=es, fmt="o", color="C3", ms=5, capsize=3,
                        label=str(erm.get("label", "direct ERM")))
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel(LABELS.get(name, name))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    return _save(fig, path, title)


def plot_spectrum(
    x: Sequence[float],
    density_S: Sequence[float],
    atom_S: float,
    path: str | Path,
    *,
    sigma: Sequence[float] | None = None,
    density_W: Sequence[float] | None = None,
    atom_W: float | None = None,
    title: str | None = None,
) -> Path:
    """Predicted spectra of the learned weights (THEORY 5).

    Left: eigenvalue density of Shat (continuous part ``density_S`` on ``x``,
    atom of mass ``atom_S`` at 0 drawn as a stem). Right, when ``sigma`` is
    given: density of the normalised singular values sigma/(p d)^(1/4) of W,
    with its atom ``atom_W`` at 0.
    """
    path = Path(path)
    panels = 2 if sigma is not None and density_W is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.6), squeeze=False)
    _density_panel(axes[0][0], np.asarray(x, float), np.asarray(density_S, float), atom_S,
                   r"eigenvalue of $\hat S$", "C0")
    if panels == 2:
        _density_panel(axes[0][1], np.asarray(sigma, float), np.asarray(density_W, float),
                       atom_W, r"singular value of $W$, $\sigma/(pd)^{1/4}$", "C2")
    return _save(fig, path, title)


def _save(fig, path: Path, title: str | None) -> Path:
    """Title, layout, write the PNG and release the figure."""
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _density_panel(ax, x: np.ndarray, rho: np.ndarray, atom: float | None, xlabel: str,
                   color: str) -> None:
    ax.plot(x, rho, "-", color=color, lw=1.6, label="continuous part")
    ax.fill_between(x, rho, color=color, alpha=0.15)
    if atom is not None and atom > 0:
        top = float(np.max(rho)) if rho.size else 1.0
        ax.vlines(0.0, 0.0, top, colors="k", lw=2.5)
        ax.plot([0.0], [top], "v", color="k", ms=6, label=f"atom at 0, mass {atom:.3f}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.set_ylim(bottom=0.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
