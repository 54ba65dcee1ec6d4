"""Numba kernels of the non-linear output channels (leaf module).

Conventions (docs/theory.md "Data model" to "State evolution").  One sample has L tokens; h is
the symmetric L x L
matrix of pre-activations and u its K = L(L+1)/2 coordinates
u_k = h_ab / tau_k, k = (a, b), a <= b in row-major order, tau_aa = sqrt(2),
tau_ab = 1.  The index arrays ``ka``, ``kb`` (int64) and ``tau`` (float64)
describe that map; h is rebuilt from u symmetrically, h_ab = h_ba = tau_k u_k.
Outputs y have M entries; l(y, h) = 1/2 ||y - g(h)||^2.

Built-in channels (``kind``):

* ``SOFTMAX``: g(h) = softmax_rows(beta h), M = L^2, row-major.  With
  A_a = softmax(beta h_a), r = A - y and, per row a,
  rbar_a = sum_b r_ab A_ab and s_ac = A_ac (r_ac - rbar_a):

      dl/dh_ac = beta s_ac,
      d2l/dh_ac dh_ad = beta^2 [ delta_cd (A_ac^2 + s_ac) - A_ac^2 A_ad
                                 - A_ac A_ad^2 + A_ac A_ad sum_b A_ab^2
                                 - s_ac A_ad - A_ac s_ad ],

  the first three A-terms being (J_a^2)_cd for the softmax Jacobian
  J_a = beta (diag A_a - A_a A_a^T) and the s-terms the curvature term
  sum_b r_ab d2A_ab/dh_ac dh_ad.  Different rows do not couple.
* ``SEQ2LAB``: g(h) = (1/L) sum_a A_aa, M = 1.  With r = g - y,
  v_ac = dg/dh_ac = (beta/L) A_aa (delta_ac - A_ac) and

      d2g/dh_ac dh_ad = (beta^2/L) [ A_aa (delta_ad - A_ad)(delta_ac - A_ac)
                                     - A_aa A_ac (delta_cd - A_ad) ],

  the Hessian of l is v v^T + r d2g (rank one across rows plus a
  row-block-diagonal part).

Derivatives in u follow from the chain rule through the symmetric map
u -> h: an off-diagonal u_k moves the two entries (a, b) and (b, a), a diagonal
one the single entry (a, a), each with factor tau_k.

Proximal operator (docs/theory.md "Channel side"): uhat = argmin_u F(u),
F(u) = l(y, h(u)) + sum_k (u_k - omega_k)^2 / (2 V_k), a non-convex
K-dimensional problem whose GLOBAL minimiser is sought by multi-start modified Newton (see
:func:`_newton` and :func:`_prox_one`).  Every evaluator shares one signature,

    evalf(u, y, par, ka, kb, tau, mode, work, grad, hess) -> l

(mode 0: loss only; 1: also grad_u l into ``grad``; 2: also the Hessian into
``hess``; ``par`` = (beta, kind) for the built-in channels, ``work`` scratch
space of :func:`work_size` floats), and every start rule
``startf(y, omega, V, par, ka, kb, tau, work, u0)``.  The Newton and batch code
reaches them through the module globals ``_evalf``/``_startf`` (built-in
channels, cached on disk); a user channel gets copies of that code bound to
its own closures (:func:`make_custom_kernels`).

V is a K-vector per sample (an (n, K) array in the batch drivers): one value
repeated in the state evolution, per-component output variances in GAMP
(:mod:`amp_attention.gamp`), where the K measurements of a sample have sensing
vectors of different norms.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import types

import numpy as np
from numba import prange

from ._jit import njit

SOFTMAX = 0
SEQ2LAB = 1

# Newton status of one start.
CONVERGED = 0  # ||grad F|| small and Hessian of F positive definite: a local minimum
SADDLE = 1  # gradient small but Hessian of F not positive definite
MAX_ITER = 2
STALLED = 3  # no Armijo step found (or F not finite)

# The clip of y for the data-consistent start (log of a zero or negative label).
Y_CLIP = 1e-12

_EPS = 2.220446049250313e-16
# Central differences: truncation O(s^2) against rounding O(eps/s) balance at
# s = eps^(1/3), giving about eps^(2/3) ~ 4e-11 relative error.
FD_STEP = _EPS ** (1.0 / 3.0)
# V' / V along the continuation path of the prox (see _prox_one).
CONTINUATION = (1e2, 1e1)
# Samples per parallel chunk: the scratch arrays are allocated once per chunk.
_CHUNK = 32
# Samples per parallel chunk of the output maps (cheap per sample: larger chunks)
_CHUNK_OUT = 1024


# ----------------------------------------------------------------- small helpers
# The evaluators run once per Newton iteration of every sample (the prox, the control
# variate's steps): they keep h, A = softmax_rows(beta h), G and the row blocks Hb of the
# Hessian in one flat scratch vector (offsets below) and their helpers are inlined, because
# a reshaped view or a non-inlined call with array arguments per evaluation cost more than
# the arithmetic at L = 2-3 (one thread, an L = 2 evaluation with its Hessian: ~400 ns with
# views, ~210 ns flat; docs/performance.md).  The 2-D forms below wrap the flat ones, so
# every formula is written once.
@njit(cache=True, inline="always")
def _h_from_u_flat(u, ka, kb, tau, L, w, o):
    """h(u) into w[o + a L + b] (row-major)."""
    for k in range(u.size):
        v = tau[k] * u[k]
        w[o + ka[k] * L + kb[k]] = v
        w[o + kb[k] * L + ka[k]] = v


@njit(cache=True, inline="always")
def _softmax_row_flat(beta, L, src, so, dst, do):
    """softmax(beta z) of one row z = src[so:so + L] into dst[do:do + L]."""
    m = beta * src[so]
    for b in range(1, L):
        m = max(m, beta * src[so + b])
    s = 0.0
    for b in range(L):
        e = math.exp(beta * src[so + b] - m)
        dst[do + b] = e
        s += e
    for b in range(L):
        dst[do + b] /= s


@njit(cache=True, inline="always")
def _softmax_rows_flat(beta, L, src, so, dst, do):
    """softmax_rows(beta h) of h at src[so:] (row-major L x L) into dst[do:]."""
    for a in range(L):
        _softmax_row_flat(beta, L, src, so + a * L, dst, do + a * L)


@njit(cache=True, inline="always")
def _grad_to_u_flat(w, go, L, ka, kb, tau, grad):
    """grad_u from G = dl/dh at w[go:] (all L^2 entries independent)."""
    for k in range(ka.size):
        a = ka[k]
        b = kb[k]
        if a == b:
            grad[k] = tau[k] * w[go + a * L + a]
        else:
            grad[k] = tau[k] * (w[go + a * L + b] + w[go + b * L + a])


@njit(cache=True, inline="always")
def _hess_to_u_flat(w, ho, L, ka, kb, tau, hess):
    """Hessian in u from the row blocks Hb[a, c, d] = d2l/dh_ac dh_ad at w[ho + (a L + c) L + d]
    (entries of h in different rows do not interact in the row-wise softmax)."""
    K = ka.size
    for k in range(K):
        a = ka[k]
        b = kb[k]
        for k2 in range(k, K):
            c = ka[k2]
            d = kb[k2]
            s = w[ho + (a * L + b) * L + d] if a == c else 0.0
            if c != d and a == d:
                s += w[ho + (a * L + b) * L + c]
            if a != b:
                if b == c:
                    s += w[ho + (b * L + a) * L + d]
                if c != d and b == d:
                    s += w[ho + (b * L + a) * L + c]
            v = tau[k] * tau[k2] * s
            hess[k, k2] = v
            hess[k2, k] = v


@njit(cache=True, inline="always")
def _h_from_u(u, ka, kb, tau, h):
    _h_from_u_flat(u, ka, kb, tau, h.shape[0], h.reshape(h.size), 0)


@njit(cache=True, inline="always")
def _grad_to_u(G, ka, kb, tau, grad):
    _grad_to_u_flat(G.reshape(G.size), 0, G.shape[0], ka, kb, tau, grad)


@njit(cache=True, inline="always")
def _pair_k(a, c, L):
    """The u-coordinate k that moves h_ac and h_ca: {ka[k], kb[k]} = {a, c} for the row-major
    upper-triangle pairs of amp_attention.channels.base.u_coordinates (row i starts at
    i L - i (i - 1) / 2)."""
    i = min(a, c)
    return i * L - (i * (i - 1)) // 2 + max(a, c) - i


@njit(cache=True, inline="always")
def _n_tokens(ka):
    return ka[ka.size - 1] + 1


def work_size(L: int) -> int:
    """Scratch length of the built-in evaluators: h, A, G (L^2 each) and L^3."""
    return 3 * L * L + L * L * L


@njit(cache=True, nogil=True)
def _symmetric_h_chunk(lo, hi, U, ka, kb, tau, L, H):
    Hf = H.reshape(H.size)
    u = np.empty(U.shape[1])
    for i in range(lo, hi):
        for k in range(U.shape[1]):
            u[k] = U[i, k]
        _h_from_u_flat(u, ka, kb, tau, L, Hf, i * L * L)


def symmetric_h_batch(U, ka, kb, tau, L):
    """(n, L, L) symmetric h, h_ab = h_ba = tau_k u_k, of the rows of U (n, K) (the flat
    helper every evaluator uses), rows split over threads (:func:`_threaded_rows`)."""
    H = np.empty((U.shape[0], L, L))
    _threaded_rows(U.shape[0], lambda lo, hi: _symmetric_h_chunk(lo, hi, U, ka, kb, tau, L, H),
                   chunk=_CHUNK_OUT)
    return H


@njit(cache=True, nogil=True)
def _logit_noisy_h_chunk(lo, hi, Hs, Z, std, s, ka, kb, tau, H):
    for i in range(lo, hi):
        for k in range(ka.size):
            # s (tau_k (z_k std_k)): the operation order of h_from_u(z * std) scaled by s,
            # so that the fused labels equal the composed ones bit for bit
            v = s * (tau[k] * (Z[i, k] * std[k]))
            a = ka[k]
            b = kb[k]
            H[i, a, b] = Hs[i, a, b] + v
            H[i, b, a] = Hs[i, b, a] + v


def logit_noisy_h_batch(H_star, Z, std, s, ka, kb, tau):
    """h* + s E with E = h(z * std) (E_ab = E_ba = tau_k z_k std_k), (n, L, L), in one pass
    over the rows (no (n, K) or (n, L, L) temporaries), rows split over threads: the noisy
    logits of the logit-noise models (docs/theory.md section 10, "Label noise"; s = sqrt(Delta))."""
    H = np.empty_like(H_star)
    _threaded_rows(H_star.shape[0],
                   lambda lo, hi: _logit_noisy_h_chunk(lo, hi, H_star, Z, std, s, ka, kb, tau, H),
                   chunk=_CHUNK_OUT)
    return H


# ------------------------------------------------------------------ evaluators
@njit(cache=True, inline="always")
def _row_softmax_work(u, beta, ka, kb, tau, work):
    """Fill h = h(u) at work[0:L^2] and A = softmax_rows(beta h) at work[L^2:2L^2]; return L
    (G follows at 2 L^2, the Hessian's row blocks Hb at 3 L^2)."""
    L = _n_tokens(ka)
    _h_from_u_flat(u, ka, kb, tau, L, work, 0)
    _softmax_rows_flat(beta, L, work, 0, work, L * L)
    return L


@njit(cache=True, inline="always")
def _softmax_loss_s_flat(w, ao, y, L, g, go):
    """l = 1/2 sum_ab (A_ab - y_ab)^2 and s_ac = A_ac (r_ac - rbar_a) at g[go:], with A at
    w[ao:], r = A - y and rbar_a = sum_b r_ab A_ab: dl/dh_ac = beta s_ac (all L^2 entries
    of h independent).  The one place the softmax loss gradient is written."""
    loss = 0.0
    for a in range(L):
        for b in range(L):
            r = w[ao + a * L + b] - y[a * L + b]
            loss += r * r
    for a in range(L):
        rbar = 0.0
        for b in range(L):
            Ab = w[ao + a * L + b]
            rbar += (Ab - y[a * L + b]) * Ab
        for c in range(L):
            Ac = w[ao + a * L + c]
            g[go + a * L + c] = Ac * ((Ac - y[a * L + c]) - rbar)
    return 0.5 * loss


@njit(cache=True)
def _eval_softmax(u, y, par, ka, kb, tau, mode, work, grad, hess):
    beta = par[0]
    L = _row_softmax_work(u, beta, ka, kb, tau, work)
    LL = L * L
    ao, go = LL, 2 * LL
    if mode == 0:
        loss = 0.0
        for a in range(L):
            for b in range(L):
                r = work[ao + a * L + b] - y[a * L + b]
                loss += r * r
        return 0.5 * loss
    loss = _softmax_loss_s_flat(work, ao, y, L, work, go)
    b2 = beta * beta
    if mode >= 2:
        # the Hessian in u scattered straight from the row blocks
        # Hb[a, c, d] = d2l/dh_ac dh_ad (symmetric in c, d: the c <= d half; entries of h in
        # different rows do not interact): hess[k, k'] += tau_k tau_k' Hb[a, c, d] with
        # k = k(a, c), k' = k(a, d), half the block entries of _hess_to_u_flat and no branch
        # per (k, k') pair (~0.5 us of ~1.8 an evaluation at L = 5)
        K = tau.size
        for k in range(K):
            for k2 in range(K):
                hess[k, k2] = 0.0
        for a in range(L):
            S2 = 0.0
            for b in range(L):
                S2 += work[ao + a * L + b] * work[ao + a * L + b]
            for c in range(L):
                Ac = work[ao + a * L + c]
                sc = work[go + a * L + c]
                k = _pair_k(a, c, L)
                for d in range(c, L):
                    Ad = work[ao + a * L + d]
                    v = -Ac * Ac * Ad - Ac * Ad * Ad + Ac * Ad * S2 - sc * Ad - Ac * work[go + a * L + d]
                    k2 = _pair_k(a, d, L)
                    if c == d:
                        hess[k, k] += b2 * (v + Ac * Ac + sc) * tau[k] * tau[k]
                    else:
                        v = b2 * v * tau[k] * tau[k2]
                        hess[k, k2] += v
                        hess[k2, k] += v
    for a in range(L):
        for c in range(L):
            work[go + a * L + c] *= beta
    _grad_to_u_flat(work, go, L, ka, kb, tau, grad)
    return loss


@njit(cache=True, inline="always")
def _seq2lab_output_flat(w, ao, L):
    """g = (1/L) sum_a A_aa, A at w[ao:]."""
    gval = 0.0
    for a in range(L):
        gval += w[ao + a * L + a]
    return gval / L


@njit(cache=True, inline="always")
def _seq2lab_residual_flat(w, ao, y, L):
    """r = g - y with g = (1/L) sum_a A_aa, A at w[ao:]."""
    return _seq2lab_output_flat(w, ao, L) - y[0]


@njit(cache=True, inline="always")
def _seq2lab_dg_flat(w, ao, beta, L, g, go):
    """dg/dh_ac = (beta/L) A_aa (delta_ac - A_ac) at g[go:], A at w[ao:] (all L^2 entries
    independent); the one place the seq2lab output derivative is written (dl/dh = r dg/dh)."""
    for a in range(L):
        for c in range(L):
            g[go + a * L + c] = (beta / L) * w[ao + a * L + a] * ((1.0 if a == c else 0.0)
                                                                  - w[ao + a * L + c])


@njit(cache=True)
def _eval_seq2lab(u, y, par, ka, kb, tau, mode, work, grad, hess):
    beta = par[0]
    L = _row_softmax_work(u, beta, ka, kb, tau, work)
    LL = L * L
    ao, go, ho = LL, 2 * LL, 3 * LL
    r = _seq2lab_residual_flat(work, ao, y, L)
    loss = 0.5 * r * r
    if mode == 0:
        return loss
    _seq2lab_dg_flat(work, ao, beta, L, work, go)
    _grad_to_u_flat(work, go, L, ka, kb, tau, grad)  # grad_u g, scaled by r below
    if mode >= 2:
        w = r * beta * beta / L
        for a in range(L):
            Aa = work[ao + a * L + a]
            for c in range(L):
                Ac = work[ao + a * L + c]
                dac = 1.0 if a == c else 0.0
                for d in range(L):
                    Ad = work[ao + a * L + d]
                    dad = 1.0 if a == d else 0.0
                    dcd = 1.0 if c == d else 0.0
                    work[ho + (a * L + c) * L + d] = w * (Aa * (dad - Ad) * (dac - Ac)
                                                          - Aa * Ac * (dcd - Ad))
        _hess_to_u_flat(work, ho, L, ka, kb, tau, hess)
        K = ka.size
        for k in range(K):
            for k2 in range(K):
                hess[k, k2] += grad[k] * grad[k2]
    for k in range(ka.size):
        grad[k] *= r
    return loss


# --------------------------------------------------------------- start points
@njit(cache=True)
def _start_softmax(y, omega, V, par, ka, kb, tau, work, u0):
    # Invert the row softmax on the labels (clipped to [1e-12, 1]):
    # log y_ab = beta h_ab - z_a with row normalisers z_a.  For symmetric h,
    # log y_ab - log y_ba = z_b - z_a; the least-squares z (mean zero) is
    # c_b = (1/L) sum_a (log y_ab - log y_ba), and then
    #     h0_ab = (log y_ab + log y_ba + c_a + c_b) / (2 beta),
    #     h0_aa = (log y_aa + c_a) / beta,
    # which reproduces y exactly whenever y is a row softmax of a symmetric h
    # (c = 0 gives the plain symmetrised logarithm, exact only when the rows
    # share one normaliser).  The remaining free constant added to all of h
    # (the only symmetric row shift) does not change the loss; it is set to
    # minimise ||u0 - omega||^2 in closed form.
    beta = par[0]
    L = _n_tokens(ka)
    ly = work[:L * L].reshape((L, L))
    cz = work[L * L:L * L + L]
    for a in range(L):
        for b in range(L):
            ly[a, b] = math.log(min(max(y[a * L + b], Y_CLIP), 1.0))
    for b in range(L):
        t = 0.0
        for a in range(L):
            t += ly[a, b] - ly[b, a]
        cz[b] = t / L
    num = 0.0
    den = 0.0
    for k in range(ka.size):
        a = ka[k]
        b = kb[k]
        if a == b:
            h0 = (ly[a, a] + cz[a]) / beta
        else:
            h0 = (ly[a, b] + ly[b, a] + cz[a] + cz[b]) / (2.0 * beta)
        u0[k] = h0 / tau[k]
        num += (omega[k] - u0[k]) / tau[k]
        den += 1.0 / (tau[k] * tau[k])
    c = num / den
    for k in range(ka.size):
        u0[k] += c / tau[k]


@njit(cache=True)
def _diag_shift_g(beta, h, s):
    """g and dg/ds of seq2lab at h + s I."""
    L = h.shape[0]
    g = 0.0
    dg = 0.0
    for a in range(L):
        m = beta * (h[a, a] + s)
        for c in range(L):
            if c != a:
                m = max(m, beta * h[a, c])
        tot = 0.0
        for c in range(L):
            x = beta * (h[a, a] + s) if c == a else beta * h[a, c]
            tot += math.exp(x - m)
        Aa = math.exp(beta * (h[a, a] + s) - m) / tot
        g += Aa
        dg += beta * Aa * (1.0 - Aa)
    return g / L, dg / L


@njit(cache=True)
def _start_seq2lab(y, omega, V, par, ka, kb, tau, work, u0):
    # The data-consistent point along the diagonal shift h(omega) + s I: g is
    # strictly increasing in s (from 0 to 1 for L >= 2), so g = y (clipped to
    # [1e-12, 1 - 1e-12]) has one root, bracketed in closed form and found by
    # safeguarded Newton.  For L = 1, g = 1 identically and omega is returned.
    beta = par[0]
    L = _n_tokens(ka)
    for k in range(ka.size):
        u0[k] = omega[k]
    if L == 1:
        return
    h = work[:L * L].reshape((L, L))
    _h_from_u(omega, ka, kb, tau, h)
    yc = min(max(y[0], Y_CLIP), 1.0 - Y_CLIP)
    logit = math.log((L - 1) * yc / (1.0 - yc))
    dmin = np.inf
    dmax = -np.inf
    for a in range(L):
        for c in range(L):
            if c != a:
                dmin = min(dmin, h[a, c] - h[a, a])
                dmax = max(dmax, h[a, c] - h[a, a])
    # At s = dmin + logit/beta every A_aa <= yc, at dmax + logit/beta every A_aa >= yc.
    lo = dmin + logit / beta
    hi = dmax + logit / beta
    s = 0.5 * (lo + hi)
    for _ in range(200):
        g, dg = _diag_shift_g(beta, h, s)
        f = g - yc
        if f == 0.0:
            break
        if f > 0.0:
            hi = s
        else:
            lo = s
        sn = s - f / dg if dg > 0.0 else 0.5 * (lo + hi)
        if not (lo < sn < hi):
            sn = 0.5 * (lo + hi)
        if abs(sn - s) <= 1e-15 * (1.0 + abs(s)) or hi - lo <= 1e-15 * (1.0 + abs(s)):
            s = sn
            break
        s = sn
    for k in range(ka.size):
        if ka[k] == kb[k]:
            u0[k] += s / tau[k]


# ------------------------------------------------------------ linear algebra
@njit(cache=True, inline="always")
def _cholesky(A, shift, C):
    """Lower Cholesky factor of A + shift I into C; False if not positive definite."""
    K = A.shape[0]
    for j in range(K):
        s = A[j, j] + shift
        for p in range(j):
            s -= C[j, p] * C[j, p]
        if not (s > 0.0) or not math.isfinite(s):
            return False
        cjj = math.sqrt(s)
        C[j, j] = cjj
        for i in range(j + 1, K):
            t = A[i, j]
            for p in range(j):
                t -= C[i, p] * C[j, p]
            C[i, j] = t / cjj
    return True


@njit(cache=True, inline="always")
def _chol_solve_neg(C, b, x):
    """x = -(C C^T)^{-1} b."""
    K = b.size
    for i in range(K):
        t = -b[i]
        for p in range(i):
            t -= C[i, p] * x[p]
        x[i] = t / C[i, i]
    for i in range(K - 1, -1, -1):
        t = x[i]
        for p in range(i + 1, K):
            t -= C[p, i] * x[p]
        x[i] = t / C[i, i]


@njit(cache=True)
def _trace_inverse(A, aug):
    """tr(A^{-1}) by Gauss-Jordan with partial pivoting (A is not modified).

    Works for indefinite A as well (the prox can end at a non-converged point);
    returns nan if A is numerically singular.
    """
    K = A.shape[0]
    for i in range(K):
        for j in range(K):
            aug[i, j] = A[i, j]
            aug[i, K + j] = 1.0 if i == j else 0.0
    return _trace_of_solution(aug)


@njit(cache=True)
def _trace_of_solution(aug):
    """tr(A^{-1} B) for aug = [A | B] (K x 2K, overwritten) by Gauss-Jordan with partial
    pivoting; nan if A is numerically singular."""
    K = aug.shape[0]
    for col in range(K):
        piv = col
        best = abs(aug[col, col])
        for i in range(col + 1, K):
            if abs(aug[i, col]) > best:
                best = abs(aug[i, col])
                piv = i
        if not (best > 0.0):
            return np.nan
        if piv != col:
            for j in range(2 * K):
                tmp = aug[col, j]
                aug[col, j] = aug[piv, j]
                aug[piv, j] = tmp
        inv = 1.0 / aug[col, col]
        for j in range(2 * K):
            aug[col, j] *= inv
        for i in range(K):
            if i != col:
                f = aug[i, col]
                if f != 0.0:
                    for j in range(2 * K):
                        aug[i, j] -= f * aug[col, j]
    tr = 0.0
    for i in range(K):
        tr += aug[i, K + i]
    return tr


@njit(cache=True, inline="always")
def _stein_solve(H, ho, V, Jh, jo, Js, so, K, M, aug):
    """tr[(I + V H)^-1 Jh^T Js] with H (K x K) at H[ho:], Jh and Js (M x K) at Jh[jo:] and
    Js[so:], all flat row-major: the one place the Stein trace's elimination is written."""
    for a in range(K):
        for b in range(K):
            aug[a, b] = V * H[ho + a * K + b] + (1.0 if a == b else 0.0)
            s = 0.0
            for m in range(M):
                s += Jh[jo + m * K + a] * Js[so + m * K + b]
            aug[a, K + b] = s
    return _trace_of_solution(aug)


@njit(cache=True)
def stein_traces(Jh, Js, H, V):
    """tr[(I + V H_i)^-1 Jh_i^T Js_i] for every sample i: the Stein form of the m_hat
    estimator (amp_attention.solvers.channel_integrals.MonteCarloChannel._stein_terms),
    Jh, Js the (M x K) output Jacobians at the prox point and at u*, H the (K x K)
    Hessian of the loss.  A K x K elimination per sample: a batched LAPACK call spends
    more on its per-matrix overhead than on the arithmetic at K = 3."""
    n, M, K = Jh.shape
    out = np.empty(n)
    aug = np.empty((K, 2 * K))
    Jhf, Jsf, Hf = Jh.reshape(Jh.size), Js.reshape(Js.size), H.reshape(H.size)
    for i in range(n):
        out[i] = _stein_solve(Hf, i * K * K, V, Jhf, i * M * K, Jsf, i * M * K, K, M, aug)
    return out


@njit(cache=True, inline="always")
def _output_jacobian_builtin(u, par, ka, kb, tau, work, J, D):
    """J[m K + k] = d g_m / d u_k (M x K, flat) of a built-in channel at u; D: scratch of
    K L^2 floats (seq2lab's g = (1/L) sum_a A_aa is the trace of the row-softmax Jacobian,
    as in amp_attention.channels.seq2lab)."""
    beta = par[0]
    L = _row_softmax_work(u, beta, ka, kb, tau, work)
    LL = L * L
    K = ka.size
    if par[1] == SEQ2LAB:
        for j in range(K * LL):
            D[j] = 0.0
        _row_jacobian_flat(work, LL, beta, L, ka, kb, tau, D, 0, 1, LL)
        for k in range(K):
            t = 0.0
            for a in range(L):
                t += D[k * LL + a * L + a]
            J[k] = t / L
    else:
        for j in range(LL * K):
            J[j] = 0.0
        _row_jacobian_flat(work, LL, beta, L, ka, kb, tau, J, 0, K, 1)


@njit(cache=True, inline="always")
def _stein_trace(u, us, H, V, par, ka, kb, tau, work, Jh, Js, D, aug):
    """tr[(I + V H)^-1 J(u)^T J(u*)], H the Hessian of l at u (flat, K x K), J the output
    Jacobian (overwrites ``work``)."""
    K = u.size
    _output_jacobian_builtin(u, par, ka, kb, tau, work, Jh, D)
    _output_jacobian_builtin(us, par, ka, kb, tau, work, Js, D)
    return _stein_solve(H, 0, V, Jh, 0, Js, 0, K, Jh.size // K, aug)


@njit(cache=True, nogil=True)
def _stein_chunk(lo, hi, Y, U, Ustar, V, par, ka, kb, tau, wsize, out):
    K = U.shape[1]
    M = Y.shape[1]
    L = _n_tokens(ka)
    work = np.empty(wsize)
    grad = np.empty(K)
    H = np.empty((K, K))
    Hf = H.reshape(K * K)
    Jh = np.empty(M * K)
    Js = np.empty(M * K)
    D = np.empty(K * L * L)
    aug = np.empty((K, 2 * K))
    u = np.empty(K)
    us = np.empty(K)
    y = np.empty(M)
    softmax = par[1] == SOFTMAX
    beta = par[0]
    hs = np.empty(2 * L * L)
    for i in range(lo, hi):
        for k in range(K):
            u[k] = U[i, k]
            us[k] = Ustar[i, k]
        for m in range(M):
            y[m] = Y[i, m]
        _evalf(u, y, par, ka, kb, tau, 2, work, grad, H)
        if softmax:
            # [I + V H | J(u)^T J(u*)] from the row softmaxes (the evaluator's A at u)
            _softmax_jtj_at(us, work, beta, L, ka, kb, tau, hs, aug, K)
            for a in range(K):
                for b in range(K):
                    aug[a, b] = V * H[a, b] + (1.0 if a == b else 0.0)
            out[i] = _trace_of_solution(aug)
        else:
            out[i] = _stein_trace(u, us, Hf, V, par, ka, kb, tau, work, Jh, Js, D, aug)


def stein_traces_builtin(Y, U, Ustar, V, par, ka, kb, tau, wsize):
    """:func:`stein_traces` of a built-in channel without the (n, M, K) Jacobians and (n, K, K)
    Hessians in memory: per sample the Hessian of l at u (the evaluator's), the output
    Jacobians at u and u*, and the K x K elimination, rows split over threads
    (:func:`_threaded_rows`)."""
    out = np.empty(U.shape[0])
    _threaded_rows(U.shape[0], lambda lo, hi: _stein_chunk(lo, hi, Y, U, Ustar, float(V), par,
                                                           ka, kb, tau, wsize, out))
    return out


@njit(cache=True, inline="always")
def _outputs_builtin(u, par, ka, kb, tau, work, g):
    """The M outputs g(h(u)) of a built-in channel into g (softmax: A row-major)."""
    beta = par[0]
    L = _row_softmax_work(u, beta, ka, kb, tau, work)
    if par[1] == SEQ2LAB:
        g[0] = _seq2lab_output_flat(work, L * L, L)
    else:
        for j in range(L * L):
            g[j] = work[L * L + j]


@njit(cache=True, nogil=True)
def _sq_residual_chunk(lo, hi, Y, U, Z, a, sc, Ustar, star, train, par, ka, kb, tau, wsize,
                       out):
    """out[i] = (||g(h(u*_i)) - g(h(u_i))||^2 if ``star``, ||y_i - g(h(u_i))||^2 if ``train``)
    with u_i = a U_i + sc Z_i (U_i itself where sc = 0 and a = 1)."""
    K = U.shape[1]
    M = Y.shape[1]
    work = np.empty(wsize)
    u = np.empty(K)
    g = np.empty(M)
    t = np.empty(M)
    plain = sc == 0.0 and a == 1.0
    for i in range(lo, hi):
        if star:
            for k in range(K):
                u[k] = Ustar[i, k]
            _outputs_builtin(u, par, ka, kb, tau, work, t)
        for k in range(K):
            u[k] = U[i, k] if plain else a * U[i, k] + sc * Z[i, k]
        _outputs_builtin(u, par, ka, kb, tau, work, g)
        j = 0
        if star:
            s = 0.0
            for m in range(M):
                r = t[m] - g[m]
                s += r * r
            out[i, j] = s
            j += 1
        if train:
            s = 0.0
            for m in range(M):
                r = Y[i, m] - g[m]
                s += r * r
            out[i, j] = s


def sq_output_residuals(Y, U, Ustar, par, ka, kb, tau, wsize):
    """Per row sum_m (t_m - g_m(h(u)))^2 of a built-in channel, the targets t the rows of Y
    or, with ``Ustar`` (n, K) given, g(h(u*)) (Y then only gives M); rows over threads, no
    (n, L, L) intermediates: the train terms (t = y) and the test terms (t = g(h(u*)))."""
    star = Ustar is not None
    out = np.empty((U.shape[0], 1))
    Us = Ustar if star else U
    _threaded_rows(U.shape[0], lambda lo, hi: _sq_residual_chunk(
        lo, hi, Y, U, U, 1.0, 0.0, Us, star, not star, par, ka, kb, tau, wsize, out))
    return out[:, 0]


def test_train_residuals(Ustar, Z, Y, a, sc, par, ka, kb, tau, wsize):
    """Per row (||g(h(u*)) - g(h(omega))||^2, ||y - g(h(omega))||^2) with omega = a u* + sc z
    formed row by row (n, 2): the test-only samples' clean and noisy test terms at overlaps
    (m, q) without the (n, K) omega or a second softmax of it; rows over threads.  Y with no
    rows (it then gives only M, as in :func:`sq_output_residuals`): y = g(h(u*)) (no label
    noise), the second column is the first."""
    out = np.empty((Ustar.shape[0], 2))
    train = Y.shape[0] > 0
    _threaded_rows(Ustar.shape[0], lambda lo, hi: _sq_residual_chunk(
        lo, hi, Y, Ustar, Z, float(a), float(sc), Ustar, True, train, par, ka, kb, tau,
        wsize, out), chunk=_CHUNK_OUT)
    if not train:
        out[:, 1] = out[:, 0]
    return out


@njit(cache=True, inline="always")
def _sq_dist(x, y):
    """||x - y||^2 of two vectors."""
    t = 0.0
    for b in range(x.size):
        r = x[b] - y[b]
        t += r * r
    return t


@njit(cache=True, nogil=True)
def _row_test_chunk(lo, hi, G, sq0, a, sc, beta, tau, noise_kind, sd, std, out):
    L = tau.size
    hs = np.empty(L)
    hp = np.empty(L)
    As = np.empty(L)
    Ap = np.empty(L)
    Ay = np.empty(L)
    for i in range(lo, hi):
        for b in range(L):
            hs[b] = sq0 * tau[b] * G[i, b]
            hp[b] = a * hs[b] + sc * tau[b] * G[i, L + b]
        _softmax_row_flat(beta, L, hs, 0, As, 0)
        _softmax_row_flat(beta, L, hp, 0, Ap, 0)
        clean = _sq_dist(As, Ap)
        out[i, 0] = L * clean
        if noise_kind == 0:
            out[i, 1] = L * clean
            continue
        if noise_kind == 1:  # output noise: y = A* + sd xi
            for b in range(L):
                Ay[b] = As[b] + sd * G[i, 2 * L + b]
        else:  # logit noise: y = softmax(beta (h* + sd std E))
            for b in range(L):
                hp[b] = hs[b] + sd * std[b] * G[i, 2 * L + b]
            _softmax_row_flat(beta, L, hp, 0, Ay, 0)
        out[i, 1] = L * _sq_dist(Ay, Ap)


def row_test_terms_batch(G, sq0, a, sc, beta, tau, noise_kind, sd, std):
    """Per row of G (n, 2L or 3L standard normals) L times one softmax row's (||A* - A||^2,
    ||y - A||^2): h*_b = sq0 tau_b G_b, h_b = a h*_b + sc tau_b G_{L+b}, A = softmax(beta h),
    y = A* (noise_kind 0), A* + sd G_{2L+b} (1: output noise) or softmax(beta (h* + sd std_b
    G_{2L+b})) (2: logit noise); rows over threads (SoftmaxChannel.row_test_terms)."""
    out = np.empty((G.shape[0], 2))
    _threaded_rows(G.shape[0], lambda lo, hi: _row_test_chunk(
        lo, hi, G, float(sq0), float(a), float(sc), float(beta), tau, int(noise_kind),
        float(sd), std, out), chunk=_CHUNK_OUT)
    return out


# ------------------------------------------------------- built-in dispatch
@njit(cache=True)
def _eval_builtin(u, y, par, ka, kb, tau, mode, work, grad, hess):
    # par = (beta, kind)
    if par[1] == SEQ2LAB:
        return _eval_seq2lab(u, y, par, ka, kb, tau, mode, work, grad, hess)
    return _eval_softmax(u, y, par, ka, kb, tau, mode, work, grad, hess)


@njit(cache=True)
def _start_builtin(y, omega, V, par, ka, kb, tau, work, u0):
    if par[1] == SEQ2LAB:
        _start_seq2lab(y, omega, V, par, ka, kb, tau, work, u0)
    else:
        _start_softmax(y, omega, V, par, ka, kb, tau, work, u0)


# ------------------------------------------------- outputs of the built-in channels
@njit(cache=True)
def _softmax_rows_chunk(lo, hi, H, beta, A):
    L = H.shape[1]
    Hf, Af = H.reshape(H.size), A.reshape(A.size)
    for i in range(lo, hi):
        _softmax_rows_flat(beta, L, Hf, i * L * L, Af, i * L * L)


@njit(cache=True, parallel=True)
def softmax_rows_batch(H, beta):
    """softmax_rows(beta H) of every sample, H (n, L, L) -> (n, L, L)."""
    n, L = H.shape[0], H.shape[1]
    A = np.empty((n, L, L))
    nchunk = (n + _CHUNK_OUT - 1) // _CHUNK_OUT
    for c in prange(nchunk):
        lo = c * _CHUNK_OUT
        _softmax_rows_chunk(lo, min(n, lo + _CHUNK_OUT), H, beta, A)
    return A


@njit(cache=True, inline="always")
def _row_jacobian_flat(w, ao, beta, L, ka, kb, tau, out, o, sm, sk):
    """dA_ab/du_k added into out[o + (a L + b) sm + k sk] (zero it first), A at w[ao:]:
    dA_ab/dh_ac = beta A_ab (delta_bc - A_ac), u_k moving h_ij and h_ji (k = (i, j)) by
    tau_k.  The one place the row-softmax Jacobian is written."""
    for k in range(ka.size):
        f = beta * tau[k]
        row = ka[k]
        col = kb[k]
        for rep in range(2):
            for b in range(L):
                out[o + (row * L + b) * sm + k * sk] -= f * w[ao + row * L + b] * w[ao + row * L + col]
            out[o + (row * L + col) * sm + k * sk] += f * w[ao + row * L + col]
            if ka[k] == kb[k]:
                break
            row = kb[k]
            col = ka[k]


@njit(cache=True)
def _row_jacobian_chunk(lo, hi, U, beta, ka, kb, tau, A, D):
    K = U.shape[1]
    L = A.shape[1]
    h = np.empty(L * L)
    u = np.empty(K)
    Af, Df = A.reshape(A.size), D.reshape(D.size)
    for i in range(lo, hi):
        od = i * K * L * L
        for j in range(K * L * L):
            Df[od + j] = 0.0
        for k in range(K):
            u[k] = U[i, k]
        _h_from_u_flat(u, ka, kb, tau, L, h, 0)
        o = i * L * L
        _softmax_rows_flat(beta, L, h, 0, Af, o)
        _row_jacobian_flat(Af, o, beta, L, ka, kb, tau, Df, od, 1, L * L)


@njit(cache=True, parallel=True)
def row_softmax_jacobian_batch(U, beta, ka, kb, tau):
    """(A, D): A = softmax_rows(beta h(u)) (n, L, L) and D = dA/du (n, K, L, L):
    dA_ab/dh_ac = beta A_ab (delta_bc - A_ac), u_k moving h_ij and h_ji (k = (i, j)) by tau_k."""
    n, K = U.shape
    L = _n_tokens(ka)
    A = np.empty((n, L, L))
    # np.empty, zeroed per chunk: np.zeros would be a parallel loop of its own, handed
    # out one element at a time under the dynamic scheduling of amp_attention.threads
    D = np.empty((n, K, L, L))
    nchunk = (n + _CHUNK_OUT - 1) // _CHUNK_OUT
    for c in prange(nchunk):
        lo = c * _CHUNK_OUT
        _row_jacobian_chunk(lo, min(n, lo + _CHUNK_OUT), U, beta, ka, kb, tau, A, D)
    return A, D


# ------------------------------------------------------ convexity certificate
# The constants of the curvature bound of a softmax row for L >= 3 (docs/theory.md 16.5):
# max_lambda (S lambda - 2 lambda^2) = S^2 / 8 <= 1/8 over the spectrum of J, and
# max_x 2 x (1 - x)(1 - 2 x) = 1 / (3 sqrt 3) at x = (3 - sqrt 3) / 6
_ROW_SPECTRAL = 0.125
_ROW_LABEL = 1.0 / (3.0 * math.sqrt(3.0))


@njit(cache=True)
def _pair_quartic(v, dy):
    """The z-Hessian eigenvalue of an L = 2 softmax row, (1 - v^2)(1 - 2 dy v - 3 v^2) / 4 at
    v = 1 - 2 p_1, dy = y_1 - y_2 (docs/theory.md 16.5)."""
    return 0.25 * (1.0 - v * v) * (1.0 - 2.0 * dy * v - 3.0 * v * v)


@njit(cache=True)
def pair_curvature(dy):
    """-min over v in [-1, 1] of :func:`_pair_quartic` (>= 0): the exact negative curvature of
    an L = 2 softmax row with labels y_1 - y_2 = dy, over every logit (docs/theory.md 16.5).
    The minimum lies at an end (value 0) or at a root of the derivative, the cubic
    6 v^3 + 3 dy v^2 - 4 v - dy = 0: solved in closed form (trigonometric with three real
    roots, Cardano with one), each root polished by Newton steps on the cubic; a root off by
    delta raises the value by O(delta^2), covered by the certificate's margin."""
    # v^3 + B v^2 + C v + D, depressed by v = t - B/3 to t^3 + p t + q
    B = 0.5 * dy
    C = -2.0 / 3.0
    D = -dy / 6.0
    p = C - B * B / 3.0
    q = 2.0 * B * B * B / 27.0 - B * C / 3.0 + D
    roots = np.empty(3)
    disc = q * q / 4.0 + p * p * p / 27.0
    if disc < 0.0:  # three real roots (p < 0)
        r = 2.0 * math.sqrt(-p / 3.0)
        arg = min(1.0, max(-1.0, 3.0 * q / (p * r)))
        phi = math.acos(arg) / 3.0
        for k in range(3):
            roots[k] = r * math.cos(phi - 2.0 * math.pi * k / 3.0) - B / 3.0
        nroots = 3
    else:
        sq = math.sqrt(disc)
        a = -0.5 * q + sq
        b = -0.5 * q - sq
        roots[0] = math.copysign(abs(a) ** (1.0 / 3.0), a) + math.copysign(abs(b) ** (1.0 / 3.0), b) - B / 3.0
        nroots = 1
    fmin = 0.0  # the ends v = +-1
    for k in range(nroots):
        v = roots[k]
        # the unpolished root too: any point's value is >= the minimum, so more points can
        # only raise c (a polish that slid to another root would otherwise lose this one)
        fmin = min(fmin, _pair_quartic(min(1.0, max(-1.0, v)), dy))
        for _ in range(3):
            g = ((6.0 * v + 3.0 * dy) * v - 4.0) * v - dy
            dg = (18.0 * v + 6.0 * dy) * v - 4.0
            if dg == 0.0:
                break
            v -= g / dg
        v = min(1.0, max(-1.0, v))
        fmin = min(fmin, _pair_quartic(v, dy))
    return -fmin


@njit(cache=True)
def softmax_curvature_bound(y, par, L):
    """c >= -lambda_min of the Hessian in u of l(y, h(u)) = 1/2 ||y - softmax_rows(beta h)||^2,
    for every u (docs/theory.md section 16.5).  Per row a, with p = softmax(z_a), r = p - y_a,
    the Hessian in z is J^T J + sum_b r_b p_b [(e_b - p)(e_b - p)^T - J], J = diag p - p p^T,
    whose negative part is at most
      L = 2:  pair_curvature(y_a1 - y_a2), exact (p_2 = 1 - p_1: one eigenvalue, a quartic
              in p_1; 0.2404 at most for labels in the simplex),
      L >= 3: 1/8 + sum_b y_ab^+ / (3 sqrt 3) + max_b y_ab^- / 2 (0.3175 for labels in the
              simplex; from v^T H v = v^T (2 J^2 - S J) v - sum_b y_b p_b (w_b^2 - v^T J v),
              S = |p|^2, w = v - (p.v) 1);
    h_ab = tau_k u_k with sum_a |P_a u|^2 = 2 |u|^2 (tau^2 = 2 on the diagonal, entries off
    it in two rows) gives c = 2 beta^2 max_a c_a."""
    beta = par[0]
    cmax = 0.0
    for a in range(L):
        if L == 2:
            c = pair_curvature(y[a * L] - y[a * L + 1])
        else:
            pos = 0.0
            neg = 0.0
            for b in range(L):
                v = y[a * L + b]
                if v > 0.0:
                    pos += v
                else:
                    neg = max(neg, -v)
            c = _ROW_SPECTRAL + _ROW_LABEL * pos + 0.5 * neg
        cmax = max(cmax, c)
    return 2.0 * beta * beta * cmax


@njit(cache=True)
def softmax_curvature_bound_max(Y, par, L):
    """max over the rows of Y of :func:`softmax_curvature_bound`."""
    c = 0.0
    for i in range(Y.shape[0]):
        c = max(c, softmax_curvature_bound(Y[i], par, L))
    return c


@njit(cache=True)
def _certify_builtin(y, V, par, ka, kb, tau):
    """True when F(u) = l(y, h(u)) + sum_k (u_k - omega_k)^2 / (2 V_k) is strictly convex in u
    for every omega: min_k 1/V_k above the curvature bound of the loss (softmax only; the
    seq2lab loss has no bound here)."""
    if par[1] != SOFTMAX:
        return False
    vmax = 0.0
    for k in range(V.size):
        vmax = max(vmax, V[k])
    # a relative margin: 1/V must clear the bound beyond rounding
    return 1.0 / vmax > softmax_curvature_bound(y, par, _n_tokens(ka)) * (1.0 + 1e-9)


@njit(cache=True)
def _no_certificate(y, V, par, ka, kb, tau):
    return False


# The Newton and batch code below calls the evaluator and the start rule
# through the module globals ``_evalf`` and ``_startf``.  Passing them as
# function arguments would be the obvious design, but Numba then sometimes
# embeds the callee's address in the caller and refuses to cache it; with
# globals the built-in channels are cached, and a user channel gets its own
# copies of these functions bound to its closures (:func:`_rebind`).
_evalf = _eval_builtin
#: evaluate the full Newton step's Hessian with its loss (reused by the next iteration where
#: the step is accepted; one loss-only evaluation saved per accepted full step): True for the
#: built-in evaluators, whose Hessian costs about a loss evaluation more; False for user
#: channels (_rebind), whose Hessian may be finite differences of K gradients
_EAGER_HESSIAN = True
_startf = _start_builtin
_certf = _certify_builtin


# ----------------------------------------------------------------- Newton
@njit(cache=True)
def _newton(y, omega, V, par, ka, kb, tau, gtol, maxit, work, u, grad, hess, C, gF, d, ut):
    """Minimise F from the start in ``u`` (overwritten); returns (F(u), status).

    Modified Newton: the step solves (H_F + mu I) d = -grad F with mu = 0 when
    the Hessian H_F = H_l + diag(1/V) is positive definite (Cholesky succeeds) and
    otherwise the first mu of b, 2b, 4b, ... (b = 1e-3 times the scale of
    H_F, offset by -min diag H_F when that is negative) that makes it so: a
    descent direction that is the Newton step near a strict local minimum,
    hence quadratic convergence there, and that leans towards -grad F where F
    is concave.  Armijo backtracking (c1 = 1e-4, halving) globalises it; F
    values equal within rounding (1e-15 relative) count as a decrease so that
    the last quadratically convergent steps are not rejected.

    Convergence: ||grad F||_inf <= gtol * scale with
    scale = 1 + ||grad l||_inf + (||u||_inf + ||omega||_inf) max_k 1/V_k, the size of the
    terms whose rounding limits grad F (relative accuracy, and u - omega known
    to eps |u| only, amplified by 1/V).  A point that meets it with H_F not
    positive definite is reported as SADDLE, not CONVERGED.
    """
    K = u.size
    ivmax = 0.0
    for k in range(K):
        ivmax = max(ivmax, 1.0 / V[k])
    F = np.inf
    l_next = 0.0
    fresh = False  # grad and hess already hold l's at u (the last line search's first trial)
    for it in range(maxit + 1):
        l = l_next if fresh else _evalf(u, y, par, ka, kb, tau, 2, work, grad, hess)
        quad = 0.0
        gmax = 0.0
        glmax = 0.0
        umax = 0.0
        omax = 0.0
        for k in range(K):
            diff = u[k] - omega[k]
            quad += diff * diff / V[k]
            gF[k] = grad[k] + diff / V[k]
            gmax = max(gmax, abs(gF[k]))
            glmax = max(glmax, abs(grad[k]))
            umax = max(umax, abs(u[k]))
            omax = max(omax, abs(omega[k]))
        F = l + 0.5 * quad
        if not math.isfinite(F) or not math.isfinite(gmax):
            return F, STALLED
        hmax = 0.0
        for k in range(K):
            for k2 in range(K):
                hmax = max(hmax, abs(hess[k, k2]))
            hess[k, k] += 1.0 / V[k]
        pd = _cholesky(hess, 0.0, C)
        if gmax <= gtol * (1.0 + glmax + (umax + omax) * ivmax):
            return F, (CONVERGED if pd else SADDLE)
        if it == maxit:
            break
        if not pd:
            b = 1e-3 * (hmax + ivmax)
            dmin = hess[0, 0]
            for k in range(1, K):
                dmin = min(dmin, hess[k, k])
            mu = b if dmin > 0.0 else b - dmin
            for _ in range(200):
                if _cholesky(hess, mu, C):
                    break
                mu = max(2.0 * mu, b)
        _chol_solve_neg(C, gF, d)
        slope = 0.0
        for k in range(K):
            slope += gF[k] * d[k]
        t = 1.0
        accepted = False
        fresh = False
        for trial in range(60):
            q2 = 0.0
            for k in range(K):
                ut[k] = u[k] + t * d[k]
                diff = ut[k] - omega[k]
                q2 += diff * diff / V[k]
            # the full step (usually accepted) evaluated with its gradient and Hessian, which
            # the next iteration then reuses: grad and hess are free once d is solved for
            eager = _EAGER_HESSIAN and trial == 0
            lt = _evalf(ut, y, par, ka, kb, tau, 2 if eager else 0, work, grad, hess)
            Ft = lt + 0.5 * q2
            if Ft <= F + 1e-4 * t * slope + 1e-15 * (1.0 + abs(F)):
                accepted = True
                fresh = eager
                l_next = lt
                break
            t *= 0.5
        if not accepted:
            return F, STALLED
        for k in range(K):
            u[k] = ut[k]
    return F, MAX_ITER


@njit(cache=True)
def _prox_one(y, omega, V, par, ka, kb, tau, gtol, maxit, work,
              U, Fs, st, grad, hess, C, gF, d, ut, aug, uhat, Vs, Uprev, warm):
    """Multi-start prox of one sample; writes uhat, returns (F, failed, trace term).

    Where the channel certifies F strictly convex (``_certf``: the softmax curvature
    bound below 1/V), one Newton run finds the global minimiser; the multi-start below
    runs only where it does not (or that run fails).

    Four Newton runs: from (i) omega, (ii) the channel's data-consistent point,
    (iii) their midpoint, and (iv) from (ii) along the continuation
    V' = CONTINUATION[0] V, ..., V (each stage warm-started by the previous).
    Path (iv) is needed because a full Newton step from a saturated start
    (where l is flat and F is nearly the quadratic term) jumps straight back
    to omega's basin, past the minima near the data; decreasing V' gradually
    follows the data-side branch of minimisers instead.  The end point of
    lowest F is returned (NaN counts as +inf) even when it did not converge --
    it then lies in a better basin than any converged end point -- and
    ``failed`` says that it is not a converged local minimum.
    Trace term: t = tr(I - (I + D H)^{-1}) = K - tr((I + D H)^{-1}), D = diag(V), H the
    Hessian of l at uhat.

    Warm start (``warm``): runs (iii) and (iv) start from their own end points
    of a previous call on a nearby problem (``Uprev`` rows 2-3) instead of being
    rebuilt (the continuation is the expensive part), and are run once if they
    coincide; runs (i) and (ii) start afresh from omega and the data-consistent
    point.  Each previously found minimiser is thus followed to the new problem
    in a few Newton steps.  U holds the four end points on return.
    """
    K = omega.size
    if _certf(y, V, par, ka, kb, tau):
        # F strictly convex: its one stationary point is the global minimiser, found by one
        # Newton run (from the previous end point when warm: fewer steps, the same point)
        for k in range(K):
            U[0, k] = Uprev[0, k] if warm else omega[k]
        Fs[0], st[0] = _newton(y, omega, V, par, ka, kb, tau, gtol, maxit, work, U[0], grad,
                               hess, C, gF, d, ut)
        if st[0] == CONVERGED:
            for s in range(1, 4):
                for k in range(K):
                    U[s, k] = U[0, k]
            return _prox_result(y, omega, V, par, ka, kb, tau, work, U[0], grad, hess, C,
                                aug, uhat, False)
    for k in range(K):
        U[0, k] = omega[k]
    if warm:
        _startf(y, omega, V, par, ka, kb, tau, work, U[1])
        for s in range(2, 4):
            for k in range(K):
                U[s, k] = Uprev[s, k]
    else:
        _startf(y, omega, V, par, ka, kb, tau, work, U[1])
        for k in range(K):
            U[2, k] = 0.5 * (U[0, k] + U[1, k])
            U[3, k] = U[1, k]
        for Vc in CONTINUATION:
            for k in range(K):
                Vs[k] = Vc * V[k]
            _newton(y, omega, Vs, par, ka, kb, tau, gtol, maxit, work, U[3], grad, hess, C,
                    gF, d, ut)
    best = -1
    Fbest = np.inf
    for s in range(4):
        twin = -1
        if warm and s >= 3:
            for s2 in range(2, s):
                same = True
                for k in range(K):
                    if abs(Uprev[s, k] - Uprev[s2, k]) > 1e-9 * (1.0 + abs(Uprev[s2, k])):
                        same = False
                        break
                if same:
                    twin = s2
                    break
        if twin >= 0:
            for k in range(K):
                U[s, k] = U[twin, k]
            Fs[s] = Fs[twin]
            st[s] = st[twin]
        else:
            Fs[s], st[s] = _newton(y, omega, V, par, ka, kb, tau, gtol, maxit, work,
                                   U[s], grad, hess, C, gF, d, ut)
        if best < 0 or Fs[s] < Fbest:
            best = s
            Fbest = Fs[s] if math.isfinite(Fs[s]) else np.inf
    return _prox_result(y, omega, V, par, ka, kb, tau, work, U[best], grad, hess, C, aug, uhat,
                        st[best] != CONVERGED)


@njit(cache=True)
def _prox_result(y, omega, V, par, ka, kb, tau, work, u, grad, hess, C, aug, uhat, failed):
    """uhat = u; returns (F(u), failed, trace term tr(I - (I + D H)^{-1}), D = diag(V))."""
    K = omega.size
    for k in range(K):
        uhat[k] = u[k]
    l = _evalf(uhat, y, par, ka, kb, tau, 2, work, grad, hess)
    quad = 0.0
    for k in range(K):
        diff = uhat[k] - omega[k]
        quad += diff * diff / V[k]
        for k2 in range(K):
            C[k, k2] = V[k] * hess[k, k2]
        C[k, k] += 1.0
    trace = K - _trace_inverse(C, aug)
    return l + 0.5 * quad, failed, trace


@njit(cache=True)
def _start_weak(y, omega, V, par, ka, kb, tau, work, u0):
    """Generic data-consistent start: Newton from omega on l + ||u - omega||^2/(2 * 100 V)."""
    K = omega.size
    for k in range(K):
        u0[k] = omega[k]
    _newton(y, omega, 100.0 * V, par, ka, kb, tau, 1e-9, 100, work, u0, np.empty(K),
            np.empty((K, K)), np.empty((K, K)), np.empty(K), np.empty(K), np.empty(K))


@njit(cache=True)
def _prox_chunk(lo, hi, Y, Omega, V, par, ka, kb, tau, gtol, maxit, wsize,
                uhat, gout, trace, obj, failed, Uprev, warm, Uend):
    K = Omega.shape[1]
    work = np.empty(wsize)
    U = np.empty((4, K))
    Fs = np.empty(4)
    st = np.empty(4, np.int64)
    grad = np.empty(K)
    hess = np.empty((K, K))
    C = np.empty((K, K))
    gF = np.empty(K)
    d = np.empty(K)
    ut = np.empty(K)
    aug = np.empty((K, 2 * K))
    Vs = np.empty(K)
    for i in range(lo, hi):
        F, fl, t = _prox_one(Y[i], Omega[i], V[i], par, ka, kb, tau, gtol, maxit,
                             work, U, Fs, st, grad, hess, C, gF, d, ut, aug, uhat[i], Vs,
                             Uprev[i], warm)
        for s in range(4):
            for k in range(K):
                Uend[i, s, k] = U[s, k]
        obj[i] = F
        failed[i] = fl
        trace[i] = t
        for k in range(K):
            gout[i, k] = (uhat[i, k] - Omega[i, k]) / V[i, k]


@njit(cache=True, inline="always")
def _newton_scratch(K, wsize):
    """Scratch arrays of one :func:`_newton` run: (work, grad, hess, C, gF, d, ut)."""
    return (np.empty(wsize), np.empty(K), np.empty((K, K)), np.empty((K, K)), np.empty(K),
            np.empty(K), np.empty(K))


@njit(cache=True)
def _newton_chunk(lo, hi, Y, Omega, U0, V, par, ka, kb, tau, gtol, maxit, wsize, U, F, status):
    K = Omega.shape[1]
    work, grad, hess, C, gF, d, ut = _newton_scratch(K, wsize)
    for i in range(lo, hi):
        for k in range(K):
            U[i, k] = U0[i, k]
        F[i], status[i] = _newton(Y[i], Omega[i], V[i], par, ka, kb, tau, gtol, maxit,
                                  work, U[i], grad, hess, C, gF, d, ut)


@njit(cache=True)
def _starts_chunk(lo, hi, Y, Omega, V, par, ka, kb, tau, wsize, S):
    work = np.empty(wsize)
    K = Omega.shape[1]
    for i in range(lo, hi):
        for k in range(K):
            S[i, 0, k] = Omega[i, k]
        _startf(Y[i], Omega[i], V[i], par, ka, kb, tau, work, S[i, 1])
        for k in range(K):
            S[i, 2, k] = 0.5 * (S[i, 0, k] + S[i, 1, k])


# ------------------------------------------------------------ batch drivers
@njit(cache=True, parallel=True)
def prox_batch(Y, Omega, V, par, ka, kb, tau, gtol, maxit, wsize, Uprev, warm):
    """Multi-start prox of n samples: (uhat, g_out, trace, objective, failed, ends).

    ``ends`` (n, 4, K): the end points of the four Newton runs, which a later
    call with ``warm=True`` takes as ``Uprev`` (see :func:`_prox_one`); with
    ``warm=False`` ``Uprev`` is not read (any (n, 4, K) array, e.g. empty rows).
    """
    n, K = Omega.shape
    uhat = np.empty((n, K))
    gout = np.empty((n, K))
    trace = np.empty(n)
    obj = np.empty(n)
    failed = np.empty(n, dtype=np.bool_)  # every row set by _prox_chunk
    Uend = np.empty((n, 4, K))
    nchunk = (n + _CHUNK - 1) // _CHUNK
    for c in prange(nchunk):
        lo = c * _CHUNK
        _prox_chunk(lo, min(n, lo + _CHUNK), Y, Omega, V, par, ka, kb, tau, gtol, maxit, wsize,
                    uhat, gout, trace, obj, failed, Uprev, warm, Uend)
    return uhat, gout, trace, obj, failed, Uend


# newton_batch runs once per SE evaluation (the centres of the V_hat control variate), so
# it is parallel like the prox (a user channel's copy splits its rows over threads instead,
# see _rebind); starts_batch is a diagnostics driver, serial (a parallel loop costs
# seconds of compilation).
@njit(cache=True, parallel=True)
def newton_batch(Y, Omega, U0, V, par, ka, kb, tau, gtol, maxit, wsize):
    """Single-start Newton from U0 (n, K): (U, F, status)."""
    n, K = Omega.shape
    U = np.empty((n, K))
    F = np.empty(n)
    status = np.empty(n, dtype=np.int64)
    nchunk = (n + _CHUNK - 1) // _CHUNK
    for c in prange(nchunk):
        lo = c * _CHUNK
        _newton_chunk(lo, min(n, lo + _CHUNK), Y, Omega, U0, V, par, ka, kb, tau, gtol, maxit,
                      wsize, U, F, status)
    return U, F, status


@njit(cache=True)
def starts_batch(Y, Omega, V, par, ka, kb, tau, wsize):
    """The three starting points of the prox, shape (n, 3, K)."""
    n, K = Omega.shape
    S = np.empty((n, 3, K))
    _starts_chunk(0, n, Y, Omega, V, par, ka, kb, tau, wsize, S)
    return S


@njit(cache=True)
def loss_grad_hess_one(y, u, par, ka, kb, tau, wsize):
    """(l, grad_u l, Hessian_u l) of one sample."""
    K = u.size
    grad = np.empty(K)
    hess = np.empty((K, K))
    l = _evalf(u, y, par, ka, kb, tau, 2, np.empty(wsize), grad, hess)
    return l, grad, hess


@njit(cache=True, parallel=True)
def hessian_batch(Y, U, par, ka, kb, tau, wsize):
    """Hessians of l in u at the rows of U, shape (n, K, K)."""
    n, K = U.shape
    H = np.empty((n, K, K))
    nchunk = (n + _CHUNK - 1) // _CHUNK
    for c in prange(nchunk):
        work = np.empty(wsize)
        grad = np.empty(K)
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            _evalf(U[i], Y[i], par, ka, kb, tau, 2, work, grad, H[i])
    return H


@njit(cache=True, inline="always")
def _gershgorin_above(M, floor):
    """True where every Gershgorin disc of the symmetric M lies right of ``floor``
    (M_aa - sum_b!=a |M_ab| > floor for all a): then M - floor I is positive definite
    without its Cholesky factorisation (K^2 additions against K^3/6; it certifies 99 % of
    the control variate's rows at L = 5, alpha 0.1).  False on a NaN."""
    K = M.shape[0]
    for a in range(K):
        r = 0.0
        for b in range(K):
            if b != a:
                r += abs(M[a, b])
        if not (M[a, a] - r > floor):
            return False
    return True


@njit(cache=True, inline="always")
def _floored_cholesky(M, floor, C):
    """Cholesky factor C of M with its eigenvalues raised to at least ``floor``: M itself where
    M - floor I is positive definite (two Cholesky factorisations), else M is replaced by
    Q max(Lambda, floor) Q^T (an eigendecomposition: the rare rows).  Returns True where it
    raised some.  The map M -> floored M is continuous (the identity where it is not
    needed), so the Newton step built on it is continuous in omega and V: no switch of
    estimator, no jump in the SE map (docs/theory.md 16.6)."""
    if _gershgorin_above(M, floor) or _cholesky(M, -floor, C):
        _cholesky(M, 0.0, C)
        return False
    lam, Q = np.linalg.eigh(M)
    K = M.shape[0]
    for a in range(K):
        for b in range(K):
            s = 0.0
            for j in range(K):
                s += Q[a, j] * max(lam[j], floor) * Q[b, j]
            M[a, b] = s
    for a in range(K):
        for b in range(a):
            v = 0.5 * (M[a, b] + M[b, a])
            M[a, b] = v
            M[b, a] = v
    _cholesky(M, 0.0, C)
    return True


@njit(cache=True, inline="always")
def _lower_inverse_t(C, Wt):
    """Wt = (C^-1)^T from the lower Cholesky factor C (Wt upper triangular, its rows the
    columns of C^-1, so that both inner loops below run along rows); returns
    tr (C C^T)^-1 = ||C^-1||_F^2."""
    K = C.shape[0]
    fro = 0.0
    for j in range(K):
        for i in range(j):
            Wt[j, i] = 0.0
        Wt[j, j] = 1.0 / C[j, j]
        for i in range(j + 1, K):
            t = 0.0
            for p in range(j, i):
                t -= C[i, p] * Wt[j, p]
            Wt[j, i] = t / C[i, i]
        for i in range(j, K):
            fro += Wt[j, i] * Wt[j, i]
    return fro


@njit(cache=True, inline="always")
def _spd_inverse(C, W, P):
    """P = (C C^T)^-1 from the lower Cholesky factor C (W: scratch, W = (C^-1)^T); returns
    tr P = ||C^-1||_F^2."""
    K = C.shape[0]
    tr = _lower_inverse_t(C, W)
    # P_ab = sum_p (C^-1)_pa (C^-1)_pb, p >= max(a, b)
    for a in range(K):
        for b in range(a, K):
            t = 0.0
            for p in range(b, K):
                t += W[a, p] * W[b, p]
            P[a, b] = t
            P[b, a] = t
    return tr


@njit(cache=True, inline="always")
def _trace_inverse_times(P, Jh, Js, K, M):
    """tr[P Jh^T Js] = sum_m Js_m^T P Jh_m, Jh and Js (M x K) flat row-major; the zeros of
    Jh skipped (a softmax output depends on the L coordinates of its row of h only)."""
    tr = 0.0
    for m in range(M):
        for k2 in range(K):
            jv = Jh[m * K + k2]
            if jv == 0.0:
                continue
            t = 0.0
            for k in range(K):
                t += Js[m * K + k] * P[k, k2]
            tr += jv * t
    return tr


@njit(cache=True, inline="always")
def _softmax_jtj(w, ao, A2, o2, beta, L, tau, X, co):
    """X[:, co:co + K] = J(u)^T J(u*) (K x K) of the softmax output g = softmax_rows(beta h)
    without forming the (L^2 x K) Jacobians: with A (at u, w[ao:]) and A* (at u*, A2[o2:])
    the row softmaxes, J's row block a is B_a T_a, B_a[b, c] = beta A_ab (delta_bc - A_ac)
    and T_a[c, k] = tau_k [k = k(a, c) (_pair_k)], so X = sum_a T_a^T B_a^T B*_a T_a with
    (B^T B*)_cd = beta^2 A_c A*_d (s - A*_c - A_d) + delta_cd beta^2 A_c A*_c, s = A . A*
    (O(L^3) a sample against O(L^2 K^2) for the Jacobians' product)."""
    K = tau.size
    b2 = beta * beta
    for k in range(K):
        for k2 in range(K):
            X[k, co + k2] = 0.0
    for a in range(L):
        r = ao + a * L
        r2 = o2 + a * L
        s = 0.0
        for b in range(L):
            s += w[r + b] * A2[r2 + b]
        for c in range(L):
            k = _pair_k(a, c, L)
            Ac = w[r + c]
            Asc = A2[r2 + c]
            f = b2 * tau[k] * Ac
            for d in range(L):
                k2 = _pair_k(a, d, L)
                X[k, co + k2] += f * tau[k2] * A2[r2 + d] * (s - Asc - w[r + d])
            X[k, co + k] += f * tau[k] * Asc


@njit(cache=True, inline="always")
def _softmax_jtj_at(us, w, beta, L, ka, kb, tau, hs, X, co):
    """:func:`_softmax_jtj` with A* = softmax_rows(beta h(u*)) computed here (into the
    scratch hs, 2 L^2: h(u*) then A*) and A at u left by the evaluator at w[L^2:]."""
    _h_from_u_flat(us, ka, kb, tau, L, hs, 0)
    _softmax_rows_flat(beta, L, hs, 0, hs, L * L)
    _softmax_jtj(w, L * L, hs, L * L, beta, L, tau, X, co)


#: the floor of the eigenvalues of I + V H in the control variate's Newton steps
#: (:func:`_floored_cholesky`), i.e. the loss Hessian's eigenvalues raised to -(1 - floor)/V.
#: Any floor keeps the two-level estimator exact; it trades variance against cost (an
#: eigendecomposition per raised row): measured (docs/performance.md, tenth round) 0.25 and
#: 0.5 leave steps so large on nearly flat rows that the control variate adds variance above
#: V ~ 2.5 at L = 2; 1 (H's negative part removed) is the least noisy but raises 77 % of the
#: rows at L = 5 (2.7x slower); 0.9 is within 10-30 % of 1's errors and raises 0.1 % there
STEP_FLOOR = 0.9


@njit(cache=True, nogil=True)
def _newton_step_chunk(lo, hi, Y, Omega, Eta, V, steps, floor, par, ka, kb, tau, wsize, want_cv,
                       G, CV, Ustar, want_stein, ST, RAISED):
    K = Omega.shape[1]
    L = _n_tokens(ka)
    Mo = Y.shape[1]
    Jh = np.empty(Mo * K)
    Js = np.empty(Mo * K)
    D = np.empty(K * L * L)
    us = np.empty(K)
    work = np.empty(wsize)
    grad = np.empty(K)
    M = np.empty((K, K))
    C = np.empty((K, K))
    W = np.empty((K, K))
    P = np.empty((K, K))
    x = np.empty(K)
    u = np.empty(K)
    # rows copied, not viewed: a view of a shared array per step is an atomic reference
    # count on it, which the threads contend for
    y = np.empty(Y.shape[1])
    e = np.empty(K)
    softmax = par[1] == SOFTMAX
    beta = par[0]
    hs = np.empty(2 * L * L)
    X = np.empty((K, K))
    for i in range(lo, hi):
        for k in range(K):
            u[k] = Omega[i, k]
        for k in range(Y.shape[1]):
            y[k] = Y[i, k]
        raised = False
        for it in range(steps):
            _evalf(u, y, par, ka, kb, tau, 2, work, grad, M)
            # Newton on F = l + |u - omega|^2 / (2V): V grad F = V grad l + u - omega,
            # V Hess F = I + V H (its eigenvalues raised to the floor)
            for a in range(K):
                for b in range(K):
                    M[a, b] *= V
                M[a, a] += 1.0
                grad[a] = V * grad[a] + u[a] - Omega[i, a]
            if _floored_cholesky(M, floor, C):
                raised = True
            if want_stein and it == 0:
                # Stein's trace at omega, tr[(I + V H)^-1 J(omega)^T J(u*)], with the first
                # step's (floored) matrix
                for k in range(K):
                    us[k] = Ustar[i, k]
                _spd_inverse(C, W, P)
                if softmax:
                    # the evaluator left A = softmax_rows(beta h(omega)) at work[L^2:]
                    _softmax_jtj_at(us, work, beta, L, ka, kb, tau, hs, X, 0)
                    tr = 0.0
                    for a in range(K):
                        for b in range(K):
                            tr += P[a, b] * X[b, a]
                    ST[i] = tr
                else:
                    _output_jacobian_builtin(u, par, ka, kb, tau, work, Jh, D)
                    _output_jacobian_builtin(us, par, ka, kb, tau, work, Js, D)
                    ST[i] = _trace_inverse_times(P, Jh, Js, K, Mo)
            _chol_solve_neg(C, grad, x)
            for k in range(K):
                u[k] += x[k]
        RAISED[i] = raised
        for k in range(K):
            G[i, k] = (u[k] - Omega[i, k]) / V
        if want_cv:
            for k in range(K):
                e[k] = Eta[i, k]
            _chol_solve_neg(C, e, x)
            quad = 0.0
            ee = 0.0
            for k in range(K):
                quad -= e[k] * x[k]
                ee += e[k] * e[k]
            CV[i] = (quad - _lower_inverse_t(C, W) - (ee - K)) / V


@njit(cache=True, nogil=True)
def _centre_cv_chunk(lo, hi, Y, Omega, Eta, V, par, ka, kb, tau, gtol, maxit, wsize, CV):
    K = Omega.shape[1]
    work, grad, hess, C, gF, d, ut = _newton_scratch(K, wsize)
    aug = np.empty((K, 2 * K))
    u = np.empty(K)
    om = np.empty(K)
    y = np.empty(Y.shape[1])
    Vk = np.full(K, V)
    for i in range(lo, hi):
        for k in range(K):
            om[k] = Omega[i, k]
            u[k] = om[k]
        for m in range(Y.shape[1]):
            y[m] = Y[i, m]
        _newton(y, om, Vk, par, ka, kb, tau, gtol, maxit, work, u, grad, hess, C, gF, d, ut)
        _evalf(u, y, par, ka, kb, tau, 2, work, grad, hess)
        ee = 0.0
        for a in range(K):
            ee += Eta[i, a] * Eta[i, a]
            for b in range(K):
                aug[a, b] = V * hess[a, b] + (1.0 if a == b else 0.0)
                aug[a, K + b] = Eta[i, a] * Eta[i, b] - (1.0 if a == b else 0.0)
        t = _trace_of_solution(aug)
        # singular I + V H: A = 0 on that row, still independent of eta (zero mean)
        CV[i] = (t - (ee - K)) / V if math.isfinite(t) else 0.0


def centre_cv_batch(Y, Omega, Eta, V, par, ka, kb, tau, gtol, maxit, wsize):
    """Per row eta^T A eta - tr A with A = ((I + V H)^-1 - I)/V, H the Hessian of l at the end
    of one modified-Newton run of the prox objective from omega (:func:`_newton`): the zero-mean
    control variate of the V_hat integration by parts at the pairs' centres
    (amp_attention.solvers.channel_integrals.MonteCarloChannel._centre_jacobian_cv), as
    tr[(I + V H)^-1 (eta eta^T - I)] - (|eta|^2 - K), over V, in one threaded pass."""
    CV = np.empty(Omega.shape[0])
    _threaded_rows(Omega.shape[0], lambda lo, hi: _centre_cv_chunk(
        lo, hi, Y, Omega, Eta, float(V), par, ka, kb, tau, gtol, maxit, wsize, CV))
    return CV


def newton_step_batch(Y, Omega, Eta, V, steps, par, ka, kb, tau, wsize, want_cv, Ustar=None,
                      floor=STEP_FLOOR):
    """``steps`` Newton iterations of the prox objective F(u) = l(y, u) + ||u - omega||^2 / (2V)
    from u = omega, per row (built-in channels; docs/theory.md 16.6), each with I + V H's
    eigenvalues raised to at least ``floor`` (:func:`_floored_cholesky`): G = (u_steps -
    omega)/V, the control variate's output function (one step: -(I + V H)^-1 grad l at
    omega), continuous in omega and V.  With ``want_cv`` also CV = eta^T A eta - tr A,
    A = ((I + V H)^-1 - I)/V with (floored) H at the last step's base point, for the rows of
    ``Eta``.  With ``Ustar`` (n, K) also ST = tr[(I + V H)^-1 J(omega)^T J(u*)] per row (H at
    omega: the first step's).  Returns (G, CV, ST, RAISED), CV and ST empty when not asked
    for, RAISED (n,) True where a floor was applied on the way.  Rows split over threads
    (:func:`_threaded_rows`; no parallel loop to compile)."""
    n, K = Omega.shape
    if not floor > 0.0:
        raise ValueError(f"floor must be > 0 (an eigenvalue floor of I + V H), got {floor!r}")
    G = np.empty((n, K))
    RAISED = np.zeros(n, dtype=np.bool_)
    CV = np.empty(n if want_cv else 0)
    want_stein = Ustar is not None
    ST = np.empty(n if want_stein else 0)
    Us = Ustar if want_stein else Omega
    _threaded_rows(n, lambda lo, hi: _newton_step_chunk(lo, hi, Y, Omega, Eta, float(V),
                                                        int(steps), float(floor), par, ka, kb,
                                                        tau, wsize, bool(want_cv), G, CV, Us,
                                                        want_stein, ST, RAISED))
    return G, CV, ST, RAISED


@njit(cache=True, parallel=True)
def loss_grad_h_batch(Y, H, par):
    """(l (n,), G (n, L, L)) with G_ab = dl/dh_ab, all L^2 entries of each h independent,
    for the built-in channels (par = (beta, kind)): the evaluators' own loss and
    gradient helpers, applied to h directly (what ERM needs before the adjoint)."""
    n, L = H.shape[0], H.shape[1]
    LL = L * L
    beta = par[0]
    loss = np.empty(n)
    G = np.empty((n, L, L))
    Hf, Gf = H.reshape(H.size), G.reshape(G.size)
    nchunk = (n + _CHUNK_OUT - 1) // _CHUNK_OUT
    for c in prange(nchunk):
        A = np.empty(LL)
        y = np.empty(Y.shape[1])
        for i in range(c * _CHUNK_OUT, min(n, (c + 1) * _CHUNK_OUT)):
            for m in range(Y.shape[1]):
                y[m] = Y[i, m]
            o = i * LL
            _softmax_rows_flat(beta, L, Hf, o, A, 0)
            if par[1] == SEQ2LAB:
                r = _seq2lab_residual_flat(A, 0, y, L)
                loss[i] = 0.5 * r * r
                _seq2lab_dg_flat(A, 0, beta, L, Gf, o)
                for k in range(LL):
                    Gf[o + k] *= r
            else:
                loss[i] = _softmax_loss_s_flat(A, 0, y, L, Gf, o)
                for k in range(LL):
                    Gf[o + k] *= beta
    return loss, G


_TEMPLATES = ("_newton", "_prox_one", "_prox_result", "_start_weak", "_prox_chunk", "_newton_chunk",
              "_starts_chunk", "starts_batch", "loss_grad_hess_one")


def _rebind(evalf, startf) -> dict:
    """Copies of the Newton and chunk functions calling ``evalf``/``startf``, and the batch
    drivers ``prox_batch`` and ``newton_batch`` over them.

    ``startf=None`` selects the generic start :func:`_start_weak`.  The copies
    share one globals namespace, so they call each other; they are compiled on
    first use and not cached (they depend on the user's closures).  They are compiled
    serial and without the GIL, and the batch drivers split the rows over Python threads
    (:func:`_threaded_rows`): a Numba parallel loop would cost every user channel about
    6 s more compilation in each process, for the same speed.
    """
    ns = dict(globals())
    ns["_evalf"] = evalf
    ns["_certf"] = _no_certificate
    ns["_EAGER_HESSIAN"] = False
    for name in _TEMPLATES:
        py = globals()[name].py_func
        fn = types.FunctionType(py.__code__, ns, py.__name__, py.__defaults__, py.__closure__)
        fn.__doc__ = py.__doc__
        ns[name] = njit(nogil=True)(fn)
    ns["_startf"] = ns["_start_weak"] if startf is None else startf
    prox_chunk, newton_chunk = ns["_prox_chunk"], ns["_newton_chunk"]

    def prox_batch_threaded(Y, Omega, V, par, ka, kb, tau, gtol, maxit, wsize, Uprev, warm):
        """:func:`prox_batch` with the rows split over threads."""
        n, K = Omega.shape
        out = (np.empty((n, K)), np.empty((n, K)), np.empty(n), np.empty(n),
               np.empty(n, dtype=np.bool_), np.empty((n, 4, K)))
        uhat, gout, trace, obj, failed, Uend = out
        _threaded_rows(n, lambda lo, hi: prox_chunk(
            lo, hi, Y, Omega, V, par, ka, kb, tau, gtol, maxit, wsize, uhat, gout, trace, obj,
            failed, Uprev, warm, Uend))
        return out

    def newton_batch_threaded(Y, Omega, U0, V, par, ka, kb, tau, gtol, maxit, wsize):
        """:func:`newton_batch` with the rows split over threads."""
        n, K = Omega.shape
        U, F, status = np.empty((n, K)), np.empty(n), np.empty(n, dtype=np.int64)
        _threaded_rows(n, lambda lo, hi: newton_chunk(
            lo, hi, Y, Omega, U0, V, par, ka, kb, tau, gtol, maxit, wsize, U, F, status))
        return U, F, status

    ns["prox_batch"], ns["newton_batch"] = prox_batch_threaded, newton_batch_threaded
    return ns


#: row blocks per thread of :func:`_threaded_rows`: rows differ in cost (a multi-start prox
#: against a certified single run), so each thread takes several blocks in turn
_BLOCKS_PER_THREAD = 8


def _row_pool(workers: int):
    """This process's thread pool of ``workers`` threads for :func:`_threaded_rows`, started
    once: a pool per call cost ~0.45 ms (two thread starts, their joins), ~1000 times in a
    4 x 4 softmax phase diagram.  Keyed by the process id, so that a forked child (whose
    copy of the pool has no threads) starts its own."""
    key = (os.getpid(), workers)
    with _ROW_POOLS_LOCK:  # callers on several threads (a threaded executor) share it
        pool = _ROW_POOLS.get(key)
        if pool is None:
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(max_workers=workers,
                                      thread_name_prefix="amp-attention-rows")
            _ROW_POOLS[key] = pool
    return pool


#: (pid, threads) -> the idle row pool (:func:`_row_pool`): a cache of threads, no state
#: that any result depends on
_ROW_POOLS: dict = {}
_ROW_POOLS_LOCK = threading.Lock()


def _threaded_rows(n: int, run_rows, chunk: int = _CHUNK) -> None:
    """``run_rows(lo, hi)`` (a nogil kernel writing rows lo..hi-1 of shared outputs) over all
    n rows, on as many threads as Numba may use (amp_attention.threads sets that), at least
    ``chunk`` rows a thread."""
    from numba import get_num_threads

    workers = min(get_num_threads(), max(1, n // chunk))
    if workers <= 1:
        run_rows(0, n)
        return
    edges = np.linspace(0, n, min(n, workers * _BLOCKS_PER_THREAD) + 1).astype(np.int64)
    blocks = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    # one task per thread, each taking the next block in turn (itertools.count's next is
    # atomic under the GIL): a submit per block cost ~12 us each
    nxt = itertools.count()
    stop = False  # set on an interrupt or an error: the blocks not yet taken are dropped

    def take_blocks() -> None:
        for k in iter(nxt.__next__, None):
            if k >= len(blocks) or stop:
                return
            run_rows(*blocks[k])

    futures = [_row_pool(workers).submit(take_blocks) for _ in range(workers)]
    try:
        for f in futures:
            f.result()
    finally:
        # an interrupt or an error: the blocks not yet started are dropped, the running
        # ones finish (their outputs are this call's, which nobody reads after it)
        stop = True
        for f in futures:
            f.cancel()
        for f in futures:
            if not f.cancelled():
                f.exception()


def threaded_tasks(n: int, task) -> None:
    """``task(i)`` for i = 0..n-1 on the row threads (:func:`_threaded_rows`, one row a task;
    serial on one thread): for work that releases the GIL in coarse pieces (NumPy and SciPy
    kernels)."""

    def run_rows(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            task(i)

    _threaded_rows(n, run_rows, chunk=1)


# ---------------------------------------------------- user-defined channels
# Step of the central differences of the u-gradient that give a user channel's
# Hessian: with an exact gradient, eps^(1/3) (error ~ eps^(2/3)); with a
# finite-difference gradient, whose own error e_g ~ 4e-11 plays the role of
# eps, the balance is at e_g^(1/3) ~ 3e-4, giving ~1e-7 relative error.
FD_HESS_STEP_EXACT_GRAD = FD_STEP
FD_HESS_STEP_FD_GRAD = 3e-4


def make_custom_kernels(g, jac, start, L: int, M: int) -> dict:
    """Kernels of a user channel, compiled on first use (closures around g, jac, start).

    Returns a dict with the batch drivers ``prox_batch``, ``newton_batch``,
    ``starts_batch``, ``loss_grad_hess_one`` (same signatures as the
    module-level ones), the evaluator ``evalf``, and ``outputs`` (H (n, L, L) -> (n, M)),
    ``loss_grad_h`` ((Y, H) -> (loss (n,), G (n, L, L))), ``jac``
    (h -> (M, L, L)).

    Without ``jac`` the Jacobian is a central difference in each of the L^2
    entries of h, step FD_STEP * max(1, |h_ab|) (FD_STEP = eps^(1/3) ~ 6e-6),
    accurate to about 1e-10 relative for a smooth g of O(1) derivatives.  The
    Hessian of l in u is always a central difference of the u-gradient (step
    FD_HESS_STEP_EXACT_GRAD or FD_HESS_STEP_FD_GRAD times max(1, |u_k|)),
    symmetrised.  ``start(y, omega) -> u0`` gives the data-consistent start;
    without it the prox uses :func:`_start_weak`.
    """
    has_jac = jac is not None
    hstep = FD_HESS_STEP_EXACT_GRAD if has_jac else FD_HESS_STEP_FD_GRAD
    fstep = FD_STEP

    if has_jac:
        jacf = jac
    else:
        @njit
        def jacf(h):
            J = np.empty((M, L, L))
            hp = h.copy()
            for a in range(L):
                for b in range(L):
                    x = h[a, b]
                    s = fstep * max(1.0, abs(x))
                    hp[a, b] = x + s
                    gp = g(hp)
                    hp[a, b] = x - s
                    gm = g(hp)
                    hp[a, b] = x
                    # The representable difference, not 2 s, is the true step.
                    den = (x + s) - (x - s)
                    for m in range(M):
                        J[m, a, b] = (gp[m] - gm[m]) / den
            return J

    @njit
    def _loss_G(h, y, G):
        gv = g(h)
        loss = 0.0
        for m in range(M):
            r = gv[m] - y[m]
            loss += r * r
        J = jacf(h)
        for a in range(L):
            for b in range(L):
                s = 0.0
                for m in range(M):
                    s += (gv[m] - y[m]) * J[m, a, b]
                G[a, b] = s
        return 0.5 * loss

    @njit
    def _grad_u_at(u, y, ka, kb, tau, h, G, grad):
        _h_from_u(u, ka, kb, tau, h)
        loss = _loss_G(h, y, G)
        _grad_to_u(G, ka, kb, tau, grad)
        return loss

    @njit
    def evalf(u, y, par, ka, kb, tau, mode, work, grad, hess):
        h = np.empty((L, L))
        _h_from_u(u, ka, kb, tau, h)
        if mode == 0:
            gv = g(h)
            loss = 0.0
            for m in range(M):
                r = gv[m] - y[m]
                loss += r * r
            return 0.5 * loss
        G = np.empty((L, L))
        loss = _grad_u_at(u, y, ka, kb, tau, h, G, grad)
        if mode >= 2:
            K = u.size
            up = u.copy()
            gp = np.empty(K)
            gm = np.empty(K)
            for k in range(K):
                x = u[k]
                s = hstep * max(1.0, abs(x))
                up[k] = x + s
                _grad_u_at(up, y, ka, kb, tau, h, G, gp)
                up[k] = x - s
                _grad_u_at(up, y, ka, kb, tau, h, G, gm)
                up[k] = x
                den = (x + s) - (x - s)
                for k2 in range(K):
                    hess[k2, k] = (gp[k2] - gm[k2]) / den
            for k in range(K):
                for k2 in range(k + 1, K):
                    v = 0.5 * (hess[k, k2] + hess[k2, k])
                    hess[k, k2] = v
                    hess[k2, k] = v
        return loss

    startf = None
    if start is not None:
        @njit
        def startf(y, omega, V, par, ka, kb, tau, work, u0):
            s = start(y, omega)
            for k in range(u0.size):
                u0[k] = s[k]

    @njit(nogil=True)
    def _outputs_rows(lo, hi, H, out):
        for i in range(lo, hi):
            gv = g(np.ascontiguousarray(H[i]))
            for m in range(M):
                out[i, m] = gv[m]

    @njit(nogil=True)
    def _loss_grad_h_rows(lo, hi, Y, H, loss, G):
        for i in range(lo, hi):
            loss[i] = _loss_G(np.ascontiguousarray(H[i]), Y[i], G[i])

    # rows over threads as in _rebind (no Numba parallel loop to compile per channel)
    def outputs(H):
        out = np.empty((H.shape[0], M))
        _threaded_rows(H.shape[0], lambda lo, hi: _outputs_rows(lo, hi, H, out))
        return out

    def loss_grad_h(Y, H):
        n = H.shape[0]
        loss, G = np.empty(n), np.empty((n, L, L))
        _threaded_rows(n, lambda lo, hi: _loss_grad_h_rows(lo, hi, Y, H, loss, G))
        return loss, G

    ns = _rebind(evalf, startf)
    out = {name: ns[name] for name in ("prox_batch", "newton_batch", "starts_batch",
                                       "loss_grad_hess_one")}
    out.update(outputs=outputs, loss_grad_h=loss_grad_h, jac=jacf, evalf=evalf)
    return out
