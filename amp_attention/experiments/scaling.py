"""Power-law targets along log alpha: the SE points, the error decomposition and the
fitted exponents (docs/theory.md "Power-law targets"; ``amp-attention scaling``).

The SE is solved along an increasing grid of alpha = n/d^2 with warm starts
(continuation; the theory at one point is
:func:`amp_attention.solvers.scaling.solve_point`).  lam may scale with the sample size,

    lam(alpha) = lam0 (alpha / alpha_0)^(-lam_exponent)       (alpha_0 = first grid point),

i.e. lam ~ n^(-lam_exponent) at fixed d.  Every finished point is saved atomically
under ``out/points`` and skipped on a rerun; the exponents are fitted on the curve
(:func:`fit_scaling`); :func:`run_scaling_experiment` writes the curve, the fits and
the figure into ``out`` (scaling.json, scaling.csv, scaling.<format>).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from amp_attention.solvers.scaling import (ModeExponentFit, PowerLawFit, fit_power_law,
                                           noise_limited_exponent, recovered_mode_exponent,
                                           recovery_alphas, solve_point)
from amp_attention.solvers.state_evolution import MonteCarloOptions

from ..checks import real_grid
from ..files import atomic_write_csv, atomic_write_json
from ..progress import progress_bar
from ..runner import Checkpoints, run_tasks
from ..spec import Problem


@dataclass(frozen=True)
class ScalingPlan:
    """A problem with a power-law target, the alpha grid (increasing) and the
    lam schedule lam(alpha) = problem.learner.lam (alpha/alphas[0])^(-lam_exponent)."""

    problem: Problem
    alphas: tuple[float, ...]
    lam_exponent: float = 0.0
    mc: MonteCarloOptions | None = None
    tol: float = 1e-10
    max_iter: int = 200

    def __post_init__(self) -> None:
        if self.problem.target.power_law_exponent is None:
            raise ValueError("a scaling plan needs a PowerLawTarget (--gamma), got "
                             f"{type(self.problem.target).__name__}")
        a = real_grid("alphas", self.alphas)
        if len(a) < 3 or any(not (math.isfinite(x) and x > 0) for x in a) or any(
                y <= x for x, y in zip(a, a[1:])):
            raise ValueError(f"alphas must be >= 3 increasing numbers > 0, got {self.alphas!r}")
        object.__setattr__(self, "alphas", a)
        if not (math.isfinite(self.lam_exponent) and 0.0 <= self.lam_exponent <= 2.0):
            raise ValueError(f"lam_exponent must lie in [0, 2], got {self.lam_exponent!r}")
        if not (math.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"tol must be in (0, inf), got {self.tol!r}")
        if int(self.max_iter) != self.max_iter or self.max_iter < 1:
            raise ValueError(f"max_iter must be an integer >= 1, got {self.max_iter!r}")

    def lam_at(self, alpha: float) -> float:
        return self.problem.learner.lam * (alpha / self.alphas[0]) ** (-self.lam_exponent)

    def problem_at(self, alpha: float) -> Problem:
        learner = dataclasses.replace(self.problem.learner, lam=self.lam_at(alpha))
        return dataclasses.replace(self.problem, alpha=float(alpha), learner=learner)


#: what a point file must hold to count as finished (else it is moved aside and recomputed)
POINT_KEYS = ("alpha", "n", "converged", "m", "q", "V", "test_error")
#: the SE numbers of a point (null in its file for NaN or infinity: NaN when read back)
NUMBERS = ("m", "q", "V", "test_error", "train_error", "matrix_mse", "residual")


def point_store(out: Path | str) -> Checkpoints:
    """The finished points, ``out/points/<index>_a<alpha>.json`` (NUMBERS read back as
    floats: strict JSON keeps NaN, a diverged point's, as null)."""
    return Checkpoints(str(Path(out) / "points"), POINT_KEYS, NUMBERS)


def point_key(index: int, alpha: float) -> str:
    return f"{index:04d}_a{alpha:.6g}"


def point_file(out: Path, index: int, alpha: float) -> Path:
    return point_store(out).path(point_key(index, alpha))


def _chain(plan: ScalingPlan, out: str | None, indices: list[int]) -> Iterator[dict]:
    x0 = None
    store = point_store(out) if out is not None else None
    for i in indices:
        a = plan.alphas[i]
        row = store.read(point_key(i, a)) if store is not None else None
        if row is None:
            row = solve_point(plan.problem_at(a), x0, plan.mc, tol=plan.tol, max_iter=plan.max_iter)
            if store is not None:
                store.write(point_key(i, a), row)
        if row["converged"]:
            x0 = (row["m"], row["q"], row["V"])
        yield row


def solve_chain(plan: ScalingPlan, out: str | None, indices: list[int]) -> list[dict]:
    """The points ``indices`` (contiguous, increasing alpha) of the plan, each SE
    warm-started from the previous converged one, the first from the informative
    start; finished points are read from / written to ``out``/points (a task of
    :func:`~amp_attention.runner.run_tasks`)."""
    return list(_chain(plan, out, indices))


def run_scaling(plan: ScalingPlan, out: Path | None = None, *,
                executor: cf.Executor | None = None, workers: int = 0,
                progress: Callable[[Iterable, int], Iterable] | None = None) -> list[dict]:
    """Solve every point of the plan (resuming from ``out``/points when given).

    The points form a warm-started continuation in alpha, so they are split into
    contiguous chains, one per worker (``workers`` local processes, or at least
    two on an ``executor``, as in :func:`~amp_attention.runner.run_tasks`; in
    this process by default: one chain over every point).  A chain starts from
    the informative start; its fixed points agree with the single chain's to the
    solver tolerance wherever the fixed point is unique.  ``progress(iterable,
    total)`` wraps the finished points (one chain) or chains.
    """
    n = len(plan.alphas)
    where = None if out is None else str(out)
    if executor is None and workers <= 1:
        rows = _chain(plan, where, list(range(n)))
        return list(progress(rows, n) if progress else rows)
    chains = max(1, min(n, max(workers, 2)))
    bounds = np.linspace(0, n, chains + 1).round().astype(int)
    parts = [list(range(bounds[k], bounds[k + 1])) for k in range(chains)
             if bounds[k + 1] > bounds[k]]
    done = run_tasks(solve_chain, [(plan, where, p) for p in parts],
                     executor=executor, workers=workers, progress=progress)
    return [row for rows in done for row in rows]


@dataclass(frozen=True)
class ScalingFits:
    """Fits over the converged points (at least 3): ``e_test`` (e_test - e0 ~ n^-f,
    e0 fitted when None), ``E_under`` (its own power law, e0 = 0), ``k_star`` (the
    recovered-mode exponent a of k* ~ n^a and the predicted f = a (2 gamma - 1));
    ``noise_limited_exponent`` 1 - 1/(2 gamma) for gamma > 1/2; ``recovery_alpha``:
    the first alpha at which mode k is recovered; ``errors``: fits that failed."""

    e_test: PowerLawFit | None = None
    E_under: PowerLawFit | None = None
    k_star: ModeExponentFit | None = None
    noise_limited_exponent: float | None = None
    recovery_alpha: dict[str, float] = field(default_factory=dict)
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"e_test": None if self.e_test is None else dataclasses.asdict(self.e_test),
                "E_under": None if self.E_under is None else dataclasses.asdict(self.E_under),
                "k_star": None if self.k_star is None else dataclasses.asdict(self.k_star),
                "noise_limited_exponent": self.noise_limited_exponent,
                "errors": list(self.errors), "recovery_alpha": dict(self.recovery_alpha)}


