"""Outlier eigenvalues of Shat and their eigenvector overlaps with the target (docs/theory.md
"Spectra of the learned weights").

At the SE fixed point Shat = f(B) with B = mh S0 + sqrt(qh) Z.  A target
eigenvalue s_k separated from the rest of the spectrum (a planted spike, or a
top atom of a power-law target's deterministic equivalent) with unit
eigenvector e_k gives, with theta = mh s_k and nu the law of mh times the
rest of the spectrum (docs/theory.md section 8),

    visible   iff  qh int dnu(s) / (theta - s)^2 < 1,
    position       z = psi(theta) = theta + qh G_nu(theta)              (eigenvalue of B),
    overlap        cos^2(e_k, learned eigenvector) = 1 - qh int dnu(s) / (theta - s)^2,
    eigenvalue     f(z) of Shat (f the denoiser's spectral function; 0 below the cutoff).

The learned eigenvector is B's, since Shat is a spectral function of B; when
f(z) = 0 the direction is not learned (eigenvalue 0) and no overlap is
reported.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from amp_attention.denoisers import denoiser_for
from amp_attention.spec import Problem
from amp_attention.targets import DiscreteMeasure, SpectralMeasure

from .predicted_spectrum import PredictedSpectrum
from .state_evolution import SEResult


@dataclass(frozen=True)
class Outlier:
    """One target mode: its index k (0 = largest), eigenvalue s_k, whether it
    separates from the bulk of B (``visible``), the eigenvalue z of B, the
    learned eigenvalue f(z) of Shat, and cos^2 between the learned eigenvector
    and e_k (None when not visible or not learned)."""

    #: mode index k (0 = largest)
    index: int
    #: the target eigenvalue s_k
    target_eigenvalue: float
    #: True when the mode separates from the bulk of B
    visible: bool
    #: the eigenvalue z of B (None when not visible)
    eigenvalue_B: float | None
    #: the learned eigenvalue f(z) of Shat (None when not learned)
    eigenvalue: float | None
    #: cos^2 between the learned eigenvector and e_k (None when not visible or learned)
    cos2: float | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def outlier_candidates(problem: Problem, max_modes: int) -> list[tuple[float, SpectralMeasure]]:
    """(s_k, law of the rest of the spectrum) for every candidate mode, largest first."""
    return problem.target.modes(max_modes)


def predict_outliers(problem: Problem, result: SEResult, *, max_modes: int = 40) -> list[Outlier]:
    """The outliers of Shat at the SE fixed point ``result`` of ``problem``
    (spiked target: every spike; power law: the ``max_modes`` largest eigenvalues)."""
    mh, qh, Vh = result.m_hat, result.q_hat, result.V_hat
    den = denoiser_for(problem.learner)
    cutoff = PredictedSpectrum.from_se(problem, result).cutoff

    def f(z: float) -> float:
        return float(den.spectral_function(np.array([z]), Vh, cutoff)[0])

    out = []
    for k, (s, rest) in enumerate(outlier_candidates(problem, max_modes)):
        theta = mh * s
        nu = rest.scaled(mh)
        # A continuous bulk: only a spike above its support can separate.  Atoms
        # (power law): theta may sit between them; the spread condition decides.
        if not isinstance(nu, DiscreteMeasure) and theta <= float(nu.singular_components()[-1, 1]):
            out.append(Outlier(k, s, False, None, None, None))
            continue
        G, G1, _ = nu.stieltjes_derivatives(np.array([theta + 0.0j]))
        spread = qh * float(-G1[0].real)      # qh int dnu / (theta - s)^2
        if not spread < 1.0:
            out.append(Outlier(k, s, False, None, None, None))
            continue
        z = theta + qh * float(G[0].real)
        ev = f(z)
        out.append(Outlier(k, s, True, z, ev, (1.0 - spread) if ev > 0 else None))
    return out


def measured_outliers(S: np.ndarray, S0: np.ndarray, n_modes: int) -> list[dict]:
    """Finite-d counterpart: the ``n_modes`` largest eigenvalues of S and the
    squared cosines between their eigenvectors and those of the ``n_modes``
    largest eigenvalues of S0 (matched by rank order)."""
    ev, U = np.linalg.eigh(0.5 * (S + S.T))
    ev0, U0 = np.linalg.eigh(0.5 * (S0 + S0.T))
    rows = []
    for k in range(n_modes):
        u = U[:, -1 - k]
        u0 = U0[:, -1 - k]
        rows.append({"index": k, "target_eigenvalue": float(ev0[-1 - k]),
                     "eigenvalue": float(ev[-1 - k]), "cos2": float(np.dot(u, u0) ** 2)})
    return rows

