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
Gauss-Jacobi panels with square-root end weights converge exponentially, and
psi'(u) is obtained by spectral differentiation of x(u) on each panel (the
closed form |1 + qh G'|^2 / (1 + qh Re G') cancels badly near the edges).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
from scipy.optimize import brentq
from scipy.special import roots_jacobi

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


@dataclass(frozen=True)
class Panel:
    """A piece [lo, hi] of a u-interval; a square-root edge at an end of the support."""

    lo: float
    hi: float
    sqrt_lo: bool
    sqrt_hi: bool


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
        self.intervals_u, self._breaks = self._support_u()
        lo_x = self._psi_outside(self.intervals_u[:, 0])
        hi_x = self._psi_outside(self.intervals_u[:, 1])
        self.intervals_x = np.stack([lo_x, hi_x], axis=1)
        self._n_converged: int | None = None
        self._panel_cache: list[Panel] | None = None

    # ------------------------------------------------------------------ support
    def _phi0(self, u: np.ndarray) -> np.ndarray:
        """phi(u, 0) = -G'(u) for real u off the support of nu."""
        _, G1, _ = self.nu.stieltjes_derivatives(np.asarray(u, dtype=float) + 0j)
        return -np.real(G1)

    def _phi0_slope(self, u: np.ndarray) -> np.ndarray:
        _, _, G2 = self.nu.stieltjes_derivatives(np.asarray(u, dtype=float) + 0j)
        return -np.real(G2)

    def _support_u(self) -> tuple[np.ndarray, list[np.ndarray]]:
        comps = self.nu.singular_components()
        inv_qh = 1.0 / self.qh
        span = math.sqrt(self.qh) * 1.01
        # Outer edges: phi0 decreases away from the extreme components; phi0 <= 1/dist^2.
        l0, rk = comps[0, 0], comps[-1, 1]

        def left_fun(logs):
            return inv_qh - self._phi0(l0 - np.exp(logs))

        def right_fun(logs):
            return inv_qh - self._phi0(rk + np.exp(logs))

        # Stay a relative 1e-12 away from the components: at a branch point of
        # G_nu the closed forms lose all precision (the edge is then that close).
        scale = max(1.0, float(np.max(np.abs(comps))))
        eps = 1e-12 * scale
        lo_log = math.log(min(eps, 0.5 * span))
        hi_log = math.log(span)
        s_left = float(np.exp(_bisect_increasing(left_fun, [lo_log], [hi_log])[0]))
        s_right = float(np.exp(_bisect_increasing(right_fun, [lo_log], [hi_log])[0]))
        edges_lo = [l0 - s_left]
        edges_hi = []
        breaks: list[list[float]] = [[]]
        if comps.shape[0] > 1:
            g_lo, g_hi = comps[:-1, 1] + eps, comps[1:, 0] - eps
            # Convex phi0 on each gap: its minimum is where -G'' changes sign.
            umin = _bisect_increasing(self._phi0_slope, g_lo, g_hi)
            split = self._phi0(umin) < inv_qh
            for j in range(g_lo.size):
                # Continuous components have interior edges worth a panel break.
                if comps[j, 1] > comps[j, 0]:
                    breaks[-1].extend([comps[j, 0], comps[j, 1]])
                if split[j]:
                    a = _bisect_increasing(lambda x: inv_qh - self._phi0(x), [g_lo[j]], [umin[j]])[0]
                    b = _bisect_increasing(lambda x: self._phi0(x) - inv_qh, [umin[j]], [g_hi[j]])[0]
                    edges_hi.append(a)
                    edges_lo.append(b)
                    breaks.append([])
                elif self.qh * self._phi0(umin[j]) < 4.0:
                    # Nearly split: v(umin) ~ (gap/2) sqrt(qh phi0(umin) - 1) is small
                    # against the gap, so w(u) passes close to the axis here; break
                    # the panel.  Elsewhere (dense atoms, qh phi0 >> 1) the curve
                    # stays far above the atoms and one panel spans many of them.
                    breaks[-1].append(umin[j])
        if comps[-1, 1] > comps[-1, 0]:
            breaks[-1].extend([comps[-1, 0], comps[-1, 1]])
        edges_hi.append(rk + s_right)
        intervals = np.stack([np.array(edges_lo), np.array(edges_hi)], axis=1)
        out_breaks = []
        for (a, b), br in zip(intervals, breaks):
            br = np.unique(np.array(br, dtype=float))
            out_breaks.append(br[(br > a) & (br < b)])
        return intervals, out_breaks

    def _psi_outside(self, u: np.ndarray) -> np.ndarray:
        """psi(u) = u + qh G(u) where v(u) = 0 (real u off the support of rho_B's u-set)."""
        u = np.asarray(u, dtype=float)
        return u + self.qh * np.real(self.nu.stieltjes(u + 0j))

    @property
    def edges(self) -> np.ndarray:
        """Support of rho_B as a (k, 2) array of [lo, hi] intervals in x."""
        return self.intervals_x.copy()

    # ------------------------------------------------------------ subordination
    def solve_v(self, u: np.ndarray, max_iter: int = 200) -> np.ndarray:
        """v(u) >= 0 with phi(u, v^2) = 1/qh, for u inside the support u-intervals.

        Safeguarded Newton on r(t) = 1/phi(u, t), which is increasing and concave
        in t = v^2 (1/phi is a complete Bernstein function), so Newton from the
        left of the root is monotone; t = qh is always to the right
        (phi <= 1/t for a probability measure).
        """
        u = np.asarray(u, dtype=float)
        kernel = getattr(self.nu, "solve_v", None)
        if kernel is not None:
            return np.asarray(kernel(u.ravel(), self.qh)).reshape(u.shape)
        return self._solve_v_python(u, max_iter)

    def _solve_v_python(self, u: np.ndarray, max_iter: int = 200) -> np.ndarray:
        """Vectorised NumPy version of the v(u) solve, for measures without a kernel."""
        qh = self.qh
        lo = np.zeros_like(u)
        hi = np.full_like(u, qh)
        t = hi.copy()
        active = np.ones(u.shape, dtype=bool)
        for _ in range(max_iter):
            ua, ta = u[active], t[active]
            phi, slope = self.nu.phi_and_slope(ua, ta)
            r = 1.0 / phi
            res = r - qh
            right = res > 0
            lo_a = np.where(right, lo[active], ta)
            hi_a = np.where(right, ta, hi[active])
            dr = -slope / (phi * phi)
            with np.errstate(divide="ignore", invalid="ignore"):
                tn = ta - res / dr
            bad = ~np.isfinite(tn) | (tn <= lo_a) | (tn >= hi_a)
            fallback = np.where(lo_a > 0, np.sqrt(lo_a * hi_a), 1e-3 * hi_a)
            tn = np.where(bad, fallback, tn)
            done = (np.abs(res) <= 1e-15 * qh) | (np.abs(tn - ta) <= 1e-16 * ta)
            t[active] = np.where(done, ta, tn)
            lo[active], hi[active] = lo_a, hi_a
            idx = np.flatnonzero(active)
            active[idx[done]] = False
            if not active.any():
                break
        return np.sqrt(t)

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
    def _panels(self) -> list[Panel]:
        """Panels of the u-support, graded geometrically towards internal breaks.

        Internal breaks are edges of continuous components of nu (branch points
        of G_nu) and nearly split gaps; there the curve w(u) passes at a distance
        ~ v(break) from a singularity, so panels shrink towards the break until
        their size is comparable to that distance (geometric grading keeps the
        Gauss rules exponentially convergent)."""
        if getattr(self, "_panel_cache", None) is not None:
            return self._panel_cache
        panels = []
        for (a, b), br in zip(self.intervals_u, self._breaks):
            pts = [a, b]
            if br.size:
                vb = self.solve_v(br)
                for p, vp in zip(br, vb):
                    pts.append(p)
                pts_sorted = np.array(sorted(pts))
                extra = []
                for p, vp in zip(br, vb):
                    k = int(np.searchsorted(pts_sorted, p))
                    for nb in (pts_sorted[k - 1], pts_sorted[k + 1]):
                        half = 0.5 * (nb - p)
                        delta = max(vp, 1e-13 * abs(half))
                        h = half * 0.25
                        while abs(h) > delta:
                            extra.append(p + h)
                            h *= 0.25
                        extra.append(p + half)
                pts = sorted(set(pts) | set(extra))
            pts = np.array(sorted(pts))
            for k in range(pts.size - 1):
                panels.append(Panel(pts[k], pts[k + 1], k == 0, k == pts.size - 2))
        self._panel_cache = panels
        return panels

    def _cut_panels(self, u_cut: float) -> list[Panel]:
        out = []
        for p in self._panels():
            if p.hi <= u_cut:
                continue
            if p.lo < u_cut:
                p = Panel(u_cut, p.hi, False, p.sqrt_hi)
            out.append(p)
        return out

    def rule_from_panels(self, panels: list[Panel], n: int) -> QuadratureRule:
        """Composite Gauss-Jacobi rule with ``n`` nodes per panel."""
        if not panels:
            e = np.zeros(0)
            return QuadratureRule(e, e, e, e, e)
        pieces = []
        for p in panels:
            t, W, D = _jacobi_panel_rule(n, 0.5 if p.sqrt_hi else 0.0, 0.5 if p.sqrt_lo else 0.0)
            half = 0.5 * (p.hi - p.lo)
            pieces.append((p.lo + half * (1.0 + t), half, W, D))
        u = np.concatenate([piece[0] for piece in pieces])
        v = self.solve_v(u)
        x = u + self.qh * np.real(self.nu.stieltjes(u + 1j * v))
        dxdu = np.empty_like(x)
        W_all = np.empty_like(x)
        for k, (_, half, W, D) in enumerate(pieces):
            sl = slice(k * n, (k + 1) * n)
            dxdu[sl] = (D @ x[sl]) / half
            W_all[sl] = half * W
        weights = W_all * v * dxdu / (_PI * self.qh)
        return QuadratureRule(x, weights, (x - u) / self.qh, u, v)

    def integrate(
        self,
        integrands: Callable[[QuadratureRule], np.ndarray],
        x_cut: float = -math.inf,
        *,
        n_start: int = 16,
        n_max: int = 1536,
    ) -> tuple[np.ndarray, float, int]:
        """int_{x > x_cut} h_j(x) rho_B(x) dx for the rows h_j of ``integrands(rule)``.

        Doubles the nodes per panel until two successive rules agree to ``rtol``
        (relative to the scale of each integral).  Returns (values, error
        estimate, nodes per panel).
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
        panels = self._panels() if u_cut == -math.inf else self._cut_panels(u_cut)
        if not panels:
            probe = integrands(self.rule_from_panels(self._panels()[:1], 2))
            return np.zeros(np.shape(probe)[0]), 0.0, 0
        n = min(max(n_start, self._n_converged or n_start), n_max // 2)
        prev = None
        while True:
            rule = self.rule_from_panels(panels, n)
            vals = np.asarray(integrands(rule) @ rule.weights, dtype=float)
            if prev is not None:
                scale = np.maximum(np.abs(vals), np.abs(rule.weights) @ np.abs(integrands(rule)).T + 1e-300)
                err = float(np.max(np.abs(vals - prev) / scale))
                if err <= self.rtol:
                    self._n_converged = n // 2
                    return vals, err, n
                if 2 * n > n_max:
                    return vals, err, n
            prev = vals
            n *= 2

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
        a, b = float(iv[k, 0]), float(iv[k, 1])
        return brentq(lambda uu: float(self.psi(np.array([uu]))[0]) - x_cut, a, b,
                      xtol=1e-15 * max(1.0, abs(a), abs(b)), rtol=8.9e-16, maxiter=200)

    def mass_above(self, x_cut: float) -> float:
        """int_{x > x_cut} rho_B."""
        vals, _, _ = self.integrate(lambda r: np.ones((1, r.x.size)), x_cut)
        return float(vals[0])

    def upper_quantile(self, fraction: float) -> float:
        """x with int_{y > x} rho_B(y) dy = fraction (0 < fraction < 1).

        Safeguarded Newton in u on M(u) = mass above psi(u), with
        M'(u) = -v(u) psi'(u) / (pi qh); bisection keeps the bracket.
        """
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
        lo, hi = float(self.intervals_u[0, 0]), float(self.intervals_u[-1, 1])
        scale = max(1.0, abs(lo), abs(hi))
        ones = lambda r: np.ones((1, r.x.size))  # noqa: E731
        u = 0.5 * (lo + hi)
        for _ in range(200):
            res = float(self.integrate_u(ones, u)[0][0]) - fraction
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
