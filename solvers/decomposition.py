"""Four-way decomposition of the matrix error (docs/theory.md "Power-law targets").

With c* = m/q, S' = c* Shat and P the projector on the outlier eigenvectors of
Shat (P' = I - P), the matrix MSE ||Shat - S0||_F^2/d splits exactly into

    E_mismatch = q (1 - c*)^2                                  (wrong overall scale)
    E_approx   = ||P (S' - S0) P||^2 / d                       (error inside recovered directions)
    E_under    = (||S0||^2 - ||P S0 P||^2) / d                 (target energy not recovered)
    E_over     = (||P' S' P'||^2 - 2 <P' S' P', S0>) / d       (bulk fitted on noise)

(the identity uses only P S' P' = 0, true because P projects on eigenvectors
of Shat).  Two faces, as everywhere in the package:

* finite d (:func:`measured_decomposition`): the four terms of a trained S and
  the target S0 by projection on the top ``n_outliers`` eigenvectors of S;
* SE (:func:`predicted_decomposition`): from the outliers of
  :mod:`amp_attention.solvers.outliers` (learned eigenvalue lambda_k = f(z_k), cos^2_k) and
  the SE overlaps m, q.  With u_k the learned eigenvector of mode k, theta_a =
  mh s_a and nu the law of the other modes (weights w_a = 1/d for the atoms of a
  finite-d target),

      <u_k, e_a>^2 = qh w_a / (theta_k - theta_a)^2          (a != k; they sum to 1 - cos^2_k)
      a_k := <u_k, S0 u_k> = cos^2_k s_k + (qh/mh) [theta_k (-G_nu'(theta_k)) - G_nu(theta_k)]

  and, per unit mass w_k of mode k,
      ||P S0 P||^2/d = sum_k w_k a_k^2 + w^2 k*(k* - 1) qh/mh^2,
      <P Shat P, S0>/d = sum_k w_k lambda_k a_k,   ||P Shat P||^2/d = sum_k w_k lambda_k^2.
  The off-diagonal entries come from one noise entry each: to first order in
  the noise <u_k, S0 u_l> = -sqrt(qh) Z_kl / mh (k != l), mean square
  qh / (mh^2 d) (docs/theory.md section 13); in total O(k*^2/d^2).
  A target whose modes carry no mass in the limit (Wishart, planted spikes)
  has P = 0 at d = inf: E_approx = 0 and E_under = Q0.

The four SE terms sum to Q0 - 2m + q by construction (the a_k and lambda_k
cancel between E_approx, E_under and E_over); what the SE adds is the split.
For a non-linear channel the mismatch is also reported on the test error:
e_test(m, q) - min_c e_test(c m, c^2 q).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from amp_attention.channels import optional_member
from amp_attention.spec import Problem
from amp_attention.targets import target_measure

from .outliers import Outlier, outlier_candidates, predict_outliers
from .state_evolution import MonteCarloOptions, SEResult, StateEvolution

TERMS = ("over", "under", "approx", "mismatch")


@dataclass(frozen=True)
class ErrorDecomposition:
    """E_over, E_under, E_approx, E_mismatch (docs/theory.md "Power-law targets") and what they
    decompose.

    ``matrix_mse`` is ||Shat - S0||_F^2/d (the four terms sum to it);
    ``n_outliers`` the rank of P; ``c_star`` = m/q; ``test_mismatch`` the
    mismatch on the test error (SE, non-linear channels; None otherwise)."""

    #: E_over: overfitting, the learned modes' excess over their best rescaling
    over: float
    #: E_under: underfitting, the target energy outside the learned modes
    under: float
    #: E_approx: approximation error inside the learned modes
    approx: float
    mismatch: float
    matrix_mse: float
    n_outliers: int
    c_star: float
    test_mismatch: float | None = None

    @property
    def total(self) -> float:
        return self.over + self.under + self.approx + self.mismatch

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"total": self.total}


def measured_decomposition(S: np.ndarray, S0: np.ndarray, n_outliers: int) -> ErrorDecomposition:
    """The four terms of a finite-d S (symmetric d x d) against S0, with P the
    projector on the eigenvectors of the ``n_outliers`` largest eigenvalues of S."""
    S = 0.5 * (np.asarray(S, dtype=float) + np.asarray(S, dtype=float).T)
    S0 = np.asarray(S0, dtype=float)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S0.shape != S.shape:
        raise ValueError(f"S and S0 must be square matrices of one shape, got {S.shape} and {S0.shape}")
    d = S.shape[0]
    k = int(n_outliers)
    if k != n_outliers or not 0 <= k <= d:
        raise ValueError(f"n_outliers must be an integer in [0, d] = [0, {d}], got {n_outliers!r}")
    ev, U = np.linalg.eigh(S)
    q = float(np.sum(S * S)) / d
    m = float(np.sum(S * S0)) / d
    Q0 = float(np.sum(S0 * S0)) / d
    if not q > 0:
        raise ValueError("S is zero: c* = m/q is undefined")
    c = m / q
    top = U[:, d - k:]
    lam_top = ev[d - k:]
    M = top.T @ S0 @ top                          # P S0 P in the outlier basis
    approx = float(np.sum((c * np.diag(lam_top) - M) ** 2)) / d
    under = (Q0 * d - float(np.sum(M * M))) / d
    bulk = c * (S - (top * lam_top) @ top.T)      # P' S' P'
    over = (float(np.sum(bulk * bulk)) - 2.0 * float(np.sum(bulk * S0))) / d
    mismatch = (q - m) ** 2 / q
    mse = float(np.sum((S - S0) ** 2)) / d
    return ErrorDecomposition(over, under, approx, mismatch, mse, k, c)


def _mode_weight(problem: Problem) -> float:
    """Mass of one target mode in the SE's law of S0: 1/d for a finite-d list, 0 in the limit."""
    return problem.target.mode_weight


