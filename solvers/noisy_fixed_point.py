"""Fixed points of a noisy, discontinuous map: the convergence rule of the Monte-Carlo SE
where the prox minimiser jumps (docs/theory.md 16.9).

Under common random numbers the Monte-Carlo SE map ``T`` is a deterministic function of
x = (m, q, V), but where the channel's prox has competing minima it is a finite sum of
functions that jump as x moves: ``T = T_smooth + (jumps of size O(1/N))``, and ``T_smooth``
is itself known only to its Monte-Carlo error.  Three things then break the solvers of
:mod:`.fixed_point`:

* a Jacobian by finite differences at a small step (1e-3 relative) measures the jumps, not
  the slope (at softmax L = 2, lam 5e-5, alpha 0.25 it has an eigenvalue ~6 where a 3 %
  central difference at 2^13 samples gives 0.90 +- 0.08 i), so quasi-Newton steps built
  on it go astray;
* the fixed point is badly conditioned (eigenvalues of dT/dx near 1: (I - J)^-1 amplifies
  the map's error about tenfold, and estimates of the slope at 2^11 scatter across 1), so
  Anderson and Picard on the common draws wander at a residual of 1e-3 - 1e-1 for hundreds
  of iterations;
* a residual target of 1e-7 is meaningless: below the Monte-Carlo error the fixed point
  of this map is not better defined than the map.

Two solvers here.  :func:`solve_noisy_fixed_point`: Newton steps
``x <- x + (I - J)^-1 (T(x) - x)`` on the common draws, with ``J`` from central differences
at a step (``rel_step``, 3 % relative) wide enough to average over many jumps and narrow
enough for the curvature (the slope's error from the jumps falls like
``(N rel_step)^-1/2``), recomputed whenever the iterate has moved by more than a few steps;
accepted when the remaining Newton distance ``(I - J)^-1 (T(x) - x)`` is at most ``accept``
times the fixed point's own Monte-Carlo standard error in every component (``stderr(x,
J)``); where the distances stop falling, frozen-Jacobian iterates are averaged and the
average tested.  The SE uses it for a start (on the coarse level, and on the fine level
from a far start).  :func:`solve_averaged_fresh`: the fixed point of the exact, smooth mean
map as the average of iterates on fresh draws (Picard, or Newton at a gain below 1),
accepted where the iterates are stationary, with its error by batch means; the report
states it (``stderr``, ``drift``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from amp_attention.result import Status

from .fixed_point import FixedPointReport, relative_residual

#: relative step of the central-difference Jacobian (of max(|x_i|, 1e-2))
REL_STEP = 3e-2
#: accept when every component's Newton distance is at most this many standard errors
ACCEPT = 0.25
#: a Newton step changes no component by more than this factor of its size (x -> x/2 .. 2x)
MAX_RELATIVE_STEP = 0.5
#: recompute the Jacobian after the iterate moved this many rel_steps (relative) since
RECOMPUTE_AFTER = 3.0
#: frozen-Jacobian steps whose iterates are averaged once the distances stall
AVERAGE_STEPS = 6


@dataclass(frozen=True, kw_only=True)
class NoisyFixedPointReport(FixedPointReport):
    """:class:`FixedPointReport` of :func:`solve_noisy_fixed_point`: ``mc_distance`` is the
    largest component of the Newton distance (I - J)^-1 (T(x) - x) over the fixed point's
    Monte-Carlo standard error at the reported x (accepted at <= ``ACCEPT``);
    ``evaluations`` counts the map evaluations (Jacobians included); ``jacobian`` the
    smoothed dT/dx last used; ``averaged`` whether x is an average of iterates."""

    mc_distance: float = math.inf
    evaluations: int = 0
    jacobian: np.ndarray | None = None
    averaged: bool = False

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("x", "history", "jacobian")


def central_jacobian(T: Callable[[np.ndarray], np.ndarray], x: np.ndarray, rel_step: float,
                     valid: Callable[[np.ndarray], bool] | None = None) -> np.ndarray:
    """dT/dx at x (rows: T's components, columns: x's) by central differences, steps
    rel_step max(|x_i|, 1e-2) (one-sided where a side leaves the domain); ValueError where
    neither side is valid."""
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        h = rel_step * max(abs(x[i]), 1e-2)
        up, dn = x.copy(), x.copy()
        up[i] += h
        dn[i] -= h
        ok_up = valid is None or valid(up)
        ok_dn = valid is None or valid(dn)
        if ok_up and ok_dn:
            cols.append((np.asarray(T(up), dtype=float) - np.asarray(T(dn), dtype=float))
                        / (2.0 * h))
        elif ok_up or ok_dn:
            side, s = (up, h) if ok_up else (dn, -h)
            cols.append((np.asarray(T(side), dtype=float) - np.asarray(T(x), dtype=float)) / s)
        else:
            raise ValueError(f"no valid finite-difference step in component {i} at {x}")
    return np.column_stack(cols)


def _limited(x: np.ndarray, dx: np.ndarray, limit: float = MAX_RELATIVE_STEP) -> np.ndarray:
    """dx scaled so that no component moves by more than ``limit`` of its size."""
    scale = np.maximum(np.abs(x), 1e-2)
    worst = float(np.max(np.abs(dx) / scale))
    return dx if worst <= limit else dx * (limit / worst)


def solve_noisy_fixed_point(
    T: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    stderr: Callable[[np.ndarray, np.ndarray], np.ndarray | None],
    *,
    rel_step: float = REL_STEP,
    accept: float = ACCEPT,
    max_steps: int = 20,
    valid: Callable[[np.ndarray], bool] | None = None,
    monitor: Callable[[int, float], None] | None = None,
) -> NoisyFixedPointReport:
    """Solve x = T(x) for a noisy, discontinuous T by smoothed Newton steps and, where they
    stall, averaged iterates (module docstring).

    ``stderr(x, J)``: the Monte-Carlo standard error of the fixed point's components at x
    given the smoothed Jacobian J (None or non-finite: unavailable -- the solve then fails
    rather than accepting blind).  ``monitor(step, distance)`` sees every Newton step's
    distance in standard errors.  Never raises on a bad map value: the report says what
    happened."""
    if not (0 < rel_step < 1):
        raise ValueError(f"rel_step must lie in (0, 1), got {rel_step!r}")
    if not accept > 0:
        raise ValueError(f"accept must be > 0, got {accept!r}")
    count = [0]

    def F(x: np.ndarray) -> np.ndarray:
        count[0] += 1
        out = np.asarray(T(x), dtype=float)
        if not np.all(np.isfinite(out)):
            raise FloatingPointError("non-finite map value")
        return out

    x = np.asarray(x0, dtype=float).copy()
    history: list[float] = []
    J = None
    x_jac = None
    best = (math.inf, x.copy(), math.inf)  # (distance, x, relative residual)
    stalled = 0
    status, message = Status.MAX_ITER, f"not within {accept:g} standard errors in {max_steps} steps"
    try:
        for step in range(1, max_steps + 1):
            if J is None or np.max(np.abs(x - x_jac) / np.maximum(np.abs(x_jac), 1e-2)) > \
                    RECOMPUTE_AFTER * rel_step:
                J = central_jacobian(F, x, rel_step, valid)
                x_jac = x.copy()
            tx = F(x)
            res = relative_residual(x, tx)
            A = np.eye(x.size) - J
            dx = np.linalg.solve(A, tx - x)
            err = stderr(x, J)
            if err is None or not np.all(np.isfinite(err)) or np.any(np.asarray(err) <= 0):
                status, message = Status.FAILED, "no Monte-Carlo error at the iterate: cannot apply the rule"
                break
            dist = float(np.max(np.abs(dx) / err))
            history.append(dist)
            if monitor is not None:
                monitor(step, dist)
            if dist < best[0]:
                best, stalled = (dist, x.copy(), res), 0
            else:
                stalled += 1
            if dist <= accept:
                return _done(x, True, step, res, history, count[0], J, dist, False)
            if stalled >= 2 and best[0] <= 4.0 * accept:
                avg = _average(F, best[1], J, valid, count)
                if avg is not None:
                    xa = avg
                    ta = F(xa)
                    da = float(np.max(np.abs(np.linalg.solve(A, ta - xa)) / stderr(xa, J)))
                    history.append(da)
                    if da <= accept:
                        return _done(xa, True, step, relative_residual(xa, ta), history,
                                     count[0], J, da, True)
                    if da < best[0]:
                        best = (da, xa.copy(), relative_residual(xa, ta))
                status, message = Status.MAX_ITER, (
                    f"stalled at {best[0]:.2g} standard errors (averaged iterates included)")
                break
            dx = _limited(x, dx)
            for _ in range(11):
                cand = x + dx
                if valid is None or valid(cand):
                    break
                dx = 0.5 * dx
            else:
                status, message = Status.INVALID, "the Newton step leaves the domain"
                break
            x = cand
    except (ValueError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError) as exc:
        status, message = Status.INVALID, f"{type(exc).__name__}: {exc}"
    dist, xb, res = best
    return NoisyFixedPointReport(x=xb, iterations=len(history), residual=res,
                                 history=tuple(history), success=False, status=status,
                                 message=message, mc_distance=dist, evaluations=count[0],
                                 jacobian=J, averaged=False)


def _average(F, x: np.ndarray, J: np.ndarray, valid, count) -> np.ndarray | None:
    """Mean of AVERAGE_STEPS frozen-Jacobian Newton iterates from x (None if one leaves
    the domain): where the map's jumps move the Newton target by about the step itself,
    the iterates scatter around the fixed point of the smooth part and their mean is
    closer to it than any one of them."""
    A = np.eye(x.size) - J
    xs = []
    for _ in range(AVERAGE_STEPS):
        x = x + _limited(x, np.linalg.solve(A, F(x) - x))
        if valid is not None and not valid(x):
            return None
        xs.append(x.copy())
    return np.mean(xs, axis=0)


def _done(x, ok, step, res, history, evaluations, J, dist, averaged) -> NoisyFixedPointReport:
    return NoisyFixedPointReport(
        x=np.asarray(x, dtype=float), iterations=step, residual=res, history=tuple(history),
        success=ok, status=Status.CONVERGED,
        message=(f"converged within the Monte-Carlo error: Newton distance {dist:.2g} standard "
                 f"errors{' (averaged iterates)' if averaged else ''}"),
        mc_distance=dist, evaluations=evaluations, jacobian=J, averaged=averaged)


@dataclass(frozen=True, kw_only=True)
class AveragedReport(NoisyFixedPointReport):
    """:class:`NoisyFixedPointReport` of :func:`solve_averaged_fresh`: ``x`` is the average of
    the kept iterates, ``stderr`` its standard error per component (batch means),
    ``iterates`` the kept iterates (rows), ``drift`` the difference of the two halves' means
    in combined standard errors (largest component; stationarity test)."""

    stderr: np.ndarray | None = None
    iterates: np.ndarray | None = None
    drift: float = math.nan

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("x", "history", "jacobian", "stderr", "iterates")


#: iterations of the averaged solve discarded before averaging (the start's transient)
BURN_IN = 4
#: iterations averaged (a multiple of BATCHES)
AVERAGED = 16
#: batches of the batch-means error of the average
BATCHES = 4
#: gain of the averaged solve's Newton steps: below 1 the iterates stay closer to the fixed
#: point (their spread is sqrt(GAIN / (2 - GAIN)) of a full step's: 0.58 at 0.5) and see
#: less of the map's curvature, at the same error of their mean (Polyak-Ruppert averaging)
GAIN = 0.5
#: a step of the averaged solve moves no component by more than this share of its size: one
#: draw's noise amplified by an ill-conditioned (I - J)^-1 must not throw the iterate out
#: of the region where J holds (a full 50 % step walked the band point to q = 57)
AVERAGED_STEP = 0.1
#: the two halves' means may differ by at most this many combined standard errors
DRIFT_LIMIT = 3.0
#: rounds of the averaged solve before a still-drifting sequence is reported as such
ROUNDS = 3
#: draws whose Newton step cannot be brought into the domain by halving, before the averaged
#: solve gives up (a single noisy draw far off is skipped: the iterate stays)
MAX_STUCK = 3
#: ... and the mean's relative standard error may be at most this in every component: iterates
#: that wander over tens of percent are no fixed point whatever their halves say
MAX_RELATIVE_ERROR = 0.1


def var1_stderr(X: np.ndarray) -> np.ndarray:
    """Standard error of the mean of iterates X (rows) under a fitted VAR(1) model
    x_(k+1) = a + B x_k + e_k: the mean's covariance (I - B)^-1 Sigma_e (I - B)^-T / K, with
    B and Sigma_e by least squares over the K - 1 transitions (infinite where B has an
    eigenvalue of modulus >= 0.999: no stationary mean).  Unlike an AR(1) model with an
    assumed rho it sees the iterates' own persistence, component by component (in the band,
    lreg 1e-4, alpha 0.2484, Picard's lag-1 correlations are 0.90, 0.94 and 0.98 in m, q,
    V); short sequences understate it (at 32-64 iterates by up to 4x against the spread of
    independent means, at 128 within their scatter), so it is one lower bound of
    :func:`_stationary`'s error, not the error."""
    K, n = X.shape
    if K < n + 3:
        return np.full(n, np.inf)
    Z = np.column_stack([np.ones(K - 1), X[:-1]])
    coef, *_ = np.linalg.lstsq(Z, X[1:], rcond=None)
    E = X[1:] - Z @ coef
    S = E.T @ E / max(K - 1 - Z.shape[1], 1)
    B = coef[1:].T
    if not np.all(np.isfinite(B)) or np.max(np.abs(np.linalg.eigvals(B))) >= 0.999:
        return np.full(n, np.inf)
    M = np.linalg.inv(np.eye(n) - B)
    return np.sqrt(np.maximum(np.diag(M @ S @ M.T), 0.0) / K)


