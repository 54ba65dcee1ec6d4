"""The figures of arXiv 2509.24914 redrawn by the engine (issue 30; docs/paper.md).

Every theory curve is recomputed by the engine under the paper's conventions
(:mod:`amp_attention.paper`: softmax label task, ``logit_goe`` noise, lam = lreg/2);
the authors' published simulation points are read from a clone of their repository
(PenombraET/ExtensiveAttention) whose path the user gives, and overlaid.  Nothing is
downloaded.  Theory points are checkpointed one by one (a rerun resumes).

Figure 1: singular values of W at four alphas (kappa0 0.5, lambda 0.01, Delta 0.5; their
Adam eigenvalue files), the test error against alpha (log axis) and the rank fraction
for kappa0 0.2, 0.5, 0.8 with the alpha where the bulk splits and the upper piece's mass.
Figure 2: test error and training loss against alpha at kappa0 0.5, Delta 0.5 for six
lambdas, with their Adam points (d = 100) and the interpolation threshold.
Figure 3: left, test error at the cross-validated lambda (kappa0 0.05, Delta 0.05) of
their factorised and unfactorised Adam runs, with the engine's SE at the same lambda;
right, the thresholds against kappa0 on the alpha_bar = alpha (K - 1) axis.
Figures 4, 5 and 6 (their Adam runs at d = 100 only; the paper draws no theory there):
label vs seq2seq task (test error and training objective), temperature beta 0.5 / 1 / 2,
and T = 2 / 3 / 5 tokens, each at Delta 0 and 0.5, with the engine's SE curves.  Every
Adam file is read through :class:`AdamRuns`, which states the setting it ran and checks
it against the file's own columns.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from ..channels.branches import PROX_BRANCHES
from ..files import atomic_write_json
from ..runner import CheckpointFile
from ..jsonsafe import as_float
from ..paper import PaperSetting, alpha_bar, interpolation_alpha_bar, to_paper_columns
from ..spec import Learner, Problem, Task, WishartTarget

#: figures this module draws (the others: docs/paper.md, "Not done yet")
FIGURES = (1, 2, 3, 4, 5, 6)

FIG2_LREGS = (0.01, 0.002, 0.001, 0.0005, 0.0001, 1e-05)
#: a file that must exist in a clone of the authors' repository
MARKER = "data/GD/GD_kappa_0.5_lreg_0.01_noise_0.5.csv"
#: the authors' code and data (docs/paper.md names the commit the figures were drawn from)
AUTHORS_REPOSITORY = "PenombraET/ExtensiveAttention"
#: the commit of their repository whose data the committed figures and docs/paper.md use
AUTHORS_COMMIT = "614c5fbe476bdbc6e195bf349cc99ecd1b504c4c"


#: the folders of their data/ the six figures read
DATA_FOLDERS = ("data/SE", "data/GD", "data/spectra", "data/beta", "data/seq2seq",
                "data/more_tokens")


def missing_data(root: Path) -> list[str]:
    """The folders of DATA_FOLDERS missing from the clone at ``root`` (checked before any
    figure is computed: a run of all six takes tens of minutes)."""
    return [d for d in DATA_FOLDERS if not (Path(root) / d).is_dir()]


def repo_commit(root: Path) -> str | None:
    """The commit checked out in the clone at ``root`` (its .git/HEAD, a branch ref resolved
    through .git/refs or .git/packed-refs), or None where it is no git clone or the ref
    cannot be read: plain file reads, no git executable needed."""
    git = Path(root) / ".git"
    try:
        head = (git / "HEAD").read_text().strip()
    except OSError:
        return None
    if not head.startswith("ref: "):
        return head if len(head) == 40 else None
    ref = head[5:]
    try:
        return (git / ref).read_text().strip()
    except OSError:
        pass
    try:
        for line in (git / "packed-refs").read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == ref:
                return parts[0]
    except OSError:
        return None
    return None


def commit_check(root: Path) -> dict:
    """{"found": the clone's commit or None, "expected": AUTHORS_COMMIT, "matches": bool or
    None (unknown), "message": one line saying which it found}."""
    found = repo_commit(root)
    matches = None if found is None else found == AUTHORS_COMMIT
    if found is None:
        msg = (f"the authors' repository at {root} is not a readable git clone: its commit is "
               f"unknown (the figures were made with {AUTHORS_COMMIT[:8]})")
    elif matches:
        msg = f"the authors' repository is at {found[:8]}, the commit the docs use"
    else:
        msg = (f"the authors' repository is at {found[:8]}, not {AUTHORS_COMMIT[:8]} (the "
               "commit the docs use): their data may differ from what docs/paper.md quotes")
    return {"found": found, "expected": AUTHORS_COMMIT, "matches": matches, "message": msg}


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
             max_iter: int = 500, saved_only: bool = False,
             x0: tuple[float, float, float] | None = None,
             prox_branch: str = "global", fresh_average: str = "stall") -> list[dict]:
    """SE fixed points along ``problems`` (one curve, in order), each continued from the
    previous one's (m, q, V); every finished point is saved to ``checkpoint`` (JSON, keyed
    by alpha and lam) before the next starts, and a rerun skips the saved ones.  A point
    that does not converge within ``max_iter`` iterations per level is saved with its
    status and left out of the figure (the figure's JSON lists it).  ``saved_only``:
    solve nothing, return the saved points (a point not yet solved has status
    "not computed").  ``x0``: the (m, q, V) the first point starts from.  ``prox_branch``:
    the SE's prox branch (docs/theory.md 16.8; part of every point's key and record);
    ``fresh_average``: MonteCarloOptions.fresh_average ("always": every point without a
    convexity certificate is the fresh-draw average, docs/theory.md 16.9; in the key)."""
    from ..solvers.state_evolution import solve_state_evolution

    store = CheckpointFile(checkpoint)
    mc = figure_mc(mc_log2n, prox_branch, seed, fresh_average=fresh_average)
    out = []
    for p in problems:
        key = (f"alpha={p.alpha!r},lam={p.learner.lam!r},branch={prox_branch}"
               + ("" if fresh_average == "stall" else f",average={fresh_average}"))
        row = store.read(key)
        if row is None and saved_only:
            out.append({"alpha": p.alpha, "lam": p.learner.lam, "status": "not computed"})
            continue
        if row is None:
            r = solve_state_evolution(p, mc=mc, x0=x0, max_iter=max_iter)
            if x0 is not None and not r.success:  # continuation failed: a cold solve
                r = solve_state_evolution(p, mc=mc, max_iter=max_iter)
            row = _se_row(p, r)
            store.write(key, row)
        # continue from a converged point; the lam = 0 interpolator (V infinite) is no start
        if row["status"] == "converged" and all(
                isinstance(row[k], (int, float)) and math.isfinite(row[k])
                for k in ("m", "q", "V")):
            x0 = (row["m"], row["q"], row["V"])
        elif row["status"] == "converged":
            x0 = None
        out.append(row)
    return out


def figure_mc(mc_log2n: int, prox_branch: str, seed: int = 0, **options):
    """The figures' Monte-Carlo options: 2^mc_log2n RQMC samples per replica, the coarse
    level at 2^min(10, mc_log2n), the prox branch; ``options`` any other field."""
    from ..solvers.state_evolution import MonteCarloOptions

    return MonteCarloOptions(log2_n=mc_log2n, coarse_log2_n=min(10, mc_log2n), seed=seed,
                             prox_branch=prox_branch, **options)


def _se_row(p: Problem, r) -> dict:
    """A checkpoint row of an SE result (what every figure's record holds per point)."""
    return {"alpha": p.alpha, "lam": p.learner.lam, "status": r.status.value,
            "m": r.m, "q": r.q, "V": r.V, "test_error": r.test_error,
            "test_error_noisy": r.test_error_noisy, "matrix_mse": r.matrix_mse,
            "loss": r.loss, "m_hat": r.m_hat, "q_hat": r.q_hat, "V_hat": r.V_hat,
            "rank_fraction": r.rank_fraction, "stderr": dict(r.mc_stderr or {}),
            "mc_error_method": r.mc_error_method,
            "vhat_jump_share": r.vhat_jump_share, "seconds": r.seconds,
            "prox_branch": r.prox_branch, "prox_branch_split": r.prox_branch_split,
            "mc_convergence": r.mc_convergence, "method": r.method,
            "paper": to_paper_columns(r, p.alpha)}


#: Figure 3's search range of the SE-optimal lambda, in their lreg (engine lam = lreg / 2):
#: their Adam cross-validation found 5e-6 .. 0.044 (noisy), their SE_L2 file 1e-4 .. 0.042;
#: a solve below 1e-3 costs minutes (the small-lambda band); an optimum on a bound is flagged
FIG3_LREG_RANGE = (1e-3, 0.3)
#: the lowest lreg a search continued below FIG3_LREG_RANGE goes to
FIG3_LREG_FLOOR = 1e-5
#: the search's resolution in log10 lreg (7 % in lambda; the test error is flat there)
FIG3_LOG10_TOL = 0.03


def se_optimal_curve(problems: list[Problem], checkpoint: Path, mc_log2n: int, *,
                     lreg_range: tuple[float, float] = FIG3_LREG_RANGE,
                     saved_only: bool = False, prox_branch: str = "global",
                     seed: int = 0) -> list[dict]:
    """The SE at its own optimal lambda along ``problems`` (their lambda is ignored):
    at each alpha, lam* minimising the SE's test error against a fresh noisy label (the
    quantity the paper plots) by :func:`solvers.compare.best_lam` over their lreg in
    ``lreg_range``; each finished alpha saved in ``checkpoint`` (rows as
    :func:`se_curve`'s, plus ``lreg_opt``, ``lreg_at_bound`` and ``solves``)."""
    import dataclasses

    from ..solvers.compare import best_lam

    store = CheckpointFile(checkpoint)
    mc = figure_mc(mc_log2n, prox_branch, seed)

    def search(p: Problem, lo: float, hi: float) -> tuple[dict, bool, int, bool]:
        """(row at the optimum, its solve succeeded, solves, on a bound) over lreg lo..hi."""
        lam, r, solves, at_bound = best_lam(p, (lo / 2.0, hi / 2.0), mc=mc,
                                            quantity="test_error_noisy", xatol=FIG3_LOG10_TOL)
        row = _se_row(dataclasses.replace(p, learner=dataclasses.replace(p.learner, lam=lam)), r)
        row.update(lam=lam, lreg_opt=2.0 * lam)
        return row, r.success, solves, at_bound

    out = []
    for p in problems:
        key = (f"alpha={p.alpha!r},optimal,lreg={lreg_range[0]!r}..{lreg_range[1]!r},"
               f"branch={prox_branch}")
        row = store.read(key)
        if row is None and saved_only:
            out.append({"alpha": p.alpha, "status": "not computed"})
            continue
        if row is None:
            row, _, solves, at_bound = search(p, *lreg_range)
            row.update(lreg_at_bound=bool(at_bound), solves=solves,
                       lreg_searched=list(lreg_range))
            store.write(key, row)
        row = {**row, "lreg_searched": row.get("lreg_searched", list(lreg_range))}
        # an optimum on the lower bound is continued a decade down at a time (the searches
        # below 1e-3 cost minutes a solve: only where the optimum asks for them)
        while (not saved_only and row["status"] == "converged" and row["lreg_at_bound"]
               and row["lreg_opt"] < 2.0 * row["lreg_searched"][0]
               and row["lreg_searched"][0] / 10.0 >= FIG3_LREG_FLOOR):
            top = row["lreg_searched"][0]
            lo = top / 10.0
            lower, success, solves, at_bound = search(p, lo, 3.0 * top)
            searched = [lo, row["lreg_searched"][1]]
            if success and lower["test_error_noisy"] < row["test_error_noisy"]:
                # on a bound of this search means on its lower one (the upper one, 3 x the
                # old lower bound, lies inside the range searched before)
                lower.update(lreg_at_bound=bool(at_bound and lower["lreg_opt"] < 2.0 * lo),
                             solves=row["solves"] + solves, lreg_searched=searched)
                row = lower
            else:  # the bound was a Monte-Carlo accident: the optimum stays, now inside
                row = {**row, "lreg_at_bound": False, "solves": row["solves"] + solves,
                       "lreg_searched": searched}
            store.write(key, row)
        out.append(row)
    return out


def _optimal_task(problems: list[Problem], checkpoint: str, mc_log2n: int,
                  saved_only: bool, prox_branch: str) -> list[dict]:
    return se_optimal_curve(problems, Path(checkpoint), mc_log2n, saved_only=saved_only,
                            prox_branch=prox_branch)


def _figure3_task(kind: str, *args) -> list[dict]:
    return _optimal_task(*args) if kind == "optimal" else _curve_task(*args)


def _curve_task(problems: list[Problem], checkpoint: str, mc_log2n: int,
                max_iter: int, saved_only: bool = False,
                prox_branch: str = "global", fresh_average: str = "stall") -> list[dict]:
    return se_curve(problems, Path(checkpoint), mc_log2n, max_iter=max_iter,
                    saved_only=saved_only, prox_branch=prox_branch,
                    fresh_average=fresh_average)


def axes_record(fig) -> list[dict]:
    """Each panel's limits, scales and labels as drawn (for the figure's record, which the
    tests hold against the notebook's cells)."""
    return [{"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
             "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
             "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()]}
            for ax in fig.axes]


def _run_curves(curves: dict[str, list[Problem]], out: Path, mc_log2n: int, workers: int,
                progress: Callable[[Iterable, int], Iterable] | None,
                max_iter: int = 500, saved_only: bool = False,
                prox_branch: str = "global",
                fresh_average: str = "stall") -> dict[str, list[dict]]:
    from ..runner import run_tasks

    names = list(curves)
    tasks = [(curves[n], str(out / f"points_{n}.json"), mc_log2n, max_iter, saved_only,
              prox_branch, fresh_average) for n in names]
    return dict(zip(names, run_tasks(_curve_task, tasks, workers=workers, progress=progress)))


# ---------------------------------------------------------------- Figure 1

FIG1_KAPPAS = (0.2, 0.5, 0.8)
FIG1_SPECTRA = (0.1, 0.5, 4.0, 40.0)
#: their lambda in Figure 1 (engine lam = lreg / 2), logit noise Delta 0.5
FIG1_LREG = 0.01
#: the notebook's Figure 1 cell: colours (myblue, myred, mybluelight, the rank curves'),
#: the test panel's and the rank panel's alpha limits
FIG1_BLUE, FIG1_RED, FIG1_GREY = "#0a6ed3", "#d30a6e", "#989898"
FIG1_RANK_COLORS = (FIG1_RED, FIG1_BLUE, "#64c108")
FIG1_TEST_XLIM = (0.03, 60.0)
FIG1_RANK_XLIM = (0.03, 40.0)


def _fig1_problem(alpha: float, kappa0: float) -> Problem:
    return PaperSetting(float(alpha), FIG1_LREG, kappa0, 0.5).problem()


def fig1_spectrum(row: dict, kappa0: float, lreg: float = FIG1_LREG):
    """The engine's predicted spectrum (``PredictedSpectrum``) at a saved SE row of
    Figure 1's setting (factorised learner kappa 1, lam = lreg / 2)."""
    from ..solvers.predicted_spectrum import PredictedSpectrum

    from ..denoisers import denoiser_for
    from ..targets import target_measure

    return PredictedSpectrum.from_hats(
        target_measure(WishartTarget(kappa0)), denoiser_for(Learner(1.0, lreg / 2.0)), 1.0,
        row["m_hat"], row["q_hat"], row["V_hat"], row["rank_fraction"])


def _pieces(row: dict, kappa0: float) -> tuple[int, float]:
    """(number of pieces of the continuous spectrum, mass of the top piece)."""
    _, masses = fig1_spectrum(row, kappa0).bulk_components
    return int(masses.size), float(masses[-1]) if masses.size else math.nan


def bulk_split(rows: list[dict], kappa0: float, checkpoint: Path, mc_log2n: int,
               max_iter: int, iters: int = 7, saved_only: bool = False) -> dict:
    """alpha where the continuous spectrum of Shat splits in two, by bisection in log alpha
    between the last saved SE row with one piece and the next with two (each bisection
    point an SE solve continued from the lower end, saved in ``checkpoint``); None
    where no row of ``rows`` has two pieces.  ``saved_only``: the bisection as far as
    ``checkpoint`` holds it."""
    ok = [r for r in rows if r["status"] == "converged"]
    pieces = [_pieces(r, kappa0)[0] for r in ok]
    j = next((i for i, n in enumerate(pieces) if n >= 2), None)
    if j is None or j == 0:
        return {"alpha": None, "bracket": None, "upper_mass": None}
    lo, hi = ok[j - 1], ok[j]
    for _ in range(iters):
        a = math.sqrt(lo["alpha"] * hi["alpha"])
        (r,) = se_curve([_fig1_problem(a, kappa0)], checkpoint, mc_log2n,
                        max_iter=max_iter, x0=(lo["m"], lo["q"], lo["V"]),
                        saved_only=saved_only)
        if r["status"] != "converged":
            break
        if _pieces(r, kappa0)[0] >= 2:
            hi = r
        else:
            lo = r
    return {"alpha": math.sqrt(lo["alpha"] * hi["alpha"]), "bracket": [lo["alpha"], hi["alpha"]],
            "upper_mass": _pieces(hi, kappa0)[1]}


def figure1(root: Path, out: Path, *, points: int, mc_log2n: int, workers: int,
            progress=None, max_iter: int = 500, saved_only: bool = False,
            prox_branch: str = "global") -> dict:
    """Top: singular values of W at alpha 0.1, 0.5, 4, 40 (kappa0 0.5); bottom left: test
    error against alpha; bottom right: rank fraction against alpha, kappa0 0.2 / 0.5 / 0.8,
    with the bulk split.  Softmax L = 2, lambda 0.01, Delta 0.5 (logit_goe).  Layout,
    limits and colours of the notebook's Figure 1 cell."""
    from ..plotting import plt, save_figure

    alphas = np.unique(np.concatenate([np.geomspace(0.02, 60.0, points), FIG1_SPECTRA]))
    curves = {f"fig1_kappa0_{k:g}": [_fig1_problem(a, k) for a in alphas] for k in FIG1_KAPPAS}
    theory = _run_curves(curves, out, mc_log2n, workers, progress, max_iter, saved_only,
                         prox_branch)
    splits = {}
    for k in FIG1_KAPPAS:
        name = f"fig1_kappa0_{k:g}"
        splits[f"{k:g}"] = bulk_split(theory[name], k, out / f"points_{name}_split.json",
                                      mc_log2n, max_iter, saved_only=saved_only)
    fig = plt.figure(figsize=(10.0, 6.2))
    grid = fig.add_gridspec(2, 4, height_ratios=(1.0, 1.35))
    rows5 = {r["alpha"]: r for r in _converged(theory["fig1_kappa0_0.5"])}
    target_sigma = np.linspace(1e-3, 2.2, 600)
    tm = fig1_target_sigma_density(0.5, target_sigma)
    spectra, bands = {}, {}
    for i, a in enumerate(FIG1_SPECTRA):
        ax = fig.add_subplot(grid[0, i])
        ev = np.loadtxt(root / f"data/spectra/spectrum_alpha_{a}_kappa_0.5_lreg_0.01_noise_0.5.csv",
                        skiprows=1, ndmin=1)
        ax.hist(ev, bins=np.linspace(0.0, 2.2, 45), density=True, color=FIG1_GREY, alpha=0.5,
                label="authors' Adam, d = 100 (all runs)")
        ax.plot(target_sigma, tm, "--", color=FIG1_RED, lw=1.2, label="target $S_0$")
        if a in rows5:
            sp = fig1_spectrum(rows5[a], 0.5)
            ax.plot(sp.singular_values, sp.density_W, color=FIG1_BLUE, lw=1.5,
                    label="engine SE (continuous part; the atom at 0 as a bar)")
            ax.axvline(0.0, color=FIG1_BLUE, lw=1.5)
            edges, masses = sp.bulk_components
            ks = fig1_ks(ev, sp)
            spectra[f"{a:g}"] = {"atom_at_zero_W": sp.atom_at_zero_W,
                                 "pieces_sigma": np.sqrt(np.maximum(edges, 0.0)).tolist(),
                                 "masses": masses.tolist(),
                                 "their_largest": float(ev.max()),
                                 "engine_largest": float(np.sqrt(max(edges[-1, 1], 0.0))),
                                 "ks_their_adam": ks}
            ax.text(0.97, 0.95, f"atom {sp.atom_at_zero_W:.2f}\nKS {ks:.3f}",
                    transform=ax.transAxes, ha="right", va="top", fontsize=7, color=FIG1_BLUE)
        ax.set_title(f"$\\alpha$ = {a:g}", fontsize=9)
        ax.set_ylim(0.0, 1.6)
        ax.set_xlim(-0.1, 2.3)
        ax.set_xlabel(r"singular value of $W/\sqrt[4]{pd}$", fontsize=8)
        if i == 0:
            ax.set_ylabel("density")
            top = ax
    ax1 = fig.add_subplot(grid[1, :2])
    rows = theory["fig1_kappa0_0.5"]
    a5, test5 = _curve_values(rows, "test_error_noisy")
    ax1.plot(a5, test5, color=FIG1_BLUE, lw=1.5, label="engine SE")
    bands["fig1_kappa0_0.5:test_error_noisy"] = _band(ax1, rows, "test_error_noisy", FIG1_BLUE)
    se = read_table(root, "data/spectra/SE_kappa_0.5_lreg_0.01_noise_0.5.csv")
    ax1.plot(se["alpha"], se["test"], ":", color="k", lw=1.0, label="authors' SE")
    summary = {}
    for rel, mk, color, label in (
            ("data/spectra/GD_kappa_0.5_lreg_0.01_noise_0.5.csv", "x", "k", "Adam, $\\kappa$ = 1"),
            ("data/spectra/GD_kappa_student_0.75_kappa_0.5_lreg_0.01_noise_0.5.csv", ".",
             FIG1_RED, "Adam, $\\kappa$ = 0.75")):
        gd = read_table(root, rel)
        ax1.errorbar(gd["alpha"], gd["test_error_mean"], gd["test_error_std"], fmt=mk, ms=4,
                     color=color, capsize=2, lw=0.8, label=f"authors' {label}")
        summary[label] = _deviation(a5, test5, gd["alpha"], gd["test_error_mean"],
                                    gd["test_error_std"])
    for a in FIG1_SPECTRA:
        ax1.axvline(a, color="grey", ls="--", lw=0.8)
    ax1.set_xscale("log")
    ax1.set_xlabel(r"$\alpha = n/d^2$")
    ax1.set_ylabel("test error (fresh noisy label)")
    ax1.set_xlim(*FIG1_TEST_XLIM)
    ax1.set_ylim(0.0, 0.55)
    ax1.legend(fontsize=7, frameon=False)
    ax2 = fig.add_subplot(grid[1, 2:])
    ranks = {}
    for k, color in zip(FIG1_KAPPAS, FIG1_RANK_COLORS):
        name = f"fig1_kappa0_{k:g}"
        a, frac = _curve_values(theory[name], "rank_fraction")
        ax2.plot(a, frac, color=color, lw=1.5, label=f"engine, $\\kappa_0$ = {k:g}")
        bands[f"{name}:rank_fraction"] = _band(ax2, theory[name], "rank_fraction", color)
        theirs = read_table(root, f"data/spectra/rank_kappa_{k:g}_lreg_0.01_noise_0.5.csv")
        ax2.plot(theirs["alpha"], theirs["rank"], ":", color="k", lw=0.9)
        fin = np.isfinite(frac)
        inside = (theirs["alpha"] >= a[fin].min()) & (theirs["alpha"] <= a[fin].max())
        diff = theirs["rank"] - np.interp(theirs["alpha"], a[fin], frac[fin])
        shown = inside & (theirs["alpha"] >= FIG1_RANK_XLIM[0]) & (theirs["alpha"] <= FIG1_RANK_XLIM[1])
        ranks[f"{k:g}"] = {"max_abs_diff_vs_their_rank": float(np.max(np.abs(diff[inside]))),
                           "median_diff": float(np.median(diff[inside])),
                           "max_abs_diff_inside_axis": float(np.max(np.abs(diff[shown])))}
        sp = splits[f"{k:g}"]
        if sp["alpha"] is not None:
            at = float(np.interp(sp["alpha"], a[fin], frac[fin]))
            ax2.plot([sp["alpha"]] * 2, [sp["upper_mass"], at], color=color, lw=0.8)
            ax2.plot([sp["alpha"]], [sp["upper_mass"]], "o", color=color, ms=4)
            ax2.plot([sp["alpha"], FIG1_RANK_XLIM[1]], [sp["upper_mass"]] * 2, "--", color=color,
                     lw=1.2)
    ax2.plot([], [], ":", color="k", lw=0.9, label="authors' rank files")
    ax2.plot([], [], "o--", color="grey", ms=4, label="bulk splits; upper piece's mass")
    ax2.set_xscale("log")
    ax2.set_xlabel(r"$\alpha = n/d^2$")
    ax2.yaxis.set_label_position("right")
    ax2.yaxis.tick_right()
    ax2.set_ylabel("rank fraction", rotation=270, labelpad=14)
    ax2.set_xlim(*FIG1_RANK_XLIM)
    ax2.set_ylim(0.0, 1.2)
    ax2.legend(fontsize=7, loc="upper left", ncol=2, frameon=False)
    path = out / "figure1.png"
    axes = axes_record(fig)
    save_figure(fig, path, r"Figure 1: softmax, L = 2, $\lambda$ = 0.01, $\Delta$ = 0.5; "
                r"spectra and test error at $\kappa_0$ = 0.5; bands $\pm$ 2 s.e.",
                legend_from=top, legend_columns=3,
                note="The notebook's theory spectra omit the factor $\\hat m/\\hat\\sigma$ of the "
                     "free convolution; the engine's are the SE's law (KS: its Kolmogorov "
                     f"distance to their d = 100 singular values, those below {FIG1_ZERO_SIGMA:g} "
                     "counted as zeros).  Axis limits are the notebook's; their unconverged "
                     "rows ($\\alpha$ < 0.03, $\\alpha$ near 50) lie outside.")
    return {"figure": 1, "png": str(path), "axes": axes, "test_vs_adam": summary, "rank_vs_theirs": ranks,
            "bulk_split": splits, "spectra": spectra, "bands": bands, "theory": theory}


#: Figure 1's Kolmogorov distances: singular values below this count as zeros (the
#: histograms' first bin; Adam's zeros are not exact: at alpha 4, 27 % of their values lie
#: between 1e-9 and 0.05, against the engine's atom 0.28)
FIG1_ZERO_SIGMA = 0.05


def fig1_ks(sigmas: np.ndarray, spectrum, d: int = 100, p: int = 100,
            zero: float = FIG1_ZERO_SIGMA, nodes: int = 4001) -> float:
    """Kolmogorov distance between their singular values and the engine's law of W's
    (``spectrum.cdf_W`` for a p x d W), both mapped by x -> 0 below ``zero`` (the same
    coarsening on both sides: the atom at 0 absorbs the law's mass below ``zero``).  The
    law's CDF is continuous above 0: it is read at ``nodes`` points and interpolated
    (error below the largest density times the spacing, ~1e-3)."""
    from .spectrum_check import kolmogorov_distance

    x = np.where(np.asarray(sigmas, dtype=float) < zero, 0.0, sigmas)
    g = np.linspace(zero, max(float(np.max(x)), zero) * 1.001 + 1e-9, nodes)
    Fg = spectrum.cdf_W(g, d, p)
    below = float(spectrum.cdf_W(zero, d, p, left=True))

    def cdf(v, left=False):
        v = np.asarray(v, dtype=float)
        return np.where(v < 0, 0.0, np.where(v == 0, 0.0 if left else below,
                                             np.where(v < zero, below, np.interp(v, g, Fg))))

    return kolmogorov_distance(x, cdf)


def fig1_target_sigma_density(kappa0: float, sigma: np.ndarray) -> np.ndarray:
    """Density of the target's singular values sqrt(s) (s the eigenvalues of S0, over d),
    2 sigma rho_S0(sigma^2): the dashed curve of Figure 1."""
    from ..targets import target_measure

    m = target_measure(WishartTarget(kappa0))
    return 2.0 * sigma * m.density(sigma * sigma)


# ---------------------------------------------------------------- Figure 2

#: the paper's Figure 2 also shows the lambda -> 0+ curve (their lreg 0 table)
FIG2_ZERO = 0.0
#: the notebook's Figure 2 cell: one colour per lambda of FIG2_LREGS (the lambda -> 0+
#: curve in FIG1_RED, their myred), the panels' alpha limits
FIG2_COLORS = ("#0F2B5F", "#5991C7", "#8EC1E7", "#B9DBF1", "#D5A370", "#7B4F37")
FIG2_TEST_XLIM = (0.05, 0.5)
FIG2_TRAIN_XLIM = (0.05, 0.4)


def _fig2_alphas(points: int, interp: float) -> np.ndarray:
    """The grid of Figure 2's curves: ``points`` from 0.05 to 0.5, refined around the
    interpolation threshold where the small-lambda curves peak (and the lambda -> 0+ curve
    jumps)."""
    near = interp * np.array([0.97, 0.99, 1.01, 1.03, 1.08, 1.15, 1.3])
    return np.unique(np.round(np.concatenate([np.linspace(0.05, 0.5, points), near]), 6))


def _band(ax, rows: list[dict], field: str, color, scale: float = 2.0,
          x_scale: float = 1.0) -> dict:
    """A Monte-Carlo error band (+- ``scale`` propagated standard errors) along a curve, and
    a marker on every converged point with no converged neighbour (a line needs two);
    abscissa alpha times ``x_scale``.  Returns what was drawn, for the figure's record:
    the field, the scale, the converged points, those with a band, the widest half-width
    and the isolated (marked) alphas."""
    a, v = _curve_values(rows, field)
    a = a * x_scale
    key = "loss" if field == "train" else field
    err = np.array([math.nan if r["status"] != "converged" else
                    as_float((r.get("stderr") or {}).get(key))
                    * (2.0 * r["alpha"] if field == "train" else 1.0)
                    for r in _solved_rows(rows)], dtype=float)
    # an interpolator's training loss is exactly 0 (lambda -> 0+ below the threshold, the
    # limit equations): no Monte-Carlo error to draw
    err = np.where(np.isnan(err) & (v == 0.0) & (field == "train"), 0.0, err)
    ok = np.isfinite(v) & np.isfinite(err)
    if ok.any():
        ax.fill_between(a, np.where(ok, v - scale * err, np.nan),
                        np.where(ok, v + scale * err, np.nan), color=color, alpha=0.25, lw=0)
    fin = np.isfinite(v)
    lonely = fin & ~np.r_[False, fin[:-1]] & ~np.r_[fin[1:], False]
    if lonely.any():
        ax.plot(a[lonely], v[lonely], "o", ms=3.5, color=color, mfc="none")
    return {"field": field, "scale": scale, "points": int(fin.sum()), "banded": int(ok.sum()),
            "max_halfwidth": float(scale * np.max(err[ok])) if ok.any() else None,
            "isolated_alphas": (a[lonely] / x_scale).tolist()}


def _vs_table(rows: list[dict], table: dict[str, np.ndarray]) -> dict:
    """The engine's noisy test error along a curve against their SE table's ``test`` column
    (linear interpolation between their dense rows) at every converged engine point inside
    the table's range: z = difference / sqrt(engine's error^2 + their row scatter^2), their
    row scatter the spread of their column around a quadratic over 11 rows
    (:func:`amp_attention.paper.row_scatter`); median and largest |z|, points beyond 3."""
    from ..paper import row_scatter

    ta, tt = np.asarray(table["alpha"], float), np.asarray(table["test"], float)
    trows = [{"alpha": a, "test": t} for a, t in zip(ta, tt)]
    zs, diffs = [], []
    for r in rows:
        if r["status"] != "converged" or not (ta[0] <= r["alpha"] <= ta[-1]):
            continue
        i = int(np.argmin(np.abs(ta - r["alpha"])))
        theirs = float(np.interp(r["alpha"], ta, tt))
        err = math.hypot(as_float((r.get("stderr") or {}).get("test_error_noisy")),
                         row_scatter(trows, i, "test"))
        diffs.append(r["test_error_noisy"] - theirs)
        zs.append(diffs[-1] / err if err > 0 else math.inf)
    if not zs:
        return {}
    az = np.abs(zs)
    return {"n": len(zs), "median_diff": float(np.median(diffs)), "median_abs_z": float(np.median(az)),
            "max_abs_z": float(np.max(az)), "beyond_3": int(np.sum(az > 3))}


def figure2(root: Path, out: Path, *, points: int, mc_log2n: int, workers: int,
            progress=None, max_iter: int = 500, saved_only: bool = False,
            prox_branch: str = "teacher") -> dict:
    """Test error and training objective vs alpha, kappa0 0.5, Delta 0.5: six lambdas and
    the lambda -> 0+ curve, in ``prox_branch`` ("teacher": the paper's convention; "global";
    "both": teacher solid, global dashed), with +- 2 standard-error Monte-Carlo bands."""
    from ..plotting import plt, save_figure
    from ..solvers.thresholds import interpolation_threshold

    interp = interpolation_threshold(PaperSetting(0.1, 0.01).problem())
    alphas = _fig2_alphas(points, interp.alpha)
    lregs = (*FIG2_LREGS, FIG2_ZERO)
    branches = ("teacher", "global") if prox_branch == "both" else (prox_branch,)
    theory = {}
    for br in branches:
        curves = {f"fig2_lreg_{lr:g}_{br}": [PaperSetting(float(a), lr).problem() for a in alphas]
                  for lr in lregs}
        # every point without a convexity certificate as the fresh-draw average: near the
        # band the common-draws fixed points scatter over seeds up to 2x their error bars
        theory.update(_run_curves(curves, out, mc_log2n, workers, progress, max_iter,
                                  saved_only, br, "always"))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 4.2))
    colors = [*FIG2_COLORS, FIG1_RED]
    summary: dict = {}
    vs_tables: dict = {}
    bands: dict = {}
    for lr, c in zip(lregs, colors):
        label = (f"$\\lambda$ = {lr:g}" if lr > 0 else r"$\lambda \to 0^+$")
        gd_path = f"data/GD/GD_kappa_0.5_lreg_{lr:g}_noise_0.5.csv"
        gd = read_table(root, gd_path) if (root / gd_path).exists() else None  # none at 0
        for br in branches:
            rows = theory[f"fig2_lreg_{lr:g}_{br}"]
            a, test = _curve_values(rows, "test_error_noisy")
            _, train = _curve_values(rows, "train")
            main = br == branches[0]
            style = dict(color=c, lw=1.6 if main else 1.0, ls="-" if main else "--")
            ax1.plot(a, test, label=label if main else None, **style)
            ax2.plot(a, np.where(train > 0, train, np.nan), **style)
            if main:
                bands[f"fig2_lreg_{lr:g}_{br}:test_error_noisy"] = _band(
                    ax1, rows, "test_error_noisy", c)
                bands[f"fig2_lreg_{lr:g}_{br}:train"] = _band(ax2, rows, "train", c)
                if gd is not None:
                    summary[f"{lr:g}"] = _deviation(a, test, gd["alpha"], gd["test_error_mean"],
                                                    gd["test_err_std"])
        se = read_table(root, f"data/SE/SE_kappa_0.5_lreg_{lr:g}_noise_0.5.csv".replace(
            "lreg_0_", "lreg_0.0_"))  # their lambda = 0 file is named 0.0
        for br in branches:
            vs_tables.setdefault(br, {})[f"{lr:g}"] = _vs_table(
                theory[f"fig2_lreg_{lr:g}_{br}"], se)
        ax1.plot(se["alpha"], se["test"], color=c, lw=0.8, ls=":")
        ax2.plot(se["alpha"], np.where(se["train"] > 0, se["train"], np.nan), color=c,
                 lw=0.8, ls=":")
        if gd is not None:
            sel = slice(0, None, 3)
            ax1.errorbar(gd["alpha"][sel], gd["test_error_mean"][sel], gd["test_err_std"][sel],
                         fmt="o", ms=3, color=c, capsize=2, lw=0.8)
            ax2.errorbar(gd["alpha"][sel], gd["loss_mean"][sel], gd["loss_std"][sel],
                         fmt="o", ms=3, color=c, capsize=2, lw=0.8)
    for ax in (ax1, ax2):
        ax.axvline(interp.alpha, color="grey", ls="--", lw=1)
        ax.set_xlabel(r"$\alpha = n/d^2$")
    ax1.set_xlim(*FIG2_TEST_XLIM)
    ax2.set_xlim(*FIG2_TRAIN_XLIM)
    ax1.plot([], [], "o", color="k", ms=3, label="authors' Adam, d = 100 (mean $\\pm$ std)")
    ax1.plot([], [], ":", color="k", lw=0.8, label="authors' SE tables")
    if len(branches) == 2:
        ax1.plot([], [], "--", color="k", lw=1.0, label="engine SE, global minimiser")
    ax1.plot([], [], "--", color="grey", lw=1, label=f"$\\alpha_{{interp}}$ = {interp.alpha:.4f}")
    ax1.set_ylabel("test error (fresh noisy label)")
    ax1.set_ylim(0.1, 0.55)
    ax2.set_ylabel(r"training objective / $d^2$")
    ax2.set_yscale("log")
    ax2.set_ylim(1e-6, 0.05)
    path = out / "figure2.png"
    what = {"teacher": "engine SE, teacher branch (the paper's prox)",
            "global": "engine SE, global minimiser",
            "both": "engine SE, teacher branch solid, global minimiser dashed"}
    axes = axes_record(fig)
    save_figure(fig, path, r"Figure 2: softmax, L = 2, $\kappa_0$ = 0.5, $\Delta$ = 0.5 (logit); "
                f"{what[prox_branch]}; bands $\\pm$ 2 s.e.",
                legend_from=ax1, legend_columns=3)
    return {"figure": 2, "png": str(path), "axes": axes, "alpha_interp": interp.alpha,
            "prox_branch": prox_branch, "test_vs_adam": summary,
            "test_vs_their_tables": vs_tables, "bands": bands, "theory": theory}


