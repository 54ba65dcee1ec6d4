"""Fixed-point iteration x = T(x): damped Picard and Anderson acceleration (docs/theory.md
"Fixed point").

The iteration never hides failure: the returned :class:`FixedPointReport`
carries ``success``, an enumerated ``status`` (converged, max_iter, diverged,
invalid, failed), a ``message``, the final residual and the iteration count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from amp_attention.result import Result, Status


@dataclass(frozen=True, kw_only=True)
class FixedPointReport(Result):
    """Outcome of a fixed-point solve: the last point ``x``, the iteration count, the
    final relative residual and the residual per iteration (``history``)."""

    #: the last point
    x: np.ndarray
    #: iterations run
    iterations: int
    #: final relative residual
    residual: float
    #: the relative residual of every iteration
    history: tuple[float, ...] = ()

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("x", "history")


def _report(x, success: bool, it: int, res: float, status: Status, message: str,
            history) -> FixedPointReport:
    return FixedPointReport(x=x, iterations=it, residual=res, history=tuple(history),
                            success=success, status=status, message=message)


def relative_residual(x: np.ndarray, tx: np.ndarray, floor: float = 1e-8) -> float:
    """max_i |T(x)_i - x_i| / max(|T(x)_i|, floor): relative, robust at zero."""
    return float(np.max(np.abs(tx - x) / np.maximum(np.abs(tx), floor)))


def _evaluate(T, x: np.ndarray, it: int, history: list[float], monitor=None):
    """(T(x), relative residual), appended to ``history`` and passed to
    ``monitor(it, residual)``; or the failure report when T raises or is not finite."""
    try:
        tx = np.asarray(T(x), dtype=float)
    except (ValueError, FloatingPointError, ZeroDivisionError) as exc:
        return _report(x, False, it, math.inf, Status.INVALID, str(exc), history)
    if not np.all(np.isfinite(tx)):
        return _report(x, False, it, math.inf, Status.DIVERGED, "non-finite map value", history)
    history.append(relative_residual(x, tx))
    if monitor is not None:
        monitor(it, history[-1])
    return tx, history[-1]


def solve_fixed_point(
    T: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    method: str = "anderson",
    tol: float = 1e-10,
    max_iter: int = 500,
    damping: float = 1.0,
    memory: int = 5,
    valid: Callable[[np.ndarray], bool] | None = None,
    monitor: Callable[[int, float], None] | None = None,
    report_evaluated: bool = False,
    stall_after: int | None = None,
) -> FixedPointReport:
    """Solve x = T(x) (``monitor(iteration, residual)`` sees every evaluation).

    ``stall_after``: stop (status max_iter, "stalled") once the lowest residual so far has
    not halved in that many iterations: a noisy map (Monte-Carlo SE where the prox
    minimiser jumps) bounces at its noise level for ever, and its caller has a better rule
    for it (:mod:`.noisy_fixed_point`).

    The reported point is T(x) of the last x, or with ``report_evaluated`` x itself
    (equally within ``tol``; a caching T then answers the caller's next question
    there for free).

    method "damped": x <- (1 - damping) x + damping T(x).
    method "anderson": type-II Anderson mixing on the residual f = T(x) - x with
    ``memory`` past differences, falling back to the damped step whenever the
    extrapolated point is invalid (``valid`` false, non-finite) or the
    least-squares problem is ill-conditioned.
    """
    if method not in ("damped", "anderson"):
        raise ValueError(f"method must be 'damped' or 'anderson', got {method!r}")
    if not (0.0 < damping <= 1.0):
        raise ValueError(f"damping must lie in (0, 1], got {damping!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    x = np.asarray(x0, dtype=float).copy()
    history: list[float] = []
    dX: list[np.ndarray] = []
    dF: list[np.ndarray] = []
    x_prev = f_prev = None
    best_res, best_it = math.inf, 0
    for it in range(1, max_iter + 1):
        out = _evaluate(T, x, it, history, monitor)
        if isinstance(out, FixedPointReport):
            return out
        tx, res = out
        if res <= tol:
            return _report(x if report_evaluated else tx, True, it, res, Status.CONVERGED, "",
                           history)
        if res < 0.5 * best_res:
            best_res, best_it = res, it
        if stall_after is not None and it - best_it >= stall_after:
            return _report(tx, False, it, res, Status.MAX_ITER,
                           f"stalled: the residual has not halved in {stall_after} iterations "
                           f"(lowest {min(history):.1e})", history)
        f = tx - x
        damped = x + damping * f
        x_new = damped
        if method == "anderson":
            if x_prev is not None:
                dX.append(x - x_prev)
                dF.append(f - f_prev)
                if len(dX) > memory:
                    dX.pop(0)
                    dF.pop(0)
            x_prev, f_prev = x.copy(), f.copy()
            if dF:
                Fm = np.stack(dF, axis=1)
                Xm = np.stack(dX, axis=1)
                scale = np.maximum(np.abs(tx), 1e-8)
                gamma, *_ = np.linalg.lstsq(Fm / scale[:, None], f / scale, rcond=1e-12)
                cand = x + damping * f - (Xm + damping * Fm) @ gamma
                if np.all(np.isfinite(cand)) and (valid is None or valid(cand)):
                    x_new = cand
                else:
                    dX.clear()
                    dF.clear()
        if valid is not None and not valid(x_new):
            x_new = tx
        x = x_new
    return _report(x, False, max_iter, history[-1] if history else math.inf, Status.MAX_ITER,
                   f"not converged in {max_iter} iterations", history)


def solve_fixed_point_quasi_newton(
    T: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    jacobian: np.ndarray,
    *,
    tol: float = 1e-10,
    max_iter: int = 20,
    valid: Callable[[np.ndarray], bool] | None = None,
    monitor: Callable[[int, float], None] | None = None,
) -> FixedPointReport:
    """Solve r(x) = T(x) - x = 0 by quasi-Newton steps x <- x - B^(-1) r(x).

    B starts at J - I with ``jacobian`` J an approximation of dT/dx (e.g. from a
    cheaper, coarser version of T) and is corrected after every step by
    Broyden's rank-one secant update B += (dr - B dx) dx^T / |dx|^2, so a few
    evaluations of the expensive T suffice even when J is only roughly right.
    A step that leaves the domain is halved (up to 10 times); failure is
    reported, never hidden.
    """
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    J = np.asarray(jacobian, dtype=float)
    x = np.asarray(x0, dtype=float).copy()
    if J.shape != (x.size, x.size) or not np.all(np.isfinite(J)):
        raise ValueError(f"jacobian must be a finite {x.size} x {x.size} matrix")
    B = J - np.eye(x.size)
    history: list[float] = []
    x_prev = r_prev = None
    for it in range(1, max_iter + 1):
        out = _evaluate(T, x, it, history, monitor)
        if isinstance(out, FixedPointReport):
            return out
        tx, res = out
        if res <= tol:
            # x itself (not T(x)): T was evaluated there, so a caching T answers
            # the caller's next question at x for free.
            return _report(x, True, it, res, Status.CONVERGED, "", history)
        r = tx - x
        if x_prev is not None:
            dx, dr = x - x_prev, r - r_prev
            B = B + np.outer(dr - B @ dx, dx) / float(dx @ dx)
        try:
            step = -np.linalg.solve(B, r)
        except np.linalg.LinAlgError:
            return _report(x, False, it, res, Status.FAILED,
                           "singular: the quasi-Newton matrix is not invertible", history)
        for _ in range(11):
            cand = x + step
            if np.all(np.isfinite(cand)) and (valid is None or valid(cand)):
                break
            step = 0.5 * step
        else:
            return _report(x, False, it, res, Status.INVALID,
                           "quasi-Newton step leaves the domain", history)
        x_prev, r_prev = x, r
        x = cand
    return _report(x, False, max_iter, history[-1] if history else math.inf, Status.MAX_ITER,
                   f"quasi-Newton iteration did not converge in {max_iter} steps", history)
