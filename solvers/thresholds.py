"""Interpolation and perfect-recovery thresholds from the lam -> 0+ limit of the SE
(docs/theory.md "Thresholds").

Derivation (docs/theory.md section 12).  As lam -> 0+ below the interpolation
threshold the minimiser tends to the minimum-trace interpolator, V diverges
like v / lam and every conjugate scales with lam (Vh = lam vh, mh = lam mh',
qh = lam^2 qh').  In the prox of the channel, V -> infinity turns uhat into the
Euclidean projection (u-coordinates) of omega onto the zero-loss set.  When
that set is affine -- linear channel; softmax with labels inside its range
(logit noise or none), where it is {h* + noise + c 11^T} -- the channel side
reduces to two numbers:

    r = rank of the constraints per sample      (K linear, K - 1 softmax)
    N = E || P_perp xi_u ||^2                   (label-noise energy in the constrained directions)

and Vh' = mh' = 2 alpha r / v,  qh' = 2 alpha (r E + N) / v^2, E = ||Shat - S0||_F^2/d.
On the denoiser side B' = mh' (S0 + sigma Z) with sigma^2 = (r E + N)/(2 alpha r^2)
and Shat = relu(S0 + sigma Z - t) (top kappa d eigenvalues), t = v/(alpha r);
the divergence equation reads delta(sigma, t) = 2 alpha r, delta the
normalised divergence of that spectral map.

* Interpolation threshold (N > 0): the largest alpha with a solution, reached
  at t -> 0 (V stays finite above it).  With delta_0, E_0 of the projection
  onto the PSD cone (rank <= kappa d) of S0 + sigma Z:

      r sigma^2 delta_0(sigma) = r E_0(sigma) + N,     alpha_interp = delta_0(sigma) / (2 r).

  Pure noise (N -> infinity): delta_0 -> 1/2 (kappa >= 1), alpha_interp -> 1/(4 r),
  the statistical dimension d(d+1)/4 of the PSD cone per equation.
* Perfect recovery (N = 0): E -> 0, sigma -> 0 with t = tau sigma, and the two
  equations become Phi(tau) = delta(tau) = 2 alpha r with
  Phi(tau) = lim E / sigma^2.  Stein's identity gives Phi - delta = tau Phi'/2,
  so they meet at the minimiser: alpha_PR = min_tau Phi(tau) / (2 r).

Element-wise learner (no PSD constraint, Frobenius penalty): the ridgeless
limit has delta = 1, so alpha_interp = alpha_PR = 1/(2 r) (parameter count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, minimize_scalar

from amp_attention.channels import ZeroLossGeometry, channel_for, optional_member
from amp_attention.penalties import penalty_class, penalty_names
from amp_attention.penalties.nuclear_psd import NuclearNormPSD
from amp_attention.result import Result, Status, outcome
from amp_attention.checks import Real
from amp_attention.spec import Problem, Task, check_problem
from amp_attention.targets import target_measure

THRESHOLD_KINDS = ("interpolation", "perfect_recovery")
# A non-zero target eigenvalue counts as resolved by the sigma -> 0 extrapolation
# when it exceeds this many times the largest sigma used.
RESOLVED_SIGMAS = 10.0


def zero_loss_geometry(task: Task, noise: float | None = None) -> ZeroLossGeometry:
    """The zero-loss geometry of ``task``'s channel at label-noise variance ``noise``
    (default the task's); ValueError when the channel's zero-loss set is empty or
    not affine (softmax with output noise, seq2lab, channels without the capability)."""
    channel = channel_for(task)
    geometry = optional_member(channel, "zero_loss_geometry")
    if geometry is None:
        raise ValueError(f"channel {task.channel_name!r}: the zero-loss set is not affine, no "
                         "closed-form limit; use the lam-continuation (threshold_by_continuation)")
    return geometry(noise)


@dataclass(frozen=True)
class ThresholdResult(Result):
    """A threshold alpha and how it was obtained.

    ``sigma``: the effective noise level of the limit equations at the
    threshold (interpolation) or 0 (recovery); ``tau``: the optimal
    threshold-to-noise ratio (recovery); ``rank``/``noise_energy``: the
    constraint geometry; ``residual``: of the equation solved; success /
    status / message as in :class:`~amp_attention.result.Result`.
    """

    #: 'interpolation' or 'perfect recovery'
    kind: str
    #: the threshold alpha
    alpha: float
    sigma: float
    tau: float
    rank: int
    noise_energy: float
    #: how it was obtained (equations solved, closed form)
    method: str
    residual: float = 0.0


#: smallest noise energy per equation, relative to Q0, that the interpolation equation
#: resolves: sigma^2 delta_0 - E_0 is a difference of O(Q0) integrals with a floor of
#: ~1e-14 (measured at kappa0 = 0.4-2), 1 % of this resolution; below it roots of the
#: floor were returned (Delta = 1e-16 gave 0.05 for 0.16)
NOISE_RESOLUTION = 1e-12


def projection_stats(problem: Problem, sigma: float, threshold: float = 0.0):
    """(delta, E) of Shat = relu(S0 + sigma Z - threshold) (top kappa d), mh = Vh = 1."""
    den = NuclearNormPSD(0.5 * threshold, problem.learner.kappa)
    target = target_measure(problem.target)
    f = den.functionals(target, 1.0, sigma * sigma, 1.0)
    return f.V, target.moment(2) - 2.0 * f.m + f.q


def zero_lam_theory(problem: Problem) -> str:
    """Which lam -> 0+ theory the learner's penalty has (its optional ``zero_lam_thresholds``):
    "trace" (the equations below, PSD trace norm) or "parameter_count"."""
    penalty = problem.learner.penalty
    theory = getattr(penalty, "zero_lam_thresholds", None)
    if theory is None:
        known = [n for n in penalty_names()
                 if getattr(penalty_class(n), "zero_lam_thresholds", None)]
        raise ValueError(f"parameterisation: the lam -> 0+ thresholds are derived for the "
                         f"{', '.join(known)} learners, not for the {penalty.name} one "
                         f"({penalty.describe()})")
    return theory


def _parameter_count(kind: str, geo: ZeroLossGeometry) -> ThresholdResult:
    return ThresholdResult(kind, 1.0 / (2.0 * geo.rank), math.nan, 0.0, geo.rank,
                           geo.noise_energy, "element-wise learner: parameter count d(d+1)/2, "
                           "alpha = 1/(2 r)", success=True, status=Status.CONVERGED,
                           message="closed form")


def interpolation_threshold(problem: Problem) -> ThresholdResult:
    """alpha_interp of ``problem`` (its alpha and lam are ignored): the largest
    alpha at which ERM with lam -> 0+ fits noisy labels exactly (e_train -> 0).

    Solves r sigma^2 delta_0(sigma) - r E_0(sigma) = N for sigma by Brent's
    method on a bracket grown geometrically, then alpha = delta_0 / (2 r).
    Noiseless labels (N = 0) are always interpolated (S0 fits them): alpha = inf.
    """
    check_problem(problem)
    geo = zero_loss_geometry(problem.task)
    if zero_lam_theory(problem) == "parameter_count":
        return _parameter_count("interpolation", geo)
    r, N = geo.rank, geo.noise_energy
    method = f"lam -> 0+ limit equations ({geo.description})"
    if N == 0.0:
        return ThresholdResult("interpolation", math.inf, 0.0, 0.0, r, N, method, success=True,
                               status=Status.CONVERGED,
                               message="noiseless labels: S0 interpolates at every alpha")

    Q0 = target_measure(problem.target).moment(2)
    if N / r < NOISE_RESOLUTION * Q0:
        # sigma^2 delta_0 - E_0 is a difference of O(Q0) integrals: a noise energy below
        # their rounding error has no resolvable root
        return ThresholdResult("interpolation", math.nan, math.nan, 0.0, r, N, method,
                               success=False, status=Status.FAILED,
                               message=f"noise energy per equation N/r = {N / r:.3g} is below "
                                       f"the resolution {NOISE_RESOLUTION:g} Q0 of the limit "
                                       "equation; the threshold approaches its Delta -> 0+ "
                                       "value like Delta^(1/3)")

    def F(sigma: float) -> float:
        delta, E = projection_stats(problem, sigma)
        return (sigma * sigma * delta - E) - N / r

    lo, hi = 1e-3, 1.0
    while F(hi) < 0:
        lo, hi = hi, 4.0 * hi
        if hi > 1e14:
            return ThresholdResult("interpolation", math.nan, math.nan, 0.0, r, N, method,
                                   success=False, status=Status.FAILED,
                                   message="no root of the limit equation below sigma = 1e14")
    while F(lo) >= 0:
        lo *= 0.1  # F -> -N/r < 0 as sigma -> 0: a small noise has its root near 0
        if lo < 1e-12:
            return ThresholdResult("interpolation", math.nan, math.nan, 0.0, r, N, method,
                                   success=False, status=Status.FAILED,
                                   message="no sign change of the limit equation above "
                                           "sigma = 1e-12 (noise energy too small to resolve)")
    sigma = brentq(F, lo, hi, xtol=1e-13, rtol=1e-12, maxiter=200)
    delta, E = projection_stats(problem, sigma)
    residual = abs(sigma * sigma * delta - E - N / r)
    return ThresholdResult("interpolation", delta / (2.0 * r), sigma, 0.0, r, N, method,
                           residual, success=True, status=Status.CONVERGED)


def recovery_mse_ratio(problem: Problem, tau: float, sigma: float = 1e-3) -> float:
    """Phi(tau) = lim_{sigma -> 0} ||relu(S0 + sigma Z - tau sigma) - S0||_F^2 / (d sigma^2).

    E = Q0 - 2m + q cancels to O(sigma^2) while the quadrature is accurate to
    ~1e-11 relative, so sigma cannot be tiny; the O(sigma) bias is removed by
    one Richardson step, 2 Phi(sigma) - Phi(2 sigma) (error O(sigma^2))."""
    def ratio(s: float) -> float:
        _, E = projection_stats(problem, s, tau * s)
        return E / (s * s)

    return 2.0 * ratio(sigma) - ratio(2.0 * sigma)


def descent_cone_mse_ratio(kappa0: float, tau: float) -> float:
    """Closed form of Phi(tau) for S0 of rank fraction kappa0 with its non-zero
    eigenvalues bounded away from 0 and a learner without rank cap: the range
    block passes Z - tau I, the cross blocks pass Z, the null block is
    relu(Z_22 - tau) with Z_22 a semicircle of variance 1 - kappa0:

        Phi = kappa0^2 + kappa0 tau^2 + 2 kappa0 (1 - kappa0)
              + (1 - kappa0) int relu(x - tau)^2 rho_sc,(1 - kappa0)(x) dx.
    """
    from scipy.integrate import quad

    s2 = 1.0 - kappa0
    null = 0.0
    if s2 > 0:
        R = 2.0 * math.sqrt(s2)
        if tau < R:
            null = quad(lambda x: (x - tau) ** 2 * math.sqrt(max(R * R - x * x, 0.0))
                        / (2.0 * math.pi * s2), max(tau, -R), R, epsabs=1e-13, epsrel=1e-12)[0]
    return kappa0 * kappa0 + kappa0 * tau * tau + 2.0 * kappa0 * (1.0 - kappa0) + s2 * null


def _minimise_over_tau(phi, xatol: float):
    """(tau, Phi(tau), optimiser result) minimising Phi over [0, 6], the boundary tau = 0
    included (where the minimum can sit)."""
    res = minimize_scalar(phi, bounds=(0.0, 6.0), method="bounded", options={"xatol": xatol})
    tau, value = float(res.x), float(res.fun)
    value0 = phi(0.0)
    if value0 < value:
        tau, value = 0.0, value0
    return tau, value, res


def perfect_recovery_threshold(problem: Problem, sigma: float = 1e-3) -> ThresholdResult:
    """alpha_PR of ``problem`` with its noise set to 0 (its alpha and lam are
    ignored): the smallest alpha at which ERM with lam -> 0+ recovers S0
    (e_test -> 0); alpha_PR = min_tau Phi(tau) / (2 r)."""
    check_problem(problem)
    sigma = Real(0.0, 1.0, lo_open=True, why="the small variance of the lam -> 0+ limit").check("sigma", sigma)
    geo = zero_loss_geometry(problem.task, noise=0.0)
    if zero_lam_theory(problem) == "parameter_count":
        return _parameter_count("perfect_recovery", geo)
    r = geo.rank
    measure = target_measure(problem.target)
    s_min, rank_fraction = measure.smallest_positive(), measure.positive_mass()
    if s_min is not None and not problem.learner.rank_capped:
        # Finitely many atoms, all non-zero ones >= s_min > 0: as sigma -> 0 every one of
        # them is resolved and Phi is that of the descent cone of the trace norm at a
        # matrix of this rank fraction, whatever the atoms.  The quadrature route would
        # need sigma << s_min, where E = Q0 - 2m + q cancels below its accuracy.
        tau, phi, res = _minimise_over_tau(lambda t: descent_cone_mse_ratio(rank_fraction, t),
                                           xatol=1e-9)
        method = (f"lam -> 0+ limit, Delta = 0: min over tau of the descent-cone Phi(tau) of "
                  f"a target of rank fraction {rank_fraction:.6g} (all its non-zero "
                  f"eigenvalues >= {s_min:.3g} > 0, no rank cap; {geo.description})")
        return ThresholdResult("perfect_recovery", phi / (2.0 * r), 0.0, tau, r, 0.0, method,
                               **outcome(res.success, Status.FAILED, str(res.message)))
    tau, phi, res = _minimise_over_tau(lambda t: recovery_mse_ratio(problem, t, sigma), xatol=1e-7)
    method = (f"lam -> 0+ limit, Delta = 0: min over tau of Phi(tau) = lim E/sigma^2 "
              f"(Richardson from sigma = {sigma:g}, {2 * sigma:g}; {geo.description})")
    status = outcome(res.success, Status.FAILED, str(res.message))
    if s_min is not None and s_min < RESOLVED_SIGMAS * 2.0 * sigma:
        # eigenvalues within a few sigma of 0 act as zeros at this sigma: the value is
        # the threshold of another (lower-rank) target, not the sigma -> 0 limit
        n_low = int(np.sum((measure.points > 0) & (measure.points < RESOLVED_SIGMAS * 2.0 * sigma)))
        status = {"success": False, "status": Status.UNRESOLVED,
                  "message": f"{n_low} non-zero target eigenvalue(s) lie below "
                  f"{RESOLVED_SIGMAS:g} x sigma = {RESOLVED_SIGMAS * 2.0 * sigma:.3g} (smallest "
                  f"{s_min:.3g}), so the sigma -> 0 limit is not reached with a rank cap"}
    return ThresholdResult("perfect_recovery", phi / (2.0 * r), 0.0, tau, r, 0.0, method,
                           **status)

