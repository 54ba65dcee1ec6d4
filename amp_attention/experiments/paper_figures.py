"""The figures of arXiv 2509.24914 redrawn by the engine (issue 30; docs/paper.md).

Every theory curve is recomputed by the engine under the paper's conventions
(:mod:`amp_attention.paper`: softmax label task, ``logit_goe`` noise, lam = lreg/2);
the authors' published simulation points are read from a clone of their repository
(PenombraET/ExtensiveAttention) whose path the user gives, and overlaid.  Nothing is
downloaded.  Theory points are checkpointed one by one (a rerun resumes).

Figure 2: test error and training loss against alpha at kappa0 0.5, Delta 0.5 for six
lambdas, with their Adam points (d = 100) and the interpolation threshold.
Figure 3: left, test error at the cross-validated lambda (kappa0 0.05, Delta 0.05) of
their factorised and unfactorised Adam runs, with the engine's SE at the same lambda;
right, the thresholds against kappa0 on the alpha_bar = alpha (K - 1) axis.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from ..files import atomic_write_json
from ..paper import PaperSetting, alpha_bar, interpolation_alpha_bar, to_paper_columns
from ..spec import Learner, Problem, Task, WishartTarget

#: figures this module draws (the others: docs/paper.md, "Not done yet")
FIGURES = (2, 3)

FIG2_LREGS = (0.01, 0.002, 0.001, 0.0005, 0.0001, 1e-05)
#: a file that must exist in a clone of the authors' repository
MARKER = "data/GD/GD_kappa_0.5_lreg_0.01_noise_0.5.csv"


def check_repo(repo: Path | str) -> Path:
    """The clone's root, or ValueError naming ``repo`` and the file that is missing."""
    root = Path(repo).expanduser()
    if not (root / MARKER).is_file():
        raise ValueError(f"repo: {str(repo)!r} is not a clone of PenombraET/ExtensiveAttention "
                         f"({MARKER} is missing); clone it with git clone "
                         "https://github.com/PenombraET/ExtensiveAttention and pass its path")
    return root


def read_table(root: Path, rel: str) -> dict[str, np.ndarray]:
    """Columns of one of their CSVs (header row, numbers) as float arrays."""
    path = root / rel
    if not path.is_file():
        raise ValueError(f"repo: {rel} is missing from {root}")
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], [r for r in rows[1:] if r]
    return {h.strip(): np.array([float(r[j]) for r in body]) for j, h in enumerate(header) if h.strip()}


def read_table_noheader(root: Path, rel: str) -> np.ndarray:
    """Rows of one of their header-less CSVs (interpolation.csv) as a float matrix."""
    path = root / rel
    if not path.is_file():
        raise ValueError(f"repo: {rel} is missing from {root}")
    return np.loadtxt(path, delimiter=",", ndmin=2)


# ---------------------------------------------------------------- theory curves

def se_curve(problems: list[Problem], checkpoint: Path, mc_log2n: int, seed: int = 0,
             max_iter: int = 500, saved_only: bool = False) -> list[dict]:
    """SE fixed points along ``problems`` (one curve, in order), each continued from the
    previous one's (m, q, V); every finished point is saved to ``checkpoint`` (JSON, keyed
    by alpha and lam) before the next starts, and a rerun skips the saved ones.  A point
    that does not converge within ``max_iter`` iterations per level is saved with its
    status and left out of the figure (the figure's JSON lists it).  ``saved_only``:
    solve nothing, return the saved points (a point not yet solved has status
    "not computed")."""
    import json

    from ..solvers.state_evolution import MonteCarloOptions, solve_state_evolution

    done = json.loads(checkpoint.read_text()) if checkpoint.exists() else {}
    mc = MonteCarloOptions(log2_n=mc_log2n, coarse_log2_n=min(10, mc_log2n), seed=seed)
    x0 = None
    out = []
    for p in problems:
        key = f"alpha={p.alpha!r},lam={p.learner.lam!r}"
        if key not in done and saved_only:
            out.append({"alpha": p.alpha, "lam": p.learner.lam, "status": "not computed"})
            continue
        if key not in done:
            r = solve_state_evolution(p, mc=mc, x0=x0, max_iter=max_iter)
            if x0 is not None and not r.success:  # continuation failed: a cold solve
                r = solve_state_evolution(p, mc=mc, max_iter=max_iter)
            row = {"alpha": p.alpha, "lam": p.learner.lam, "status": r.status.value,
                   "m": r.m, "q": r.q, "V": r.V, "test_error": r.test_error,
                   "test_error_noisy": r.test_error_noisy, "matrix_mse": r.matrix_mse,
                   "loss": r.loss, "stderr": dict(r.mc_stderr or {}),
                   "vhat_jump_share": r.vhat_jump_share, "seconds": r.seconds,
                   "paper": to_paper_columns(r, p.alpha)}
            done[key] = row
            atomic_write_json(checkpoint, done)
        row = done[key]
        if row["status"] == "converged":
            x0 = (row["m"], row["q"], row["V"])
        out.append(row)
    return out


