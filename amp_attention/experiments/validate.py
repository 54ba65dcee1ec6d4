"""Theory vs trained layers: the SE curve against Adam runs over (alpha, d, seed) (issue 5).

For a base problem, a grid of sample ratios and a list of dimensions, every
(alpha, d, seed) run trains the layer with Adam (:func:`amp_attention.adam.train_layer`)
and is stored as one JSON file in ``OUT/runs`` (written atomically), so a
rerun skips finished runs and an interrupted sweep resumes.  The SE is solved
on a fine alpha grid (theory lines) and at the grid points.  Per alpha the
per-seed values are fitted as a + b/d (:func:`amp_attention.solvers.extrapolation.fit_inverse_d`,
variance exponent estimated when there are >= 2 seeds at >= 2 d).  Outputs:
``OUT/validate.csv`` (one row per alpha and d, plus d = "inf" for the
extrapolation and "theory"), ``OUT/validate.json`` (parameters, theory curve,
table) and ``OUT/validate.png`` (test error, train error, matrix MSE against
alpha, and the 1/d extrapolation of the test error).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from amp_attention.solvers.extrapolation import fit_inverse_d
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

from ..adam import AdamOptions, train_layer
from ..checks import Integer, grid_values, real_grid
from ..files import atomic_save_figure, atomic_write_csv, atomic_write_json, ensure_directory
from ..operators import check_token_dtype
from ..runner import Checkpoints, run_checkpointed
from ..spec import Problem

QUANTITIES = ("test_error", "train_error", "matrix_mse")
SEED_SCALINGS = ("constant", "equal-precision")


@dataclass(frozen=True)
class ValidationPlan:
    """What to run: ``problem`` (its alpha is replaced by each grid value), the
    grid ``alphas``, dimensions ``ds``, ``seeds`` per (alpha, d) (one count, or one
    count per alpha: points with a larger seed-to-seed spread need more) at the largest
    d; ``seed_scaling="equal-precision"`` multiplies them by (d_max/d)^2 at smaller d
    (rounded up): the seed spread of these statistics shrinks like 1/d, so every d
    then has about the same standard error, at a cost dominated by d_max; this
    takes the noise of the small-d points out of the extrapolated value.  The target
    spectrum, Adam options, the SE's Monte-Carlo options (non-linear channels),
    the number of points of the theory curve, and the ``dtype`` of the products over the
    data in training (float32: :mod:`amp_attention.operators`; a run file of the other
    dtype is not resumed but redone)."""

    problem: Problem
    alphas: tuple[float, ...]
    ds: tuple[int, ...]
    seeds: int | tuple[int, ...] = 3
    target_spectrum: str = "quantile"
    adam: AdamOptions = AdamOptions()
    mc: MonteCarloOptions | None = None
    theory_points: int = 25
    seed_scaling: str = "constant"
    dtype: str = "float64"

    def __post_init__(self) -> None:
        check_token_dtype(self.dtype)
        object.__setattr__(self, "alphas", real_grid("alphas", self.alphas))
        object.__setattr__(self, "ds", tuple(Integer(2, integral_float=True).check("ds", d)
                                             for d in grid_values("ds", self.ds)))
        if any(not (math.isfinite(a) and a > 0) for a in self.alphas):
            raise ValueError(f"alphas must be a non-empty list of numbers > 0, got {self.alphas!r}")
        for name, values in (("alphas", self.alphas), ("ds", self.ds)):
            repeated = sorted({v for v in values if list(values).count(v) > 1})
            if repeated:  # one run counted twice would shrink the standard errors
                raise ValueError(f"{name} must list each value once, got "
                                 f"{', '.join(f'{v:g}' for v in repeated)} more than once")
        counts = self.seeds if isinstance(self.seeds, (tuple, list)) else (self.seeds,)
        if isinstance(self.seeds, (tuple, list)):
            if len(counts) != len(self.alphas):
                raise ValueError(f"seeds must be one integer or one per alpha ({len(self.alphas)}), "
                                 f"got {self.seeds!r}")
            object.__setattr__(self, "seeds", tuple(int(c) for c in counts))
        if any(isinstance(c, bool) or int(c) != c or c < 1 for c in counts):
            raise ValueError(f"seeds must be integers >= 1, got {self.seeds!r}")
        if self.seed_scaling not in SEED_SCALINGS:
            raise ValueError(f"seed_scaling must be one of {', '.join(SEED_SCALINGS)}, "
                             f"got {self.seed_scaling!r}")
        object.__setattr__(self, "theory_points", Integer(2, integral_float=True).check(
            "theory_points", self.theory_points))

    def seeds_at(self, alpha: float, d: int | None = None) -> int:
        """Number of seeds at sample ratio ``alpha`` and dimension ``d`` (default: d_max)."""
        base = self.seeds[self.alphas.index(alpha)] if isinstance(self.seeds, tuple) else int(self.seeds)
        if d is None or self.seed_scaling == "constant":
            return base
        return int(math.ceil(base * (max(self.ds) / d) ** 2 - 1e-9))

    def runs(self) -> list[tuple[float, int, int]]:
        """Every (alpha, d, seed) of the plan."""
        return [(a, d, s) for a in self.alphas for d in self.ds for s in range(self.seeds_at(a, d))]


def _at(problem: Problem, alpha: float) -> Problem:
    return dataclasses.replace(problem, alpha=float(alpha))


#: what a run file must hold to count as finished (else it is moved aside and redone)
RUN_KEYS = ("alpha", "d", "seed", "converged", "test_error", "train_error", "matrix_mse")


def run_store(out: Path | str) -> Checkpoints:
    """The sweep's finished runs: ``out/runs/<key>.json``."""
    return Checkpoints(str(Path(out) / "runs"), RUN_KEYS, QUANTITIES)