def learned_outliers(outliers: list[Outlier]) -> list[Outlier]:
    """The modes that separate from the bulk of B and are kept by the denoiser (f(z) > 0)."""
    return [o for o in outliers if o.visible and o.eigenvalue is not None and o.eigenvalue > 0]


def _diagonal_overlaps(problem: Problem, result: SEResult, learned: list[Outlier]) -> np.ndarray:
    """a_k = <u_k, S0 u_k> = cos^2_k s_k + (qh/mh) int t dnu(t) / (theta_k - t)^2 per mode,
    with nu the law of mh times the other modes (the same as in the outlier formula)."""
    if not learned:
        return np.zeros(0)
    mh, qh = result.m_hat, result.q_hat
    rests = outlier_candidates(problem, max(o.index for o in learned) + 1)
    out = []
    for o in learned:
        nu = rests[o.index][1].scaled(mh)
        theta = mh * o.target_eigenvalue
        G, G1, _ = nu.stieltjes_derivatives(np.array([theta + 0.0j]))
        out.append(o.cos2 * o.target_eigenvalue + qh / mh * (theta * float(-G1[0].real) - float(G[0].real)))
    return np.array(out)


def _test_mismatch(problem: Problem, result: SEResult, mc: MonteCarloOptions | None) -> float | None:
    """e_test(m, q) - min_c e_test(c m, c^2 q) for a non-linear channel (None for linear:
    there e_test is proportional to the matrix error and the matrix E_mismatch says it all)."""
    se = StateEvolution(problem, mc)
    if se.mc is None:
        return None
    Q0 = se.Q0
    m, q = result.m, result.q

    def e_test(c: float) -> float:
        return se.channel.test_error_at(c * m, c * c * q, Q0)

    c_max = math.sqrt(q * Q0) / abs(m) if m != 0 else 2.0     # m^2 c^2 <= c^2 q Q0 always holds
    best = minimize_scalar(e_test, bounds=(1e-3, 4.0 * max(1.0, c_max)), method="bounded",
                           options={"xatol": 1e-8})
    at_one = e_test(1.0)
    return float(at_one - min(best.fun, at_one))