def theory_at(a: np.ndarray, theory: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The theory curve (points ``a``, ``theory``) at ``at``: monotone piecewise-cubic
    (PCHIP) interpolation, which follows the curvature of the smooth curves between the
    SE points (linear interpolation overestimates a convex decay by up to 1e-2 on the
    figures' grids) without overshooting near a kink."""
    from scipy.interpolate import PchipInterpolator

    order = np.argsort(a)
    a, theory = np.asarray(a, dtype=float)[order], np.asarray(theory, dtype=float)[order]
    at = np.asarray(at, dtype=float)
    ok = np.isfinite(theory)
    out = np.full(at.shape, math.nan)
    if ok.sum() < 2:
        return out
    # a NaN (unconverged) grid point is a gap: no value between it and its neighbours
    k = np.clip(np.searchsorted(a, at, side="right") - 1, 0, a.size - 2)
    usable = (ok[k] & ok[k + 1]) | (np.isclose(at, a[k]) & ok[k]) | (np.isclose(at, a[k + 1]) & ok[k + 1])
    usable &= (at >= a[0]) & (at <= a[-1])
    af, tf = a[ok], theory[ok]
    fn = (PchipInterpolator(af, tf, extrapolate=False) if af.size >= 3
          else (lambda x: np.interp(x, af, tf)))
    out[usable] = fn(at[usable])
    return out


def _theory_at_points(a, theory, a_sim) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(theory at a_sim, NaN where none; the points compared: inside the theory's range
    with a value; the points in a gap: inside the range, next to an unconverged point)."""
    ref = theory_at(a, theory, a_sim)
    inside = (a_sim >= np.min(a)) & (a_sim <= np.max(a))
    return ref, inside & np.isfinite(ref), inside & ~np.isfinite(ref)


def _deviation(a, theory, a_sim, sim, std, relative: bool = False) -> dict:
    """Simulation minus theory (:func:`theory_at`) at the simulation's alphas inside the
    theory's range: median and largest |difference|, and in units of ``std`` (per point;
    None: points without an error, no z); ``relative``: also relative to the theory
    (``median_rel``, ``max_abs_rel``)."""
    if a.size < 2:
        return {}
    ref, inside, gap = _theory_at_points(a, theory, a_sim)
    if not np.any(inside):
        return {}
    diff = sim[inside] - ref[inside]
    out = {"n": int(inside.sum()), "in_gap": int(gap.sum()), "median_diff": float(np.median(diff)),
           "max_abs_diff": float(np.max(np.abs(diff)))}
    if std is not None:
        z = diff / np.maximum(std[inside], 1e-12)
        out.update(median_z=float(np.median(z)), max_abs_z=float(np.max(np.abs(z))))
    if relative:
        rel = diff / np.maximum(np.abs(ref[inside]), 1e-12)
        out["median_rel"] = float(np.median(rel))
        out["max_abs_rel"] = float(np.max(np.abs(rel)))
    return out


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


#: the notebook's palette (visualisation.ipynb, Figures 3-6)
PAPER_PALETTE = ("#003f5c", "#2f4b7c", "#665191", "#a05195", "#d45087", "#f95d6a", "#ff7c43",
                 "#ffa600")
#: Figure 3's SE-optimal-lambda grid: dense at small alpha, where the factorised error falls
#: (each point a lambda search of 10-15 SE solves, 1-25 minutes of a core)
FIG3_OPTIMAL_ALPHAS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4,
                       0.5)


def figure3(root: Path, out: Path, *, points: int, mc_log2n: int, workers: int,
            progress=None, max_iter: int = 500, saved_only: bool = False,
            prox_branch: str = "global") -> dict:
    """Left: test error against alpha, the SE at its own optimal lambda (the paper's
    curves: their SE_L1 / SE_L2 files), the SE at their Adam cross-validated lambdas
    (what their points ran) and the alpha -> infinity asymptote; right: thresholds vs
    kappa0.  Layout, limits and palette of the notebook's Figure 3 cell."""
    from ..plotting import plt, save_figure
    from ..runner import run_tasks
    from ..solvers.state_evolution import teacher_test_error

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
    optimal = {f"fig3_optimal_{name}": [PaperSetting(a, 0.01, 0.05, 0.05,
                                                     parameterisation=par).problem()
                                        for a in FIG3_OPTIMAL_ALPHAS]
               for name, par in (("factorised", "factorised"), ("unfactorised", "elementwise"))}
    # the four curves as one sweep (the optimal curves need not wait for the others)
    tasks = ([("curve", curves[n], str(out / f"points_{n}.json"), mc_log2n, max_iter,
               saved_only, prox_branch) for n in curves]
             + [("optimal", optimal[n], str(out / f"points_{n}.json"), mc_log2n, saved_only,
                 prox_branch) for n in optimal])
    theory = dict(zip([*curves, *optimal],
                      run_tasks(_figure3_task, tasks, workers=workers, progress=progress)))
    floor = teacher_test_error(next(iter(optimal.values()))[0], figure_mc(mc_log2n, prox_branch))
    kappas = np.linspace(0.02, 0.98, 49)
    rows = [threshold_row(float(k)) for k in kappas]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.27, 4.4))
    summary, vs_se, bands = {}, {}, {}
    colors = {"factorised": PAPER_PALETTE[4], "unfactorised": PAPER_PALETTE[2]}
    for label, gd, se_file in (("factorised", gd1, "SE_L1"), ("unfactorised", gd2, "SE_L2")):
        color = colors[label]
        opt = theory[f"fig3_optimal_{label}"]
        a, test = _curve_values(opt, "test_error_noisy")
        ax1.plot(a, test, "-", color=color, lw=1.6,
                 label=f"engine SE at the SE-optimal $\\lambda$, {label}")
        bands[f"fig3_optimal_{label}:test_error_noisy"] = _band(ax1, opt, "test_error_noisy", color)
        # an optimum on the search's lower bound: the curve there is an upper bound
        edge = [r for r in opt if r["status"] == "converged" and r.get("lreg_at_bound")]
        if edge:
            ax1.plot([r["alpha"] for r in edge], [r["test_error_noisy"] for r in edge], "v",
                     ms=5, color=color, mfc="white", zorder=6,
                     label=f"optimum on the search's lower bound ({label}): an upper bound")
        their = read_table(root, f"data/cross_validation/{se_file}_kappa_0.05_noise_0.05.csv")
        ax1.plot(their["alpha"], their["test"], ":", color="k", lw=0.9)
        # their SE rows minus the engine's curve (no error of theirs to scale by: no z)
        vs_se[label] = {"file": f"data/cross_validation/{se_file}_kappa_0.05_noise_0.05.csv",
                        **_deviation(a, test, their["alpha"], their["test"], None, relative=True)}
        if "lreg" in their:  # their SE_L2 file names its optimal lambda
            ok = [r for r in opt if r["status"] == "converged"]
            vs_se[label]["lreg_opt"] = {
                "alpha": [r["alpha"] for r in ok], "engine": [r["lreg_opt"] for r in ok],
                "theirs": np.interp([r["alpha"] for r in ok], their["alpha"],
                                    their["lreg"], left=math.nan, right=math.nan).tolist()}
        rs = theory[f"fig3_{label}"]
        a2, test2 = _curve_values(rs, "test_error_noisy")
        ax1.plot(a2, test2, "-.", color=color, lw=0.8,
                 label=f"engine SE at their Adam's $\\lambda_{{opt}}$, {label}")
        bands[f"fig3_{label}:test_error_noisy"] = _band(ax1, rs, "test_error_noisy", color)
        sem = gd["test_err_std_opt"] / math.sqrt(ADAM_RUNS)
        ax1.errorbar(gd["alpha"], gd["test_err_mean_opt"], sem, fmt="x", ms=4, color=color,
                     capsize=2, lw=0.8, zorder=5,
                     label=f"authors' Adam, {label} (mean $\\pm$ s.e., 8 runs)")
        # in units of the standard error of their 8-run means (what the panel draws)
        summary[label] = _deviation(a2, test2, gd["alpha"], gd["test_err_mean_opt"], sem)
    ax1.plot([], [], ":", color="k", lw=0.9, label="authors' SE (SE_L1, SE_L2 files)")
    ax1.axhline(floor["test_error_noisy"], color="grey", lw=2, alpha=0.6, zorder=0,
                label=r"$\alpha \to \infty$: the teacher's own test error")
    ax1.set_xlabel(r"$\alpha = n/d^2$")
    ax1.set_ylabel("test error (fresh noisy label)")
    ax1.set_xlim(0.005, 0.5)
    ax1.set_ylim(0.0, None)
    k = np.array([r["kappa0"] for r in rows])
    for key, color, style, label in (
            ("pr_unfactorised", PAPER_PALETTE[2], "-", "perfect recovery, unfactorised"),
            ("interp_factorised", PAPER_PALETTE[7], "-", "interpolation, factorised ($\\Delta \\to 0^+$)"),
            ("pr_factorised", PAPER_PALETTE[4], "-", "perfect recovery, factorised"),
            ("pr_bayes", PAPER_PALETTE[0], "-", "perfect recovery, Bayes-optimal")):
        ax2.plot(k, [r[key] for r in rows], style, color=color, lw=2, label=label)
    itp = read_table_noheader(root, "data/cross_validation/interpolation.csv")
    kg = np.geomspace(0.01, 100, itp.shape[1])
    sel = (kg > 0.015) & (kg < 1.0)
    ax2.plot(kg[sel][::6], itp[0][sel][::6], "o", ms=3, color="k",
             label="authors' interpolation.csv ($\\Delta$ = 0 row)")
    ax2.set_xlabel(r"target width $\kappa_0$")
    ax2.set_ylabel(r"$\bar\alpha = \alpha\,(K - 1)$")
    ax2.set_xlim(0, 1)
    ax2.set_ylim(0, 0.55)
    ax2.set_yticks([0.0, 0.25, 0.5])
    ax2.legend(fontsize=7, loc="lower right", frameon=False)
    path = out / "figure3.png"
    axes = axes_record(fig)
    save_figure(fig, path, r"Figure 3: softmax, L = 2; left $\kappa_0$ = 0.05, $\Delta$ = 0.05; "
                r"bands $\pm$ 2 s.e.", legend_from=ax1, legend_columns=2)
    return {"figure": 3, "png": str(path), "axes": axes, "test_vs_adam": summary, "optimal_vs_their_se": vs_se,
            "asymptote": floor, "thresholds": rows, "bands": bands, "theory": theory}


