"""The element-wise learner's penalty: Frobenius (ridge) on symmetric S (docs/theory.md
"Learners and the objective").

S symmetric, unconstrained, P(S) = lam d ||S||_F^2 / 2 (kappa is ignored).  It enters
the effective problem as lam ||S||_F^2, so f(x) = x / (Vh + 2 lam) on every eigenvalue
and the SE functionals are closed form.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import numpy as np

from .base import DenoiserFunctionals, check_hats, check_kappa, check_lam, sym


@dataclass(frozen=True)
class Frobenius:
    """Element-wise learner: penalty lam d ||S||_F^2 / 2 on symmetric S.

    f(x) = x / (Vh + 2 lam) on every eigenvalue; the functionals are closed form:
    q = (mh^2 Q0 + qh) c^2, V = c, m = mh Q0 c, Tr/d = mh <s> c, c = 1/(Vh + 2 lam).
    """

    lam: float
    kappa: float = 1.0

    name: ClassVar[str] = "elementwise"
    #: S is any symmetric matrix: no factor W, eigenvalues of either sign
    factorised: ClassVar[bool] = False
    smooth: ClassVar[bool] = True
    uses_kappa: ClassVar[bool] = False
    rank_capped: ClassVar[bool] = False
    #: lam -> 0+: d(d+1)/2 parameters, alpha = 1/(2 r) for both thresholds
    zero_lam_thresholds: ClassVar[str] = "parameter_count"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lam", check_lam(self.lam))
        object.__setattr__(self, "kappa", check_kappa(self.kappa))

    @classmethod
    def from_learner(cls, learner) -> "Frobenius":
        return cls(learner.lam, learner.kappa)

    @staticmethod
    def paper_lam(lreg: float) -> float:
        """The paper's code writes this penalty with lreg = lam (docs/paper.md)."""
        return lreg

    def convex_learner(self) -> bool:
        return True

    def describe(self) -> str:
        return "element-wise learner"

    def rank(self, d: int) -> None:
        return None

    # ---------------------------------------------------------- objective in S
    def value(self, S: np.ndarray) -> float:
        """P(S) = lam d ||S||_F^2 / 2."""
        return 0.5 * self.lam * S.shape[0] * float(np.sum(S * S))

    def gradient(self, S: np.ndarray) -> np.ndarray:
        """dP/dS = lam d S."""
        return self.lam * S.shape[0] * S

    def gradient_scale(self, d: int) -> float:
        """||dP/dS||_F at S = 0 is 0."""
        return 0.0

    def prox(self, B: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """argmin_S ||S - B||^2/2 + t P(S) = sym(B) / (1 + t lam d)."""
        S = sym(B) / (1.0 + t * self.lam * B.shape[0])
        return S, np.linalg.eigvalsh(S)

    # ------------------------------------------------------------- the weights
    def weights_shape(self, d: int, p: int | None = None) -> tuple[int, int]:
        """The weights are S itself (d x d)."""
        return (d, d)

    def initial_weights(self, d: int, scale: float, rng: np.random.Generator,
                        p: int | None = None) -> np.ndarray:
        """S symmetric with N(0, scale^2 / d) entries off the diagonal."""
        A = rng.standard_normal((d, d)) * (scale / math.sqrt(d))
        return 0.5 * (A + A.T)

    def small_weights(self, d: int, rng: np.random.Generator, p: int | None = None) -> np.ndarray:
        """S = 0 (not a stationary point unless the data make it one)."""
        return np.zeros((d, d))

    def check_weights(self, S: np.ndarray, d: int) -> None:
        if S.shape != (d, d):
            raise ValueError(f"an element-wise start must have shape ({d}, {d}), got {S.shape}")

    def S_from_weights(self, P: np.ndarray) -> np.ndarray:
        return sym(P)

    def objective_weights(self, S: np.ndarray,
                          data_loss: Callable[[np.ndarray], tuple[float, np.ndarray]]
                          ) -> tuple[float, np.ndarray]:
        """R(S) = f(S) + lam d ||S||_F^2 / 2 and dR/dS = grad f + lam d S."""
        f, g = data_loss(S)
        return f + self.value(S), g + self.gradient(S)

    def weights_penalty(self, S: np.ndarray) -> tuple[float, np.ndarray]:
        return self.value(S), self.gradient(S)

    def singular_values(self, S: np.ndarray) -> None:
        """No factor W."""
        return None

    # ---------------------------------------------------------------- denoiser
    def matrix_map(self, B: np.ndarray, Vh: float, *, with_spectrum: bool = False):
        B = np.asarray(B, dtype=float)
        d = B.shape[0]
        c = 1.0 / (Vh + 2.0 * self.lam)
        S = c * 0.5 * (B + B.T)
        # The divergence of a linear map c*B is c (d(d+1)/2 / (d^2/2) -> 1 + 1/d).
        V = c * (d + 1) / d
        return (S, V, np.linalg.eigvalsh(S)) if with_spectrum else (S, V)

    def functionals(self, target, mh: float, qh: float, Vh: float, *,
                    rtol: float = 1e-11) -> DenoiserFunctionals:
        check_hats(mh, qh, Vh)
        c = 1.0 / (Vh + 2.0 * self.lam)
        Q0 = target.moment(2)
        q = (mh * mh * Q0 + qh) * c * c
        return DenoiserFunctionals(
            m=mh * Q0 * c,
            q=q,
            V=c,
            trace_per_d=mh * target.moment(1) * c,
            rank_fraction=1.0,
            cutoff=-math.inf,
            penalty_per_d2=0.5 * self.lam * q,
        )

    def spectral_value(self, f: np.ndarray) -> float:
        """P(Shat)/d^2 from the d eigenvalues f of Shat: lam sum(f^2)/(2 d)."""
        return 0.5 * self.lam * float(np.sum(f * f)) / f.size

    def spectral_function(self, x: np.ndarray, Vh: float, cutoff: float = -math.inf) -> np.ndarray:
        return np.asarray(x, dtype=float) / (Vh + 2.0 * self.lam)

    def cutoff(self, law) -> float:
        """Every eigenvalue of B is kept."""
        return -math.inf

    def spectral_pieces(self, Vh: float, cutoff: float = -math.inf) -> list:
        """One piece, the whole line: f(x) = x / (Vh + 2 lam) (see NuclearNormPSD)."""
        return [(-math.inf, math.inf, 0.0, Vh + 2.0 * self.lam)]