def fit_scaling(rows: list[dict], gamma: float, e0: float | None) -> ScalingFits:
    """The fits of :class:`ScalingFits` from the rows of :func:`run_scaling`."""
    ok = [r for r in rows if r["converged"]]
    e_test = E_under = k_star = None
    errors = []
    if len(ok) >= 3:
        n = [r["n"] for r in ok]
        try:
            e_test = fit_power_law(n, [r["test_error"] for r in ok], e0)
        except ValueError as exc:
            errors.append(f"e_test fit: {exc}")
        try:
            # the k*-prediction is a statement about E_under
            # (docs/theory.md "Power-law targets"), fitted on its own
            E_under = fit_power_law(n, [r["decomposition"]["under"] for r in ok], 0.0)
        except ValueError as exc:
            errors.append(f"E_under fit: {exc}")
        try:
            k_star = recovered_mode_exponent(n, [r["k_star"] for r in ok], gamma)
        except ValueError as exc:
            errors.append(f"k* fit: {exc}")
    return ScalingFits(e_test, E_under, k_star,
                       noise_limited_exponent(gamma) if gamma > 0.5 else None,
                       {str(k): a for k, a in recovery_alphas(rows).items()}, tuple(errors))


@dataclass(frozen=True)
class ScalingRun:
    """The SE rows along alpha (resumable, one file per point) and their fits."""

    rows: list[dict]
    fits: ScalingFits

    @property
    def converged(self) -> list[dict]:
        return [r for r in self.rows if r["converged"]]


