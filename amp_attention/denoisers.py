"""Denoisers: the prior side of the state evolution and of GAMP (docs/theory.md "Denoiser side
and free probability").

The ERM penalties (nuclear norm PSD, Frobenius, symmetric nuclear norm) are the
denoisers of :mod:`amp_attention.penalties`; this module adds the Bayes-optimal one.
Each denoiser is one object with two faces:

* finite d: the matrix map B -> Shat (with its exact normalised divergence V),
  used by GAMP on data and by direct checks against sampled GOE matrices;
* asymptotic: the functionals q, V, m, Tr(Shat)/d and the rank fraction of the
  same spectral map applied to B = mh S0 + sqrt(qh) Z, from the limiting law
  rho_B = (mh * spectrum of S0) boxplus semicircle(qh).

In docs/theory.md's notation the effective problem is
    Shat = argmin_S (Vh/2) ||S||_F^2 - <B, S> + 2 P(S)/d
for the learner's penalty P(S) in the ERM objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._subordination_kernels import FAMILY_BAYES
from .freeprob import SemicircleFreeConvolution
from .penalties import DenoiserFunctionals, Penalty, check_hats, penalty_for
from .penalties.frobenius import Frobenius
from .penalties.nuclear_psd import NuclearNormPSD
from .penalties.nuclear_symmetric import SymmetricNuclearNorm
from .spectral_maps import spectral_divergence, symmetric_eigh
from .targets import SpectralMeasure

__all__ = ["BayesDenoiserFunctionals", "BayesOptimal", "Denoiser", "DenoiserFunctionals",
           "Frobenius", "NuclearNormPSD", "SymmetricNuclearNorm", "check_hats", "denoiser_for"]


@dataclass(frozen=True)
class BayesDenoiserFunctionals:
    """The Bayes-optimal denoiser at signal-to-noise ratio qhat (docs/theory.md "Bayes-optimal
    baseline").

    mmse: ||E[S0|Y] - S0||_F^2 / d from the free-convolution density,
    1/qhat - (4 pi^2 / (3 qhat^2)) int rho_Y^3; q = Q0 - mmse (Nishimori: m = q);
    mmse_from_map: Q0 - 2m + q of the eigenvalue map y - (2/qhat) Re g_Y(y) (the same
    number computed the other way); quadrature_error: relative error estimate.
    """

    mmse: float
    q: float
    Q0: float
    mmse_from_map: float
    quadrature_error: float = 0.0


@dataclass(frozen=True, eq=False)
class BayesOptimal:
    """The Bayes-optimal (rotation-invariant) denoiser of a target with spectral law ``prior``
    (docs/theory.md "Bayes-optimal baseline").

    From B = mh S0 + sqrt(qh) Z, i.e. Y = B / mh = S0 + sigma Z with sigma^2 = qh / mh^2,
    the posterior mean keeps the eigenvectors of B and maps each eigenvalue by
    f(x) = (x - 2 qh Re g_B(x)) / mh, which is y - 2 sigma^2 Re g_Y(y) at y = x / mh.
    In the subordination variables of :mod:`.freeprob` (x = psi(u), Re g_B = (x - u)/qh)
    this is f = (2u - x)/mh.  At the Bayes-optimal point mh = qh = Vh = qhat.
    The same object serves the state evolution (:meth:`functionals`,
    :meth:`bayes_functionals`) and GAMP on data (:meth:`matrix_map`).
    """

    prior: SpectralMeasure
    rtol: float = 1e-11

    #: the posterior mean is any symmetric matrix (PSD here, but with no factor W learned)
    factorised = False

    def law(self, mh: float, qh: float) -> SemicircleFreeConvolution:
        """rho_B = (mh * prior) boxplus semicircle(qh)."""
        check_hats(mh, qh, 1.0)
        return SemicircleFreeConvolution(self.prior.scaled(mh), qh, rtol=self.rtol)

    # ------------------------------------------------------------- asymptotic
    def functionals(
        self, target: SpectralMeasure, mh: float, qh: float, Vh: float, *, rtol: float = 1e-11
    ) -> DenoiserFunctionals:
        """The overlaps of the eigenvalue map at any hats (the general formulas of
        docs/theory.md "Denoiser side": q = int f^2 rho_B, V = 2 int f rho_B Re g_B,
        m = (int x f rho_B - qh V)/mh); ``target`` must be the prior (Bayes-optimal
        means the denoiser knows the law of S0).  Vh is not used: the posterior mean
        does not depend on it."""
        check_hats(mh, qh, Vh)
        if target is not self.prior and target != self.prior:
            raise ValueError("target: the Bayes-optimal denoiser is evaluated on its own "
                             "prior; pass the same spectral law")
        law = SemicircleFreeConvolution(target.scaled(mh), qh, rtol=rtol)
        # rows f, f^2, x f, f Re g_B (and rho_B^2, unused) of f = (2u - x)/mh
        vals, err = law.spectral_integrals(FAMILY_BAYES, 0.0, mh)
        trace, q, xf, fg = (float(v) for v in vals[:4])
        V = 2.0 * fg
        m = (xf - qh * V) / mh
        return DenoiserFunctionals(m, q, V, trace, 1.0, -math.inf, err)

    def bayes_functionals(self, qhat: float) -> BayesDenoiserFunctionals:
        """MMSE of denoising Y = S0 + Z / sqrt(qhat) two ways: from int rho_Y^3 and from
        the eigenvalue map's overlaps (docs/theory.md "Bayes-optimal baseline").

        With B = qhat Y, rho_B = v/(pi qhat) at the quadrature nodes and
        int rho_Y^3 dy = qhat^2 int rho_B^3 dx, so
        mmse = 1/qhat - (4 pi^2/3) int rho_B^2 rho_B dx."""
        check_hats(qhat, qhat, qhat)
        law = self.law(qhat, qhat)
        # rows f, f^2, x f, f Re g_B, rho_B^2 of f = (2u - x)/qhat
        vals, err = law.spectral_integrals(FAMILY_BAYES, 0.0, qhat)
        _, q, xf, fg, rho2 = (float(v) for v in vals)
        Q0 = self.prior.moment(2)
        mmse = 1.0 / qhat - (4.0 * math.pi**2 / 3.0) * rho2
        m = (xf - qhat * 2.0 * fg) / qhat
        # rounding can put a vanishing mmse a few ulps below 0
        mmse = max(mmse, 0.0)
        return BayesDenoiserFunctionals(mmse, Q0 - mmse, Q0, Q0 - 2.0 * m + q, err)

    def spectral_function(self, x: np.ndarray, mh: float, qh: float) -> np.ndarray:
        """f(x) = (x - 2 qh Re g_B(x)) / mh for eigenvalues x of B (any real x)."""
        x = np.atleast_1d(np.asarray(x, dtype=float))
        g = self.law(mh, qh).stieltjes_real(x)
        return (x - 2.0 * qh * np.real(g)) / mh

    # ---------------------------------------------------------------- finite d
    def matrix_map(self, B: np.ndarray, Vh: float, *, with_spectrum: bool = False):
        """(Shat, V) for a d x d symmetric B at the Bayes-optimal point mh = qh = Vh:
        Shat = U f(Lambda) U^T and the exact finite-d divergence
        V = (2/d^2)[sum_i f'(nu_i) + sum_{i<j} (f_i - f_j)/(nu_i - nu_j)] (f' by central
        differences of the same map)."""
        check_hats(Vh, Vh, Vh)
        nu, U = symmetric_eigh(B)
        law = self.law(Vh, Vh)
        h = 1e-5 * (1.0 + float(np.max(np.abs(law.edges))))
        xs = np.concatenate([nu, nu - h, nu + h])
        fs = (xs - 2.0 * Vh * np.real(law.stieltjes_real(xs))) / Vh
        d = nu.size
        f, fprime = fs[:d], (fs[2 * d:] - fs[d:2 * d]) / (2.0 * h)
        S = (U * f) @ U.T
        V = spectral_divergence(nu, f, fprime)
        return (S, V, f) if with_spectrum else (S, V)


Denoiser = Penalty | BayesOptimal


def denoiser_for(learner) -> Penalty:
    """The denoiser of a :class:`~amp_attention.spec.Learner`: its penalty
    (:func:`amp_attention.penalties.penalty_for`)."""
    return penalty_for(learner)
