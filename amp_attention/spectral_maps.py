"""Finite-d spectral matrix maps and their exact divergence (docs/theory.md "Denoiser side and
free probability").

These are the pure-NumPy building blocks shared by the denoisers (state
evolution checks, GAMP) and by direct ERM (proximal steps):

* :func:`psd_soft_threshold` -- B -> U f(Lambda) U^T with
  f(nu) = relu(nu - threshold) / scale on the top ``rank`` eigenvalues of B,
  0 elsewhere.  With threshold = 2 lam, scale = Vh it is the nuclear-norm PSD
  denoiser; with scale = 1 it is the proximal operator of
  ``threshold * Tr S + indicator(S PSD, rank S <= rank)``.
* :func:`spectral_divergence` -- the normalised divergence
  (2/d^2) [ sum_i f'(nu_i) + sum_{i<j} (f(nu_i) - f(nu_j)) / (nu_i - nu_j) ]
  of a spectral map, i.e. the finite-d V of docs/theory.md "Denoiser side and free probability".
"""

from __future__ import annotations

import numpy as np


def symmetric_eigh(B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of the symmetric part of ``B`` (ascending eigenvalues)."""
    B = np.asarray(B, dtype=float)
    if B.ndim != 2 or B.shape[0] != B.shape[1]:
        raise ValueError(f"B must be a square matrix, got shape {B.shape}")
    return np.linalg.eigh(0.5 * (B + B.T))


def top_rank_mask(nu: np.ndarray, rank: int | None) -> np.ndarray:
    """Boolean mask of the ``rank`` largest entries of the ascending array ``nu``."""
    keep = np.ones(nu.shape, dtype=bool)
    if rank is not None and rank < nu.size:
        keep[: nu.size - max(int(rank), 0)] = False
    return keep


def soft_threshold_values(
    nu: np.ndarray, threshold: float, scale: float = 1.0, rank: int | None = None
) -> np.ndarray:
    """f(nu) = relu(nu - threshold) / scale on the top ``rank`` values of ascending nu."""
    f = np.maximum(nu - threshold, 0.0) / scale
    return np.where(top_rank_mask(nu, rank), f, 0.0)


def two_sided_soft_threshold(nu: np.ndarray, threshold: float, scale: float = 1.0) -> np.ndarray:
    """sign(nu) relu(|nu| - threshold) / scale: the spectral map of the symmetric nuclear
    norm (scale = 1: the prox of ``threshold * ||S||_*``)."""
    return np.sign(nu) * np.maximum(np.abs(nu) - threshold, 0.0) / scale


def psd_soft_threshold(
    B: np.ndarray, threshold: float, scale: float = 1.0, rank: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply f(nu) = relu(nu - threshold)/scale (top-``rank`` only) to symmetric B.

    Returns ``(S, nu, f)``: the matrix U diag(f) U^T, the ascending eigenvalues
    of B and the values f(nu).  Eigenvectors with f = 0 are skipped in the
    reconstruction, so the cost beyond ``eigh`` is O(d^2 rank(S)).
    """
    nu, U = symmetric_eigh(B)
    f = soft_threshold_values(nu, threshold, scale, rank)
    nz = f > 0
    Uk = U[:, nz]
    S = (Uk * f[nz]) @ Uk.T
    return S, nu, f


def spectral_divergence(nu: np.ndarray, f: np.ndarray, fprime: np.ndarray) -> float:
    """Normalised divergence of the spectral map with values f and slopes f' at nu.

    (2/d^2) [ sum_i f'(nu_i) + sum_{i<j} (f_i - f_j)/(nu_i - nu_j) ]; the
    off-diagonal sum is O(d^2) memory-light via a row loop over blocks.
    """
    nu = np.asarray(nu, dtype=float)
    f = np.asarray(f, dtype=float)
    d = nu.size
    total = float(np.sum(fprime))
    # Pairwise divided differences; coincident eigenvalues (measure zero for
    # continuous B) fall back to the average slope.
    block = 512
    for start in range(0, d, block):
        sl = slice(start, min(start + block, d))
        dn = nu[sl, None] - nu[None, :]
        df = f[sl, None] - f[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(dn != 0.0, df / dn, 0.5 * (fprime[sl, None] + fprime[None, :]))
        rows = np.arange(sl.start, sl.stop)
        q[rows - start, rows] = 0.0
        total += 0.5 * float(np.sum(q))
    return 2.0 * total / d**2