# ---------------------------------------------------------------- Adam files (Figures 4-6)

#: test inputs per run in their Adam scripts (their test_err columns are sums over them)
N_TEST = 2000
#: Adam runs per alpha in their scripts (their *_std columns are run-to-run deviations)
ADAM_RUNS = 8


@dataclass(frozen=True)
class AdamRuns:
    """One of the authors' Adam files (d = 100, :data:`ADAM_RUNS` runs per alpha) and the
    setting it ran: T tokens, beta (teacher and student), logit noise Delta
    (``logit_goe``), their lambda ``lreg`` (engine lam = lreg / 2), target kappa0 0.5,
    student width ratio 1, and the task: "label" (the L x L softmax output; their
    ``test_err_mean`` is against the clean label and ``test_err_mean_noise`` against a
    noisy one, both summed over :data:`N_TEST` inputs) or "seq2seq" (softmax(beta h) X,
    loss / d; their ``test_err_mean`` is per input and entry against the noisy label).
    Some file names disagree with their contents (more_tokens/*: "lam_0.01" ran lambda
    0.001; the noise column is unreliable): the setting here is read off the columns
    and :func:`adam_points` checks it."""

    rel: str
    T: int = 2
    beta: float = 1.0
    noise: float = 0.0
    lreg: float = 0.01
    task: str = "label"

    @property
    def curve(self) -> str:
        """Name of the engine's SE curve for this setting (shared by files that ran it)."""
        return f"T{self.T}_beta{self.beta:g}_noise{self.noise:g}_lreg{self.lreg:g}"

    def problem(self, alpha: float) -> Problem:
        return PaperSetting(alpha, self.lreg, 0.5, self.noise, T=self.T, beta=self.beta).problem()


