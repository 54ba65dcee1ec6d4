"""Finite-d denoiser functionals: the SE's prior side averaged over sampled GOE matrices.

The deterministic equivalent (docs/theory.md, "State evolution", denoiser
side) replaces the target by its eigenvalue law and takes d -> infinity: every
eigenvalue of S0 is smeared into a piece of the free convolution rho_B.  At
the dimension of an experiment the top eigenvalues of a power-law target are
single, separated values; each one either becomes an outlier of B or is
absorbed by the bulk (a BBP transition, smeared over a window that shrinks
with d), and the deterministic equivalent cannot see that.  This module
evaluates the same functionals at the user's d instead (docs/theory.md "Denoiser side and free
probability",
"finite-size alternative"):

    B_r = mh D + sqrt(qh) Z_r,   D = diag(s_1..s_d),  Z_r ~ GOE(d), r = 1..R,
    (Shat_r, V_r) = the denoiser's matrix map of B_r (exact finite-d divergence
                    V_r = (2/d^2)[sum_i f'(nu_i) + sum_{i<j} (f_i - f_j)/(nu_i - nu_j)]),
    m = <Tr(D Shat_r)/d>,  q = <Tr(Shat_r^2)/d>,  V = <V_r>,

with s the d eigenvalues of the finite-d target (``data.target_eigenvalues``)
and Z_r off-diagonal variance 1/d (semicircle on [-2, 2]).  The eigenvectors
of S0 need not be drawn: Z is rotation invariant.  The draws Z_r are fixed for
the whole fixed-point solve (common random numbers), so the SE map stays
deterministic; their spread is the sampling error, propagated through the
fixed point by :func:`amp_attention.solvers.state_evolution.propagated_sampling_stderr`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .denoisers import DenoiserFunctionals, check_hats
from .targets import SpectralMeasure

#: per-draw columns of :attr:`FiniteSizeDenoiser.last_replicas`
REPLICA_FIELDS = ("m", "q", "V", "trace_per_d", "rank_fraction", "penalty_per_d2")


@dataclass(frozen=True)
class FiniteSizeOptions:
    """The finite-d prediction mode: dimension ``d``, ``draws`` GOE matrices, ``seed``."""

    d: int
    draws: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.d, bool) or int(self.d) != self.d or not 2 <= self.d <= 20000:
            raise ValueError(f"finite_d d must be an integer in [2, 20000], got {self.d!r}")
        if isinstance(self.draws, bool) or int(self.draws) != self.draws or self.draws < 2:
            raise ValueError(f"finite_d draws must be an integer >= 2, got {self.draws!r}")
        if isinstance(self.seed, bool) or int(self.seed) != self.seed or self.seed < 0:
            raise ValueError(f"finite_d seed must be an integer >= 0, got {self.seed!r}")
        object.__setattr__(self, "d", int(self.d))
        object.__setattr__(self, "draws", int(self.draws))
        object.__setattr__(self, "seed", int(self.seed))


def goe(d: int, rng: np.random.Generator) -> np.ndarray:
    """Z = (G + G^T)/sqrt(2d): off-diagonal variance 1/d, diagonal 2/d (semicircle on [-2, 2])."""
    G = rng.standard_normal((d, d))
    return (G + G.T) / math.sqrt(2.0 * d)


def effective_observation(s: np.ndarray, Z: np.ndarray, mh: float, qh: float) -> np.ndarray:
    """B = mh diag(s) + sqrt(qh) Z: the denoiser's input at dimension len(s) (docs/theory.md
    "Denoiser side and free probability")."""
    B = math.sqrt(qh) * Z
    B[np.diag_indices(s.size)] += mh * s
    return B


class FiniteSizeDenoiser:
    """A denoiser's functionals at dimension d, averaged over fixed GOE draws.

    ``base`` is the asymptotic denoiser (its ``matrix_map`` and rank cap at d are
    used), ``eigenvalues`` the d eigenvalues of S0.  ``functionals`` has the
    signature of the asymptotic one (its ``target`` argument is ignored: the
    target is ``eigenvalues``), so the SE solver uses it unchanged; after each
    call ``last_replicas`` holds the per-draw values (R x len(REPLICA_FIELDS)).
    """

    def __init__(self, base, eigenvalues: np.ndarray, options: FiniteSizeOptions):
        s = np.asarray(eigenvalues, dtype=float).ravel()
        if s.size != options.d or not np.all(np.isfinite(s)):
            raise ValueError(f"eigenvalues must be {options.d} finite numbers, got shape {s.shape}")
        self.base = base
        self.s = s
        self.options = options
        rng = np.random.default_rng([options.seed, 0xF1D])
        self.Z = [goe(options.d, rng) for _ in range(options.draws)]
        self.last_replicas: np.ndarray | None = None

    def _one(self, Z: np.ndarray, mh: float, qh: float, Vh: float) -> np.ndarray:
        d = self.s.size
        S, V, f = self.base.matrix_map(effective_observation(self.s, Z, mh, qh), Vh,
                                       with_spectrum=True)
        tol = 1e-12 * max(float(np.max(np.abs(f))), 1e-300)
        return np.array([float(np.dot(self.s, np.diag(S))) / d, float(np.sum(f * f)) / d, V,
                         float(np.sum(f)) / d, float(np.sum(np.abs(f) > tol)) / d,
                         self.base.spectral_value(f)])

    def functionals(self, target: SpectralMeasure | None, mh: float, qh: float, Vh: float,
                    **_: object) -> DenoiserFunctionals:
        """Means over the draws of m, q, V, Tr/d and the rank fraction of Shat_r."""
        check_hats(mh, qh, Vh)
        reps = np.array([self._one(Z, mh, qh, Vh) for Z in self.Z])
        self.last_replicas = reps
        m, q, V, tr, rank, pen = (float(v) for v in reps.mean(axis=0))
        return DenoiserFunctionals(m, q, V, tr, rank, cutoff=math.nan, quadrature_error=0.0,
                                   penalty_per_d2=pen)

    def replica_functionals(self, mh: float, qh: float, Vh: float) -> np.ndarray:
        """The per-draw values (R x len(REPLICA_FIELDS)) at the given hats."""
        self.functionals(None, mh, qh, Vh)
        return np.array(self.last_replicas, copy=True)



#: The deterministic equivalent is flagged at the experiment's d when the predicted
#: excess kurtosis of h(Shat - S0) exceeds this value.  Measured (docs/validation.md,
#: "Power-law targets at small alpha"): at d = 100..800 and alpha = 0.05..0.3 the ERM
#: matrix MSE exceeds the SE's by 0.08-0.26 times this kurtosis (1.6-31 % at kurtosis
#: 0.12-1.9), so 0.1 flags deviations of about 1-3 % and more.
RESIDUAL_KURTOSIS_WARN = 0.1

#: longest eigenvalue list whose residual kurtosis is computed: the diagnostic
#: diagonalises d x d matrices (O(d^3) time, O(d^2) memory: ~3 s at d = 2000 on
#: one core, where a list of 30,000 entries ran out of memory); beyond it the SE
#: result reports none
RESIDUAL_KURTOSIS_MAX_D = 2000


def residual_kurtosis(base, eigenvalues: np.ndarray, mh: float, qh: float, Vh: float, *,
                      draws: int = 2, seed: int = 0) -> tuple[float, float]:
    """Predicted excess kurtosis 12 sum e^4 / (sum e^2)^2 of the pre-activation error
    h(Shat - S0) at dimension d = len(eigenvalues), e the eigenvalues of Shat - S0,
    with Shat the denoiser output of B = mh D + sqrt(qh) Z at the given hats (mean and
    standard error over ``draws`` GOE draws).

    h(E) = sum_i e_i (g_i^2 - 1)/sqrt(d) for Gaussian tokens, so this is the exact
    excess kurtosis of the residual that the SE's Gaussian channel assumes to be 0:
    it is O(1/d) when the error is spread over many directions and O(1) when a few
    separated target modes carry it (power-law targets at small alpha).
    """
    s = np.asarray(eigenvalues, dtype=float).ravel()
    d = s.size
    rng = np.random.default_rng([seed, 0xC07])
    vals = []
    for _ in range(int(draws)):
        S, _ = base.matrix_map(effective_observation(s, goe(d, rng), mh, qh), Vh)
        S[np.diag_indices(d)] -= s
        e = np.linalg.eigvalsh(S)
        vals.append(12.0 * float(np.sum(e**4)) / max(float(np.sum(e**2)) ** 2, 1e-300))
    v = np.array(vals)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