def _curve_task(problems: list[Problem], checkpoint: str, mc_log2n: int,
                max_iter: int, saved_only: bool = False) -> list[dict]:
    return se_curve(problems, Path(checkpoint), mc_log2n, max_iter=max_iter,
                    saved_only=saved_only)


def _run_curves(curves: dict[str, list[Problem]], out: Path, mc_log2n: int, workers: int,
                progress: Callable[[Iterable, int], Iterable] | None,
                max_iter: int = 500, saved_only: bool = False) -> dict[str, list[dict]]:
    from ..runner import run_tasks

    names = list(curves)
    tasks = [(curves[n], str(out / f"points_{n}.json"), mc_log2n, max_iter, saved_only)
             for n in names]
    return dict(zip(names, run_tasks(_curve_task, tasks, workers=workers, progress=progress)))


# ---------------------------------------------------------------- Figure 2

def figure2(root: Path, out: Path, *, points: int, mc_log2n: int, workers: int,
            progress=None, max_iter: int = 500, saved_only: bool = False) -> dict:
    """Test error and training loss vs alpha, kappa0 0.5, Delta 0.5, six lambdas."""
    from ..plotting import plt, save_figure
    from ..solvers.thresholds import interpolation_threshold

    alphas = np.linspace(0.05, 0.5, points)
    curves = {f"fig2_lreg_{lr:g}": [PaperSetting(float(a), lr).problem() for a in alphas]
              for lr in FIG2_LREGS}
    theory = _run_curves(curves, out, mc_log2n, workers, progress, max_iter, saved_only)
    interp = interpolation_threshold(PaperSetting(0.1, 0.01).problem())
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.9))
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, len(FIG2_LREGS)))
    summary = {}
    for lr, c in zip(FIG2_LREGS, colors):
        rows = [r for r in theory[f"fig2_lreg_{lr:g}"] if r["status"] == "converged"]
        a = np.array([r["alpha"] for r in rows])
        test = np.array([r["paper"]["test"] for r in rows])
        train = np.array([r["paper"]["train"] for r in rows])
        ax1.plot(a, test, color=c, lw=1.6, label=f"engine SE, $\\lambda$ = {lr:g}")
        ax2.plot(a, train, color=c, lw=1.6)
        se = read_table(root, f"data/SE/SE_kappa_0.5_lreg_{lr:g}_noise_0.5.csv")
        ax1.plot(se["alpha"], se["test"], color=c, lw=0.8, ls=":")
        ax2.plot(se["alpha"], se["train"], color=c, lw=0.8, ls=":")
        gd = read_table(root, f"data/GD/GD_kappa_0.5_lreg_{lr:g}_noise_0.5.csv")
        sel = slice(0, None, 3)
        ax1.errorbar(gd["alpha"][sel], gd["test_error_mean"][sel], gd["test_err_std"][sel],
                     fmt="o", ms=3, color=c, capsize=2, lw=0.8)
        ax2.errorbar(gd["alpha"][sel], gd["loss_mean"][sel], gd["loss_std"][sel],
                     fmt="o", ms=3, color=c, capsize=2, lw=0.8)
        summary[f"{lr:g}"] = _deviation(a, test, gd["alpha"], gd["test_error_mean"], gd["test_err_std"])
    for ax in (ax1, ax2):
        ax.axvline(interp.alpha, color="grey", ls="--", lw=1)
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_xlim(0.04, 0.51)
    ax1.plot([], [], "o", color="k", ms=3, label="authors' Adam, d = 100 (mean $\\pm$ std, 8 runs)")
    ax1.plot([], [], ":", color="k", lw=0.8, label="authors' SE tables")
    ax1.plot([], [], "--", color="grey", lw=1, label=f"engine $\\alpha_{{interp}}$ = {interp.alpha:.5f}")
    ax1.set_ylabel("test error (fresh noisy label)")
    ax1.set_ylim(0.1, 0.56)
    ax2.set_ylabel(r"training objective / $d^2$")
    ax2.set_yscale("log")
    path = out / "figure2.png"
    save_figure(fig, path, r"Figure 2: softmax, L = 2, $\kappa_0$ = 0.5, $\Delta$ = 0.5 (logit)",
                legend_from=ax1, legend_columns=3)
    return {"figure": 2, "png": str(path), "alpha_interp": interp.alpha,
            "test_vs_adam": summary, "theory": theory}


