"""Numba kernels for Biane's subordination on the real axis (leaf module).

For each real u, solve phi(u, t) = int dnu(s)/((u - s)^2 + t) = 1/qh for
t = v^2 by safeguarded Newton on r(t) = 1/phi(u, t) (increasing and concave in
t, so Newton from the left is monotone; t = qh is always to the right).  The
measure enters only through phi and d phi/dt; two measures are compiled:

* Marchenko-Pastur ``scale * mu`` (ratio c), through its Stieltjes transform
  G = 2/(A + R) or (A - R)/(2 c z), A = z - 1 + c, R = sqrt(z - l-) sqrt(z - l+);
* a discrete measure (sums over atoms, no cancellation as t -> 0).

See amp_attention.freeprob for the mathematics; these kernels are the hot loop
of every SE iteration.
"""

from __future__ import annotations

import cmath
import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def _sqrt_upper(z: complex) -> complex:
    # Arguments live in the closed upper half-plane; a signed zero imaginary
    # part must not flip the branch of the principal square root.
    return cmath.sqrt(complex(z.real, abs(z.imag)))


@njit(cache=True, error_model="numpy")
def mp_stieltjes_and_derivative(w: complex, c: float, scale: float) -> tuple[complex, complex]:
    """(G_nu(w), G_nu'(w)) for nu = scale * MP(c)."""
    z = w / scale
    sc = math.sqrt(c)
    lo = (1.0 - sc) ** 2
    hi = (1.0 + sc) ** 2
    R = _sqrt_upper(z - lo) * _sqrt_upper(z - hi)
    A = z - 1.0 + c
    plus = A + R
    minus = A - R
    if abs(plus) >= abs(minus):
        G = 2.0 / plus
    else:
        G = minus / (2.0 * c * z)
    G1 = -G * (1.0 - c * G) / R
    return G / scale, G1 / (scale * scale)


@njit(cache=True, error_model="numpy")
def _newton_v(qh: float, phi_fn_kind: int, u: float, c: float, scale: float,
              points: np.ndarray, weights: np.ndarray, t0: float) -> float:
    lo = 0.0
    hi = qh
    # Any start in (0, qh] converges (one step lands left of the root, then
    # monotone); a neighbour's solution saves most of the iterations.
    t = t0 if (t0 > 0.0 and t0 <= qh) else qh
    for _ in range(200):
        if phi_fn_kind == 0:
            v = math.sqrt(t)
            G, G1 = mp_stieltjes_and_derivative(complex(u, v), c, scale)
            phi = -G.imag / v
            slope = -(G1.real + phi) / (2.0 * t)
        else:
            phi = 0.0
            slope = 0.0
            for k in range(points.size):
                inv = 1.0 / ((u - points[k]) ** 2 + t)
                wi = weights[k] * inv
                phi += wi
                slope -= wi * inv
        if not (phi > 0.0 and math.isfinite(phi)):
            # t too small for a finite evaluation: move right (bisect).
            lo = max(lo, t)
            t = 0.5 * (lo + hi) if lo > 0.0 else 0.5 * hi
            continue
        res = 1.0 / phi - qh
        if res > 0.0:
            hi = min(hi, t)
        else:
            lo = max(lo, t)
        if abs(res) <= 1e-15 * qh:
            return math.sqrt(t)
        dr = -slope / (phi * phi)
        tn = t - res / dr if dr > 0.0 else -1.0
        if not (tn > lo and tn < hi) or not math.isfinite(tn):
            tn = math.sqrt(lo * hi) if lo > 0.0 else 1e-3 * hi
        if abs(tn - t) <= 1e-16 * t:
            return math.sqrt(tn)
        t = tn
    return math.sqrt(t)


@njit(cache=True, error_model="numpy")
def solve_v_mp(u: np.ndarray, qh: float, c: float, scale: float) -> np.ndarray:
    out = np.empty(u.size)
    dummy = np.zeros(1)
    for i in range(u.size):
        out[i] = _newton_v(qh, 0, u[i], c, scale, dummy, dummy, qh)
    return out


@njit(cache=True, error_model="numpy")
def solve_v_discrete(u: np.ndarray, qh: float, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    out = np.empty(u.size)
    t0 = qh
    for i in range(u.size):
        # Nodes come in increasing order within a panel: warm-start from the
        # previous node (each Newton step costs a pass over all atoms).
        v = _newton_v(qh, 1, u[i], 0.0, 1.0, points, weights, t0)
        out[i] = v
        t0 = v * v if v > 0.0 else qh
    return out


@njit(cache=True, error_model="numpy")
def discrete_stieltjes(w: np.ndarray, points: np.ndarray, weights: np.ndarray,
                       derivatives: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(G, G', G'') of sum_k weights_k delta(s - points_k) at every w (G', G'' only
    when ``derivatives``; zeros otherwise).

    With a = Re w - s_k, b = Im w: 1/(w - s_k) = (a - i b)/(a^2 + b^2), so the
    sums run in real arithmetic without the d x N temporaries of the NumPy form
    (the hot loop of the SE for power-law targets)."""
    n = w.size
    G = np.empty(n, dtype=np.complex128)
    G1 = np.zeros(n, dtype=np.complex128)
    G2 = np.zeros(n, dtype=np.complex128)
    for i in range(n):
        x = w[i].real
        b = w[i].imag
        b2 = b * b
        g_re = 0.0
        g_im = 0.0
        g1_re = 0.0
        g1_im = 0.0
        g2_re = 0.0
        g2_im = 0.0
        for k in range(points.size):
            a = x - points[k]
            r = 1.0 / (a * a + b2)
            wr = weights[k] * r
            g_re += wr * a
            g_im -= wr * b
            if derivatives:
                # (a - i b)^2 r^2 and (a - i b)^3 r^3
                wr2 = wr * r
                sq_re = a * a - b2
                sq_im = -2.0 * a * b
                g1_re -= wr2 * sq_re
                g1_im -= wr2 * sq_im
                wr3 = wr2 * r
                g2_re += 2.0 * wr3 * (sq_re * a + sq_im * b)
                g2_im += 2.0 * wr3 * (sq_im * a - sq_re * b)
        G[i] = complex(g_re, g_im)
        if derivatives:
            G1[i] = complex(g1_re, g1_im)
            G2[i] = complex(g2_re, g2_im)
    return G, G1, G2