def predicted_decomposition(problem: Problem, result: SEResult, *,
                            outliers: list[Outlier] | None = None,
                            structure: "OutlierStructure | None" = None,
                            mc: MonteCarloOptions | None = None) -> ErrorDecomposition:
    """The four terms from the SE fixed point ``result`` of ``problem`` (module docstring).

    P covers the k* modes of :func:`outlier_structure` unless ``outliers``
    (from :func:`amp_attention.solvers.outliers.predict_outliers`) are given; ``structure``: that
    :func:`outlier_structure`, when the caller already has it.  ``mc``: the
    RQMC options of a non-linear channel's test-error mismatch (default: the SE's)."""
    if not result.success:
        raise ValueError(f"the SE did not converge (status {result.summary!r}); no decomposition")
    m, q = result.m, result.q
    Q0 = target_measure(problem.target).moment(2)
    if q <= 0.0:
        # Shat = 0 (a weight decay large enough to kill every mode): nothing is learnt,
        # the whole error Q0 is underfitting and the rescaling c* = m/q is void
        closed_form = optional_member(problem.task.channel_object, "se") is not None
        return ErrorDecomposition(0.0, Q0, 0.0, 0.0, Q0 - 2.0 * m + q, 0, 0.0,
                                  None if closed_form else 0.0)
    c = m / q
    w = _mode_weight(problem)
    if outliers is None:
        if w > 0 and structure is None:
            structure = outlier_structure(problem, result)
        k = structure.count if w > 0 else 0
        outliers = predict_outliers(problem, result, max_modes=k) if k > 0 else []
    learned = learned_outliers(outliers)
    lam = np.array([o.eigenvalue for o in learned])
    a = _diagonal_overlaps(problem, result, learned)
    k = len(learned)
    # ||P S0 P||^2 / d: diagonal a_k^2 plus the k(k-1) off-diagonal entries, each
    # <u_k, S0 u_l> = -sqrt(qh) Z_kl / mh to first order (mean square qh / (mh^2 d)).
    p_s0 = w * float(np.sum(a * a)) + w * w * k * (k - 1) * result.q_hat / result.m_hat ** 2
    p_cross = w * float(np.sum(lam * a))          # <P Shat P, S0> / d
    p_sq = w * float(np.sum(lam * lam))           # ||P Shat P||^2 / d
    approx = c * c * p_sq - 2.0 * c * p_cross + p_s0
    under = Q0 - p_s0
    over = c * c * (q - p_sq) - 2.0 * c * (m - p_cross)
    mismatch = (q - m) ** 2 / q
    return ErrorDecomposition(over, under, approx, mismatch, Q0 - 2.0 * m + q, len(learned), c,
                              _test_mismatch(problem, result, mc))


def count_outliers(eigenvalues: np.ndarray, threshold: float) -> int:
    """Finite-d count of outliers: eigenvalues of the trained S above ``threshold``
    (:attr:`OutlierStructure.threshold`, the learned image of the main bulk's edge)."""
    return int(np.sum(np.asarray(eigenvalues, dtype=float) > threshold))


@dataclass(frozen=True)
class OutlierStructure:
    """Which modes of Shat are outliers, from the deterministic equivalent rho_B.

    ``count`` (k*): the target modes whose support components of rho_B lie above
    the main bulk (the component carrying the largest mass) and above the
    denoiser's cutoff, so that Shat has an eigenvalue f(z) > f(edge) for each;
    ``bulk_edge``: the main bulk's upper edge x_edge; ``threshold`` = f(x_edge),
    the largest eigenvalue of Shat the main bulk produces.

    Why not the spike criterion qh int dnu/(theta - t)^2 < 1 alone: inside a
    finite-d bulk it also holds between two atoms, for modes whose eigenvalues
    of B sit among the bulk's; the support of rho_B tells which separate."""

    count: int
    bulk_edge: float
    threshold: float


def outlier_structure(problem: Problem, result: SEResult) -> OutlierStructure:
    """k*, x_edge and f(x_edge) at the SE fixed point ``result`` (see :class:`OutlierStructure`)."""
    from amp_attention.denoisers import denoiser_for

    from .predicted_spectrum import PredictedSpectrum

    pred = PredictedSpectrum.from_se(problem, result)
    law = pred.law
    iv = law.intervals_x
    lo, hi = iv[:, :1], iv[:, 1:]
    masses, _, _ = law.integrate(lambda r: ((r.x >= lo) & (r.x <= hi)).astype(float))
    main = int(np.argmax(masses))
    edge = float(iv[main, 1])
    count = 0
    w = _mode_weight(problem)
    if w > 0:
        for j in range(main + 1, iv.shape[0]):
            if iv[j, 1] > pred.cutoff:
                count += int(round(masses[j] / w))
    f = denoiser_for(problem.learner).spectral_function(np.array([edge]), result.V_hat, pred.cutoff)
    return OutlierStructure(count, edge, float(f[0]))
