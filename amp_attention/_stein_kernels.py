"""Numba kernel of the Stein form of the m_hat estimator (leaf module; see
amp_attention.solvers.channel_integrals.MonteCarloChannel._stein_terms).

Per sample: t = tr[(I + V H)^-1 Jh^T Js] with Jh, Js the (M x K) output Jacobians at
the prox point and at u*, H the (K x K) Hessian of the loss: K is at most a few
tens, so a small Gaussian elimination per sample beats a batched LAPACK call,
whose per-matrix overhead dominates at K = 3.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def stein_traces(Jh: np.ndarray, Js: np.ndarray, H: np.ndarray, V: float) -> np.ndarray:
    """tr[(I + V H_i)^-1 Jh_i^T Js_i] for every sample i (Gaussian elimination with
    partial pivoting on [I + V H | Jh^T Js])."""
    n, M, K = Jh.shape
    out = np.empty(n)
    A = np.empty((K, K))
    B = np.empty((K, K))
    for i in range(n):
        for a in range(K):
            for b in range(K):
                A[a, b] = V * H[i, a, b] + (1.0 if a == b else 0.0)
                s = 0.0
                for m in range(M):
                    s += Jh[i, m, a] * Js[i, m, b]
                B[a, b] = s
        for c in range(K):
            p = c
            for r in range(c + 1, K):
                if abs(A[r, c]) > abs(A[p, c]):
                    p = r
            if p != c:
                for b in range(K):
                    A[c, b], A[p, b] = A[p, b], A[c, b]
                    B[c, b], B[p, b] = B[p, b], B[c, b]
            piv = A[c, c]
            for r in range(c + 1, K):
                f = A[r, c] / piv
                if f != 0.0:
                    for b in range(c, K):
                        A[r, b] -= f * A[c, b]
                    for b in range(K):
                        B[r, b] -= f * B[c, b]
        # back substitution, keeping only the diagonal of X = A^-1 B
        tr = 0.0
        X = np.empty(K)
        for b in range(K):
            for r in range(K - 1, -1, -1):
                s = B[r, b]
                for cc in range(r + 1, K):
                    s -= A[r, cc] * X[cc]
                X[r] = s / A[r, r]
            tr += X[b]
        out[i] = tr
    return out
