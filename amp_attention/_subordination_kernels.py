"""Numba kernels for Biane's subordination on the real axis (leaf module).

Everything the free convolution nu boxplus sc(qh) needs per SE evaluation runs
here, compiled end to end (amp_attention.freeprob holds the mathematics):

* the Stieltjes transform G_nu and its derivatives (:func:`g_derivs`);
* the support of rho_B in the u variable: outer edges, split gaps and the
  panel breaks (:func:`support_u`), and the graded panels (:func:`panels`);
* v(u): for each real u, phi(u, t) = int dnu(s)/((u - s)^2 + t) = 1/qh for
  t = v^2 by safeguarded Newton on r(t) = 1/phi(u, t) (increasing and concave
  in t, so Newton from the left is monotone; t = qh is always to the right);
* the composite Gauss-Jacobi rule on the panels (:func:`quadrature_rule`) and
  psi^{-1} of a cut (:func:`u_cut`).

A measure is passed as (kind, c, scale, points, weights): kind MP is
``scale * Marchenko-Pastur(c)`` (G = 2/(A + R) or (A - R)/(2 c z), A = z - 1 + c,
R = sqrt(z - l-) sqrt(z - l+)); kind DISCRETE is sum_k weights_k delta(s - points_k)
(sums over atoms: no cancellation as t -> 0).
"""

from __future__ import annotations

import cmath
import math

import numpy as np
from ._jit import njit

MP = 0
DISCRETE = 1

#: root-function selectors of :func:`_root_fn`
_LEFT_EDGE, _RIGHT_EDGE, _SLOPE, _PHI_BELOW, _PHI_ABOVE, _PSI = 0, 1, 2, 3, 4, 5


@njit(cache=True, error_model="numpy")
def _sqrt_upper(z: complex) -> complex:
    # Arguments live in the closed upper half-plane; a signed zero imaginary
    # part must not flip the branch of the principal square root.
    return cmath.sqrt(complex(z.real, abs(z.imag)))


@njit(cache=True, error_model="numpy")
def _mp_g_and_root(z: complex, c: float) -> tuple[complex, complex]:
    """(G_mu(z), R(z)) of Marchenko-Pastur(c), R = sqrt(z - l-) sqrt(z - l+): per point
    the form of G without cancellation ((A + R)(A - R) = 4 c z, so one is large)."""
    sc = math.sqrt(c)
    lo = (1.0 - sc) ** 2
    hi = (1.0 + sc) ** 2
    if z.imag > 0.0:
        # One square root: the arguments of z - l- and z - l+ add up to S in (0, 2 pi);
        # their product of roots is the principal root of the product when S <= pi
        # (Im >= 0) and minus it when S > pi (Im < 0), where sqrt(p) = conj(sqrt(conj p)).
        prod = (z - lo) * (z - hi)
        root = cmath.sqrt(complex(prod.real, abs(prod.imag)))
        R = root if prod.imag >= 0.0 else -root.conjugate()
    else:
        z = complex(z.real, 0.0)
        R = _sqrt_upper(z - lo) * _sqrt_upper(z - hi)
    A = z - 1.0 + c
    plus = A + R
    minus = A - R
    if plus.real * plus.real + plus.imag * plus.imag >= minus.real * minus.real + minus.imag * minus.imag:
        return 2.0 / plus, R
    return minus / (2.0 * c * z), R


@njit(cache=True, error_model="numpy")
def g_derivs(kind: int, w: complex, c: float, scale: float, points: np.ndarray,
             weights: np.ndarray) -> tuple[complex, complex, complex]:
    """(G, G', G'') of the measure at w (Im w >= 0, off the support)."""
    if kind == MP:
        z = w / scale
        G, R = _mp_g_and_root(z, c)
        # Implicit differentiation of c z G^2 - (z - 1 + c) G + 1 = 0 with
        # 2 c z G - (z - 1 + c) = -R on the physical branch (accurate at the edges).
        N = G * (1.0 - c * G)
        D = -R
        G1 = N / D
        N1 = G1 * (1.0 - 2.0 * c * G)
        D1 = -(z - 1.0 - c) / R
        G2 = (N1 * D - N * D1) / (D * D)
        return G / scale, G1 / scale**2, G2 / scale**3
    return _discrete_g(w, points, weights, True)