def _beta_file(beta: str, noise: str) -> AdamRuns:
    return AdamRuns(f"data/beta/lam_0.01_Delta_in{noise}_D100_beta{beta}.csv",
                    beta=float(beta.replace("05", "0.5")), noise=float(noise))


def _tokens_file(T: int, noise: str) -> AdamRuns:
    sub = "noisy" if float(noise) > 0 else "noiseless"
    return AdamRuns(f"data/more_tokens/{sub}/lam_0.01_Delta_in{noise}_D100_T{T}_beta1.0.csv",
                    T=T, noise=float(noise), lreg=0.001)


#: every Adam file of their data/beta, data/seq2seq and data/more_tokens
ADAM_FILES: dict[str, AdamRuns] = {
    **{f"beta{b}_noise{n}": _beta_file(b, n) for n in ("0.00", "0.50") for b in ("05", "1", "2")},
    **{f"{task}_noise{n}": AdamRuns(f"data/seq2seq/lam_0.01_Delta_in{n}_D100_{task}.csv",
                                    noise=float(n), task=task)
       for n in ("0.00", "0.50") for task in ("label", "seq2seq")},
    **{f"T{T}_noise{n}": _tokens_file(T, n) for n in ("0.00", "0.50") for T in (2, 3, 5)},
}


