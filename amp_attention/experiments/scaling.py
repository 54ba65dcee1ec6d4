"""Power-law targets along log alpha: the SE points, the error decomposition and the
fitted exponents (docs/theory.md "Power-law targets"; ``amp-attention scaling``)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_attention.solvers.scaling import (ModeExponentFit, PowerLawFit, ScalingPlan,
                                           fit_power_law, noise_limited_exponent,
                                           recovered_mode_exponent, recovery_alphas, run_scaling)

from ..progress import progress_bar


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
    """The fits of :class:`ScalingFits` from the rows of
    :func:`~amp_attention.solvers.scaling.run_scaling`."""
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


def run_scaling_experiment(plan: ScalingPlan, out: Path | None, *, e0: float | None = None,
                           executor: cf.Executor | None = None, workers: int = 0,
                           progress: bool = True) -> ScalingRun:
    """Solve (or resume from ``out``) every point of ``plan`` and fit the exponents
    (``executor``/``workers``: contiguous warm-started chains in parallel, see
    :func:`~amp_attention.solvers.scaling.run_scaling`)."""
    rows = run_scaling(plan, out, executor=executor, workers=workers,
                       progress=lambda it, n: progress_bar(
                           it, total=n, desc="alpha", show=progress))
    return ScalingRun(rows, fit_scaling(rows, plan.problem.target.gamma, e0))
