"""Free convolution with a semicircle: rho_B = nu boxplus sc(qh) (docs/theory.md "Denoiser side
and free probability").

B = mh S0 + sqrt(qh) Z has the limiting eigenvalue law nu boxplus sc(qh), with
nu the law of mh * s (s ~ spectrum of S0) and sc(qh) the semicircle of variance
qh.  Its Stieltjes transform g_B(z) = int rho_B(y)/(z - y) dy satisfies the
subordination relation g_B(z) = G_nu(w), w = z - qh g_B(z).

On the real axis we use Biane's parametrisation of the subordination point:
for real u let v(u) >= 0 solve

    phi(u, v^2) := int dnu(s) / ((u - s)^2 + v^2) = 1 / qh       (v = 0 if impossible)

and w(u) = u + i v(u).  Then x = psi(u) := u + qh Re G_nu(w(u)) is an increasing
bijection of R, and at x = psi(u)

    rho_B(x) = v(u) / (pi qh),      Re g_B(x + i0) = (x - u) / qh.

The support of rho_B is psi({v > 0}); in u it is a union of intervals whose
edges solve -G_nu'(u) = 1/qh outside the support of nu.  Integrals
int h(x) rho_B(x) dx are computed in the u variable, where v vanishes like a
square root at the interval ends and everything else is analytic: composite
Gauss-Jacobi panels with square-root end weights converge exponentially (each
panel refined on its own until it agrees with its refinement), and psi'(u) is
obtained by spectral differentiation of x(u) on each panel (the closed form
|1 + qh G'|^2 / (1 + qh Re G') cancels badly near the edges).  The support, the
panels, v(u) and the rules are compiled (:mod:`._subordination_kernels`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
from scipy.special import roots_jacobi

from . import _subordination_kernels as _k
from .targets import SpectralMeasure

_PI = math.pi


def _bisect_increasing(
    fun: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray, iters: int = 100
) -> np.ndarray:
    """Vectorised bisection for the sign change of an increasing function on [lo, hi]."""
    lo = np.array(lo, dtype=float, copy=True)
    hi = np.array(hi, dtype=float, copy=True)
    if lo.size == 1:
        # One unknown: Brent's method needs ~10 evaluations instead of ~60.
        def scalar(x: float) -> float:
            return float(fun(np.array([x]))[0])

        from scipy.optimize import brentq  # here: the import costs 0.3 s at start-up

        a, b = float(lo[0]), float(hi[0])
        fa, fb = scalar(a), scalar(b)
        if fa > 0:
            return lo
        if fb <= 0 or not (np.isfinite(fa) and np.isfinite(fb)):
            return hi if fb <= 0 else _bisect_increasing_loop(fun, lo, hi, iters)
        return np.array([brentq(scalar, a, b, xtol=1e-300, rtol=8.9e-16, maxiter=500)])
    return _bisect_increasing_loop(fun, lo, hi, iters)


def _bisect_increasing_loop(fun, lo: np.ndarray, hi: np.ndarray, iters: int) -> np.ndarray:
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        pos = fun(mid) > 0
        hi = np.where(pos, mid, hi)
        lo = np.where(pos, lo, mid)
        if np.all((hi - lo) <= 4e-16 * np.maximum(np.abs(lo), np.abs(hi))):
            break
    return 0.5 * (lo + hi)


@lru_cache(maxsize=64)
def _jacobi_panel_rule(n: int, alpha: float, beta: float):
    """Gauss-Jacobi nodes/weights on [-1, 1] for (1-t)^alpha (1+t)^beta, the
    weight divided out, and the spectral differentiation matrix on the nodes."""
    t, W = roots_jacobi(n, alpha, beta)
    W = W / ((1.0 - t) ** alpha * (1.0 + t) ** beta)
    diff = t[:, None] - t[None, :]
    np.fill_diagonal(diff, 1.0)
    # Barycentric weights 1/prod(t_j - t_k), in log form to avoid overflow.
    logabs = np.sum(np.log(np.abs(diff)), axis=1)
    sign = np.prod(np.sign(diff), axis=1)
    lam = sign * np.exp(-(logabs - logabs.mean()))
    D = (lam[None, :] / lam[:, None]) / diff
    np.fill_diagonal(D, 0.0)
    np.fill_diagonal(D, -np.sum(D, axis=1))
    return t, W, D


@lru_cache(maxsize=16)
def _rule_tables(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_jacobi_panel_rule` for the four panel kinds, stacked: entry
    2 [square root at the panel's hi] + [square root at its lo]."""
    rules = [_jacobi_panel_rule(n, a, b) for a in (0.0, 0.5) for b in (0.0, 0.5)]
    return tuple(np.ascontiguousarray(np.stack([r[i] for r in rules])) for i in range(3))