def adam_points(root: Path, runs: AdamRuns) -> dict[str, np.ndarray]:
    """Their Adam points in the engine's units, per alpha: ``test`` (clean label; label
    task only), ``test_noisy``, each with ``*_std`` (run-to-run), ``mse`` (their S_MSE,
    the engine's ``matrix_mse``), ``train`` (their total objective / d^2 at each row's d,
    the engine's 2 alpha ``loss``), ``d``.  ValueError where the file contradicts
    ``runs`` (lambda, tokens, or noise: a noisy test error equal to the clean one)."""
    t = read_table(root, runs.rel)
    d = t["D"]
    if not np.allclose(t["lambda"], runs.lreg) or ("L" in t and not np.all(t["L"] == runs.T)):
        raise ValueError(f"{runs.rel}: lambda {sorted(set(t['lambda']))} / T {sorted(set(t.get('L', [])))} "
                         f"in the file, the setting says lambda {runs.lreg}, T {runs.T}")
    out = {"alpha": t["alpha"], "d": d, "mse": t["MSE_mean"], "mse_std": t["MSE_std"],
           "train": t["train_total_loss_mean"] / d**2,
           "train_std": t["train_total_loss_std"] / d**2}
    if runs.task == "seq2seq":
        out["test_noisy"], out["test_noisy_std"] = t["test_err_mean"], t["test_err_std"]
        return out
    out["test"], out["test_std"] = t["test_err_mean"] / N_TEST, t["test_err_std"] / N_TEST
    out["test_noisy"] = t["test_err_mean_noise"] / N_TEST
    out["test_noisy_std"] = t["test_err_std_noise"] / N_TEST
    noisy = bool(np.any(t["test_err_mean_noise"] != t["test_err_mean"]))
    if noisy != (runs.noise > 0):
        raise ValueError(f"{runs.rel}: noisy and clean test errors {'differ' if noisy else 'agree'}, "
                         f"the setting says Delta = {runs.noise}")
    return out


