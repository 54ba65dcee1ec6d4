"""The penalty contract: what the learner's weight decay induces on S (docs/theory.md
"Learners and the objective" and "Denoiser side and free probability").

One object per penalty P(S) of the ERM objective R(S) = sum_mu l(y_mu, h_mu(S)) + P(S)
serves every algorithm:

* the objective (direct ERM, Adam, the KKT residual): :meth:`Penalty.value`,
  :meth:`Penalty.gradient` (a subgradient on Sym(d));
* the trainable weights (Adam, L-BFGS over weights): :meth:`Penalty.weights_shape`,
  :meth:`Penalty.S_from_weights`, :meth:`Penalty.objective_weights` (R and the chain
  rule of dR/dS into the weights), :meth:`Penalty.weights_penalty` (P written in the
  weights, with its gradient: the part a mini-batch must not rescale);
* the proximal operator (APG, the stopping rule): :meth:`Penalty.prox`
  = argmin_S ||S - B||_F^2 / 2 + t P(S), with the eigenvalues it keeps;
* the denoiser of the effective problem Shat = argmin_S (Vh/2)||S||_F^2 - <B, S>
  + 2 P(S)/d (GAMP on data: :meth:`Penalty.matrix_map`; the state evolution:
  :meth:`Penalty.functionals`), and its spectral map for the predicted spectra.

The built-in penalties sit behind :mod:`.registry`, keyed by
``Learner.parameterisation``; no other module branches on the parameterisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Protocol, runtime_checkable

import numpy as np

from ..spectral_maps import spectral_divergence


@dataclass(frozen=True)
class DenoiserFunctionals:
    """Asymptotic overlaps of the denoiser output (docs/theory.md "Denoiser side and free
    probability").

    m = Tr(S0 Shat)/d, q = Tr(Shat^2)/d, V = normalised divergence,
    trace_per_d = Tr(Shat)/d, rank_fraction = rank(Shat)/d, cutoff = the
    smallest eigenvalue of B that is kept (-inf when every one is),
    quadrature_error = the relative error estimate of the integrals,
    penalty_per_d2 = P(Shat)/d^2 (the training loss per sample adds penalty_per_d2 / alpha).
    """

    m: float
    q: float
    V: float
    trace_per_d: float
    rank_fraction: float
    cutoff: float
    quadrature_error: float = 0.0
    penalty_per_d2: float = math.nan


def check_hats(mh: float, qh: float, Vh: float) -> None:
    for name, val in (("m_hat", mh), ("q_hat", qh), ("V_hat", Vh)):
        if not (math.isfinite(val) and val > 0):
            raise ValueError(f"{name} must be finite and > 0, got {val!r}")


def check_lam(lam: float) -> float:
    if isinstance(lam, bool) or not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be in [0, inf), got {lam!r}")
    return float(lam)


def check_kappa(kappa: float) -> float:
    if isinstance(kappa, bool) or not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"kappa must be in (0, inf), got {kappa!r}")
    return float(kappa)


def sym(M: np.ndarray) -> np.ndarray:
    return 0.5 * (M + M.T)


def map_with_divergence(nu: np.ndarray, U: np.ndarray, f: np.ndarray, fprime: np.ndarray,
                        with_spectrum: bool):
    """(Shat, V[, f]) of a spectral map with values f and slopes f' at the eigenvalues nu
    of B (eigenvectors U): Shat = U f(Lambda) U^T and
    V = (2/d^2)[sum_i f'(nu_i) + sum_{i<j} (f_i - f_j)/(nu_i - nu_j)]."""
    nz = f != 0.0
    S = (U[:, nz] * f[nz]) @ U[:, nz].T
    V = spectral_divergence(nu, f, fprime)
    return (S, V, f) if with_spectrum else (S, V)


@runtime_checkable
class Penalty(Protocol):
    """The contract every penalty meets (module docstring); ``lam`` the weight decay,
    ``kappa`` the learner's width p/d.

    Class attributes: ``name`` (the registry key, ``Learner.parameterisation``),
    ``factorised`` (S = W^T W / sqrt(p d): W's singular values exist), ``smooth``
    (P is differentiable: the stopping rule is the gradient norm, ERM uses gradient
    methods on S), ``uses_kappa`` (kappa changes the problem), ``rank_capped`` (rank <= kappa d), ``convex_learner``
    is a method (P convex on its domain and no rank cap: a convex channel then has one
    ERM minimiser).  Optional (looked up with ``getattr``): ``zero_lam_thresholds``
    (``"trace"`` for the lam -> 0+ equations of docs/theory.md "Thresholds",
    ``"parameter_count"`` for alpha = 1/(2 r)), ``paper_lam`` (the paper code's lreg
    to this lam).
    """

    name: ClassVar[str]
    factorised: ClassVar[bool]
    smooth: ClassVar[bool]
    uses_kappa: ClassVar[bool]
    rank_capped: bool
    lam: float
    kappa: float

    def convex_learner(self) -> bool: ...

    def describe(self) -> str: ...

    def rank(self, d: int) -> int | None: ...

    # objective in S
    def value(self, S: np.ndarray) -> float: ...

    def gradient(self, S: np.ndarray) -> np.ndarray: ...

    def gradient_scale(self, d: int) -> float: ...

    def prox(self, B: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]: ...

    # the trainable weights
    def weights_shape(self, d: int) -> tuple[int, int]: ...

    def initial_weights(self, d: int, scale: float, rng: np.random.Generator) -> np.ndarray: ...

    def small_weights(self, d: int, rng: np.random.Generator) -> np.ndarray: ...

    def check_weights(self, P: np.ndarray, d: int) -> None: ...

    def S_from_weights(self, P: np.ndarray) -> np.ndarray: ...

    def objective_weights(self, P: np.ndarray,
                          data_loss: Callable[[np.ndarray], tuple[float, np.ndarray]]
                          ) -> tuple[float, np.ndarray]: ...

    def weights_penalty(self, P: np.ndarray) -> tuple[float, np.ndarray]: ...

    def singular_values(self, P: np.ndarray) -> np.ndarray | None: ...

    # denoiser
    def matrix_map(self, B: np.ndarray, Vh: float, *, with_spectrum: bool = False): ...

    def functionals(self, target, mh: float, qh: float, Vh: float, *,
                    rtol: float = 1e-11) -> DenoiserFunctionals: ...

    def spectral_value(self, f: np.ndarray) -> float: ...

    def spectral_function(self, x: np.ndarray, Vh: float, cutoff: float) -> np.ndarray: ...

    def cutoff(self, law) -> float: ...

    def spectral_pieces(self, Vh: float, cutoff: float) -> list[tuple[float, float, float, float]]: ...