def _deviation(a, theory, a_sim, sim, std) -> dict:
    """Simulation minus interpolated theory at the simulation's alphas inside the theory's
    range: median and largest |difference|, and in units of ``std`` (per point)."""
    if a.size < 2:
        return {}
    inside = (a_sim >= a.min()) & (a_sim <= a.max())
    if not np.any(inside):
        return {}
    diff = sim[inside] - np.interp(a_sim[inside], a, theory)
    z = diff / np.maximum(std[inside], 1e-12)
    return {"n": int(inside.sum()), "median_diff": float(np.median(diff)),
            "max_abs_diff": float(np.max(np.abs(diff))), "median_z": float(np.median(z)),
            "max_abs_z": float(np.max(np.abs(z)))}


# ---------------------------------------------------------------- Figure 3

def threshold_row(kappa0: float) -> dict:
    """alpha_bar of the thresholds at target ratio kappa0 (T = 2): factorised interpolation
    (Delta -> 0+: :func:`amp_attention.paper.interpolation_alpha_bar`), factorised and
    element-wise perfect recovery, Bayes-optimal perfect recovery."""
    from ..solvers.bayes_optimal import bayes_perfect_recovery_threshold
    from ..solvers.thresholds import perfect_recovery_threshold

    def prob(param: str = "factorised") -> Problem:  # noiseless: perfect recovery
        return Problem(Task("softmax", L=2, noise=0.0, noise_at="logit_goe"),
                       WishartTarget(kappa0), Learner(1.0, 0.01, param), alpha=0.1)

    def ab(res) -> float:
        return alpha_bar(res.alpha, 2) if res.success else math.nan

    return {"kappa0": kappa0, "interp_factorised": interpolation_alpha_bar(kappa0, 0.0),
            "pr_factorised": ab(perfect_recovery_threshold(prob())),
            "pr_unfactorised": ab(perfect_recovery_threshold(prob("elementwise"))),
            "pr_bayes": ab(bayes_perfect_recovery_threshold(prob()))}