@njit(cache=True, error_model="numpy")
def _discrete_g(w: complex, points: np.ndarray, weights: np.ndarray,
                derivatives: bool) -> tuple[complex, complex, complex]:
    """(G, G', G'') of sum_k weights_k delta(s - points_k) in real arithmetic: with
    a = Re w - s_k, b = Im w, 1/(w - s_k) = (a - i b) r, r = 1/(a^2 + b^2) (G', G''
    zero unless ``derivatives``; G is the same bit for bit either way)."""
    x = w.real
    b = w.imag
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
    return complex(g_re, g_im), complex(g1_re, g1_im), complex(g2_re, g2_im)


@njit(cache=True, error_model="numpy")
def _g_only(kind: int, w: complex, c: float, scale: float, points: np.ndarray,
            weights: np.ndarray) -> complex:
    if kind == MP:
        return _mp_g_and_root(w / scale, c)[0] / scale
    return _discrete_g(w, points, weights, False)[0]


@njit(cache=True, error_model="numpy")
def _phi_and_slope(kind: int, u: float, t: float, c: float, scale: float, points: np.ndarray,
                   weights: np.ndarray) -> tuple[float, float, complex]:
    """(phi(u, t), d phi/dt, G(u + i sqrt t)) at t = v^2 > 0 (G: Marchenko-Pastur only,
    where it comes for free; 0 for a discrete measure, whose Re G is a sum of its own)."""
    if kind == MP:
        v = math.sqrt(t)
        # G and G' only (g_derivs without G''): this is the innermost loop
        G, R = _mp_g_and_root(complex(u, v) / scale, c)
        G1 = -G * (1.0 - c * G) / R
        phi = -G.imag / (scale * v)
        # d/dv Im G = Re G'  =>  d phi/dv = -(Re G' + phi)/v, and dt = 2 v dv.
        return phi, -(G1.real / (scale * scale) + phi) / (2.0 * t), G / scale
    phi = 0.0
    slope = 0.0
    for k in range(points.size):
        inv = 1.0 / ((u - points[k]) ** 2 + t)
        wi = weights[k] * inv
        phi += wi
        slope -= wi * inv
    return phi, slope, 0j


@njit(cache=True, error_model="numpy")
def _newton_v(kind: int, u: float, qh: float, c: float, scale: float, points: np.ndarray,
              weights: np.ndarray, t0: float, want_g: bool) -> tuple[float, complex]:
    """(v(u), G(u + i v) when ``want_g``): safeguarded Newton on r(t) = 1/phi(u, t)."""
    lo = 0.0
    hi = qh
    # Any start in (0, qh] converges (one step lands left of the root, then
    # monotone); a neighbour's solution saves most of the iterations.
    t = t0 if (t0 > 0.0 and t0 <= qh) else qh
    G = 0j
    for _ in range(200):
        phi, slope, G = _phi_and_slope(kind, u, t, c, scale, points, weights)
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
            break
        dr = -slope / (phi * phi)
        tn = t - res / dr if dr > 0.0 else -1.0
        if not (tn > lo and tn < hi) or not math.isfinite(tn):
            tn = math.sqrt(lo * hi) if lo > 0.0 else 1e-3 * hi
        if abs(tn - t) <= 1e-16 * t:
            t = tn  # G is that of the previous t: 1e-16 away
            break
        t = tn
    v = math.sqrt(t)
    if want_g and kind != MP:
        G = _discrete_g(complex(u, v), points, weights, False)[0]
    return v, G


@njit(cache=True, error_model="numpy")
def solve_v(kind: int, u: np.ndarray, qh: float, c: float, scale: float, points: np.ndarray,
            weights: np.ndarray) -> np.ndarray:
    """v(u) for every u (inside the support u-intervals), warm-started from the
    previous entry (quadrature nodes come in increasing order within a panel)."""
    out = np.empty(u.size)
    t0 = qh
    for i in range(u.size):
        v = _newton_v(kind, u[i], qh, c, scale, points, weights, t0, False)[0]
        out[i] = v
        t0 = v * v if v > 0.0 else qh
    return out