def _stationary(X: np.ndarray, rho: float | None = None) -> tuple[bool, float, np.ndarray, float]:
    """(stationary, drift in standard errors, standard error of the mean, largest relative
    error) of iterates X (rows) of the averaged solve at gain GAIN.  Near the fixed point the
    iterates follow x_(k+1) - x* = rho (x_k - x*) + GAIN e_k with rho = 1 - GAIN (an AR(1)
    process), so the iterates' spread sigma follows from successive differences,
    Var(diff) = 2 (1 - rho) sigma^2 -- which a slow drift does not inflate, unlike a
    batch-means error, which would let a drifting sequence pass its own halves test -- and a
    mean over K iterates has the error sigma sqrt((1 + rho) / ((1 - rho) K)).  The halves'
    means must agree within DRIFT_LIMIT of their difference's error.  The reported error is
    the largest of that, the batch-means error over BATCHES batches (an inexact J changes
    rho; batch means see it) and the fitted VAR(1) model's (:func:`var1_stderr`: the
    iterates' own persistence, where it exceeds the assumed rho)."""
    K = len(X)
    xbar = X.mean(axis=0)
    if rho is None:
        rho = 1.0 - GAIN
    sigma = np.std(np.diff(X, axis=0), axis=0, ddof=1) / math.sqrt(2.0 * (1.0 - rho))
    inflate = math.sqrt((1.0 + rho) / (1.0 - rho))
    batch = X[: K - K % BATCHES].reshape(BATCHES, -1, X.shape[1]).mean(axis=1)
    var1 = var1_stderr(X)
    stderr = np.maximum.reduce([batch.std(axis=0, ddof=1) / math.sqrt(BATCHES),
                                sigma * inflate / math.sqrt(K), var1])
    half = K // 2
    diff = np.abs(X[:half].mean(axis=0) - X[half:].mean(axis=0))
    # the halves' difference has twice the error of the whole mean; under the fitted VAR(1)
    # where the iterates persist longer than the assumed rho says
    diff_err = np.maximum(sigma * inflate * math.sqrt(4.0 / K), 2.0 * var1)
    drift = float(np.max(diff / np.maximum(diff_err, 1e-300)))
    rel = float(np.max(stderr / np.maximum(np.abs(xbar), 1e-12)))
    return drift <= DRIFT_LIMIT and rel <= MAX_RELATIVE_ERROR, drift, stderr, rel


