"""lam = 0 exactly (docs/theory.md 12.1): the minimum-trace interpolator below the
interpolation threshold, the lam -> 0+ limit of the SE above it.

Below alpha_interp the ERM minimisers at lam -> 0+ tend to the interpolator of least trace,
and the SE's variables scale as V = v/lam, Vh = lam vh, mh = lam mh', qh = lam^2 qh'
(docs/theory.md section 12).  Where the channel's zero-loss set is affine (linear; softmax
without label noise or with it on the logits: r equations per sample, noise energy N in
the constrained directions) the limit is two equations in (sigma, t):

    delta(sigma, t) = 2 alpha r,        2 alpha r^2 sigma^2 = r E(sigma, t) + N,

with Shat = relu(S0 + sigma Z - t) (top kappa d eigenvalues), delta its normalised
divergence and E = ||Shat - S0||_F^2 / d, both from the denoiser at mh = Vh = 1, qh = sigma^2
(:func:`solvers.thresholds.projection_stats`).  Shat's overlaps give the test errors through
the channel (which needs no prox: the V -> infinity prox is the Euclidean projection on an
affine set, unique, so both prox branches agree); the training error and loss are 0, V is
infinite and the conjugates vanish.  Above alpha_interp, V stays finite as lam -> 0+ and the
SE at lam = 0 is solved as it stands (threshold 0 in the denoiser: the PSD projection).
"""

from __future__ import annotations

import math
import time

from scipy.optimize import brentq

from amp_attention.penalties.nuclear_psd import NuclearNormPSD
from amp_attention.result import Status
from amp_attention.spec import Problem
from amp_attention.targets import target_measure

from .thresholds import (interpolation_threshold, perfect_recovery_threshold, projection_stats,
                         zero_lam_theory, zero_loss_geometry)


def zero_lam_regime(problem: Problem) -> tuple[str, float]:
    """("interpolating", alpha_interp) where lam = 0 is the minimum-trace interpolator of
    this problem (alpha below the interpolation threshold of an affine zero-loss set and a
    nuclear-norm learner), else ("se", alpha_interp or NaN): the SE at lam = 0 itself."""
    if problem.learner.lam != 0.0:
        return "se", math.nan
    try:
        if zero_lam_theory(problem) != "trace":  # no PSD trace norm: no interpolator here
            return "se", math.nan
        th = interpolation_threshold(problem)  # ValueError: no affine zero-loss set
    except ValueError:
        return "se", math.nan
    if not th.success and not math.isinf(th.alpha):
        return "se", math.nan
    return ("interpolating" if problem.alpha < th.alpha else "se"), th.alpha


def _t_of_sigma(problem: Problem, sigma: float, goal: float) -> float:
    """The threshold t >= 0 with delta(sigma, t) = goal (delta decreases in t); 0 where even
    t = 0 leaves delta below the goal."""
    if projection_stats(problem, sigma, 0.0)[0] <= goal:
        return 0.0
    hi = max(1.0, 4.0 * sigma)
    while projection_stats(problem, sigma, hi)[0] > goal:
        hi *= 4.0
        if hi > 1e12:
            raise ValueError(f"no threshold with divergence {goal:g} at sigma = {sigma:g}")
    return brentq(lambda t: projection_stats(problem, sigma, t)[0] - goal, 0.0, hi,
                  xtol=1e-14, rtol=1e-13, maxiter=200)


