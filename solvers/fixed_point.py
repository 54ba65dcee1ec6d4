"""Fixed-point iteration x = T(x): damped Picard and Anderson acceleration (THEORY 4.3).

The iteration never hides failure: the returned :class:`FixedPointReport`
carries ``converged``, the final residual, the iteration count and a status
string ("converged", "max_iter", "diverged: ...", "invalid: ...").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class FixedPointReport:
    x: np.ndarray
    converged: bool
    iterations: int
    residual: float
    status: str
    history: tuple[float, ...]


def relative_residual(x: np.ndarray, tx: np.ndarray, floor: float = 1e-8) -> float:
    """max_i |T(x)_i - x_i| / max(|T(x)_i|, floor): relative, robust at zero."""
    return float(np.max(np.abs(tx - x) / np.maximum(np.abs(tx), floor)))


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
) -> FixedPointReport:
    """Solve x = T(x).

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
    for it in range(1, max_iter + 1):
        try:
            tx = np.asarray(T(x), dtype=float)
        except (ValueError, FloatingPointError, ZeroDivisionError) as exc:
            return FixedPointReport(x, False, it, math.inf, f"invalid: {exc}", tuple(history))
        if not np.all(np.isfinite(tx)):
            return FixedPointReport(x, False, it, math.inf, "diverged: non-finite map value "
                                    "(try --damping 0.5 or --method damped)", tuple(history))
        res = relative_residual(x, tx)
        history.append(res)
        if res <= tol:
            return FixedPointReport(tx, True, it, res, "converged", tuple(history))
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
    return FixedPointReport(x, False, max_iter, history[-1] if history else math.inf,
                            "max_iter: not converged (raise --max-iter, or lower --damping)",
                            tuple(history))