#: nodes per panel of the first level of :meth:`SemicircleFreeConvolution.spectral_integrals`
N_START = 16
#: the largest rule (nodes per panel) of the adaptive quadrature
N_MAX = 1024


@lru_cache(maxsize=4)
def _level_tables(levels: int) -> tuple:
    """The rules N_START 2^l, l < ``levels``, flat for
    :func:`._subordination_kernels.spectral_integrals`: nodes and weights (4, sum n),
    differentiation matrices (4, sum n^2), their offsets, and the n of each level."""
    ns = np.array([N_START << lev for lev in range(levels)], dtype=np.int64)
    tabs = [_rule_tables(int(n)) for n in ns]
    t = np.ascontiguousarray(np.concatenate([tb[0] for tb in tabs], axis=1))
    w = np.ascontiguousarray(np.concatenate([tb[1] for tb in tabs], axis=1))
    d = np.ascontiguousarray(np.concatenate([tb[2].reshape(4, -1) for tb in tabs], axis=1))
    off_t = np.concatenate([[0], np.cumsum(ns)]).astype(np.int64)
    off_d = np.concatenate([[0], np.cumsum(ns * ns)]).astype(np.int64)
    return t, w, d, off_t, off_d, ns


@dataclass(frozen=True)
class Panels:
    """Pieces [lo_i, hi_i] of the u-intervals; a square-root edge where ``sqrt_lo``/
    ``sqrt_hi`` (the ends of the support)."""

    lo: np.ndarray
    hi: np.ndarray
    sqrt_lo: np.ndarray
    sqrt_hi: np.ndarray

    def __len__(self) -> int:
        return int(self.lo.size)

    def above(self, u_cut: float) -> "Panels":
        """The panels over u > u_cut (a cut panel loses its square-root lower end)."""
        keep = self.hi > u_cut
        lo, cut = self.lo[keep].copy(), self.lo[keep] < u_cut
        lo[cut] = u_cut
        sqrt_lo = self.sqrt_lo[keep] & ~cut
        return Panels(lo, self.hi[keep].copy(), sqrt_lo, self.sqrt_hi[keep].copy())

    def below(self, u_cut: float) -> "Panels":
        """The panels over u < u_cut (a cut panel loses its square-root upper end)."""
        keep = self.lo < u_cut
        hi, cut = self.hi[keep].copy(), self.hi[keep] > u_cut
        hi[cut] = u_cut
        sqrt_hi = self.sqrt_hi[keep] & ~cut
        return Panels(self.lo[keep].copy(), hi, self.sqrt_lo[keep].copy(), sqrt_hi)


@dataclass(frozen=True)
class QuadratureRule:
    """Nodes x_i, weights w_i with int h(x) rho_B(x) dx ~ sum_i w_i h(x_i).

    Also carries u_i, v_i (subordination) and Re g_B(x_i)."""

    x: np.ndarray
    weights: np.ndarray
    re_g: np.ndarray
    u: np.ndarray
    v: np.ndarray