def interpolator_overlaps(problem: Problem) -> dict:
    """(sigma, t, m, q, rank_fraction, trace_per_d, residual) of the minimum-trace
    interpolator (module docstring); ValueError where the equations have no root."""
    geo = zero_loss_geometry(problem.task)
    r, N = geo.rank, geo.noise_energy
    alpha = problem.alpha
    target = target_measure(problem.target)
    Q0 = target.moment(2)
    goal = 2.0 * alpha * r

    if N == 0.0:
        pr = perfect_recovery_threshold(problem)
        if pr.success and alpha >= pr.alpha:
            s0 = target.moment(1)
            return {"sigma": 0.0, "t": 0.0, "m": Q0, "q": Q0, "rank_fraction": math.nan,
                    "trace_per_d": s0, "residual": 0.0}

    def G(sigma: float) -> float:
        t = _t_of_sigma(problem, sigma, goal)
        _, E = projection_stats(problem, sigma, t)
        return 2.0 * alpha * r * r * sigma * sigma - (r * E + N)

    lo, hi = 1e-4 * math.sqrt(Q0), math.sqrt(Q0)
    while G(hi) < 0:
        lo, hi = hi, 4.0 * hi
        if hi > 1e12:
            raise ValueError("no root of the interpolator's equations below sigma = 1e12")
    while G(lo) > 0:
        lo *= 0.25
        if lo < 1e-12:
            raise ValueError("no root of the interpolator's equations above sigma = 1e-12")
    sigma = brentq(G, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=200)
    t = _t_of_sigma(problem, sigma, goal)
    f = NuclearNormPSD(0.5 * t, problem.learner.kappa).functionals(target, 1.0, sigma * sigma, 1.0)
    residual = abs(G(sigma)) / (r * r * 2 * alpha * sigma * sigma)
    return {"sigma": sigma, "t": t, "m": f.m, "q": f.q, "rank_fraction": f.rank_fraction,
            "trace_per_d": f.trace_per_d, "residual": residual}


def solve_interpolator(problem: Problem, mc=None, *, t0: float | None = None):
    """The lam = 0 SE result below alpha_interp: the minimum-trace interpolator
    (:func:`interpolator_overlaps`) with the channel's test errors at its overlaps
    (test-only Monte-Carlo samples for the RQMC channels, with their replica errors);
    train error and loss 0, V infinite, conjugates 0."""
    from .state_evolution import SEResult, StateEvolution, t_halfwidths

    t0 = time.perf_counter() if t0 is None else t0
    ov = interpolator_overlaps(problem)
    se = StateEvolution(problem, mc)
    m, q = ov["m"], ov["q"]
    stderr, how, dof = None, "", None
    tf = getattr(se.channel, "test_fields", None)
    fields = tf(m, q, se.Q0) if tf is not None else None
    if fields is not None:
        test, noisy = float(fields[:, 0].mean()), float(fields[:, 1].mean())
        R = fields.shape[0]
        err = fields.std(axis=0, ddof=1) / math.sqrt(R)
        stderr = {"test_error": float(err[0]), "test_error_noisy": float(err[1])}
        dof = R - 1
        how = (f"replica spread over {R} replicas of the test-only samples (the overlaps "
               "are deterministic: limit equations)")
    else:
        ch = se.channel.se(m, q, 1.0, se.Q0, problem.alpha)
        test, noisy = ch.test_error, ch.test_error_noisy
    ok = ov["residual"] < 1e-8
    return SEResult(
        m=m, q=q, V=math.inf, m_hat=0.0, q_hat=0.0, V_hat=0.0, train_error=0.0,
        test_error=test, matrix_mse=se.Q0 - 2.0 * m + q, loss=0.0,
        rank_fraction=ov["rank_fraction"], trace_per_d=ov["trace_per_d"], iterations=0,
        residual=ov["residual"], start="interpolator", success=ok,
        status=Status.CONVERGED if ok else Status.FAILED,
        message=("" if ok else f"limit equations solved to a relative residual "
                               f"{ov['residual']:.1e} only"),
        start_policy="lam = 0 below the interpolation threshold: the minimum-trace "
                     "interpolator (lam -> 0+ limit equations, docs/theory.md 12.1)",
        method=(f"limit equations: sigma = {ov['sigma']:.6g}, t = {ov['t']:.6g} "
                "(Shat = relu(S0 + sigma Z - t))"),
        mc_stderr=stderr, mc_error_method=how, test_error_noisy=noisy, mc_dof=dof,
        mc_halfwidth95=t_halfwidths(stderr, dof),
        prox_branch=se.prox_branch, seconds=time.perf_counter() - t0)


__all__ = ["interpolator_overlaps", "solve_interpolator", "zero_lam_regime"]