def figure3(root: Path, out: Path, *, points: int, mc_log2n: int, workers: int,
            progress=None, max_iter: int = 500, saved_only: bool = False) -> dict:
    """Left: test error at their cross-validated lambdas; right: thresholds vs kappa0."""
    from ..plotting import plt, save_figure

    gd1 = read_table(root, "data/cross_validation/GD_L1_kappa_0.05_noise_0.05.csv")
    gd2 = read_table(root, "data/cross_validation/GD_L2_kappa_0.05_noise_0.05.csv")
    keep1 = np.arange(0, gd1["alpha"].size, max(1, -(-gd1["alpha"].size // points)))
    keep2 = np.arange(0, gd2["alpha"].size, max(1, -(-gd2["alpha"].size // points)))
    curves = {
        "fig3_factorised": [PaperSetting(float(gd1["alpha"][i]), float(gd1["lambda_optimal"][i]),
                                         0.05, 0.05).problem() for i in keep1],
        "fig3_unfactorised": [PaperSetting(float(gd2["alpha"][i]), float(gd2["lambda_optimal"][i]),
                                           0.05, 0.05, parameterisation="elementwise").problem()
                              for i in keep2],
    }
    theory = _run_curves(curves, out, mc_log2n, workers, progress, max_iter, saved_only)
    kappas = np.linspace(0.02, 0.98, 49)
    rows = [threshold_row(float(k)) for k in kappas]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.9))
    summary = {}
    for name, gd, keep, color, label in (
            ("fig3_factorised", gd1, keep1, "tab:pink", "factorised"),
            ("fig3_unfactorised", gd2, keep2, "tab:purple", "unfactorised")):
        rs = [r for r in theory[name] if r["status"] == "converged"]
        a = np.array([r["alpha"] for r in rs])
        test = np.array([r["paper"]["test"] for r in rs])
        ax1.plot(a, test, "-", color=color, lw=1.4,
                 label=f"engine SE at their $\\lambda_{{opt}}$, {label}")
        sem = gd["test_err_std_opt"] / math.sqrt(8)
        ax1.errorbar(gd["alpha"], gd["test_err_mean_opt"], sem, fmt="x", ms=4, color=color,
                     capsize=2, lw=0.8, label=f"authors' Adam, {label} (mean $\\pm$ s.e., 8 runs)")
        se_file = "SE_L1" if label == "factorised" else "SE_L2"
        their = read_table(root, f"data/cross_validation/{se_file}_kappa_0.05_noise_0.05.csv")
        ax1.plot(their["alpha"], their["test"], ":", color=color, lw=0.9,
                 label=f"authors' {se_file} (SE at the SE-optimal $\\lambda$)")
        # in units of the standard error of their 8-run means (what the panel draws)
        summary[label] = _deviation(a, test, gd["alpha"], gd["test_err_mean_opt"], sem)
    ax1.set_xlabel(r"$\alpha = n/d^2$")
    ax1.set_ylabel("test error (fresh noisy label)")
    ax1.set_xlim(0.0, 0.52)
    k = np.array([r["kappa0"] for r in rows])
    for key, style, label in (("pr_unfactorised", "-", "perfect recovery, unfactorised"),
                              ("interp_factorised", "--", "interpolation, factorised ($\\Delta \\to 0^+$)"),
                              ("pr_factorised", "-", "perfect recovery, factorised"),
                              ("pr_bayes", ":", "perfect recovery, Bayes-optimal")):
        ax2.plot(k, [r[key] for r in rows], style, lw=1.5, label=label)
    itp = read_table_noheader(root, "data/cross_validation/interpolation.csv")
    kg = np.geomspace(0.01, 100, itp.shape[1])
    sel = (kg > 0.015) & (kg < 1.0)
    ax2.plot(kg[sel][::6], itp[0][sel][::6], "o", ms=3, color="k",
             label="authors' interpolation.csv ($\\Delta$ = 0 row)")
    ax2.set_xlabel(r"target width $\kappa_0$")
    ax2.set_ylabel(r"$\bar\alpha = \alpha\,(K - 1)$")
    ax2.set_xlim(0, 1)
    ax2.set_ylim(0, 0.55)
    ax2.legend(fontsize=7, loc="lower right")
    path = out / "figure3.png"
    save_figure(fig, path, r"Figure 3: softmax, L = 2; left $\kappa_0$ = 0.05, $\Delta$ = 0.05",
                legend_from=ax1, legend_columns=2)
    return {"figure": 3, "png": str(path), "test_vs_adam": summary, "thresholds": rows,
            "theory": theory}


def draw_figure(number: int, repo: Path | str, out: Path | str, *, points: int = 12,
                mc_log2n: int = 12, workers: int = 0, progress=None, max_iter: int = 500,
                saved_only: bool = False) -> dict:
    """Redraw Figure ``number`` into ``out``/figureN.png (theory checkpoints beside it) and
    write ``out``/figureN.json (parameters, the engine's curves, deviations from the
    authors' points).  ``saved_only``: draw from the saved theory points only."""
    if number not in FIGURES:
        raise ValueError(f"figure must be one of {FIGURES} (Figures 1, 4, 5 and 6 are not "
                         f"redrawn yet: docs/paper.md), got {number!r}")
    root = check_repo(repo)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fn = figure2 if number == 2 else figure3
    res = fn(root, out, points=points, mc_log2n=mc_log2n, workers=workers, progress=progress,
             max_iter=max_iter, saved_only=saved_only)
    res["parameters"] = {"repo": str(root), "points": points, "mc_log2n": mc_log2n,
                         "max_iter": max_iter}
    res["not_converged"] = [{"curve": name, "alpha": r["alpha"], "status": r["status"]}
                            for name, rows in res["theory"].items() for r in rows
                            if r["status"] != "converged"]
    atomic_write_json(out / f"figure{number}.json", res, indent=1)
    return res