def run_key(alpha: float, d: int, seed: int) -> str:
    return f"a{alpha:.6g}_d{d}_s{seed}"


def run_file(out: Path, alpha: float, d: int, seed: int) -> Path:
    return run_store(out).path(run_key(alpha, d, seed))


def train_run(problem: Problem, alpha: float, d: int, seed: int, adam: AdamOptions,
              target_spectrum: str, dtype: str = "float64") -> dict:
    """The record of one Adam-trained layer of a validation sweep (a task of
    :func:`~amp_attention.runner.run_checkpointed`, which saves it)."""
    res = train_layer(_at(problem, alpha), d, seed, options=adam, target_spectrum=target_spectrum,
                      dtype=dtype)
    return {"alpha": alpha, "dtype": dtype, **res.to_dict()}


def finished(rec: dict | None, dtype: str) -> bool:
    """A run file counts as finished for a plan of ``dtype`` (files written before the
    dtype was recorded are float64 runs)."""
    return rec is not None and rec.get("dtype", "float64") == dtype


def run_validation(
    plan: ValidationPlan,
    out: Path,
    *,
    executor: cf.Executor | None = None,
    workers: int = 0,
    progress: Callable[[Iterable, int], Iterable] | None = None,
    figure_format: str = "png",
) -> dict:
    """Run (or resume) the plan into directory ``out``; return the summary dict
    (also written to validate.json), including ``trained``: how many runs this
    call actually performed; the figure is ``validate.<figure_format>`` (png, pdf,
    svg).  The runs go through
    :func:`~amp_attention.runner.run_tasks` (``executor``, ``workers``, ``progress``
    as there: in this process by default)."""
    out = Path(out)
    ensure_directory(out / "runs")
    tasks = {run_key(a, d, s): (plan.problem, a, d, s, plan.adam, plan.target_spectrum,
                                plan.dtype) for a, d, s in plan.runs()}
    records, trained = run_checkpointed(train_run, tasks, run_store(out),
                                        accept=lambda _key, rec: finished(rec, plan.dtype),
                                        executor=executor, workers=workers, progress=progress)
    runs = list(records.values())
    grid = np.unique(np.concatenate([np.linspace(min(plan.alphas), max(plan.alphas),
                                                 plan.theory_points), plan.alphas]))
    theory = []
    for a in grid:
        r = solve_state_evolution(_at(plan.problem, a), mc=plan.mc)
        theory.append({"alpha": float(a), "converged": r.converged,
                       **{q: getattr(r, q) for q in QUANTITIES},
                       "mc_stderr": (None if r.mc_stderr is None
                                     else {q: r.mc_stderr[q] for q in QUANTITIES})})
    bayes = bayes_curve(plan, grid)
    table, fits = _table(plan, runs, theory)
    summary = {"params": {**plan.problem.to_dict(), "alphas": list(plan.alphas),
                          "ds": list(plan.ds), "seeds": (list(plan.seeds) if isinstance(plan.seeds, tuple)
                                               else plan.seeds),
                          "seed_scaling": plan.seed_scaling,
                          "target_spectrum": plan.target_spectrum,
                          "adam": dataclasses.asdict(plan.adam), "dtype": plan.dtype},
               "theory": theory, "bayes": bayes, "table": table, "fits": fits,
               "trained": trained,
               "all_converged": all(r["converged"] for r in runs)}
    atomic_write_json(out / "validate.json", summary)
    _write_csv(out / "validate.csv", table)
    plot_validation(summary, out / f"validate.{figure_format}")
    return summary


