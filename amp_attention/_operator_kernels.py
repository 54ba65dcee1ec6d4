"""Numba kernels for the per-sample small products of the measurement operator.

The heavy parts of A and A* (docs/theory.md "Why the problem is a GLM") are GEMMs done by BLAS in
:mod:`amp_attention.operators`; what remains is, per sample, K = L(L+1)/2 dot
products of length d (forward) or an L x L weighting of the L tokens (adjoint):
O(n L^2 d) work that numpy's einsum runs several times slower than memory
bandwidth allows.  Both kernels stream over the samples serially: they are
memory-bound and 10-20x cheaper than the GEMMs around them, and a parallel
region right after a BLAS call fights BLAS's spinning threads for the cores
(measured: 8 ms per call instead of 0.1 ms at n = 640, d = 40 on 2 cores).
"""

from __future__ import annotations

from ._jit import njit


@njit(cache=True)
def upper_products(XS, X, ka, kb, out):
    """out[mu, k] = XS[mu, ka[k], :] . X[mu, kb[k], :] for every sample mu."""
    n = X.shape[0]
    d = X.shape[2]
    K = ka.size
    for mu in range(n):
        for k in range(K):
            a = ka[k]
            b = kb[k]
            s = 0.0
            for i in range(d):
                s += XS[mu, a, i] * X[mu, b, i]
            out[mu, k] = s


@njit(cache=True)
def weighted_tokens(r, X, ka, kb, out):
    """out[mu] = Rt[mu] @ X[mu] with the symmetric L x L matrix Rt[mu] whose upper
    triangle (row-major, a <= b) is r[mu]: Rt_aa = r_aa, Rt_ab = Rt_ba = r_ab / 2."""
    n, L, d = X.shape
    K = ka.size
    for mu in range(n):
        for a in range(L):
            for i in range(d):
                out[mu, a, i] = 0.0
        for k in range(K):
            a = ka[k]
            b = kb[k]
            if a == b:
                w = r[mu, k]
                for i in range(d):
                    out[mu, a, i] += w * X[mu, a, i]
            else:
                w = 0.5 * r[mu, k]
                for i in range(d):
                    out[mu, a, i] += w * X[mu, b, i]
                    out[mu, b, i] += w * X[mu, a, i]
