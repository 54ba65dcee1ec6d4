"""Figures for the command line: state-evolution curves and learned-weight spectra.

Small pure functions: each takes arrays, writes one PNG and returns its path.
Matplotlib runs with the non-interactive Agg backend (selected here, before
pyplot is imported), so the functions work on headless machines; every figure
is closed after saving.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402

from .files import atomic_save_figure  # noqa: E402

#: resolution of the raster (PNG) figures, dots per inch; PDF and SVG are vector (the
#: format follows the suffix of the path each function is given)
FIGURE_DPI = 300

#: axis labels of the quantities plot_se_curve knows by name
LABELS = {
    "test_error": r"test error $e_{\rm test}$",
    "train_error": r"train error $e_{\rm train}$",
    "matrix_mse": r"matrix MSE $\|\hat S - S_0\|_F^2/d$",
    "loss": r"loss $R/n$",
    "rank_fraction": r"rank fraction of $\hat S$",
    "m": r"$m = {\rm Tr}(S_0 \hat S)/d$",
    "q": r"$q = {\rm Tr}(\hat S^2)/d$",
    "test_error_over_bayes": r"$e_{\rm test}$ of ERM / Bayes-optimal",
    "matrix_mse_over_bayes": "matrix MSE of ERM / Bayes-optimal MMSE",
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
    note: str | None = None,
    bayes: Mapping[str, Sequence[float]] | None = None,
    vlines: Mapping[str, float] | None = None,
) -> Path:
    """One panel per field: SE prediction vs alpha = n/d^2, optional ERM points.

    ``theory[field]`` holds the SE values at ``alphas``. ``erm`` (optional) is
    ``{"alpha": [...], "mean": {field: [...]}, "stderr": {field: [...]},
    "label": str}``; its points are drawn with error bars of one standard
    error. ``converged`` (optional, one flag per alpha) marks SE points that did
    not converge with red crosses.  ``bayes[field]`` (optional, the fields it has) is the
    Bayes-optimal curve, drawn in black.  ``vlines`` maps labels to alphas (thresholds)
    drawn as dotted vertical lines on every panel where finite.  One legend for all panels
    sits below them, with ``note`` (a caption line) under it.
    """
    path = Path(path)
    a = np.asarray(alphas, dtype=float)
    fig, axes = plt.subplots(1, len(fields), figsize=(4.2 * len(fields), 3.6), squeeze=False)
    for ax, name in zip(axes[0], fields):
        y = np.asarray(theory[name], dtype=float)
        ax.plot(a, y, "-", color="C0", lw=1.8, label="state evolution (d = inf)")
        if bayes is not None and name in bayes:
            ax.plot(a, np.asarray(bayes[name], dtype=float), "--", color="k", lw=1.5,
                    label="Bayes-optimal (MMSE)")
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
        for k, (label, x) in enumerate((vlines or {}).items()):
            if x is not None and np.isfinite(x):
                ax.axvline(x, color="0.35", ls=(":", "-.")[k % 2], lw=1.3, label=label)
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel(LABELS.get(name, name))
        ax.set_ylim(bottom=0.0)
        ax.grid(alpha=0.3)
    return save_figure(fig, path, title, legend_from=axes[0][0], note=note)


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
    outliers: Sequence[Mapping] | None = None,
) -> Path:
    """Predicted spectra of the learned weights (docs/theory.md "Spectra of the learned weights").

    Left: eigenvalue density of Shat (continuous part ``density_S`` on ``x``,
    atom of mass ``atom_S`` at 0 drawn as a stem). Right, when ``sigma`` is
    given: density of the normalised singular values sigma/(p d)^(1/4) of W,
    with its atom ``atom_W`` at 0.  ``outliers`` (dicts with ``eigenvalue``,
    ``cos2``, ``target_eigenvalue``) are drawn as red lines with their overlaps.
    """
    path = Path(path)
    panels = 2 if sigma is not None and density_W is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.6), squeeze=False)
    _density_panel(axes[0][0], np.asarray(x, float), np.asarray(density_S, float), atom_S,
                   r"eigenvalue of $\hat S$", "C0")
    if panels == 2:
        _density_panel(axes[0][1], np.asarray(sigma, float), np.asarray(density_W, float),
                       atom_W, r"singular value of $W$, $\sigma/(pd)^{1/4}$", "C2")
    _outlier_lines(axes[0][0], outliers, sqrt=False)
    if panels == 2:
        _outlier_lines(axes[0][1], outliers, sqrt=True)
    return save_figure(fig, path, title)


def _outlier_lines(ax, outliers: Sequence[Mapping] | None, sqrt: bool) -> None:
    """Predicted outliers as red vertical lines, labelled with the target eigenvalue and cos^2."""
    shown = [o for o in (outliers or []) if o.get("eigenvalue")]
    if not shown:
        return
    top = ax.get_ylim()[1]
    for k, o in enumerate(shown):
        x = float(np.sqrt(o["eigenvalue"])) if sqrt else float(o["eigenvalue"])
        ax.axvline(x, color="red", lw=1.2, ls="--", label="SE outliers" if k == 0 else None)
        ax.text(x, top * (0.9 - 0.12 * (k % 4)), f" s0={o['target_eigenvalue']:.3g}\n cos2={o['cos2']:.3f}",
                color="red", fontsize=6.5, va="top")
    ax.legend(fontsize=7)


def save_figure(fig, path: Path, title: str | None, *, legend_from=None,
                legend_columns: int | None = None, legend_face: str | None = None,
                note: str | None = None) -> Path:
    """Title, layout, write the PNG and release the figure.

    ``legend_from`` (an axes): its handles become one legend for the whole
    figure, in a band below the panels, so that it never covers data; with
    ``legend_columns`` columns (default: all entries on one row) and face colour
    ``legend_face`` (a grey face keeps white markers visible). ``note`` is a
    caption line under everything. The bands are sized in inches, so a short
    strip and a tall grid of panels get the same legend band.
    """
    handles, labels = legend_from.get_legend_handles_labels() if legend_from is not None else ([], [])
    height = fig.get_figheight()
    note_band = 0.3 / height if note else 0.0
    columns = min(len(handles), legend_columns or len(handles)) if handles else 1
    rows = -(-len(handles) // columns)
    legend_band = (0.25 + 0.15 * rows) / height if handles else 0.0
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, note_band + legend_band, 1, 1))
    if handles:
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, note_band),
                   ncol=columns, fontsize=8,
                   facecolor=legend_face, framealpha=1.0 if legend_face else None)
    if note:
        fig.text(0.5, 0.1 / height, note, ha="center", va="bottom", fontsize=7.5, wrap=True)
    atomic_save_figure(fig, path, dpi=FIGURE_DPI)
    plt.close(fig)
    return path


def _density_panel(ax, x: np.ndarray, rho: np.ndarray, atom: float | None, xlabel: str,
                   color: str) -> None:
    ax.plot(x, rho, "-", color=color, lw=1.6, label="continuous part")
    ax.fill_between(x, rho, color=color, alpha=0.15)
    atom_label = f"atom at 0, mass {atom:.3f}" if atom is not None and atom > 0 else None
    _atom_and_axes(ax, float(np.max(rho)) if rho.size else 1.0, atom_label, xlabel, 8)


def _atom_and_axes(ax, height: float, atom_label: str | None, xlabel: str, fontsize: int) -> None:
    """The atom at 0 as a stem of ``height`` (when labelled) and the density-axis styling."""
    if atom_label is not None:
        ax.vlines(0.0, 0.0, height, colors="k", lw=2.5)
        ax.plot([0.0], [height], "v", color="k", ms=6, label=atom_label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    # headroom above the data for the legend, so that it never covers a bar or the curve
    ax.set_ylim(0.0, 1.45 * ax.get_ylim()[1])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=fontsize, loc="upper right")


def plot_spectrum_overlay(
    spectrum,
    runs: Sequence[Mapping],
    per_d: Sequence[Mapping],
    path: str | Path,
    *,
    zero_tol: float = 1e-6,
    bins: int = 50,
    title: str | None = None,
) -> Path:
    """Predicted spectra (a ``PredictedSpectrum``) over histograms of trained weights.

    Histograms pool the seeds of the largest d in ``runs`` (stored run dicts
    with ``d``, ``p``, ``eigenvalues_S``, ``singular_values_W``); they are
    normalised like the prediction (over d eigenvalues, over min(p, d) singular
    values), with eigenvalues within ``zero_tol`` x the largest counted in the
    atom at 0.  A last panel shows the Kolmogorov distances of ``per_d`` against
    d (log-log, with a 1/d guide) when there are >= 2 dimensions.
    """
    path = Path(path)
    d_max = max(int(r["d"]) for r in runs)
    top = [r for r in runs if int(r["d"]) == d_max]
    has_w = spectrum.singular_values is not None and top[0].get("singular_values_W") is not None
    show_ks = len(per_d) >= 2
    panels = 1 + int(has_w) + int(show_ks)
    fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.7), squeeze=False)
    ev = [np.asarray(r["eigenvalues_S"], float) for r in top]
    tols = [zero_tol * max(float(np.max(np.abs(e))), 1e-300) for e in ev]
    _overlay_panel(axes[0][0], np.asarray(spectrum.eigenvalues, float),
                   np.asarray(spectrum.density_S, float), spectrum.atom_at_zero, ev, tols,
                   [e.size for e in ev], bins, r"eigenvalue of $\hat S$", "C0", d_max)
    if has_w:
        sv = [np.asarray(r["singular_values_W"], float) / (int(r["p"]) * d_max) ** 0.25 for r in top]
        _overlay_panel(axes[0][1], np.asarray(spectrum.singular_values, float),
                       np.asarray(spectrum.density_W, float), spectrum.atom_at_zero_W, sv,
                       [float(np.sqrt(t)) for t in tols], [s.size for s in sv], bins,
                       r"singular value of $W$, $\sigma/(pd)^{1/4}$", "C2", d_max)
    if show_ks:
        ax = axes[0][-1]
        ds = np.array([r["d"] for r in per_d], float)
        same = "ks_W" in per_d[0] and all(abs(r["ks_S"] - r["ks_W"]) <= 1e-12 for r in per_d)
        for key, color, label, style in (
                ("ks_S", "C0", r"$\hat S$ eigenvalues", dict(fmt="o-", ms=5)),
                ("ks_W", "C2", r"$W$ singular values" + (r" (equal: $\sigma^2 \propto$ "
                                                          "eigenvalue)" if same else ""),
                 dict(fmt="s--", ms=9, mfc="none") if same else dict(fmt="o-", ms=5))):
            if key not in per_d[0]:
                continue
            y = np.array([r[key] for r in per_d], float)
            err = np.array([r.get(key + "_stderr", np.nan) for r in per_d], float)
            ax.errorbar(ds, y, yerr=np.where(np.isfinite(err), err, 0.0), color=color,
                        capsize=3, label=label, **style)
        y0 = per_d[0]["ks_S"]
        ax.plot(ds, y0 * ds[0] / ds, "k:", lw=1, label=r"$\propto 1/d$")
        ax.set_xscale("log")
        ax.set_yscale("log")
        # the dimensions themselves as ticks, in plain numbers (no overlapping 3 x 10^1)
        ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(ds))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("dimension d")
        ax.set_ylabel("Kolmogorov distance to the SE law")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7.5, loc="best")
    return save_figure(fig, path, title)


def _overlay_panel(ax, x: np.ndarray, rho: np.ndarray, atom: float | None,
                   samples: Sequence[np.ndarray], tols: Sequence[float], counts: Sequence[int],
                   bins: int, xlabel: str, color: str, d: int) -> None:
    nz = np.concatenate([s[np.abs(s) > t] for s, t in zip(samples, tols)])
    total = float(sum(counts))
    zero_frac = 1.0 - nz.size / total
    if nz.size:
        lo = min(float(np.min(nz)), float(np.min(x)) if x.size else 0.0)
        hi = max(float(np.max(nz)), float(np.max(x)) if x.size else 1.0)
        # about 2 sqrt(N) bins at most, so a single small-d run is not all noise
        edges = np.linspace(lo, hi, min(bins, max(8, int(2 * np.sqrt(nz.size)))) + 1)
        ax.hist(nz, bins=edges, weights=np.full(nz.size, 1.0 / (total * (edges[1] - edges[0]))),
                color="0.6", alpha=0.6, label=f"Adam, d = {d} ({len(samples)} seed(s))")
    ax.plot(x, rho, "-", color=color, lw=1.8, label="SE prediction")
    peak = max(float(np.max(rho)) if rho.size else 1.0, 1e-12)
    atom_label = (f"atom at 0: SE {atom:.3f}, Adam {zero_frac:.3f}"
                  if atom is not None and (atom > 0 or zero_frac > 0) else None)
    _atom_and_axes(ax, peak, atom_label, xlabel, 7)


def cell_edges(centres: Sequence[float], *, log: bool) -> np.ndarray:
    """Edges of the heat-map cells around sorted grid points: midpoints between neighbours
    in the axis's own scale (geometric means on a log axis, so that log-spaced lam rows get
    cells of equal height there), the end cells as wide as their neighbours; one point
    gets a cell of +-50 % (+-0.5 when linear at 0)."""
    c = np.asarray(centres, float)
    t = np.log(c) if log else c
    if t.size == 1:
        half = math.log(1.5) if log else (0.5 * abs(t[0]) or 0.5)
        e = np.array([t[0] - half, t[0] + half])
    else:
        mid = 0.5 * (t[1:] + t[:-1])
        e = np.concatenate(([t[0] - (mid[0] - t[0])], mid, [t[-1] + (t[-1] - mid[-1])]))
    return np.exp(e) if log else e


def plot_phase_diagram(
    alphas: Sequence[float],
    lams: Sequence[float],
    arrays: Mapping[str, np.ndarray],
    path: str | Path,
    *,
    fields: Sequence[str] = ("test_error", "train_error", "rank_fraction", "matrix_mse"),
    log_fields: Sequence[str] = ("test_error", "train_error", "matrix_mse"),
    vlines: Mapping[str, float] | None = None,
    title: str | None = None,
    note: str | None = None,
) -> Path:
    """Heatmaps over the alpha x lam grid (arrays indexed [i_alpha, j_lam]).

    lam is drawn on a log axis when every lam > 0.  Points with two fixed points
    (``arrays["hysteresis"]``) are marked with x, non-converged ones with red dots;
    ``vlines`` maps labels to alpha values drawn as vertical lines (thresholds).
    """
    path = Path(path)
    a = np.asarray(alphas, float)
    lam = np.asarray(lams, float)
    log_lam = bool(np.all(lam > 0)) and lam.size > 1
    cols = min(2, len(fields))
    rows = -(-len(fields) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.5 * rows + 0.6), squeeze=False)
    for ax in axes.ravel()[len(fields):]:
        ax.set_visible(False)
    styles = ("--", ":", "-.", "-")
    order = np.argsort(lam, kind="stable")  # a lam grid may come in any order
    a_edges, lam_edges = cell_edges(a, log=False), cell_edges(lam[order], log=log_lam)
    for ax, name in zip(axes.ravel(), fields):
        Z = np.asarray(arrays[name], float).T  # rows: lam, columns: alpha
        norm = None
        if name in log_fields:
            pos = Z[np.isfinite(Z) & (Z > 0)]
            if pos.size:
                norm = matplotlib.colors.LogNorm(vmin=max(pos.min(), pos.max() * 1e-8), vmax=pos.max())
                Z = np.where(Z > 0, Z, np.nan)
        mesh = ax.pcolormesh(a_edges, lam_edges, Z[order], shading="flat", norm=norm,
                             cmap="viridis")
        ax.set_facecolor("0.75")  # undefined cells (NaN) in grey, where white lines stay visible
        fig.colorbar(mesh, ax=ax)
        hyst = np.asarray(arrays.get("hysteresis", np.zeros_like(Z.T, bool)), bool)
        bad = ~np.asarray(arrays.get("converged", np.ones_like(Z.T, bool)), bool)
        ii, jj = np.nonzero(hyst)
        if ii.size:
            ax.plot(a[ii], lam[jj], "x", color="w", ms=5, label="two fixed points")
        ii, jj = np.nonzero(bad)
        if ii.size:
            ax.plot(a[ii], lam[jj], ".", color="red", ms=5, label="not converged")
        for k, (label, x) in enumerate((vlines or {}).items()):
            if x is not None and np.isfinite(x) and a.min() <= x <= a.max():
                ax.axvline(x, color="w", ls=styles[k % len(styles)], lw=1.6, label=label)
        if log_lam:
            ax.set_yscale("log")
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel(r"$\lambda$")
        ax.set_title(LABELS.get(name, name), fontsize=9)
    return save_figure(fig, path, title, legend_from=axes[0][0], legend_columns=3,
                       legend_face="0.85", note=note)


def plot_threshold_curves(name: str, rows: Sequence[Mapping], path: str | Path, *,
                          title: str | None = None) -> Path:
    """alpha_interp and alpha_PR against the grid variable ``name`` (rows of
    ``amp-attention thresholds``; missing values are skipped)."""
    path = Path(path)
    fig, ax = plt.subplots(1, 1, figsize=(5.2, 3.8))
    x = np.array([r[name] for r in rows], float)
    for key, style, label in (("alpha_interp", "o-", r"$\alpha_{\rm interp}$ ($\lambda \to 0^+$)"),
                              ("alpha_PR", "s--", r"$\alpha_{\rm PR}$ ($\Delta = 0$, $\lambda \to 0^+$)"),
                              ("alpha_PR_bayes", "^:", r"$\alpha_{\rm PR}$ Bayes-optimal ($\Delta = 0$)")):
        y = np.array([np.nan if r.get(key) is None else r[key] for r in rows], float)
        if np.any(np.isfinite(y)):
            ax.plot(x, y, style, ms=4, label=label)
    if name == "noise":
        ax.set_xscale("log")
    ax.set_xlabel({"kappa": r"learner width $\kappa = p/d$", "kappa0": r"target rank $\kappa_0$",
                   "noise": r"label noise $\Delta$"}.get(name, name))
    ax.set_ylabel(r"$\alpha = n/d^2$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path, title)


def plot_scaling(rows: Sequence[Mapping], fits: Mapping, path: str | Path, *,
                 title: str | None = None) -> Path:
    """Scaling-law figure (``amp-attention scaling``): e_test - e0 against n on
    log-log axes with the fitted power law and the slope predicted from k*; the
    four terms of the matrix MSE as signed lines with their sum underneath (E_over
    can be negative); the k* staircase."""
    path = Path(path)
    ok = [r for r in rows if r["converged"] and r.get("decomposition")]
    n = np.array([r["n"] for r in ok], float)
    fig, axes = plt.subplots(3, 1, figsize=(6.2, 9.6), sharex=True,
                             gridspec_kw={"height_ratios": [1.3, 1.0, 0.7]})
    ax = axes[0]
    fe, fk = fits.get("e_test"), fits.get("k_star")
    e0 = fe["e0"] if fe else 0.0
    ax.loglog(n, [r["test_error"] - e0 for r in ok], "o", ms=3.5, label=r"SE $e_{\rm test} - e_0$")
    if fe:
        ax.loglog(n, fe["amplitude"] * n ** (-fe["exponent"]), "-", lw=1.4,
                  label=rf"fit $f = {fe['exponent']:.3f}$ [{fe['ci_low']:.3f}, {fe['ci_high']:.3f}]")
        if fk:
            # predicted slope through the geometric middle of the data
            mid = len(n) // 2
            y_mid = fe["amplitude"] * n[mid] ** (-fe["exponent"])
            ax.loglog(n, y_mid * (n / n[mid]) ** (-fk["exponent"]), "--", lw=1.2,
                      label=rf"from $k^*$: $f = a(2\gamma - 1) = {fk['exponent']:.3f}$")
    bayes = [r.get("bayes_test_error") for r in ok]
    if e0 == 0.0 and bayes and all(b is not None for b in bayes):
        ax.loglog(n, bayes, "k--", lw=1.2, label=r"Bayes-optimal $e_{\rm test}$ (MMSE)")
    ax.set_ylabel(r"$e_{\rm test} - e_0$")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7.5)
    ax = axes[1]
    # Signed lines, not a stacked area: E_over is negative wherever the bulk of
    # Shat carries target energy (docs/theory.md "Power-law targets"), and stacking would hide
    # E_under.
    terms = [("under", r"$E_{\rm under}$", "-"), ("over", r"$E_{\rm over}$", "--"),
             ("approx", r"$E_{\rm approx}$", "-."), ("mismatch", r"$E_{\rm mismatch}$", ":")]
    for t, lab, style in terms:
        ax.plot(n, [r["decomposition"][t] for r in ok], style, lw=1.5, label=lab)
    ax.plot(n, [r["matrix_mse"] for r in ok], "k-", lw=2.2, alpha=0.35,
            label="matrix MSE = sum of the four")
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylabel("matrix-MSE terms (signed)")
    ax.legend(fontsize=7.5, ncol=2)
    ax.grid(alpha=0.3)
    ax = axes[2]
    ax.step(n, [r["k_star"] for r in ok], where="post")
    # minor tick labels of a log axis spanning less than a decade collide
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xscale("log")
    ax.set_xlabel(r"$n = \alpha d^2$")
    ax.set_ylabel(r"recovered modes $k^*$")
    ax.grid(alpha=0.3)
    return save_figure(fig, path, title)


def plot_compare(rows: Sequence[Mapping], path: str | Path, *, lam: float,
                 thresholds: Mapping[str, float | None] | None = None,
                 title: str | None = None, note: str | None = None) -> Path:
    """``amp-attention compare``: test error and matrix MSE vs alpha for ERM at the user's
    lam, ERM at the best lam and the Bayes-optimal estimator (with one-standard-error
    bands where Monte Carlo enters); ``thresholds`` {label: alpha} are drawn as vertical
    lines."""
    path = Path(path)
    a = np.array([r["alpha"] for r in rows], float)
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8))
    curves = (("erm", "-", "C0", rf"ERM, $\lambda = {lam:g}$"),
              ("erm_best", "--", "C2", r"ERM, best $\lambda$ (per $\alpha$)"),
              ("bayes", "-", "k", "Bayes-optimal (MMSE)"))
    for ax, qty in zip(axes, ("test_error", "matrix_mse")):
        for key, style, color, label in curves:
            y = np.array([r[f"{key}_{qty}"] for r in rows], float)
            s = np.array([r[f"{key}_{qty}_stderr"] for r in rows], float)
            ax.plot(a, y, style, color=color, lw=2.2 if key == "bayes" else 1.6, label=label)
            if np.any(s > 0):
                ax.fill_between(a, y - s, y + s, color=color, alpha=0.2, lw=0)
        for (name, value), ls in zip((thresholds or {}).items(), (":", "-.")):
            if value is not None and a.min() <= value <= a.max():
                ax.axvline(value, color="0.4", ls=ls, lw=1.0, label=f"{name} = {value:.4g}")
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel(LABELS[qty])
        ax.set_ylim(bottom=0.0)
        ax.grid(alpha=0.3)
    return save_figure(fig, path, title, legend_from=axes[0], legend_columns=3, note=note)