#: the quantities the Bayes-optimal estimator defines (it has no training error)
BAYES_QUANTITIES = ("test_error", "matrix_mse")


def bayes_curve(plan: ValidationPlan, grid) -> list[dict]:
    """The Bayes-optimal estimator (docs/theory.md "Bayes-optimal baseline") on the theory grid
    when its channel side is in closed form, else (nested Monte Carlo, ~20 s a point) at
    the plan's alphas only; [] when the channel has no Bayes-optimal SE (the reason is
    not an error of the validation)."""
    from amp_attention.solvers.bayes_optimal import BayesStateEvolution, solve_bayes_optimal

    try:
        se = BayesStateEvolution(_at(plan.problem, float(grid[0])))
    except ValueError:
        return []
    alphas = grid if se.mc is None else sorted(plan.alphas)
    out = []
    for a in alphas:
        r = solve_bayes_optimal(_at(plan.problem, float(a)))
        out.append({"alpha": float(a), "converged": r.converged,
                    **{q: getattr(r, q) for q in BAYES_QUANTITIES}})
    return out


def _table(plan: ValidationPlan, runs: list[dict], theory: list[dict]) -> tuple[list[dict], dict]:
    """(CSV rows, the a + b/d fits per alpha and quantity)."""
    rows, fits = [], {}
    by_alpha = {t["alpha"]: t for t in theory}
    for a in plan.alphas:
        sel = [r for r in runs if r["alpha"] == a]
        for d in plan.ds:
            rs = [r for r in sel if r["d"] == d]
            row = {"alpha": a, "d": str(d), "n_seeds": len(rs)}
            for q in QUANTITIES:
                v = np.array([r[q] for r in rs])
                row[q] = float(v.mean())
                row[q + "_stderr"] = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
            rows.append(row)
        row = {"alpha": a, "d": "inf", "n_seeds": len(sel)}
        enough = len(plan.ds) >= 2 and plan.seeds_at(a) >= 2
        fits[str(a)] = {}
        for q in QUANTITIES:
            if len(plan.ds) >= 2 and len(sel) >= 3:
                fit = fit_inverse_d([r["d"] for r in sel], [r[q] for r in sel],
                                    variance_exponent=None if enough else 2.0)
                row[q], row[q + "_stderr"] = fit.intercept, fit.intercept_se
                fits[str(a)][q] = dataclasses.asdict(fit)
            else:
                row[q], row[q + "_stderr"] = math.nan, math.nan
        rows.append(row)
        th = by_alpha[float(a)]
        rows.append({"alpha": a, "d": "theory", "n_seeds": 0,
                     **{q: th[q] for q in QUANTITIES},
                     **{q + "_stderr": (th["mc_stderr"] or {}).get(q, 0.0) for q in QUANTITIES}})
    return rows, fits


def _write_csv(path: Path, table: list[dict]) -> None:
    keys = list(table[0])
    atomic_write_csv(path, keys, ([row.get(k, "") for k in keys] for row in table))


#: y-axis labels of the validated quantities (symbols as in docs/theory.md)
YLABELS = {"test_error": r"test error $e_{\rm test} = E\,\|g(h(S_0)) - g(h(\hat S))\|^2$",
           "train_error": r"train error $e_{\rm train}$",
           "matrix_mse": r"matrix MSE $\|\hat S - S_0\|_F^2 / d$"}


