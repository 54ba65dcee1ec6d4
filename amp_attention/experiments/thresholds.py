"""Interpolation and perfect-recovery thresholds of a problem, alone or along a grid
(docs/theory.md "Thresholds"; ``amp-attention thresholds``)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from dataclasses import dataclass
from typing import Iterable

from amp_attention.solvers.bayes_optimal import bayes_perfect_recovery_threshold
from amp_attention.solvers.thresholds import (ThresholdResult, interpolation_threshold,
                                              perfect_recovery_threshold)

from ..progress import progress_bar
from ..runner import run_tasks
from ..spec import Problem

#: the parameters a threshold grid can run over
GRID_PARAMETERS = ("kappa", "kappa0", "noise")


@dataclass(frozen=True)
class ThresholdPoint:
    """alpha_interp and alpha_PR of one problem (its alpha and lam are not inputs).

    A threshold the solvers cannot give for this problem (a ValueError: e.g. softmax
    with output noise has no interpolation) is None, with the reason in
    ``*_message``.
    """

    #: alpha_interp (None when the solvers cannot give it)
    interpolation: ThresholdResult | None
    #: alpha_PR (None when the solvers cannot give it)
    perfect_recovery: ThresholdResult | None
    #: why interpolation is None ('' otherwise)
    interpolation_message: str = ""
    #: why perfect_recovery is None ('' otherwise)
    perfect_recovery_message: str = ""
    #: alpha_PR of the Bayes-optimal estimator (docs/theory.md "Bayes-optimal baseline")
    bayes_perfect_recovery: ThresholdResult | None = None
    #: why bayes_perfect_recovery is None ('' otherwise)
    bayes_perfect_recovery_message: str = ""


def thresholds_of(problem: Problem) -> ThresholdPoint:
    """Both thresholds of ``problem`` (:mod:`amp_attention.solvers.thresholds`) and the
    Bayes-optimal perfect-recovery threshold (:mod:`amp_attention.solvers.bayes_optimal`)."""
    found: dict[str, ThresholdResult | None] = {}
    why: dict[str, str] = {}
    for key, fun in (("interpolation", interpolation_threshold),
                     ("perfect_recovery", perfect_recovery_threshold),
                     ("bayes_perfect_recovery", bayes_perfect_recovery_threshold)):
        try:
            found[key], why[key] = fun(problem), ""
        except ValueError as exc:
            found[key], why[key] = None, " ".join(str(exc).split())
    return ThresholdPoint(found["interpolation"], found["perfect_recovery"],
                          why["interpolation"], why["perfect_recovery"],
                          found["bayes_perfect_recovery"], why["bayes_perfect_recovery"])


def vary(problem: Problem, name: str, value: float) -> Problem:
    """``problem`` with one parameter of :data:`GRID_PARAMETERS` set to ``value`` (a
    Wishart or spiked target keeps its kind and spikes); ValueError when the value is
    out of range or the target has no kappa0."""
    if name == "kappa":
        return dataclasses.replace(problem, learner=dataclasses.replace(problem.learner, kappa=value))
    if name == "kappa0":
        if not hasattr(problem.target, "kappa0"):
            raise ValueError(f"kappa0 is the width of a wishart or spiked target; the "
                             f"{problem.target.kind} target has none")
        return dataclasses.replace(problem, target=dataclasses.replace(problem.target, kappa0=value))
    if name == "noise":
        return dataclasses.replace(problem, task=dataclasses.replace(problem.task, noise=value))
    raise ValueError(f"name must be one of {', '.join(GRID_PARAMETERS)}; got {name!r}")


def threshold_grid(problem: Problem, name: str, values: Iterable[float], *,
                   executor: cf.Executor | None = None, workers: int = 0,
                   progress: bool = True) -> tuple[tuple[float, ThresholdPoint], ...]:
    """(value, :class:`ThresholdPoint`) along ``values`` of parameter ``name``; every
    value is checked before any is solved.  The points are independent tasks of
    :func:`~amp_attention.runner.run_tasks` (``executor``, ``workers``: in this
    process by default)."""
    problems = [(float(v), vary(problem, name, float(v))) for v in values]
    points = run_tasks(thresholds_of, [(p,) for _, p in problems], executor=executor,
                       workers=workers,
                       progress=lambda it, n: progress_bar(it, total=n,
                                                           desc=f"thresholds over {name}",
                                                           show=progress))
    return tuple((v, point) for (v, _), point in zip(problems, points))
