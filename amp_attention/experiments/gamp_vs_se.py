"""GAMP on one finite-d data set beside the state evolution (docs/theory.md "GAMP on data").

GAMP's overlaps (m_t, q_t, V_t) from the start (0, 0, V0) follow the undamped SE
trajectory from the same start, and its fixed point is an ERM stationary point
whose errors approach the SE fixed point's as d grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from amp_attention.solvers.state_evolution import (MonteCarloOptions, SEResult, se_iterates,
                                                   solve_state_evolution)

from ..erm import kkt_residual, rank_cap
from ..gamp import GAMPOptions, GAMPResult, gamp_on_problem
from ..spec import Problem


@dataclass(frozen=True)
class GAMPEnd:
    """GAMP's last iterate: errors and overlaps at finite d and the KKT residual of the
    ERM objective there (:func:`~amp_attention.erm.kkt_residual`: zero at an ERM
    stationary point)."""

    train_error: float
    test_error: float
    matrix_mse: float
    m: float
    q: float
    V: float
    kkt_residual: float


@dataclass(frozen=True)
class GAMPComparison:
    """GAMP on one data set and the SE of the same problem.

    ``gamp``: the run (history per iteration, status); ``n``: samples; ``end``:
    its last iterate (None when GAMP diverged); ``se_trajectory``: the undamped SE
    iterates (m, q, V) from GAMP's start (0, 0, V0), shape (T + 1, 3) (empty with
    damping != 1, whose iterates are not the SE's); ``se``: the SE fixed point
    (None when GAMP diverged before its first iterate: nothing to compare).
    """

    gamp: GAMPResult
    n: int
    end: GAMPEnd | None
    se_trajectory: np.ndarray = field(repr=False)
    se: SEResult | None


def compare_gamp_with_se(problem: Problem, d: int, seed: int, *,
                         options: GAMPOptions | None = None,
                         mc: MonteCarloOptions | None = None, se_iterates_max: int = 30,
                         target_spectrum: str = "sampled", n_test: int = 2000,
                         progress: bool = False, dtype: str = "float64") -> GAMPComparison:
    """Run GAMP on the data set of (problem, d, seed) and solve the SE beside it
    (``mc``: RQMC options of a Monte-Carlo channel; ``se_iterates_max``: SE iterates
    to compute, at most GAMP's iteration count; ``dtype``: of the products over the data,
    see :func:`amp_attention.gamp.gamp_on_problem`)."""
    options = GAMPOptions() if options is None else options
    on_data = gamp_on_problem(problem, d, seed, options=options,
                              target_spectrum=target_spectrum, n_test=n_test, progress=progress,
                              dtype=dtype)
    res, data = on_data.result, on_data.data
    if not res.history:
        return GAMPComparison(res, data.n, None, np.empty((0, 3)), None)
    n_se = min(se_iterates_max, len(res.history) - 1) if options.damping == 1.0 else 0
    traj = (se_iterates(problem, (0.0, 0.0, options.V0), n_se, mc=mc) if n_se
            else np.empty((0, 3)))
    se = solve_state_evolution(problem, mc=mc)
    end = None
    if res.S is not None:
        last = res.history[-1]
        end = GAMPEnd(train_error=last.train_error, test_error=last.test_error,
                      matrix_mse=float(np.sum((res.S - data.S0) ** 2)) / d, m=last.m, q=last.q,
                      V=float(res.V),
                      kkt_residual=kkt_residual(data.X, data.y, res.S, problem.task.channel_object,
                                                problem.learner.lam,
                                                problem.learner.parameterisation,
                                                rank_cap(problem, d)))
    return GAMPComparison(res, data.n, end, traj, se)