def _alpha_of_x(x: float | np.ndarray, T: int):
    """alpha at x = alpha (K - 1)/2 (alpha itself at T = 2): the theory grid's coordinate
    (Figure 6 itself is drawn on alpha (K - 1), fig6_x_scale)."""
    return 2.0 * x / alpha_bar(1.0, T)


def _theory_alphas(points: int, T: int) -> np.ndarray:
    """Theory alphas for Figures 4-6, ascending: x = alpha (K - 1)/2 (alpha itself at
    T = 2) at 0.005 (their first alpha), 0.0075, 0.01, 0.0175, 0.025, 0.0375, ``points``
    values from 0.05 to 0.5 and the midpoints between them, i.e. up to alpha (K - 1) = 1,
    their largest row (the comparison with their points interpolates the curve; the finer
    grid keeps that error below their seed error)."""
    grid = np.linspace(0.05, 0.5, points)
    x = np.sort(np.concatenate([[0.005, 0.0075, 0.01, 0.0175, 0.025, 0.0375], grid,
                                0.5 * (grid[1:] + grid[:-1])]))
    return _alpha_of_x(x, T)


def _adam_curves(files: list[AdamRuns], points: int) -> dict[str, list[Problem]]:
    return {f.curve: [f.problem(float(a)) for a in _theory_alphas(points, f.T)] for f in files}


def _converged(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "converged"]


def _solved_rows(rows: list[dict]) -> list[dict]:
    """The rows of a curve that were solved (converged or not), in alpha order."""
    return sorted((r for r in rows if r["status"] != "not computed"), key=lambda r: r["alpha"])


def _curve_values(rows: list[dict], field: str) -> tuple[np.ndarray, np.ndarray]:
    """(alphas, values) of ``field`` along the solved SE rows of a curve, in alpha order,
    NaN at a row that did not converge (a gap: plots break there and :func:`theory_at`
    gives no value next to it); "train" is the authors' training objective per d^2,
    2 alpha ``loss``."""
    rs = _solved_rows(rows)
    a = np.array([r["alpha"] for r in rs], dtype=float)
    return a, np.array([math.nan if r["status"] != "converged"
                        else 2.0 * r["alpha"] * r["loss"] if field == "train" else r[field]
                        for r in rs], dtype=float)


