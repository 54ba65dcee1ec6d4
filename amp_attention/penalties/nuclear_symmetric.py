"""The symmetric (non-PSD) nuclear norm: S symmetric, P(S) = lam d ||S||_* = lam d sum_i
|s_i| over the eigenvalues of S (docs/theory.md "Learners and the objective"; the
paper's code has it as ``posdef=False``).

Effective problem: Shat = argmin (Vh/2)||S||^2 - <B, S> + 2 lam ||S||_*, the two-sided
soft threshold f(nu) = sign(nu) relu(|nu| - 2 lam)/Vh of every eigenvalue of B.  As a
trained layer S = (U^T U - V^T V)/sqrt(p d) with U, V in R^{p x d} and weight decay
(lam / sqrt(kappa)) (||U||_F^2 + ||V||_F^2): at a minimum U^T U and V^T V are the
positive and negative parts of sqrt(p d) S, where this weight decay equals
lam d ||S||_* (the variational form of the nuclear norm), so Adam on (U, V) solves
the same problem.  No rank cap: kappa >= 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from .._subordination_kernels import FAMILY_SHIFTED
from ..spectral_maps import symmetric_eigh, two_sided_soft_threshold
from .base import (DenoiserFunctionals, check_hats, check_kappa, check_lam,
                   map_with_divergence, sym)


@dataclass(frozen=True)
class SymmetricNuclearNorm:
    """Nuclear norm on symmetric S of either sign: P(S) = lam d ||S||_* (no rank cap).

    f(nu) = sign(nu) relu(|nu| - 2 lam) / Vh on every eigenvalue of B; the SE
    functionals are those of docs/theory.md "Denoiser side" (q = int f^2 rho_B,
    V = 2 int f rho_B Re g_B, m = (int x f rho_B - qh V)/mh) over both tails
    |x| > 2 lam of rho_B.
    """

    lam: float
    kappa: float = 1.0

    name: ClassVar[str] = "symmetric"
    #: S = (U^T U - V^T V)/sqrt(p d): eigenvalues of either sign, no single factor W
    factorised: ClassVar[bool] = False
    smooth: ClassVar[bool] = False
    uses_kappa: ClassVar[bool] = True
    rank_capped: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lam", check_lam(self.lam))
        kappa = check_kappa(self.kappa)
        if kappa < 1.0:
            raise ValueError(f"kappa must be >= 1 for the symmetric nuclear-norm learner "
                             f"(parameterisation 'symmetric' has no rank cap), got {kappa!r}")
        object.__setattr__(self, "kappa", kappa)

    @classmethod
    def from_learner(cls, learner) -> "SymmetricNuclearNorm":
        return cls(learner.lam, learner.kappa)

    @staticmethod
    def paper_lam(lreg: float) -> float:
        """As the PSD nuclear norm: the paper's code writes lreg = 2 lam."""
        return lreg / 2.0

    def convex_learner(self) -> bool:
        return True

    def describe(self) -> str:
        return "symmetric nuclear-norm learner"

    def rank(self, d: int) -> None:
        return None

    # ---------------------------------------------------------- objective in S
    def value(self, S: np.ndarray) -> float:
        """P(S) = lam d sum_i |s_i|."""
        s = np.linalg.eigvalsh(sym(S))
        return self.lam * S.shape[0] * float(np.sum(np.abs(s)))

    def gradient(self, S: np.ndarray) -> np.ndarray:
        """A subgradient: lam d U sign(Lambda) U^T (0 on zero eigenvalues)."""
        s, U = symmetric_eigh(S)
        return self.lam * S.shape[0] * ((U * np.sign(s)) @ U.T)

    def gradient_scale(self, d: int) -> float:
        """The largest subgradient at S = 0 has norm lam d sqrt(d)."""
        return self.lam * d * math.sqrt(d)

    def prox(self, B: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """argmin_S ||S - B||^2/2 + t P(S): every eigenvalue soft-thresholded at t lam d."""
        nu, U = symmetric_eigh(B)
        f = two_sided_soft_threshold(nu, t * (self.lam * B.shape[0]))
        nz = f != 0.0
        return (U[:, nz] * f[nz]) @ U[:, nz].T, f

    # ------------------------------------------------------------- the weights
    def weights_shape(self, d: int, p: int | None = None) -> tuple[int, int]:
        """[U; V] stacked: 2p x d, p = round(kappa d) unless given."""
        p = max(1, int(round(self.kappa * d))) if p is None else int(p)
        return (2 * p, d)

    def initial_weights(self, d: int, scale: float, rng: np.random.Generator,
                        p: int | None = None) -> np.ndarray:
        """[U; V] = scale N(0, 1)."""
        return scale * rng.standard_normal(self.weights_shape(d, p))

    def small_weights(self, d: int, rng: np.random.Generator, p: int | None = None) -> np.ndarray:
        """The start near S = 0: 1e-3 N(0, 1) ((U, V) = 0 is a stationary point)."""
        return self.initial_weights(d, 1e-3, rng, p)

    def check_weights(self, P: np.ndarray, d: int) -> None:
        if P.ndim != 2 or P.shape[1] != d or P.shape[0] % 2:
            raise ValueError(f"a symmetric nuclear-norm start stacks U0 and V0: shape (2p, {d}), "
                             f"got {P.shape}")

    @staticmethod
    def _halves(P: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        two_p, d = P.shape
        if two_p % 2:
            raise ValueError(f"weights must stack U and V (2p x d), got shape {P.shape}")
        p = two_p // 2
        return P[:p], P[p:], math.sqrt(p * d)

    def S_from_weights(self, P: np.ndarray) -> np.ndarray:
        U, V, c = self._halves(P)
        return sym((U.T @ U - V.T @ V) / c)

    def objective_weights(self, P: np.ndarray,
                          data_loss: Callable[[np.ndarray], tuple[float, np.ndarray]]
                          ) -> tuple[float, np.ndarray]:
        """R = f(S) + lam d (||U||^2 + ||V||^2)/sqrt(p d); dR/dU = 2 U grad f / sqrt(p d),
        dR/dV = -2 V grad f / sqrt(p d), plus the weight decay's gradient."""
        U, V, c = self._halves(P)
        f, g = data_loss(self.S_from_weights(P))
        pen, gpen = self.weights_penalty(P)
        grad = np.concatenate([(2.0 / c) * (U @ g), (-2.0 / c) * (V @ g)]) + gpen
        return f + pen, grad

    def weights_penalty(self, P: np.ndarray) -> tuple[float, np.ndarray]:
        """lam d ||[U; V]||_F^2 / sqrt(p d) and its gradient."""
        _, _, c = self._halves(P)
        d = P.shape[1]
        return self.lam * d * float(np.sum(P * P)) / c, (2.0 * self.lam * d / c) * P

    def singular_values(self, P: np.ndarray) -> None:
        """No single factor W."""
        return None

    # ---------------------------------------------------------------- denoiser
    def matrix_map(self, B: np.ndarray, Vh: float, *, with_spectrum: bool = False):
        """(Shat, V) for a d x d symmetric B: f = sign(nu) relu(|nu| - 2 lam)/Vh and the
        exact normalised divergence."""
        nu, U = symmetric_eigh(B)
        f = two_sided_soft_threshold(nu, 2.0 * self.lam, Vh)
        fprime = np.where(f != 0.0, 1.0 / Vh, 0.0)
        return map_with_divergence(nu, U, f, fprime, with_spectrum)

    def cutoff(self, law) -> float:
        """Eigenvalues of B with |x| > 2 lam are kept."""
        return 2.0 * self.lam

    def functionals(self, target, mh: float, qh: float, Vh: float, *,
                    rtol: float = 1e-11) -> DenoiserFunctionals:
        """The rows 1, f, f^2, x f, f Re g_B over x > 2 lam (f = (x - 2 lam)/Vh) and over
        x < -2 lam (f = (x + 2 lam)/Vh), added; Tr|S|/d = int |f| rho_B gives P/d^2."""
        from ..freeprob import SemicircleFreeConvolution

        check_hats(mh, qh, Vh)
        law = SemicircleFreeConvolution(target.scaled(mh), qh, rtol=rtol)
        t = 2.0 * self.lam
        up, err_up = law.spectral_integrals(FAMILY_SHIFTED, t, Vh, law.u_cut(t))
        down, err_down = law.spectral_integrals(FAMILY_SHIFTED, -t, Vh, law.u_cut(-t),
                                                below=True)
        rank, trace, q, xf, fg = (float(a + b) for a, b in zip(up, down))
        V = 2.0 * fg
        m = (xf - qh * V) / mh
        abs_trace = float(up[1] - down[1])
        return DenoiserFunctionals(m, q, V, trace, rank, t, max(err_up, err_down),
                                   self.lam * abs_trace)

    def spectral_value(self, f: np.ndarray) -> float:
        """P(Shat)/d^2 from the d eigenvalues f of Shat: lam sum|f| / d."""
        return self.lam * float(np.sum(np.abs(f))) / f.size

    def spectral_function(self, x: np.ndarray, Vh: float, cutoff: float = math.nan) -> np.ndarray:
        return two_sided_soft_threshold(np.asarray(x, dtype=float), 2.0 * self.lam, Vh)

    def spectral_pieces(self, Vh: float, cutoff: float = math.nan) -> list:
        """Two pieces (see NuclearNormPSD): x < -2 lam (shift -2 lam) and x > 2 lam (shift
        2 lam), scale Vh; f = 0 between them."""
        t = 2.0 * self.lam
        return [(-math.inf, -t, -t, Vh), (t, math.inf, t, Vh)]
