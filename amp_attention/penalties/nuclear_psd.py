"""The factorised learner's penalty: the nuclear norm on PSD S with rank cap kappa d
(docs/theory.md "Learners and the objective").

S = W^T W / sqrt(p d), W in R^{p x d}, p = max(1, round(kappa d)), and
P(S) = lam d Tr S = (lam / sqrt(kappa)) ||W||_F^2, i.e. ERM over PSD S with
rank <= kappa d (no cap when kappa >= 1).  Effective problem: f(nu) =
relu(nu - 2 lam)/Vh on the top kappa d eigenvalues of B, 0 on the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from .._subordination_kernels import FAMILY_SHIFTED
from ..spectral_maps import psd_soft_threshold, spectral_divergence
from .base import DenoiserFunctionals, check_hats, check_kappa, check_lam, sym


@dataclass(frozen=True)
class NuclearNormPSD:
    """Nuclear-norm (trace) penalty on PSD S with rank cap kappa*d (factorised learner).

    f(nu) = relu(nu - 2 lam) / Vh on the top kappa*d eigenvalues of B, 0 on the
    others (docs/theory.md "Denoiser side and free probability"); no cap when kappa >= 1.
    """

    lam: float
    kappa: float = 1.0

    name: ClassVar[str] = "factorised"
    #: Shat = W^T W / sqrt(p d): PSD, with a factor W whose singular values exist
    factorised: ClassVar[bool] = True
    smooth: ClassVar[bool] = False
    uses_kappa: ClassVar[bool] = True
    #: the lam -> 0+ threshold equations of docs/theory.md "Thresholds" are this penalty's
    zero_lam_thresholds: ClassVar[str] = "trace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lam", check_lam(self.lam))
        object.__setattr__(self, "kappa", check_kappa(self.kappa))

    @classmethod
    def from_learner(cls, learner) -> "NuclearNormPSD":
        return cls(learner.lam, learner.kappa)

    @staticmethod
    def paper_lam(lreg: float) -> float:
        """The paper's code writes this penalty with lreg = 2 lam (docs/paper.md)."""
        return lreg / 2.0

    @property
    def rank_capped(self) -> bool:
        return self.kappa < 1.0

    def convex_learner(self) -> bool:
        return not self.rank_capped

    def describe(self) -> str:
        return f"kappa = {self.kappa:g} >= 1" if not self.rank_capped else \
            f"rank cap kappa = {self.kappa:g}"

    def rank(self, d: int) -> int | None:
        """The rank cap p = round(kappa d) at dimension d (None when kappa >= 1)."""
        return max(1, int(round(self.kappa * d))) if self.rank_capped else None

    # ---------------------------------------------------------- objective in S
    def value(self, S: np.ndarray) -> float:
        """P(S) = lam d Tr S (S PSD)."""
        return self.lam * S.shape[0] * float(np.trace(S))

    def gradient(self, S: np.ndarray) -> np.ndarray:
        """dP/dS = lam d I on the PSD cone."""
        d = S.shape[0]
        return self.lam * d * np.eye(d)

    def gradient_scale(self, d: int) -> float:
        """||dP/dS||_F at S = 0 (the stopping rule's scale): lam d sqrt(d)."""
        return self.lam * d * math.sqrt(d)

    def prox(self, B: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """argmin_S ||S - B||^2/2 + t P(S) over PSD S of rank <= cap: the eigenvalues
        relu(nu - t lam d) of the top ``rank`` ones; returns (S, its eigenvalues)."""
        d = B.shape[0]
        S, _, f = psd_soft_threshold(B, t * (self.lam * d), 1.0, rank=self.rank(d))
        return S, f

    # ------------------------------------------------------------- the weights
    def weights_shape(self, d: int, p: int | None = None) -> tuple[int, int]:
        """W is p x d, p = max(1, round(kappa d)) unless given."""
        return (max(1, int(round(self.kappa * d))) if p is None else int(p), d)

    def initial_weights(self, d: int, scale: float, rng: np.random.Generator,
                        p: int | None = None) -> np.ndarray:
        """W = scale N(0, 1) (p x d)."""
        return scale * rng.standard_normal(self.weights_shape(d, p))

    def small_weights(self, d: int, rng: np.random.Generator, p: int | None = None) -> np.ndarray:
        """The start near S = 0: W = 1e-3 N(0, 1) (W = 0 itself is a stationary point)."""
        return self.initial_weights(d, 1e-3, rng, p)

    def check_weights(self, W: np.ndarray, d: int) -> None:
        if W.ndim != 2 or W.shape[1] != d:
            raise ValueError(f"W0 must have shape (p, {d}), got {W.shape}")

    def S_from_weights(self, W: np.ndarray) -> np.ndarray:
        p, d = W.shape
        return sym((W.T @ W) / math.sqrt(p * d))

    def objective_weights(self, W: np.ndarray,
                          data_loss: Callable[[np.ndarray], tuple[float, np.ndarray]]
                          ) -> tuple[float, np.ndarray]:
        """R(W) = f(W^T W / sqrt(p d)) + (lam / sqrt(kappa)) ||W||_F^2 and
        dR/dW = 2 W (dR/dS) / sqrt(p d)."""
        p, d = W.shape
        c = math.sqrt(p * d)
        S = (W.T @ W) / c
        f, g = data_loss(S)
        return f + self.value(S), (2.0 / c) * (W @ (g + self.gradient(S)))

    def weights_penalty(self, W: np.ndarray) -> tuple[float, np.ndarray]:
        """P in the weights, lam d ||W||_F^2 / sqrt(p d), and its gradient."""
        p, d = W.shape
        c = math.sqrt(p * d)
        return self.value(self.S_from_weights(W)), (2.0 * self.lam * d / c) * W

    def singular_values(self, W: np.ndarray) -> np.ndarray:
        return np.linalg.svd(W, compute_uv=False)

    # ---------------------------------------------------------------- denoiser
    def matrix_map(self, B: np.ndarray, Vh: float, *, with_spectrum: bool = False):
        """(Shat, V) for a d x d symmetric B: Shat = U f(Lambda) U^T and
        V = (2/d^2)[sum_i f'(nu_i) + sum_{i<j} (f_i - f_j)/(nu_i - nu_j)];
        with ``with_spectrum`` also the eigenvalues f(nu) of Shat."""
        d = B.shape[0]
        S, nu, f = psd_soft_threshold(B, 2.0 * self.lam, Vh, self.rank(d))
        fprime = np.where(f > 0, 1.0 / Vh, 0.0)
        V = spectral_divergence(nu, f, fprime)
        return (S, V, f) if with_spectrum else (S, V)

    def cutoff(self, law) -> float:
        """Smallest kept eigenvalue of B: max(2 lam, (1 - kappa) quantile of rho_B)."""
        cut = 2.0 * self.lam
        if self.rank_capped:
            cut = max(cut, law.upper_quantile(self.kappa))
        return cut

    def functionals(self, target, mh: float, qh: float, Vh: float, *,
                    rtol: float = 1e-11) -> DenoiserFunctionals:
        """q = int f^2 rho_B, V = 2 int f rho_B Re g_B, m = (int x f rho_B - qh V)/mh,
        Tr/d = int f rho_B, rank fraction = int_{x > cutoff} rho_B."""
        from ..freeprob import SemicircleFreeConvolution

        check_hats(mh, qh, Vh)
        law = SemicircleFreeConvolution(target.scaled(mh), qh, rtol=rtol)
        cut = self.cutoff(law)
        # rows 1, f, f^2, x f, f Re g_B of f = (x - 2 lam)/Vh over x > cut
        vals, err = law.spectral_integrals(FAMILY_SHIFTED, 2.0 * self.lam, Vh, law.u_cut(cut))
        rank, trace, q, xf, fg = (float(v) for v in vals)
        V = 2.0 * fg
        m = (xf - qh * V) / mh
        return DenoiserFunctionals(m, q, V, trace, rank, cut, err, self.lam * trace)

    def spectral_value(self, f: np.ndarray) -> float:
        """P(Shat)/d^2 from the d eigenvalues f of Shat: lam sum(f)/d."""
        return self.lam * float(np.sum(f)) / f.size

    def spectral_function(self, x: np.ndarray, Vh: float, cutoff: float) -> np.ndarray:
        """f(x) = relu(x - 2 lam)/Vh for x >= cutoff, 0 below."""
        x = np.asarray(x, dtype=float)
        return np.where(x >= cutoff, np.maximum(x - 2.0 * self.lam, 0.0) / Vh, 0.0)

    def spectral_pieces(self, Vh: float, cutoff: float) -> list[tuple[float, float, float, float]]:
        """f as affine pieces (lo, hi, shift, scale), f(x) = (x - shift)/scale on [lo, hi),
        0 elsewhere: one piece above the cutoff, shift 2 lam, scale Vh (so rho_S(s) = scale
        rho_B(shift + scale s))."""
        return [(cutoff, math.inf, 2.0 * self.lam, Vh)]