def adam_deviation(rows: list[dict], sim: dict[str, np.ndarray], field: str,
                   sim_key: str) -> dict:
    """Their Adam means minus the engine's curve (``field`` of the SE rows; "train": 2 alpha
    loss), in absolute terms, relative to the theory, and in units of the standard error
    of their :data:`ADAM_RUNS`-run mean (what a seed error of the mean is)."""
    a, th = _curve_values(rows, field)
    return _deviation(a, th, sim["alpha"], sim[sim_key],
                      sim[f"{sim_key}_std"] / math.sqrt(ADAM_RUNS), relative=True)


def _adam_panel(ax, rows: list[dict], sim: dict[str, np.ndarray], field: str, sim_key: str,
                color, label: str, x_scale: float = 1.0, marker: str = "o",
                draw_theory: bool = True) -> dict | None:
    a, th = _curve_values(rows, field)
    band = None
    if draw_theory:
        ax.plot(a * x_scale, th, "-", color=color, lw=1.5, label=f"engine SE, {label}")
        band = _band(ax, rows, field, color, x_scale=x_scale)
    ax.errorbar(sim["alpha"] * x_scale, sim[sim_key], sim[f"{sim_key}_std"], fmt=marker, ms=2.5,
                color=color, capsize=1.5, lw=0.6, alpha=0.8, label=f"authors' Adam, {label}")
    return band