def run_scaling_experiment(plan: ScalingPlan, out: Path | None, *,
                           e0: float | str | None = None, figure_format: str = "png",
                           executor: cf.Executor | None = None, workers: int = 0,
                           progress: bool = True) -> ScalingRun:
    """Solve (or resume from ``out``) every point of ``plan`` and fit the exponents
    (``executor``/``workers``: contiguous warm-started chains in parallel, see
    :func:`run_scaling`).  ``e0``: the saturation value subtracted before the fit of
    e_test, a number (or its text), or None or ``"fit"`` to fit it.  With ``out``, also
    write there ``scaling.json`` (parameters, with ``e0`` as given, rows and fits),
    ``scaling.csv`` (one row per point) and the figure ``scaling.<figure_format>`` (png,
    pdf or svg)."""
    rows = run_scaling(plan, out, executor=executor, workers=workers,
                       progress=lambda it, n: progress_bar(
                           it, total=n, desc="alpha", show=progress))
    fit_e0 = None if e0 is None or e0 == "fit" else float(e0)
    result = ScalingRun(rows, fit_scaling(rows, plan.problem.target.gamma, fit_e0))
    if out is not None:
        _write_scaling(Path(out), plan, result, "fit" if e0 is None else e0, figure_format)
    return result


#: the columns of scaling.csv (E_*: the terms of the decomposition of the matrix MSE)
CSV_COLUMNS = ("alpha", "n", "lam", "converged", "test_error", "train_error", "matrix_mse",
               "k_star", "E_over", "E_under", "E_approx", "E_mismatch", "residual_kurtosis",
               "bayes_test_error", "bayes_matrix_mse")


def _write_scaling(out: Path, plan: ScalingPlan, result: ScalingRun, e0: float | str,
                   figure_format: str) -> None:
    from .. import plotting

    problem, rows = plan.problem, result.rows
    fits = result.fits.to_dict()
    params = {**problem.to_dict(), "alphas": list(plan.alphas),
              "lam_exponent": plan.lam_exponent, "e0": e0}
    atomic_write_json(out / "scaling.json", {"params": params, "rows": rows, "fits": fits})
    table = []
    for r in rows:
        dec = r.get("decomposition") or {}
        table.append([r["alpha"], r["n"], r["lam"], r["converged"], r["test_error"],
                      r["train_error"], r["matrix_mse"], r.get("k_star"),
                      *(dec.get(t) for t in ("over", "under", "approx", "mismatch")),
                      r.get("residual_kurtosis"), r.get("bayes_test_error"),
                      r.get("bayes_matrix_mse")])
    atomic_write_csv(out / "scaling.csv", list(CSV_COLUMNS), table)
    plotting.plot_scaling(rows, fits, out / f"scaling.{figure_format}",
                          title=f"{problem.task.channel_name} L={problem.task.L}, "
                                f"gamma={problem.target.gamma:g}, d={problem.target.d}, "
                                f"lam={problem.learner.lam:g}"
                                + (f" (alpha/{plan.alphas[0]:g})^-{plan.lam_exponent:g}"
                                   if plan.lam_exponent else "")
                                + f", Delta={problem.task.noise:g}")