def _validation_title(params: dict) -> str:
    t = params["target"]
    target = (f"Wishart kappa0={t['kappa0']:g}" if t.get("kind") in ("wishart", "spiked")
              else t.get("kind", ""))
    return (f"{params['channel']} L={params['L']}, {target}, kappa={params['kappa']:g}, "
            f"lam={params['lam']:g}, Delta={params['noise']:g}; Adam lr={params['adam']['lr']:g}, "
            f"{params['target_spectrum']} target spectrum")


def validation_figure(summary: dict):
    """The figure of :func:`plot_validation` (returned open, for inspection)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    theory, table = summary["theory"], summary["table"]
    params = summary["params"]
    ds = params["ds"]
    fig, axes = plt.subplots(2, 2, figsize=(9.0, 7.2))
    axes = axes.ravel()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ta = [t["alpha"] for t in theory]
    alphas = sorted(params["alphas"])
    # markers of the different d side by side at each alpha (a dodge of 1.5 % of the
    # alpha range per series), so that no error bar hides another
    span = (alphas[-1] - alphas[0]) if len(alphas) > 1 else alphas[0]
    offsets = (np.arange(len(ds) + 1) - len(ds) / 2) * 0.015 * span
    for ax, q in zip(axes, QUANTITIES):
        ax.plot(ta, [t[q] for t in theory], "k-", lw=1.8, label=r"SE ($d \to \infty$)")
        bayes = summary.get("bayes") or []
        if bayes and q in BAYES_QUANTITIES:
            ax.plot([b["alpha"] for b in bayes], [b[q] for b in bayes],
                    "--" if len(bayes) > len(alphas) else "s--", color="0.35", lw=1.4, ms=4,
                    label="Bayes-optimal (MMSE)")
        for c, d in enumerate(ds):
            rows = [r for r in table if r["d"] == str(d)]
            ax.errorbar([r["alpha"] + offsets[c] for r in rows], [r[q] for r in rows],
                        yerr=[r[q + "_stderr"] for r in rows], fmt="o", ms=4, capsize=2,
                        color=colors[c % len(colors)], label=f"Adam, d = {d}")
        rows = [r for r in table if r["d"] == "inf"]
        ax.errorbar([r["alpha"] + offsets[-1] for r in rows], [r[q] for r in rows],
                    yerr=[r[q + "_stderr"] for r in rows], fmt="*", ms=9, capsize=2,
                    color="crimson", label=r"$a + b/d$ fit at $d \to \infty$")
        ax.set_xlabel(r"$\alpha = n/d^2$")
        ax.set_ylabel(YLABELS[q], fontsize=8.5)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    ax = axes[3]
    for c, a in enumerate(params["alphas"]):
        rows = [r for r in table if r["alpha"] == a and r["d"] not in ("inf", "theory")]
        x = [1.0 / int(r["d"]) for r in rows]
        ax.errorbar(x, [r["test_error"] for r in rows], yerr=[r["test_error_stderr"] for r in rows],
                    fmt="o", ms=4, capsize=2, color=colors[c % len(colors)],
                    label=rf"$\alpha = {a:g}$")
        th = next(r for r in table if r["alpha"] == a and r["d"] == "theory")
        fit = summary["fits"][str(a)].get("test_error")
        if fit is not None and x:
            xs = np.linspace(0, max(x), 20)
            ax.plot(xs, fit["intercept"] + fit["slope"] * xs, "--", color=colors[c % len(colors)],
                    lw=1)
        ax.plot([0], [th["test_error"]], "k_", ms=14, mew=2)
    ax.plot([], [], "k_", ms=10, mew=2, label=r"SE at $1/d = 0$")
    ax.set_xlim(left=0)
    ax.set_xlabel(r"$1/d$")
    ax.set_ylabel(r"test error $e_{\rm test}$ (dashed: $a + b/d$)", fontsize=8.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(_validation_title(params), fontsize=8.5)
    fig.tight_layout()
    return fig


def plot_validation(summary: dict, path: Path) -> Path:
    """Theory lines, per-d points (side by side) with error bars and the d -> inf points
    per quantity, with symbol y labels and the parameters in the title; last panel: the
    test error against 1/d with the fits."""
    import matplotlib.pyplot as plt

    from amp_attention.plotting import FIGURE_DPI

    fig = validation_figure(summary)
    atomic_save_figure(fig, path, dpi=FIGURE_DPI)
    plt.close(fig)
    return path