def _adam_figure(number: int, root: Path, out: Path, panels, title: str, ylabel: str,
                 xlabel: str, *, points: int, mc_log2n: int, workers: int, progress,
                 max_iter: int, saved_only: bool, x_scale=None, extra=None,
                 prox_branch: str = "global") -> dict:
    """Shared body of Figures 4-6: ``panels`` is a list of (panel title, [(file key, label,
    engine field, their column)]); every file's SE curve is solved (shared by name), drawn
    with the file's points, and summarised by :func:`adam_deviation`."""
    from ..plotting import plt, save_figure

    used = [ADAM_FILES[k] for _, entries in panels for k, *_ in entries]
    theory = _run_curves(_adam_curves(list({f.curve: f for f in used}.values()), points),
                         out, mc_log2n, workers, progress, max_iter, saved_only, prox_branch)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.9))
    axes = np.atleast_1d(axes)
    summary: dict = {}
    bands: dict = {}
    for ax, (ptitle, entries) in zip(axes, panels):
        colors = [PAPER_PALETTE[i] for i in (0, 2, 4, 6)[:len(entries)]]  # the notebook's
        drawn: set = set()
        for (key, label, field, col, *style), c in zip(entries, colors):
            f = ADAM_FILES[key]
            sim = adam_points(root, f)
            xs = x_scale(f) if x_scale else 1.0
            first = (f.curve, field) not in drawn
            drawn.add((f.curve, field))
            band = _adam_panel(ax, theory[f.curve], sim, field, col, style[0] if style else c,
                               label, xs, style[1] if len(style) > 1 else "o", draw_theory=first)
            if band is not None:
                bands[f"{f.curve}:{field}"] = band
            summary[key if field != "train" else f"{key}_train"] = {
                "file": f.rel, "their_column": col, "engine_field": field,
                col: adam_deviation(theory[f.curve], sim, field, col),
                "mse": adam_deviation(theory[f.curve], sim, "matrix_mse", "mse")}
        ax.set_title(ptitle, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_xlim(0.0, 0.5)  # the notebook's Figures 5 and 6
        ax.legend(fontsize=6.5)
    axes[0].set_ylabel(ylabel)
    if extra:
        extra(axes)
    path = out / f"figure{number}.png"
    axes_rec = axes_record(fig)
    save_figure(fig, path, title)
    return {"figure": number, "png": str(path), "axes": axes_rec, "test_vs_adam": summary,
            "bands": bands,
            "theory": theory}


def figure4(root: Path, out: Path, **kw) -> dict:
    """Label vs seq2seq task (L = 2, beta 1, lambda 0.01): test error against the noisy label
    and the training objective per d^2 (the engine's SE is the same for both tasks at
    leading order, docs/theory.md 16.4)."""
    entries = [(f"{task}_noise{n}", f"{task}, $\\Delta$ = {float(n):g}", "test_error_noisy",
                "test_noisy", color, mk)
               for n, color in (("0.00", PAPER_PALETTE[2]), ("0.50", PAPER_PALETTE[0]))
               for task, mk in (("label", "o"), ("seq2seq", "x"))]
    train = [(k, lab, "train", "train", c, mk) for k, lab, _, _, c, mk in entries]

    def limits(axes):  # the notebook's Figure 4 cell
        axes[0].set_xlim(0.005, 0.3)
        axes[1].set_xlim(0.0, 0.5)
        axes[1].set_ylabel(r"training objective / $d^2$")
        axes[1].set_ylim(0.0, 0.04)

    return _adam_figure(4, root, out, [("test error (noisy label)", entries),
                                       ("training objective", train)],
                        r"Figure 4: label vs seq2seq task, L = 2, $\beta$ = 1, $\lambda$ = 0.01, d = 100",
                        "test error (fresh noisy label)", r"$\alpha = n/d^2$", extra=limits, **kw)


def figure5(root: Path, out: Path, **kw) -> dict:
    """Temperature beta = beta* = 0.5, 1, 2 (L = 2, lambda 0.01): clean test error."""
    panels = [(f"$\\Delta$ = {float(n):g}",
               [(f"beta{b}_noise{n}", f"$\\beta$ = {b.replace('05', '0.5')}", "test_error", "test")
                for b in ("05", "1", "2")]) for n in ("0.00", "0.50")]
    return _adam_figure(5, root, out, panels,
                        r"Figure 5: temperature, L = 2, $\lambda$ = 0.01, d = 100",
                        "test error (clean label)", r"$\alpha = n/d^2$", **kw)


#: Figure 6 as their notebook draws it (visualisation.ipynb, the cell that saves
#: figures/Figure6.pdf): ``plt.errorbar(df['_alpha'] * 2 | 5 | 14, df['_test_err_mean'])``
#: for T = 2, 3, 5 -- the abscissa alpha (K - 1), K = T(T+1)/2 (their axis label writes
#: alpha_bar = 2n/((T^2 + T - 2) d^2), the inverse), the clean test error (``_test_err_mean``
#: = test_err_mean / 2000; the noisy one is ``test_err_mean_noise``), xlim (0, 0.5)
FIG6_TOKENS = (2, 3, 5)
FIG6_FIELD, FIG6_COLUMN = "test_error", "test"
FIG6_XLIM = (0.0, 0.5)


def fig6_x_scale(T: int) -> float:
    """Figure 6's abscissa per unit alpha: K - 1 = T(T+1)/2 - 1 (2, 5, 14 at T = 2, 3, 5)."""
    return alpha_bar(1.0, T)


def figure6(root: Path, out: Path, **kw) -> dict:
    """T = 2, 3, 5 tokens (beta 1, lambda 0.001): the clean test error on the axis
    alpha (K - 1), as their notebook plots it (FIG6_TOKENS)."""
    panels = [(f"$\\Delta$ = {float(n):g}",
               [(f"T{T}_noise{n}", f"T = {T}", FIG6_FIELD, FIG6_COLUMN) for T in FIG6_TOKENS])
              for n in ("0.00", "0.50")]

    def limits(axes):
        for ax in axes:
            ax.set_xlim(*FIG6_XLIM)

    return _adam_figure(6, root, out, panels,
                        r"Figure 6: T tokens, $\beta$ = 1, $\lambda$ = 0.001, d = 100",
                        "test error (clean label)", r"$\alpha\,(K - 1)$, K = T(T+1)/2",
                        x_scale=lambda f: fig6_x_scale(f.T), extra=limits, **kw)


# ---------------------------------------------------------------- finite-size allowance

#: engine field of the Adam layer and of the SE -> column of :func:`adam_points`
ALLOWANCE_FIELDS = {"test_error": "test", "test_error_noisy": "test_noisy", "matrix_mse": "mse"}


def _their_mean_at(sim: dict[str, np.ndarray], key: str, alpha: float) -> tuple[float, float]:
    """Their mean and standard error of the mean at ``alpha``, linear between their rows."""
    a = sim["alpha"]
    if not a.min() <= alpha <= a.max():
        return math.nan, math.nan
    return (float(np.interp(alpha, a, sim[key])),
            float(np.interp(alpha, a, sim[f"{key}_std"])) / math.sqrt(ADAM_RUNS))


def adam_allowance(root: Path, key: str, x: float, *, ds: tuple[int, ...] = (32, 64),
                   seeds: int = 4, mc_log2n: int = 11, checkpoint: Path | None = None,
                   options=None) -> dict:
    """The finite-size allowance at one of their settings (``ADAM_FILES[key]``) and
    x = alpha (K - 1)/2, measured with the engine's own Adam (:func:`amp_attention.adam.train_layer`,
    their initialisation W0 ~ N(0, 1)) at two or more dimensions ``ds``, ``seeds`` data
    sets each, against the engine's SE at the same alpha.  A seq2seq setting trains the
    seq2seq loss (:mod:`amp_attention.seq2seq`) and, on the same data sets, the label
    loss, and reports their paired difference per d (``seq2seq_minus_label``).

    The finite-d deviation delta(d) = mean(d) - SE is carried to their d = 100 with the
    slower of the two usual rates, d^-1/2 (the report gives d delta(d) and sqrt(d)
    delta(d) at both d to show which holds): the allowance is
    A = (|delta(d2)| + 3 sem(d2)) sqrt(d2 / 100), d2 the largest d, and their point passes where
    |theirs - SE| <= 3 sem(theirs) + A.  Every finished run is saved to ``checkpoint``
    (JSON, atomically) before the next starts; a rerun skips the saved ones."""
    from ..adam import train_layer
    from ..solvers.state_evolution import solve_state_evolution

    f = ADAM_FILES[key]
    alpha = _alpha_of_x(float(x), f.T)
    store = CheckpointFile(checkpoint) if checkpoint else None
    done = {} if store is None else store.records()

    def save(k: str) -> None:
        if store is not None:
            store.write(k, done[k])

    def record(layer):
        return {"status": layer.status.value, "iterations": layer.iterations,
                "seconds": layer.seconds, "test_error": layer.test_error,
                "test_error_noisy": layer.test_error_noisy, "matrix_mse": layer.matrix_mse}

    p = f.problem(alpha)
    if "se" not in done:
        r = solve_state_evolution(p, mc=figure_mc(mc_log2n, "global"))
        done["se"] = {"status": r.status.value, "test_error": r.test_error,
                      "test_error_noisy": r.test_error_noisy, "matrix_mse": r.matrix_mse,
                      "stderr": dict(r.mc_stderr or {}), "vhat_jump_share": r.vhat_jump_share}
        save("se")
    # seq2seq: the engine's Adam on the seq2seq loss, and on the label loss over the same
    # data sets (paired: their difference is the finite-d term of docs/theory.md 16.4,
    # measured to fall like 1/d)
    tasks = ("seq2seq", "label") if f.task == "seq2seq" else ("label",)
    for d in ds:
        for seed in range(seeds):
            for task in tasks:
                k = f"d={d},seed={seed}" + (",label" if task != f.task else "")
                if k not in done:
                    done[k] = record(train_layer(p, d, seed, init_scale=1.0, options=options,
                                                 task=task))
                    save(k)
    sim = adam_points(root, f)
    out: dict = {"key": key, "file": f.rel, "x": float(x), "alpha": alpha, "ds": list(ds),
                 "seeds": seeds, "se_status": done["se"]["status"],
                 "vhat_jump_share": done["se"]["vhat_jump_share"], "fields": {}}
    for field, col in ALLOWANCE_FIELDS.items():
        if col not in sim:
            continue
        se = as_float(done["se"][field])  # null in the checkpoint: NaN (strict JSON)
        per_d = {}
        for d in ds:
            v = np.array([as_float(done[f"d={d},seed={s}"][field]) for s in range(seeds)])
            per_d[d] = (float(v.mean()), float(v.std(ddof=1) / math.sqrt(seeds)))
        d2 = ds[-1]
        allowance = (abs(per_d[d2][0] - se) + 3.0 * per_d[d2][1]) * math.sqrt(d2 / 100.0)
        theirs, their_sem = _their_mean_at(sim, col, alpha)
        dev = theirs - se
        out["fields"][field] = {
            "se": se, "engine": {str(d): {"mean": m, "sem": e, "d_times_delta": d * (m - se),
                                      "sqrt_d_times_delta": math.sqrt(d) * (m - se)}
                                 for d, (m, e) in per_d.items()},
            "allowance_d100": allowance, "theirs": theirs, "their_sem": their_sem,
            "theirs_minus_se": dev, "bound": 3.0 * their_sem + allowance,
            "passes": bool(abs(dev) <= 3.0 * their_sem + allowance)}
        if f.task == "seq2seq":
            out["fields"][field]["seq2seq_minus_label"] = {
                str(d): _paired_difference(done, d, seeds, field) for d in ds}
    return out


def _paired_difference(done: dict, d: int, seeds: int, field: str) -> dict:
    """Mean and standard error over data sets of the seq2seq run's ``field`` minus the
    label run's on the same data set, and sqrt(d) times the mean."""
    v = np.array([as_float(done[f"d={d},seed={s}"][field])
                  - as_float(done[f"d={d},seed={s},label"][field]) for s in range(seeds)])
    return {"mean": float(v.mean()), "sem": float(v.std(ddof=1) / math.sqrt(seeds)),
            "sqrt_d_times_mean": math.sqrt(d) * float(v.mean())}


def adam_file_check(root: Path, key: str, theory_rows: list[dict],
                    allowance: dict[str, tuple[list[float], list[float]]]) -> dict:
    """Every point of their Adam file ``ADAM_FILES[key]`` inside the theory's alpha range
    against the engine's SE curve (``theory_rows``: saved SE rows of the file's setting):
    the point passes where |theirs - SE| <= 3 sem(theirs) + A(alpha), A the allowance
    measured by :func:`adam_allowance` at the setting, ``allowance[field] = (alphas,
    values)``, linear in alpha between the measured points and constant beyond them.
    Per field: points, points outside, their alphas and the largest |dev| / bound."""
    f = ADAM_FILES[key]
    sim = adam_points(root, f)
    out: dict = {"file": f.rel, "setting": f.curve, "fields": {}}
    for field, col in ALLOWANCE_FIELDS.items():
        a, values = _curve_values(theory_rows, field)
        if col not in sim or field not in allowance or a.size < 2:
            continue
        th, inside, gap = _theory_at_points(a, values, sim["alpha"])
        dev = sim[col][inside] - th[inside]
        xa, va = (np.asarray(v, dtype=float) for v in allowance[field])
        order = np.argsort(xa)
        allow = np.interp(sim["alpha"][inside], xa[order], va[order])
        bound = 3.0 * sim[f"{col}_std"][inside] / math.sqrt(ADAM_RUNS) + allow
        bad = np.abs(dev) > bound
        out["fields"][field] = {"allowance": [float(allow.min()), float(allow.max())],
                                "points": int(inside.sum()), "in_gap": int(gap.sum()),
                                "outside": int(bad.sum()),
                                "alphas_outside": sim["alpha"][inside][bad].round(5).tolist(),
                                "max_dev_over_bound": float(np.max(np.abs(dev) / bound))}
    return out


#: each figure's settings as docs/paper.md names them (``figures.py --all`` uses these);
#: ALL_ORDER: Figure 5 before 4, whose beta 1 curves are Figure 5's
FIGURE_SETTINGS: dict[int, dict] = {
    1: {"points": 24, "mc_log2n": 11, "max_iter": 60, "prox_branch": "teacher"},
    2: {"points": 12, "mc_log2n": 11, "max_iter": 500, "prox_branch": "teacher"},
    3: {"points": 30, "mc_log2n": 12, "max_iter": 500, "prox_branch": "teacher"},
    5: {"points": 10, "mc_log2n": 11, "max_iter": 500, "prox_branch": "teacher"},
    4: {"points": 10, "mc_log2n": 11, "max_iter": 500, "prox_branch": "teacher"},
    6: {"points": 10, "mc_log2n": 11, "max_iter": 500, "prox_branch": "teacher"},
}
ALL_ORDER = (1, 2, 3, 5, 4, 6)


def draw_figure(number: int, repo: Path | str, out: Path | str, *, points: int = 12,
                mc_log2n: int = 12, workers: int = 0, progress=None, max_iter: int = 500,
                saved_only: bool = False, prox_branch: str = "teacher") -> dict:
    """Redraw Figure ``number`` into ``out``/figureN.png (theory checkpoints beside it) and
    write ``out``/figureN.json (parameters, the engine's curves, deviations from the
    authors' points).  ``saved_only``: draw from the saved theory points only."""
    if number not in FIGURES:
        raise ValueError(f"figure must be one of {FIGURES}, got {number!r}")
    root = check_repo(repo)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fn = {1: figure1, 2: figure2, 3: figure3, 4: figure4, 5: figure5, 6: figure6}[number]
    if prox_branch == "both" and number != 2:
        raise ValueError("prox_branch 'both' is drawn in Figure 2 only; choose global or teacher")
    choices = (*PROX_BRANCHES, "both")
    if prox_branch not in choices:
        raise ValueError(f"prox_branch must be one of {', '.join(choices)}, got {prox_branch!r}")
    res = fn(root, out, points=points, mc_log2n=mc_log2n, workers=workers, progress=progress,
             max_iter=max_iter, saved_only=saved_only, prox_branch=prox_branch)
    check = commit_check(root)
    res["parameters"] = {"repository": AUTHORS_REPOSITORY, "commit": check["found"],
                         "commit_matches_docs": check["matches"], "points": points,
                         "mc_log2n": mc_log2n, "max_iter": max_iter, "prox_branch": prox_branch}
    res["not_converged"] = [{"curve": name, "alpha": r["alpha"], "status": r["status"]}
                            for name, rows in res["theory"].items() for r in rows
                            if r["status"] != "converged"]
    # the record names its figure relative to itself and the authors' data by repository,
    # never a local path (the returned dict keeps the full path of the figure)
    atomic_write_json(out / f"figure{number}.json", {**res, "png": Path(res["png"]).name},
                      indent=1)
    return res
