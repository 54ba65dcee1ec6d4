"""The main job on built-in defaults: the SE curve over alpha with finite-d ERM beside it.

Linear channel, L = 1, Wishart target kappa0 = 0.5, factorised learner kappa = 1,
lam = 0.1, label noise Delta = 0.5, alpha on 57 points from 0.1 to 1.5 (step 0.025,
a smooth curve); direct ERM at d = 48 with 2 seeds at alpha = 0.35, 0.75, 1.1, 1.5
(``amp-attention quickstart``); beside them the Bayes-optimal estimator (the MMSE and the
Bayes predictor's test error), the best any learner can do on the same data, and the
interpolation threshold alpha_interp (lam -> 0+) of the problem.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from amp_attention.solvers.bayes_optimal import solve_bayes_optimal
from amp_attention.solvers.state_evolution import SEResult, solve_state_evolution
from amp_attention.solvers.thresholds import interpolation_threshold

from ..erm import ERMStatistics, erm_statistics
from ..progress import progress_bar
from ..spec import Learner, Problem, Task, WishartTarget


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
    def not_converged(self) -> tuple[list[float], list[float]]:
        """(alphas whose SE did not converge, alphas with an ERM seed that did not)."""
        return ([a for a, r in zip(self.config.alphas, self.se) if not r.success],
                [a for a, st in self.erm if not st.all_converged])


def run_quickstart(config: QuickstartConfig = QuickstartConfig(), *, erm: bool = True,
                   progress: bool = True) -> QuickstartResult:
    """Solve the SE along ``config.alphas`` and, unless ``erm`` is False, run direct ERM
    at ``config.erm_alphas``.  Non-convergence is reported in the results (ERM's
    warnings are not repeated)."""
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
    return QuickstartResult(config, se, tuple(rows), bayes, alpha_interp)