def solve_averaged_fresh(
    maps: Callable[[int], Callable[[np.ndarray], np.ndarray]],
    x0: np.ndarray,
    jacobian: np.ndarray,
    *,
    n_average: int = AVERAGED,
    burn_in: int = BURN_IN,
    rounds: int = ROUNDS,
    gain: float = GAIN,
    rho: float | None = None,
    rtol: float | None = None,
    max_average: int = 256,
    rejacobian: Callable[[np.ndarray], np.ndarray | None] | None = None,
    valid: Callable[[np.ndarray], bool] | None = None,
    monitor: Callable[[int, float], None] | None = None,
) -> AveragedReport:
    """The fixed point of the mean map E[T] by Newton steps on fresh draws, averaged.

    ``maps(k)`` is the map on the k-th independent set of Monte-Carlo draws (fresh
    scramblings): each ``T_k`` is an unbiased estimate of the exact, smooth map, so the jumps
    of a common-random-numbers map never enter.  The iteration

        x_(k+1) = x_k + GAIN (I - J)^-1 (T_k(x_k) - x_k)

    with ``jacobian`` J a smoothed estimate of dE[T]/dx (:func:`central_jacobian` at a wide
    step) is Newton's where J is exact: x_(k+1) - x* = (I - J)^-1 e_k + O(|x_k - x*|^2), the
    iterates scatter independently around x* with the propagated error of one map
    evaluation, and their mean converges like 1/sqrt(n_average) (a stochastic
    approximation with Polyak-Ruppert averaging at a constant, preconditioned gain; an
    inexact J correlates successive iterates, which the batch-means error counts).

    A round discards ``burn_in`` iterates and averages the next ``n_average``; it is accepted
    where they are stationary (:func:`_stationary`: the halves agree, the mean's relative
    error is below MAX_RELATIVE_ERROR).  Otherwise the next round starts from the last
    iterate, with J recomputed there by ``rejacobian`` (if given), up to ``rounds`` rounds:
    a sequence still drifting then is reported as not converged.

    ``gain`` and ``rho``: the step's gain and the iterates' correlation the stationarity test
    assumes (default 1 - gain, Newton's with an exact J); a plain fresh-draw Picard iteration
    (J = 0, gain 1) has the map's own contraction there (the largest |eigenvalue| of dT/dx).

    ``rtol``: once a round is stationary, iterates are added (``n_average`` at a time, the
    same J) until the mean's relative standard error in the first two components (m and q:
    what the test errors depend on) is at most ``rtol``, or ``max_average`` iterates are kept;
    the stationarity test is then applied to the whole sequence.
    """
    J = np.asarray(jacobian, dtype=float)
    x = np.asarray(x0, dtype=float).copy()
    history: list[float] = []
    n_average = max(BATCHES, (int(n_average) // BATCHES) * BATCHES)
    k = 0
    X = np.empty((0, x.size))
    drift, rel, stderr = math.inf, math.inf, None
    stuck = 0
    try:
        for rnd in range(rounds):
            if rnd and rejacobian is not None:
                J_new = rejacobian(x)
                if J_new is not None:
                    J = np.asarray(J_new, dtype=float)
            A = np.eye(J.shape[0]) - J
            kept: list[np.ndarray] = []

            def advance(n: int, discard: int) -> None:
                nonlocal x, k, stuck
                for step in range(n):
                    tx = np.asarray(maps(k)(x), dtype=float)
                    k += 1
                    if not np.all(np.isfinite(tx)):
                        raise FloatingPointError("non-finite map value")
                    history.append(relative_residual(x, tx))
                    if monitor is not None:
                        monitor(k, history[-1])
                    dx = _limited(x, gain * np.linalg.solve(A, tx - x), AVERAGED_STEP)
                    for _ in range(11):
                        if valid is None or valid(x + dx):
                            x = x + dx
                            break
                        dx = 0.5 * dx
                    else:
                        # one draw's step out of the domain: stay (a noisy draw, not a trend)
                        stuck += 1
                        if stuck > MAX_STUCK:
                            raise ValueError("the Newton steps keep leaving the domain")
                    if step >= discard:
                        kept.append(x.copy())

            advance(burn_in + n_average, burn_in)
            X = np.array(kept)
            ok, drift, stderr, rel = _stationary(X, rho)
            while (ok and rtol is not None and len(kept) + n_average <= max_average
                   and float(np.max(stderr[:2] / np.maximum(np.abs(X.mean(axis=0)[:2]),
                                                            1e-12))) > rtol):
                advance(n_average, 0)
                X = np.array(kept)
                ok, drift, stderr, rel = _stationary(X, rho)
            if ok:
                return AveragedReport(
                    x=X.mean(axis=0), iterations=k, residual=float(history[-1]),
                    history=tuple(history), success=True, status=Status.CONVERGED,
                    message=(f"averaged {len(X)} {'Picard' if not np.any(J) else 'Newton'} "
                             f"iterates on fresh Monte-Carlo draws "
                             f"(round {rnd + 1}, {burn_in} discarded first); halves agree "
                             f"within {drift:.2g} standard errors"),
                    mc_distance=0.0, evaluations=k, jacobian=J, averaged=True,
                    stderr=stderr, iterates=X, drift=drift)
    except (ValueError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError) as exc:
        return AveragedReport(x=X.mean(axis=0) if len(X) else x, iterations=k,
                              residual=math.inf, history=tuple(history), success=False,
                              status=Status.INVALID, message=f"{type(exc).__name__}: {exc}",
                              evaluations=k, jacobian=J, averaged=True)
    why = (f"halves {drift:.2g} standard errors apart" if drift > DRIFT_LIMIT else
           f"the mean's relative error {100 * rel:.2g} % is above "
           f"{100 * MAX_RELATIVE_ERROR:g} %")
    return AveragedReport(
        x=X.mean(axis=0), iterations=k, residual=float(history[-1]), history=tuple(history),
        success=False, status=Status.MAX_ITER,
        message=f"the averaged iterates are not stationary after {rounds} rounds ({why})",
        evaluations=k, jacobian=J, averaged=True, stderr=stderr, iterates=X, drift=drift)
