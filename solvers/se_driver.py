"""What every state-evolution fixed point shares, whatever its estimator (ERM or
Bayes-optimal): the solver options, the starts, and the choice among them with the
metastability report (docs/theory.md "Fixed point").

An estimator's SE differs only in its channel and prior maps and in the rule that picks
the reported start (ERM: the lower training loss; Bayes-optimal: the larger free
entropy); :func:`choose_and_compare` takes that rule and the comparison of two fixed
points and returns the other start's summary and whether the two converged to
different points, and :func:`reported_start_fields` assembles the result fields that
say how the fixed point was found.  The overlaps and errors are each estimator's; its
own fields live in its result class (``SEResult``, ``BayesSEResult``).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Container, Mapping, TypeVar

from amp_attention.checks import Flag, Integer, OneOf, Real

#: initialisations of a state-evolution solve
START_CHOICES = ("auto", "informative", "uninformative", "both")

#: the solver options of the state-evolution drivers and their contracts
SOLVER_OPTIONS = {
    "method": OneOf(("anderson", "damped")),
    "start": OneOf(START_CHOICES),
    "tol": Real(0.0, math.inf, lo_open=True, hi_open=True),
    "max_iter": Integer(1),
    "damping": Real(0.0, 1.0, lo_open=True),
    "spectrum": Flag(),
    "finite_size_check": Flag(),
    "progress": Flag(),
}

R = TypeVar("R")


def reported_start_fields(run, *, start: str, policy: str, alternative: dict[str, Any] | None,
                          metastable: bool, t0: float, method: str,
                          iterations_coarse: int = 0) -> dict[str, Any]:
    """The fields of an SE result that say how its fixed point was found, the same for
    every estimator: the reported start's outcome (``run``: success or converged, status,
    message, iterations, residual), the start policy, the other start and metastability,
    the coarse-level iterations, the wall time since ``t0`` (``time.perf_counter``) and
    the method."""
    return {"success": bool(getattr(run, "success", getattr(run, "converged", False))),
            "status": run.status, "message": run.message, "iterations": run.iterations,
            "residual": run.residual, "start": start, "start_policy": policy,
            "alternative": alternative, "metastable": metastable,
            "iterations_coarse": iterations_coarse,
            "seconds": time.perf_counter() - t0, "method": method}


def start_names(start: str, order: tuple[str, str]) -> tuple[str, ...]:
    """The starts to run: both (in the estimator's ``order``) for "both" and "auto", else
    the one asked for."""
    return order if start in ("both", "auto") else (start,)


def choose_and_compare(
    runs: Mapping[str, R],
    best: str,
    *,
    converged: Callable[[R], bool],
    same: Callable[[R, R], bool],
    describe: Callable[[str, R], dict[str, Any]],
    not_comparable: Container[str] = (),
) -> tuple[dict[str, Any] | None, bool]:
    """(alternative, metastable) of the reported start ``best`` among ``runs``:
    ``alternative`` describes the other start (its convergence, status, message and
    ``describe(name, run)``), ``metastable`` says that both converged to different fixed
    points (``same``); starts in ``not_comparable`` (e.g. solved on a coarser level only)
    are described but never called metastable."""
    alternative, metastable = None, False
    rep = runs[best]
    for name, other in runs.items():
        if name == best:
            continue
        if converged(other) and converged(rep) and name not in not_comparable:
            metastable = not same(rep, other)
        alternative = {"start": name, "converged": converged(other),
                       **describe(name, other)}
    return alternative, metastable
