"""The main job on built-in defaults: the SE curve over alpha with finite-d ERM beside it.

Linear channel, L = 1, Wishart target kappa0 = 0.5, factorised learner kappa = 1,
lam = 0.1, label noise Delta = 0.5, alpha on 57 points from 0.1 to 1.5 (step 0.025,
a smooth curve); direct ERM at d = 48 with 2 seeds at alpha = 0.35, 0.75, 1.1, 1.5
(``amp-attention quickstart``); beside them the Bayes-optimal estimator (the MMSE and the
Bayes predictor's test error), the best any learner can do on the same data, and the
interpolation threshold alpha_interp (lam -> 0+) of the problem.  With an output
directory, :func:`run_quickstart` writes quickstart.csv, quickstart.json and the figure.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.solvers.state_evolution import RESULT_FIELDS, SEResult, solve_state_evolution
from amp_attention.solvers.thresholds import interpolation_threshold

from ..erm import ERMStatistics, erm_statistics
from ..files import atomic_write_csv, atomic_write_text
from ..jsonsafe import strict_dumps
from ..progress import progress_bar
from ..spec import Learner, Problem, Task, WishartTarget

#: the quantities of the SE and ERM columns and panels
QUANTITIES = ("train_error", "test_error", "matrix_mse")
#: the Bayes-optimal estimator's quantities in the quickstart outputs (no training error)
BAYES_QUANTITIES = ("test_error", "matrix_mse")
#: the title of the figure (the problem of the default :class:`QuickstartConfig`)
FIGURE_TITLE = "linear channel, L = 1, Wishart kappa0 = 0.5, kappa = 1, lam = 0.1, Delta = 0.5"
#: the caption under the quickstart figure: why ERM sits above the SE at small alpha
#: (measured by benchmarks/quickstart_finite_size.py; README "Quickstart")
QUICKSTART_NOTE = ("ERM at d = 48 lies above the SE curve near the interpolation threshold: "
                   "a finite-size effect of order 1/d (at alpha = 0.35 the e_test gap is 0.107, "
                   "0.055, 0.023 at d = 32, 64, 128)")


@dataclass(frozen=True)
class QuickstartConfig:
    """The problem family (one Problem per alpha), the SE solver settings and where
    and how ERM is run (at the grid points nearest to ``erm_alpha_values``)."""

    channel: str = "linear"
    L: int = 1
    kappa0: float = 0.5
    kappa: float = 1.0
    lam: float = 0.1
    noise: float = 0.5
    alpha_grid: tuple[float, float, int] = (0.1, 1.5, 57)   # np.linspace: step 0.025
    erm_d: int = 48
    erm_seeds: tuple[int, ...] = (0, 1)
    erm_alpha_values: tuple[float, ...] = (0.35, 0.75, 1.1, 1.5)
    tol: float = 1e-10
    max_iter: int = 500
    erm_tol: float = 1e-9
    erm_max_iter: int = 20000

    def problem(self, alpha: float) -> Problem:
        return Problem(Task(self.channel, L=self.L, noise=self.noise),
                       WishartTarget(self.kappa0), Learner(self.kappa, self.lam), alpha=alpha)

    @property
    def alphas(self) -> tuple[float, ...]:
        return tuple(float(a) for a in np.linspace(*self.alpha_grid))

    @property
    def erm_alphas(self) -> tuple[float, ...]:
        """The grid points nearest to ``erm_alpha_values`` (ERM sits on the SE curve's grid)."""
        grid = np.asarray(self.alphas)
        return tuple(float(grid[np.argmin(np.abs(grid - a))]) for a in self.erm_alpha_values)


@dataclass(frozen=True)
class QuickstartResult:
    """``se[i]``: the SE at ``config.alphas[i]``; ``erm``: (alpha, ERMStatistics) at the
    ERM alphas (empty when ERM was skipped)."""

    config: QuickstartConfig
    se: tuple[SEResult, ...]
    erm: tuple[tuple[float, ERMStatistics], ...]
    #: the Bayes-optimal estimator at every alpha (docs/theory.md "Bayes-optimal baseline")
    bayes: tuple[SEResult, ...] = ()
    #: the interpolation threshold alpha_interp as lam -> 0+ (docs/theory.md "Thresholds");
    #: NaN where the solver gives none, inf where ERM interpolates at no alpha
    alpha_interp: float = math.nan

    @property
    def se_rows(self) -> list[dict]:
        """One dict per alpha: ``alpha`` and the SE result's ``to_dict()``."""
        return [{"alpha": a, **r.to_dict()} for a, r in zip(self.config.alphas, self.se)]

    @property
    def bayes_rows(self) -> list[dict]:
        """One dict per alpha: ``alpha`` and the Bayes-optimal result's ``to_dict()``."""
        return [{"alpha": a, **r.to_dict()} for a, r in zip(self.config.alphas, self.bayes)]

    @property
    def erm_rows(self) -> list[dict]:
        """One dict per ERM alpha: d, n, seeds, ``mean`` and ``stderr`` of each quantity,
        the per-seed results and whether every seed converged."""
        c = self.config
        return [{"alpha": a, "d": c.erm_d, "n": st.n, "seeds": list(c.erm_seeds),
                 "mean": st.mean, "stderr": st.stderr,
                 "per_seed": [r.to_dict() for r in st.results],
                 "all_converged": st.all_converged} for a, st in self.erm]

    @property
    def not_converged(self) -> tuple[list[float], list[float]]:
        """(alphas whose SE did not converge, alphas with an ERM seed that did not)."""
        return ([a for a, r in zip(self.config.alphas, self.se) if not r.success],
                [a for a, st in self.erm if not st.all_converged])


def run_quickstart(config: QuickstartConfig = QuickstartConfig(), *, erm: bool = True,
                   progress: bool = True, out: Path | None = None, figure_format: str = "png",
                   cell: Callable[[Any], str] = str) -> QuickstartResult:
    """Solve the SE along ``config.alphas`` and, unless ``erm`` is False, run direct ERM
    at ``config.erm_alphas``.  Non-convergence is reported in the results (ERM's
    warnings are not repeated).  With ``out`` (an existing directory), also write there
    ``quickstart.csv`` (one row per alpha, each cell written by ``cell``),
    ``quickstart.json`` (parameters, SE, ERM and Bayes-optimal rows) and the figure
    ``quickstart.<figure_format>`` (png, pdf or svg)."""
    alphas = config.alphas
    se = tuple(solve_state_evolution(config.problem(a), tol=config.tol, max_iter=config.max_iter)
               for a in progress_bar(alphas, desc="state evolution", unit="alpha",
                                     show=progress))
    bayes = tuple(solve_bayes_optimal(config.problem(a), tol=config.tol)
                  for a in progress_bar(alphas, desc="Bayes-optimal", unit="alpha",
                                        show=progress))
    try:
        th = interpolation_threshold(config.problem(alphas[0]))
        alpha_interp = float(th.alpha) if th.success else math.nan
    except ValueError:  # no interpolation threshold for this channel and noise
        alpha_interp = math.nan
    rows = []
    if erm:
        for a in config.erm_alphas:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                bar = progress_bar(list(config.erm_seeds), desc=f"direct ERM d={config.erm_d} "
                                   f"alpha={a:.3g}", unit="seed", show=progress)
                try:
                    st = erm_statistics(config.problem(a), config.erm_d, config.erm_seeds,
                                        wrap=lambda seeds: bar, tol=config.erm_tol,
                                        max_iter=config.erm_max_iter, keep_matrix=False)
                finally:
                    bar.close()
            rows.append((a, st))
    result = QuickstartResult(config, se, tuple(rows), bayes, alpha_interp)
    if out is not None:
        _write_quickstart(Path(out), result, erm, figure_format, cell)
    return result


def _write_quickstart(out: Path, res: QuickstartResult, erm: bool, figure_format: str,
                      cell: Callable[[Any], str]) -> None:
    from .. import plotting

    c = res.config
    alphas = list(c.alphas)
    se_rows, erm_rows, bayes_rows = res.se_rows, res.erm_rows, res.bayes_rows
    base = c.problem(alphas[0]).to_dict()
    base["alpha"] = alphas
    params = {
        "problem": base,
        "thresholds": {"alpha_interp": res.alpha_interp},
        "solver": {"method": "anderson", "tol": c.tol, "max_iter": c.max_iter,
                   "damping": 1.0, "start": "auto"},
        "erm": None if not erm else {
            "d": c.erm_d, "seeds": list(c.erm_seeds), "alphas": list(c.erm_alphas),
            "tol": c.erm_tol, "max_iter": c.erm_max_iter},
    }
    _write_csv(out / "quickstart.csv", se_rows, erm_rows, bayes_rows, cell)
    atomic_write_text(out / "quickstart.json",
                      strict_dumps({"params": params, "se": se_rows, "erm": erm_rows,
                                   "bayes": bayes_rows}, indent=1)
                      + "\n")
    erm_plot = None
    if erm_rows:
        erm_plot = {"alpha": [r["alpha"] for r in erm_rows],
                    "mean": {f: [r["mean"][f] for r in erm_rows] for f in QUANTITIES},
                    "stderr": {f: [r["stderr"][f] for r in erm_rows] for f in QUANTITIES},
                    "label": f"direct ERM, d = {c.erm_d} ({len(c.erm_seeds)} seeds)"}
    plotting.plot_se_curve(
        alphas, {f: [r[f] for r in se_rows] for f in QUANTITIES},
        out / f"quickstart.{figure_format}",
        fields=("test_error", "train_error", "matrix_mse"), erm=erm_plot,
        bayes={f: [r[f] for r in bayes_rows] for f in BAYES_QUANTITIES},
        converged=[r["converged"] for r in se_rows],
        vlines={rf"$\alpha_{{\rm interp}}$ = {res.alpha_interp:.3f} ($\lambda \to 0^+$)":
                res.alpha_interp},
        title=FIGURE_TITLE, note=QUICKSTART_NOTE if erm else None)


def _write_csv(path: Path, se_rows: list[dict], erm_rows: list[dict], bayes_rows: list[dict],
               cell: Callable[[Any], str]) -> None:
    erm_by_alpha = {r["alpha"]: r for r in erm_rows}
    erm_cols = [f"erm_{f}_{s}" for f in QUANTITIES for s in ("mean", "stderr")]
    header = ["alpha", *RESULT_FIELDS, "status", *erm_cols, "erm_all_converged",
              *(f"bayes_{f}" for f in BAYES_QUANTITIES)]
    table = []
    for row, bo in zip(se_rows, bayes_rows):
        e = erm_by_alpha.get(row["alpha"])
        cells = [cell(row["alpha"])] + [cell(row[f]) for f in RESULT_FIELDS]
        cells.append(row["status"])
        for f in QUANTITIES:
            for s in ("mean", "stderr"):
                cells.append(cell(e[s][f]) if e else "")
        cells.append(cell(e["all_converged"]) if e else "")
        cells.extend(cell(bo[f]) for f in BAYES_QUANTITIES)
        table.append(cells)
    atomic_write_csv(path, header, table)