class SemicircleFreeConvolution:
    """The law rho_B = nu boxplus sc(qh) for a target law ``nu`` and ``qh > 0``.

    Parameters
    ----------
    nu : SpectralMeasure
        The law of the signal part (already scaled by mh).
    qh : float
        Variance of the semicircle (the noise part sqrt(qh) Z, Z ~ GOE with
        off-diagonal variance 1/d has semicircle law on [-2 sqrt qh, 2 sqrt qh]).
    rtol : float
        Relative accuracy targeted by the adaptive quadrature.
    """

    def __init__(self, nu: SpectralMeasure, qh: float, *, rtol: float = 1e-11):
        if not (qh > 0 and math.isfinite(qh)):
            raise ValueError(f"qh must be in (0, inf), got {qh!r}")
        self.nu = nu
        self.qh = float(qh)
        self.rtol = float(rtol)
        kind, c, scale, points, weights, comp_lo, comp_hi, comp_mass = nu.kernel_args()
        self._measure = (kind, float(c), float(scale), points, weights)
        self.intervals_u, self.intervals_x, self._breaks, self._break_owner = _k.support_u(
            kind, self.qh, float(c), float(scale), self._measure[3], self._measure[4],
            np.ascontiguousarray(comp_lo, dtype=float), np.ascontiguousarray(comp_hi, dtype=float),
            np.ascontiguousarray(comp_mass, dtype=float))
        self._panel_cache: Panels | None = None

    def _psi_outside(self, u: np.ndarray) -> np.ndarray:
        """psi(u) = u + qh G(u) where v(u) = 0 (real u off the support of rho_B's u-set)."""
        u = np.asarray(u, dtype=float)
        return u + self.qh * np.real(self.nu.stieltjes(u + 0j))

    @property
    def edges(self) -> np.ndarray:
        """Support of rho_B as a (k, 2) array of [lo, hi] intervals in x."""
        return self.intervals_x.copy()

    # ------------------------------------------------------------ subordination
    def solve_v(self, u: np.ndarray) -> np.ndarray:
        """v(u) >= 0 with phi(u, v^2) = 1/qh, for u inside the support u-intervals.

        Safeguarded Newton on r(t) = 1/phi(u, t), which is increasing and concave
        in t = v^2 (1/phi is a complete Bernstein function), so Newton from the
        left of the root is monotone; t = qh is always to the right
        (phi <= 1/t for a probability measure).  Compiled:
        :func:`._subordination_kernels.solve_v`.
        """
        u = np.asarray(u, dtype=float)
        kind, c, scale, points, weights = self._measure
        return _k.solve_v(kind, np.ascontiguousarray(u.ravel()), self.qh, c, scale, points,
                          weights).reshape(u.shape)

    def psi(self, u: np.ndarray) -> np.ndarray:
        """x = psi(u) for any real u (v = 0 outside the support u-intervals)."""
        u = np.atleast_1d(np.asarray(u, dtype=float))
        inside = self._inside_u(u)
        x = np.empty_like(u)
        if np.any(~inside):
            x[~inside] = self._psi_outside(u[~inside])
        if np.any(inside):
            v = self.solve_v(u[inside])
            x[inside] = u[inside] + self.qh * np.real(self.nu.stieltjes(u[inside] + 1j * v))
        return x

    def _inside_u(self, u: np.ndarray) -> np.ndarray:
        iv = self.intervals_u
        return np.any((u[:, None] > iv[None, :, 0]) & (u[:, None] < iv[None, :, 1]), axis=1)

    def u_of_x(self, x: np.ndarray) -> np.ndarray:
        """Inverse of psi (vectorised bisection; psi is an increasing bijection)."""
        x = np.atleast_1d(np.asarray(x, dtype=float))
        width = 4.0 * math.sqrt(self.qh) + np.ptp(self.intervals_u) + 1.0
        lo = np.minimum(x, self.intervals_u[0, 0]) - width
        hi = np.maximum(x, self.intervals_u[-1, 1]) + width
        return _bisect_increasing(lambda u: self.psi(u) - x, lo, hi, iters=200)

    def density(self, x: np.ndarray) -> np.ndarray:
        """rho_B(x) = v(u)/(pi qh) at u = psi^{-1}(x)."""
        x = np.atleast_1d(np.asarray(x, dtype=float))
        u = self.u_of_x(x)
        inside = self._inside_u(u)
        rho = np.zeros_like(x)
        if np.any(inside):
            rho[inside] = self.solve_v(u[inside]) / (_PI * self.qh)
        return rho

    def stieltjes_real(self, x: np.ndarray) -> np.ndarray:
        """g_B(x + i0) = (x - w(u))/qh on the real axis."""
        x = np.atleast_1d(np.asarray(x, dtype=float))
        u = self.u_of_x(x)
        v = np.zeros_like(u)
        inside = self._inside_u(u)
        if np.any(inside):
            v[inside] = self.solve_v(u[inside])
        return (x - u - 1j * v) / self.qh

    def stieltjes(self, z: np.ndarray, steps: int = 40) -> np.ndarray:
        """g_B(z) for Im z > 0 by Newton on the subordination equation
        w + qh G_nu(w) = z, with continuation from far above the real axis."""
        z = np.atleast_1d(np.asarray(z, dtype=complex))
        if np.any(z.imag <= 0):
            raise ValueError("stieltjes(z) needs Im z > 0; use stieltjes_real on the axis")
        scale = 1.0 + math.sqrt(self.qh) + float(np.max(np.abs(self.intervals_u)))
        lift = np.concatenate([np.geomspace(10.0 * scale, 1e-6 * scale, steps), [0.0]])
        w = z + 1j * lift[0]
        for h in lift:
            target = z + 1j * h
            for _ in range(60):
                G, G1, _ = self.nu.stieltjes_derivatives(w)
                step = (w + self.qh * G - target) / (1.0 + self.qh * G1)
                wn = w - step
                # Stay in the upper half-plane (the physical branch).
                w = np.where(wn.imag > 0, wn, wn.real + 0.5j * w.imag)
                if np.all(np.abs(step) <= 1e-15 * (1.0 + np.abs(w))):
                    break
        return self.nu.stieltjes(w)

    # --------------------------------------------------------------- quadrature
    def _panels(self) -> Panels:
        """Panels of the u-support, graded geometrically towards internal breaks.

        Internal breaks are edges of continuous components of nu (branch points
        of G_nu) and nearly split gaps; there the curve w(u) passes at a distance
        ~ v(break) from a singularity, so panels shrink towards the break until
        their size is comparable to that distance (geometric grading keeps the
        Gauss rules exponentially convergent).  Compiled:
        :func:`._subordination_kernels.panels`."""
        if self._panel_cache is None:
            kind, c, scale, points, weights = self._measure
            self._panel_cache = Panels(*_k.panels(kind, self.qh, c, scale, points, weights,
                                                  self.intervals_u, self._breaks,
                                                  self._break_owner))
        return self._panel_cache

    def rule_from_panels(self, panels: Panels, n: int) -> QuadratureRule:
        """Composite Gauss-Jacobi rule with ``n`` nodes per panel
        (:func:`._subordination_kernels.quadrature_rule`)."""
        if not len(panels):
            e = np.zeros(0)
            return QuadratureRule(e, e, e, e, e)
        kind, c, scale, points, weights = self._measure
        return QuadratureRule(*_k.quadrature_rule(kind, self.qh, c, scale, points, weights,
                                                  panels.lo, panels.hi, panels.sqrt_lo,
                                                  panels.sqrt_hi, *_rule_tables(n)))

    def integrate(
        self,
        integrands: Callable[[QuadratureRule], np.ndarray],
        x_cut: float = -math.inf,
        *,
        n_start: int = 16,
        n_max: int = 1536,
    ) -> tuple[np.ndarray, float, int]:
        """int_{x > x_cut} h_j(x) rho_B(x) dx for the rows h_j of ``integrands(rule)``.

        Doubles the nodes of each panel until its rules at n and 2n agree, the
        panels' differences adding up to at most ``rtol`` relative to the scale of
        each integral (:meth:`_adaptive_panels`).  Returns (values, error
        estimate, the largest nodes per panel used).
        """
        u_cut = -math.inf if x_cut == -math.inf else self.u_cut(x_cut)
        return self.integrate_u(integrands, u_cut, n_start=n_start, n_max=n_max)

    def integrate_u(
        self,
        integrands: Callable[[QuadratureRule], np.ndarray],
        u_cut: float = -math.inf,
        *,
        n_start: int = 16,
        n_max: int = 1536,
    ) -> tuple[np.ndarray, float, int]:
        """As :meth:`integrate`, over x > psi(u_cut)."""
        panels = self._panels() if u_cut == -math.inf else self._panels().above(u_cut)
        if not len(panels):
            p = self._panels()
            probe = integrands(self.rule_from_panels(
                Panels(p.lo[:1], p.hi[:1], p.sqrt_lo[:1], p.sqrt_hi[:1]), 2))
            return np.zeros(np.shape(probe)[0]), 0.0, 0
        return self._adaptive_panels(integrands, panels, n_start, n_max)

    def spectral_integrals(self, family: int, shift: float = 0.0, fscale: float = 1.0,
                           u_cut: float = -math.inf, *,
                           below: bool = False) -> tuple[np.ndarray, float]:
        """int_{x > psi(u_cut)} h_j(x) rho_B(x) dx (``below``: over x < psi(u_cut)) for the
        five rows h_j of ``family``
        (:data:`._subordination_kernels.FAMILY_SHIFTED`: f = (x - shift)/fscale, rows 1, f,
        f^2, x f, f Re g_B; ``FAMILY_BAYES``: f = (2u - x)/fscale, rows f, f^2, x f,
        f Re g_B, rho_B^2), compiled end to end with the per-panel adaptive rule of
        :meth:`integrate`.  Returns (values, error estimate)."""
        if below:
            panels = self._panels().below(u_cut)
        else:
            panels = self._panels() if u_cut == -math.inf else self._panels().above(u_cut)
        if not len(panels):
            return np.zeros(_k.N_ROWS), 0.0
        kind, c, scale, points, weights = self._measure
        # rules up to 256 nodes first: more (up to N_MAX) only for the rare panel that needs them
        for levels, complete in ((5, False), ((N_MAX // N_START).bit_length(), True)):
            vals, err, status = _k.spectral_integrals(
                kind, self.qh, c, scale, points, weights, panels.lo, panels.hi, panels.sqrt_lo,
                panels.sqrt_hi, family, float(shift), float(fscale), self.rtol,
                *_level_tables(levels), complete)
            if status != 2:
                return vals, float(err)
        raise AssertionError("unreachable: the complete tables end with status 0 or 1")

    def _adaptive_panels(self, integrands, panels: Panels, n_start: int,
                         n_max: int) -> tuple[np.ndarray, float, int]:
        """Per-panel adaptive Gauss-Jacobi: every panel starts at ``n_start`` nodes and is
        doubled until its rules at n and 2n agree; the estimates |I_p(2n) - I_p(n)|
        (relative to the scale of each integral, max(|I|, int |h| rho_B)) of the
        accepted panels add up to at most ``rtol``.  Only panels near a singularity of
        w(u) need many nodes, so the others stop early.  Returns (values, error
        estimate, the largest nodes per panel used)."""
        n = min(max(2, n_start), n_max // 2)
        P = len(panels)
        idx = np.arange(P)
        rule = self.rule_from_panels(panels, n)
        h = integrands(rule)
        coarse = (h * rule.weights).reshape(h.shape[0], P, n).sum(axis=2)
        best = coarse.copy()
        mass = (np.abs(h) * np.abs(rule.weights)).reshape(h.shape[0], P, n).sum(axis=2)
        spent = 0.0
        while True:
            sub = Panels(panels.lo[idx], panels.hi[idx], panels.sqrt_lo[idx], panels.sqrt_hi[idx])
            rule = self.rule_from_panels(sub, 2 * n)
            h = integrands(rule)
            fine = (h * rule.weights).reshape(h.shape[0], idx.size, 2 * n).sum(axis=2)
            best[:, idx] = fine
            mass[:, idx] = (np.abs(h) * np.abs(rule.weights)).reshape(h.shape[0], idx.size,
                                                                         2 * n).sum(axis=2)
            scale = np.maximum(np.abs(best.sum(axis=1)), mass.sum(axis=1)) + 1e-300
            err = np.max(np.abs(fine - coarse) / scale[:, None], axis=0)
            order, n_ok, accepted = _k.accept_smallest(err, spent, self.rtol)
            if n_ok == idx.size:
                return best.sum(axis=1), spent + accepted, 2 * n
            if 4 * n > n_max:
                return best.sum(axis=1), spent + float(err.sum()), 2 * n
            spent += accepted
            keep = np.sort(order[n_ok:])
            idx, coarse, n = idx[keep], fine[:, keep], 2 * n

    def u_cut(self, x_cut: float) -> float:
        """psi^{-1}(x_cut), clamped to the support (so panels above it are exact)."""
        iv, ix = self.intervals_u, self.intervals_x
        if x_cut <= ix[0, 0]:
            return float(iv[0, 0])
        if x_cut >= ix[-1, 1]:
            return float(iv[-1, 1])
        k = int(np.searchsorted(ix[:, 0], x_cut, side="right") - 1)
        if x_cut >= ix[k, 1]:
            return float(iv[k + 1, 0]) if k + 1 < iv.shape[0] else float(iv[-1, 1])
        kind, c, scale, points, weights = self._measure
        return float(_k.u_cut(float(x_cut), float(iv[k, 0]), float(iv[k, 1]), kind, self.qh, c,
                              scale, points, weights, iv))

    def mass_above(self, x_cut: float) -> float:
        """int_{x > x_cut} rho_B."""
        u_cut = -math.inf if x_cut == -math.inf else self.u_cut(x_cut)
        return float(self.spectral_integrals(_k.FAMILY_SHIFTED, u_cut=u_cut)[0][0])

    def upper_quantile(self, fraction: float) -> float:
        """x with int_{y > x} rho_B(y) dy = fraction (0 < fraction < 1).

        Safeguarded Newton in u on M(u) = mass above psi(u), with
        M'(u) = -v(u) psi'(u) / (pi qh); bisection keeps the bracket.
        """
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
        lo, hi = float(self.intervals_u[0, 0]), float(self.intervals_u[-1, 1])
        scale = max(1.0, abs(lo), abs(hi))
        u = 0.5 * (lo + hi)
        for _ in range(200):
            res = float(self.spectral_integrals(_k.FAMILY_SHIFTED, u_cut=u)[0][0]) - fraction
            if res > 0:
                lo = u
            else:
                hi = u
            if abs(res) <= 1e-14 or hi - lo <= 1e-15 * scale:
                break
            slope = 0.0
            if self._inside_u(np.array([u]))[0]:
                v = float(self.solve_v(np.array([u]))[0])
                _, G1, _ = self.nu.stieltjes_derivatives(np.array([u + 1j * v]))
                g1 = complex(G1[0])
                dpsi = abs(1.0 + self.qh * g1) ** 2 / (1.0 + self.qh * g1.real)
                slope = -v * dpsi / (_PI * self.qh)
            u_new = u - res / slope if slope < 0 else 0.5 * (lo + hi)
            if not (lo < u_new < hi):
                u_new = 0.5 * (lo + hi)
            u = u_new
        return float(self.psi(np.array([u]))[0])

    def curve(self, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
        """(x, rho_B(x)) along the support, for plots (nodes dense near the edges)."""
        xs, rs = [], []
        for a, b in self.intervals_u:
            t = 0.5 * (1.0 - np.cos(np.linspace(0.0, _PI, n)))
            u = a + (b - a) * t
            v = np.zeros_like(u)
            v[1:-1] = self.solve_v(u[1:-1])
            x = u + self.qh * np.real(self.nu.stieltjes(u + 1j * v))
            xs.append(x)
            rs.append(v / (_PI * self.qh))
        return np.concatenate(xs), np.concatenate(rs)