@njit(cache=True, error_model="numpy")
def stieltjes_array(kind: int, w: np.ndarray, c: float, scale: float, points: np.ndarray,
                    weights: np.ndarray, derivatives: bool):
    """(G, G', G'') at every w (G', G'' only when ``derivatives``; zeros otherwise);
    discrete measures in real arithmetic without the d x N temporaries of NumPy."""
    n = w.size
    G = np.empty(n, dtype=np.complex128)
    G1 = np.zeros(n, dtype=np.complex128)
    G2 = np.zeros(n, dtype=np.complex128)
    for i in range(n):
        if derivatives:
            G[i], G1[i], G2[i] = g_derivs(kind, w[i], c, scale, points, weights)
        else:
            G[i] = _g_only(kind, w[i], c, scale, points, weights)
    return G, G1, G2


# ----------------------------------------------------------------------- support
@njit(cache=True, error_model="numpy")
def _phi0(kind, u, c, scale, points, weights) -> float:
    """phi(u, 0) = -G'(u) for real u off the support of nu."""
    return -g_derivs(kind, complex(u, 0.0), c, scale, points, weights)[1].real


@njit(cache=True, error_model="numpy")
def _root_fn(mode, x, p0, kind, qh, c, scale, points, weights, intervals) -> float:
    """The increasing functions whose sign change :func:`_bisect` finds."""
    if mode == _LEFT_EDGE:
        return 1.0 / qh - _phi0(kind, p0 - math.exp(x), c, scale, points, weights)
    if mode == _RIGHT_EDGE:
        return 1.0 / qh - _phi0(kind, p0 + math.exp(x), c, scale, points, weights)
    if mode == _SLOPE:  # phi0' = -G'' (phi0 is convex on a gap)
        return -g_derivs(kind, complex(x, 0.0), c, scale, points, weights)[2].real
    if mode == _PHI_BELOW:
        return 1.0 / qh - _phi0(kind, x, c, scale, points, weights)
    if mode == _PHI_ABOVE:
        return _phi0(kind, x, c, scale, points, weights) - 1.0 / qh
    return psi_scalar(x, kind, qh, c, scale, points, weights, intervals) - p0


@njit(cache=True, error_model="numpy")
def _bisect(mode, lo, hi, p0, kind, qh, c, scale, points, weights, intervals) -> float:
    """Sign change of an increasing function on [lo, hi] to full precision (lo when
    it is already positive there, hi when it is still <= 0 at hi)."""
    f_lo = _root_fn(mode, lo, p0, kind, qh, c, scale, points, weights, intervals)
    if f_lo > 0.0:
        return lo
    f_hi = _root_fn(mode, hi, p0, kind, qh, c, scale, points, weights, intervals)
    if f_hi <= 0.0:
        return hi
    for _ in range(400):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _root_fn(mode, mid, p0, kind, qh, c, scale, points, weights, intervals) > 0.0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 4e-16 * max(abs(lo), abs(hi)):
            break
    return 0.5 * (lo + hi)


