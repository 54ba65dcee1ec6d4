"""Interpolation and perfect-recovery thresholds of a problem, alone or along a grid
(docs/theory.md "Thresholds"; ``amp-attention thresholds``), and the grid's output
directory (:func:`run_threshold_table`: thresholds.csv, .json and the figure)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from amp_attention.solvers.bayes_optimal import bayes_perfect_recovery_threshold
from amp_attention.solvers.thresholds import (ThresholdResult, interpolation_threshold,
                                              perfect_recovery_threshold)

from ..files import atomic_write_csv, atomic_write_json
from ..jsonsafe import nonfinite_notes
from ..progress import progress_bar
from ..runner import run_tasks
from ..spec import Problem

#: the parameters a threshold grid can run over
GRID_PARAMETERS = ("kappa", "kappa0", "noise")
#: the thresholds of a row: ERM's (lam -> 0+) and the Bayes-optimal perfect recovery
KEYS = ("alpha_interp", "alpha_PR", "alpha_PR_bayes")


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


def threshold_params(problem: Problem) -> dict:
    """The parameters of ``problem`` that the thresholds depend on: alpha is the output
    and lam -> 0+, so neither is one."""
    return {k: v for k, v in problem.to_dict().items() if k not in ("alpha", "lam")}


def point_row(point: ThresholdPoint) -> dict:
    """The row of one :class:`ThresholdPoint`: each of :data:`KEYS` (None when
    unavailable or not converged) and its ``<key>_detail`` (the result's ``to_dict()``, or
    why it is unavailable)."""
    row: dict[str, Any] = {}
    for key, res, why in (("alpha_interp", point.interpolation, point.interpolation_message),
                          ("alpha_PR", point.perfect_recovery, point.perfect_recovery_message),
                          ("alpha_PR_bayes", point.bayes_perfect_recovery,
                           point.bayes_perfect_recovery_message)):
        if res is None:
            row[key] = None
            row[key + "_detail"] = {"success": False, "status": "unavailable", "message": why}
        else:
            row[key] = res.alpha if res.success else None
            row[key + "_detail"] = res.to_dict()
    return row


def threshold_row(problem: Problem) -> dict:
    """The row (:func:`point_row`) of the thresholds of ``problem``."""
    return point_row(thresholds_of(problem))


@dataclass(frozen=True)
class ThresholdTable:
    """The thresholds along a grid: the problem's :func:`threshold_params`, the grid
    parameter ``grid`` (one of :data:`GRID_PARAMETERS`) and one row per value (the value
    under the key ``grid``, then :func:`point_row`)."""

    #: the parameters of the problem (:func:`threshold_params`)
    params: dict
    #: the parameter the grid runs over
    grid: str
    #: one row per grid value
    rows: list

    def to_dict(self) -> dict:
        """The JSON form: an infinite threshold is null with a ``<key>_note`` saying why."""
        return {"params": self.params, "grid": self.grid,
                "rows": [nonfinite_notes(r, KEYS) for r in self.rows]}


def run_threshold_table(problem: Problem, name: str, values: Iterable[float],
                        out: Path | None = None, *, figure_format: str = "png",
                        executor: cf.Executor | None = None, workers: int = 0,
                        progress: bool = True) -> ThresholdTable:
    """The thresholds along ``values`` of parameter ``name`` (:func:`threshold_grid`) as a
    :class:`ThresholdTable`; with ``out`` (an existing directory) also written there:
    ``thresholds.csv`` (one column per :data:`KEYS`, empty where there is none),
    ``thresholds.json`` (:meth:`ThresholdTable.to_dict`) and the figure
    ``thresholds.<figure_format>`` (png, pdf or svg)."""
    grid = threshold_grid(problem, name, values, executor=executor, workers=workers,
                          progress=progress)
    table = ThresholdTable(threshold_params(problem), name,
                           [{name: v, **point_row(point)} for v, point in grid])
    if out is not None:
        from .. import plotting

        out = Path(out)
        atomic_write_csv(out / "thresholds.csv", [name, *KEYS],
                         ([r[name], *("" if r[k] is None else r[k] for k in KEYS)]
                          for r in table.rows))
        atomic_write_json(out / "thresholds.json", table.to_dict())
        plotting.plot_threshold_curves(name, table.rows, out / f"thresholds.{figure_format}",
                                       title=f"{table.params['channel']} L={table.params['L']}")
    return table