@njit(cache=True, error_model="numpy")
def support_u(kind: int, qh: float, c: float, scale: float, points: np.ndarray,
              weights: np.ndarray, comp_lo: np.ndarray, comp_hi: np.ndarray,
              comp_mass: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The u-intervals of the support of rho_B, shape (k, 2), the same in x, and the
    panel breaks inside them (flat, sorted within an interval, with the owning
    interval's index).

    Components (comp_lo, comp_hi) are the sorted singular components of nu
    (atoms: lo == hi, of mass comp_mass; 0 marks a continuous component).  On a gap
    phi0 is convex; the gap splits the support when min phi0 < 1/qh (edges: the
    two roots of phi0 = 1/qh), and is nearly split (a panel break at the minimum)
    when qh min phi0 < 4.  Between two atoms of masses a, b a distance g apart,
    phi0 >= (a^(1/3) + b^(1/3))^3 / g^2, so a gap whose bound already excludes both
    costs nothing (the many small gaps of a power-law spectrum)."""
    inv_qh = 1.0 / qh
    span = math.sqrt(qh) * 1.01
    n_comp = comp_lo.size
    l0 = comp_lo[0]
    rk = comp_hi[n_comp - 1]
    big = 0.0
    for j in range(n_comp):
        big = max(big, abs(comp_lo[j]), abs(comp_hi[j]))
    # Stay a relative 1e-12 away from the components: at a branch point of
    # G_nu the closed forms lose all precision (the edge is then that close).
    eps = 1e-12 * max(1.0, big)
    lo_log = math.log(min(eps, 0.5 * span))
    hi_log = math.log(span)
    s_left = math.exp(_bisect(_LEFT_EDGE, lo_log, hi_log, l0, kind, qh, c, scale, points,
                              weights, np.empty((0, 2))))
    s_right = math.exp(_bisect(_RIGHT_EDGE, lo_log, hi_log, rk, kind, qh, c, scale, points,
                               weights, np.empty((0, 2))))
    edges_lo = [l0 - s_left]
    edges_hi = [0.0]
    edges_hi.pop()
    brk = [0.0]
    brk.pop()
    owner = [0]
    owner.pop()
    dummy = np.empty((0, 2))
    for j in range(n_comp - 1):
        if comp_hi[j] > comp_lo[j]:
            brk.append(comp_lo[j])
            brk.append(comp_hi[j])
            owner.append(len(edges_hi))
            owner.append(len(edges_hi))
        g_lo = comp_hi[j] + eps
        g_hi = comp_lo[j + 1] - eps
        if comp_mass[j] > 0.0 and comp_mass[j + 1] > 0.0:
            gap = comp_lo[j + 1] - comp_hi[j]
            bound = (comp_mass[j] ** (1.0 / 3.0) + comp_mass[j + 1] ** (1.0 / 3.0)) ** 3 / (gap * gap)
            if qh * bound >= 4.0 * (1.0 + 1e-12):
                continue
        umin = _bisect(_SLOPE, g_lo, g_hi, 0.0, kind, qh, c, scale, points, weights, dummy)
        pmin = _phi0(kind, umin, c, scale, points, weights)
        if pmin < inv_qh:
            a = _bisect(_PHI_BELOW, g_lo, umin, 0.0, kind, qh, c, scale, points, weights, dummy)
            b = _bisect(_PHI_ABOVE, umin, g_hi, 0.0, kind, qh, c, scale, points, weights, dummy)
            edges_hi.append(a)
            edges_lo.append(b)
        elif qh * pmin < 4.0:
            # Nearly split: v(umin) ~ (gap/2) sqrt(qh phi0(umin) - 1) is small
            # against the gap, so w(u) passes close to the axis here; break
            # the panel.  Elsewhere (dense atoms, qh phi0 >> 1) the curve
            # stays far above the atoms and one panel spans many of them.
            brk.append(umin)
            owner.append(len(edges_hi))
    if comp_hi[n_comp - 1] > comp_lo[n_comp - 1]:
        brk.append(comp_lo[n_comp - 1])
        brk.append(comp_hi[n_comp - 1])
        owner.append(len(edges_hi))
        owner.append(len(edges_hi))
    edges_hi.append(rk + s_right)
    k = len(edges_lo)
    intervals = np.empty((k, 2))
    for i in range(k):
        intervals[i, 0] = edges_lo[i]
        intervals[i, 1] = edges_hi[i]
    # keep the breaks strictly inside their interval, sorted and unique
    keep_b = [0.0]
    keep_b.pop()
    keep_o = [0]
    keep_o.pop()
    for i in range(k):
        vals = [0.0]
        vals.pop()
        for j in range(len(brk)):
            if owner[j] == i and brk[j] > intervals[i, 0] and brk[j] < intervals[i, 1]:
                vals.append(brk[j])
        arr = np.sort(np.array(vals)) if len(vals) else np.empty(0)
        for j in range(arr.size):
            if j == 0 or arr[j] != arr[j - 1]:
                keep_b.append(arr[j])
                keep_o.append(i)
    breaks = np.empty(len(keep_b))
    owners = np.empty(len(keep_b), dtype=np.int64)
    for j in range(len(keep_b)):
        breaks[j] = keep_b[j]
        owners[j] = keep_o[j]
    # the support in x: psi(u) = u + qh Re G(u) at the ends (v = 0 there)
    intervals_x = np.empty((k, 2))
    for i in range(k):
        for e in range(2):
            ue = intervals[i, e]
            intervals_x[i, e] = ue + qh * _g_only(kind, complex(ue, 0.0), c, scale, points,
                                                  weights).real
    return intervals, intervals_x, breaks, owners


@njit(cache=True, error_model="numpy")
def panels(kind: int, qh: float, c: float, scale: float, points: np.ndarray, weights: np.ndarray,
           intervals: np.ndarray, breaks: np.ndarray, owners: np.ndarray):
    """Panels of the u-support, graded geometrically towards the internal breaks:
    the curve w(u) passes at a distance ~ v(break) from a singularity there, so
    panels shrink by factors of 4 towards a break until their size is comparable
    to that distance (the Gauss rules stay exponentially convergent).  Returns
    (lo, hi, sqrt_lo, sqrt_hi): a square-root end at the ends of each interval."""
    vb = solve_v(kind, breaks, qh, c, scale, points, weights)
    out_lo = [0.0]
    out_lo.pop()
    out_hi = [0.0]
    out_hi.pop()
    out_sl = [False]
    out_sl.pop()
    out_sh = [False]
    out_sh.pop()
    for i in range(intervals.shape[0]):
        a = intervals[i, 0]
        b = intervals[i, 1]
        pts = [a, b]
        idx = np.flatnonzero(owners == i)
        for j in idx:
            pts.append(breaks[j])
        if idx.size:
            base = np.sort(np.array(pts))
            for j in idx:
                p = breaks[j]
                vp = vb[j]
                k = np.searchsorted(base, p)
                for nb in (base[k - 1], base[k + 1]):
                    half = 0.5 * (nb - p)
                    delta = max(vp, 1e-13 * abs(half))
                    h = half * 0.25
                    while abs(h) > delta:
                        pts.append(p + h)
                        h *= 0.25
                    pts.append(p + half)
        srt = np.sort(np.array(pts))
        uniq = [srt[0]]
        for j in range(1, srt.size):
            if srt[j] != srt[j - 1]:
                uniq.append(srt[j])
        m = len(uniq)
        for j in range(m - 1):
            out_lo.append(uniq[j])
            out_hi.append(uniq[j + 1])
            out_sl.append(j == 0)
            out_sh.append(j == m - 2)
    n = len(out_lo)
    lo = np.empty(n)
    hi = np.empty(n)
    sl = np.empty(n, dtype=np.bool_)
    sh = np.empty(n, dtype=np.bool_)
    for j in range(n):
        lo[j] = out_lo[j]
        hi[j] = out_hi[j]
        sl[j] = out_sl[j]
        sh[j] = out_sh[j]
    return lo, hi, sl, sh


@njit(cache=True, error_model="numpy")
def _panel_nodes(kind, qh, c, scale, points, weights, lo, hi, t, w, D, x, wq, u, v):
    """One panel [lo, hi] of the composite rule: nodes u_i = lo + half (1 + t_i),
    v(u_i), x_i = psi(u_i) and weights W_i v_i psi'(u_i) / (pi qh) into x, wq, u, v
    (psi' by the spectral differentiation matrix D of the nodes t)."""
    n = t.size
    half = 0.5 * (hi - lo)
    t1 = t2 = t3 = u1 = u2 = u3 = 0.0
    for i in range(n):
        ui = lo + half * (1.0 + t[i])
        # Start Newton from the previous nodes' t = v^2 extrapolated (smooth in u on a
        # panel): two evaluations per node instead of four from the last node alone.
        t0 = qh
        if i >= 3:
            # the parabola through the three previous nodes (Lagrange form)
            t0 = (t1 * (ui - u2) * (ui - u3) / ((u1 - u2) * (u1 - u3))
                  + t2 * (ui - u1) * (ui - u3) / ((u2 - u1) * (u2 - u3))
                  + t3 * (ui - u1) * (ui - u2) / ((u3 - u1) * (u3 - u2)))
        elif i == 2:
            t0 = t1 + (t1 - t2) * (ui - u1) / (u1 - u2)
        elif i == 1:
            t0 = t1
        if not (t0 > 0.0 and t0 <= qh):
            t0 = t1 if i >= 1 else qh
        vi, G = _newton_v(kind, ui, qh, c, scale, points, weights, t0, True)
        t3, u3 = t2, u2
        t2, u2 = t1, u1
        t1, u1 = vi * vi, ui
        u[i] = ui
        v[i] = vi
        x[i] = ui + qh * G.real
    # D annihilates constants: differentiate x - mean(x) so that the rounding
    # error scales with the variation of x over the panel, not with |x| (an
    # isolated top atom's panel is narrow and far from 0).
    x_mean = 0.0
    for i in range(n):
        x_mean += x[i]
    x_mean /= n
    inv_pi_qh = 1.0 / (math.pi * qh)
    for i in range(n):
        dx = 0.0
        for j in range(n):
            dx += D[i, j] * (x[j] - x_mean)
        # W (half dx/du) v / (pi qh) with half dx/du = D x: the halves cancel
        wq[i] = w[i] * v[i] * dx * inv_pi_qh


@njit(cache=True, error_model="numpy")
def _rule_kind(sqrt_lo: bool, sqrt_hi: bool) -> int:
    """Index of a panel's Gauss-Jacobi rule in the tables: 2 [sqrt at hi] + [sqrt at lo]."""
    return (2 if sqrt_hi else 0) + (1 if sqrt_lo else 0)


@njit(cache=True, error_model="numpy")
def _level_rule(t_flat, w_flat, d_flat, off_t, off_d, ns, r, lev):
    """(nodes, weights, differentiation matrix) of rule kind r at level lev of the flat
    tables of :func:`spectral_integrals`."""
    n = ns[lev]
    return (t_flat[r, off_t[lev]:off_t[lev + 1]], w_flat[r, off_t[lev]:off_t[lev + 1]],
            d_flat[r, off_d[lev]:off_d[lev + 1]].reshape((n, n)))


@njit(cache=True, error_model="numpy")
def accept_smallest(err: np.ndarray, spent: float, rtol: float):
    """The acceptance rule of the per-panel adaptive quadrature (shared by
    :func:`spectral_integrals` and ``SemicircleFreeConvolution._adaptive_panels``):
    panels in increasing order of their error estimates ``err``, accepted while the
    accepted sum stays within half of the budget left, 0.5 (rtol - spent).  Returns
    (order, number accepted, their sum); all accepted means converged."""
    order = np.argsort(err)
    room = 0.5 * (rtol - spent)
    cum = 0.0
    n_ok = 0
    for k in range(err.size):
        if cum + err[order[k]] > room:
            break
        cum += err[order[k]]
        n_ok += 1
    return order, n_ok, cum


@njit(cache=True, error_model="numpy")
def quadrature_rule(kind: int, qh: float, c: float, scale: float, points: np.ndarray,
                    weights: np.ndarray, lo: np.ndarray, hi: np.ndarray, sqrt_lo: np.ndarray,
                    sqrt_hi: np.ndarray, t_tab: np.ndarray, w_tab: np.ndarray,
                    d_tab: np.ndarray):
    """Composite Gauss-Jacobi rule with n = t_tab.shape[1] nodes per panel.

    Rule r = 2 [sqrt at the panel's hi] + [sqrt at its lo] of the tables (nodes
    on [-1, 1], weights with the Jacobi weight divided out, spectral
    differentiation matrix).  Returns (x, weights, Re g_B, u, v) with
    int h(x) rho_B(x) dx ~ sum_i weights_i h(x_i): weights = W v psi'(u) / (pi qh)."""
    n = t_tab.shape[1]
    P = lo.size
    x = np.empty(P * n)
    wq = np.empty(P * n)
    u = np.empty(P * n)
    v = np.empty(P * n)
    for p in range(P):
        r = _rule_kind(sqrt_lo[p], sqrt_hi[p])
        sl = slice(p * n, (p + 1) * n)
        _panel_nodes(kind, qh, c, scale, points, weights, lo[p], hi[p], t_tab[r], w_tab[r],
                     d_tab[r], x[sl], wq[sl], u[sl], v[sl])
    return x, wq, (x - u) / qh, u, v


#: integrand families of :func:`spectral_integrals` (rows h_j(x) integrated against rho_B)
FAMILY_SHIFTED = 0  # f = (x - shift)/fscale: rows 1, f, f^2, x f, f Re g
FAMILY_BAYES = 1    # f = (2u - x)/fscale (posterior mean): rows f, f^2, x f, f Re g, rho_B^2
N_ROWS = 5


@njit(cache=True, error_model="numpy")
def _panel_sums(kind, qh, c, scale, points, weights, lo, hi, t, w, D, family, shift, fscale,
                x, wq, u, v, out, out_abs):
    """sum_i wq_i h_j(x_i) and sum_i |wq_i h_j(x_i)| over one panel's rule."""
    n = t.size
    _panel_nodes(kind, qh, c, scale, points, weights, lo, hi, t, w, D, x[:n], wq[:n], u[:n],
                 v[:n])
    for j in range(N_ROWS):
        out[j] = 0.0
        out_abs[j] = 0.0
    rho_scale = 1.0 / (math.pi * qh)
    for i in range(n):
        re_g = (x[i] - u[i]) / qh
        if family == FAMILY_SHIFTED:
            f = (x[i] - shift) / fscale
            h0, h1, h2, h3, h4 = 1.0, f, f * f, x[i] * f, f * re_g
        else:
            f = (2.0 * u[i] - x[i]) / fscale
            rho = v[i] * rho_scale
            h0, h1, h2, h3, h4 = f, f * f, x[i] * f, f * re_g, rho * rho
        wi = wq[i]
        out[0] += wi * h0
        out[1] += wi * h1
        out[2] += wi * h2
        out[3] += wi * h3
        out[4] += wi * h4
        aw = abs(wi)
        out_abs[0] += aw * abs(h0)
        out_abs[1] += aw * abs(h1)
        out_abs[2] += aw * abs(h2)
        out_abs[3] += aw * abs(h3)
        out_abs[4] += aw * abs(h4)


@njit(cache=True, error_model="numpy")
def spectral_integrals(kind: int, qh: float, c: float, scale: float, points: np.ndarray,
                       weights: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       sqrt_lo: np.ndarray, sqrt_hi: np.ndarray, family: int, shift: float,
                       fscale: float, rtol: float, t_flat: np.ndarray, w_flat: np.ndarray,
                       d_flat: np.ndarray, off_t: np.ndarray, off_d: np.ndarray,
                       ns: np.ndarray, tables_complete: bool):
    """int h_j rho_B over the panels for the rows h_j of ``family``, per-panel adaptive.

    Level l of the tables has ns[l] = ns[0] 2^l nodes per panel (flat: nodes and
    weights at off_t[l]:off_t[l+1], the n x n differentiation matrix at
    off_d[l]:off_d[l+1], each for the four panel kinds).  Every panel starts at
    levels 0 and 1 and is refined while its two finest rules differ; the
    differences |I_p(2n) - I_p(n)| (relative to each row's scale max(|I|, int |h|
    rho_B)) of the accepted panels add up to at most rtol, accepted greedily from the
    smallest within half of the budget left -- the rule of
    :meth:`amp_attention.freeprob.SemicircleFreeConvolution._adaptive_panels`.

    Returns (values, error estimate, status): status 0 converged, 1 a panel needs more
    than the last level and the tables are complete (the finest rules' values and
    error), 2 it needs more than the tables hold (``tables_complete`` False: call
    again with more levels).
    """
    P = lo.size
    L = ns.size
    nmax = ns[L - 1]
    if L < 2:
        raise ValueError("spectral_integrals needs at least two levels")
    coarse = np.zeros((P, N_ROWS))
    fine = np.zeros((P, N_ROWS))
    mass = np.zeros((P, N_ROWS))
    level = np.zeros(P, dtype=np.int64)  # the fine level of each panel
    active = np.ones(P, dtype=np.bool_)
    x = np.empty(nmax)
    wq = np.empty(nmax)
    u = np.empty(nmax)
    v = np.empty(nmax)
    junk = np.empty(N_ROWS)
    for p in range(P):
        r = _rule_kind(sqrt_lo[p], sqrt_hi[p])
        for lev in range(2):
            t, w, D = _level_rule(t_flat, w_flat, d_flat, off_t, off_d, ns, r, lev)
            if lev == 0:
                _panel_sums(kind, qh, c, scale, points, weights, lo[p], hi[p], t, w, D, family,
                            shift, fscale, x, wq, u, v, coarse[p], junk)
            else:
                _panel_sums(kind, qh, c, scale, points, weights, lo[p], hi[p], t, w, D, family,
                            shift, fscale, x, wq, u, v, fine[p], mass[p])
        level[p] = 1
    spent = 0.0
    total = np.zeros(N_ROWS)
    err = np.zeros(P)
    while True:
        scl = np.zeros(N_ROWS)
        for j in range(N_ROWS):
            tot = 0.0
            ab = 0.0
            for p in range(P):
                tot += fine[p, j]
                ab += mass[p, j]
            total[j] = tot
            scl[j] = max(abs(tot), ab) + 1e-300
        n_act = 0
        err_sum = 0.0
        for p in range(P):
            if active[p]:
                e = 0.0
                for j in range(N_ROWS):
                    e = max(e, abs(fine[p, j] - coarse[p, j]) / scl[j])
                err[p] = e
                err_sum += e
                n_act += 1
        idx = np.flatnonzero(active)
        rank, n_ok, cum = accept_smallest(err[idx], spent, rtol)
        order = idx[rank]
        if n_ok == n_act:
            return total, spent + cum, 0
        for k in range(n_ok, n_act):
            if level[order[k]] + 1 >= L:
                return total, spent + err_sum, 1 if tables_complete else 2
        spent += cum
        for k in range(n_ok):
            active[order[k]] = False
        for k in range(n_ok, n_act):
            p = order[k]
            lev = level[p] + 1
            t, w, D = _level_rule(t_flat, w_flat, d_flat, off_t, off_d, ns,
                                  _rule_kind(sqrt_lo[p], sqrt_hi[p]), lev)
            for j in range(N_ROWS):
                coarse[p, j] = fine[p, j]
            _panel_sums(kind, qh, c, scale, points, weights, lo[p], hi[p], t, w, D, family,
                        shift, fscale, x, wq, u, v, fine[p], mass[p])
            level[p] = lev


@njit(cache=True, error_model="numpy")
def psi_scalar(u: float, kind: int, qh: float, c: float, scale: float, points: np.ndarray,
               weights: np.ndarray, intervals: np.ndarray) -> float:
    """x = psi(u) = u + qh Re G(u + i v(u)) (v = 0 outside the support u-intervals)."""
    for i in range(intervals.shape[0]):
        if intervals[i, 0] < u < intervals[i, 1]:
            G = _newton_v(kind, u, qh, c, scale, points, weights, qh, True)[1]
            return u + qh * G.real
    return u + qh * _g_only(kind, complex(u, 0.0), c, scale, points, weights).real


@njit(cache=True, error_model="numpy")
def u_cut(x_cut: float, a: float, b: float, kind: int, qh: float, c: float, scale: float,
          points: np.ndarray, weights: np.ndarray, intervals: np.ndarray) -> float:
    """psi^{-1}(x_cut) on the u-interval [a, b] (psi is increasing)."""
    return _bisect(_PSI, a, b, x_cut, kind, qh, c, scale, points, weights, intervals)
