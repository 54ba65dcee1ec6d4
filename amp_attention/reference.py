"""High-precision reference for the Wishart target (mpmath), independent of freeprob.

For S0 Wishart (eigenvalues a' mu, mu Marchenko-Pastur of ratio c = 1/kappa0,
a' = sqrt(kappa0)) the subordination relation g = G_nu(z - qh g), with
nu = mh * spectrum(S0) = a mu, a = mh sqrt(kappa0), and the quadratic equation of
G_mu give a cubic for g_B(z):

    -c a qh g^3 + (c a z + qh) g^2 - (z - a + c a) g + 1 = 0.

On the real axis the density is |Im g|/pi of its complex root and Re g_B is the
real part of that root.  This module computes the denoiser functionals of
docs/theory.md "Denoiser side and free probability" from that cubic with mpmath (arbitrary
precision, tanh-sinh
quadrature, support edges by bisection on the sign of the discriminant) and
solves the linear-channel SE fixed point with mpmath's Newton solver.  It is
slow (seconds to a minute) and serves as the accuracy yardstick of the fast
solver (tests and benchmarks/bench_se.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import mpmath as mp


def _cubic(kappa0, mh, qh, x):
    c = 1 / mp.mpf(kappa0)
    a = mh * mp.sqrt(kappa0)
    return [-c * a * qh, c * a * x + qh, -(x - a + c * a), mp.mpf(1)]


def _discriminant(coeffs):
    a, b, c, d = coeffs
    return 18 * a * b * c * d - 4 * b**3 * d + b**2 * c**2 - 4 * a * c**3 - 27 * a**2 * d**2


def stieltjes_real(kappa0, mh, qh, x) -> mp.mpc:
    """g_B(x + i0): the root of the cubic with negative imaginary part (0j outside)."""
    coeffs = _cubic(kappa0, mh, qh, mp.mpf(x))
    if _discriminant(coeffs) >= 0:
        return mp.mpc(0)
    try:  # mpmath >= 1.4 prefers ascending coefficients
        roots = mp.polyroots(coeffs[::-1], maxsteps=200, extraprec=60, asc=True)
    except TypeError:
        roots = mp.polyroots(coeffs, maxsteps=200, extraprec=60)
    return min(roots, key=lambda r: mp.im(r))


def support_edges(kappa0, mh, qh, grid: int = 400) -> list[tuple[mp.mpf, mp.mpf]]:
    """Intervals where the cubic has complex roots (discriminant < 0)."""
    top = mh * mp.sqrt(kappa0) * (1 + mp.sqrt(1 / mp.mpf(kappa0))) ** 2
    lo, hi = -3 * mp.sqrt(qh) - 1, top + 3 * mp.sqrt(qh) + 1
    xs = [lo + (hi - lo) * k / grid for k in range(grid + 1)]
    inside = [_discriminant(_cubic(kappa0, mh, qh, x)) < 0 for x in xs]

    def refine(a, b, a_inside):
        for _ in range(mp.mp.prec + 20):
            m = (a + b) / 2
            if (_discriminant(_cubic(kappa0, mh, qh, m)) < 0) == a_inside:
                a = m
            else:
                b = m
        return (a + b) / 2

    edges = []
    for k in range(grid):
        if inside[k] != inside[k + 1]:
            edges.append(refine(xs[k], xs[k + 1], inside[k]))
    if len(edges) % 2:
        raise ValueError("support edge search failed (refine the grid)")
    return [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]


@dataclass(frozen=True)
class ReferenceFunctionals:
    m: mp.mpf
    q: mp.mpf
    V: mp.mpf
    trace_per_d: mp.mpf
    rank_fraction: mp.mpf


def psd_functionals(kappa0, mh, qh, Vh, lam, dps: int = 30) -> ReferenceFunctionals:
    """docs/theory.md "Denoiser side and free probability" functionals of f(x) = relu(x - 2
    lam)/Vh (no rank cap)."""
    with mp.workdps(dps):
        mh, qh, Vh, lam = (mp.mpf(v) for v in (mh, qh, Vh, lam))
        cut = 2 * lam
        pieces = []
        for a, b in support_edges(kappa0, mh, qh):
            if b > cut:
                pieces.append((max(a, cut), b))

        def integral(fun):
            total = mp.mpf(0)
            for a, b in pieces:
                def integrand(x):
                    g = stieltjes_real(kappa0, mh, qh, x)
                    return fun(x, -mp.im(g) / mp.pi, mp.re(g))
                total += mp.quad(integrand, [a, b])
            return total

        f = lambda x: (x - cut) / Vh  # noqa: E731
        rank = integral(lambda x, rho, reg: rho)
        trace = integral(lambda x, rho, reg: f(x) * rho)
        q = integral(lambda x, rho, reg: f(x) ** 2 * rho)
        V = 2 * integral(lambda x, rho, reg: f(x) * rho * reg)
        xf = integral(lambda x, rho, reg: x * f(x) * rho)
        return ReferenceFunctionals((xf - qh * V) / mh, q, V, trace, rank)


def symmetric_functionals(kappa0, mh, qh, Vh, lam, dps: int = 30) -> ReferenceFunctionals:
    """The same functionals for the two-sided map f(x) = sign(x) relu(|x| - 2 lam)/Vh of
    the symmetric nuclear norm: both tails |x| > 2 lam of rho_B."""
    with mp.workdps(dps):
        mh, qh, Vh, lam = (mp.mpf(v) for v in (mh, qh, Vh, lam))
        cut = 2 * lam
        pieces = []  # (a, b, shift): f = (x - shift)/Vh on [a, b]
        for a, b in support_edges(kappa0, mh, qh):
            if b > cut:
                pieces.append((max(a, cut), b, cut))
            if a < -cut:
                pieces.append((a, min(b, -cut), -cut))

        def integral(fun):
            total = mp.mpf(0)
            for a, b, shift in pieces:
                def integrand(x):
                    g = stieltjes_real(kappa0, mh, qh, x)
                    return fun(x, (x - shift) / Vh, -mp.im(g) / mp.pi, mp.re(g))
                total += mp.quad(integrand, [a, b])
            return total

        rank = integral(lambda x, f, rho, reg: rho)
        trace = integral(lambda x, f, rho, reg: f * rho)
        q = integral(lambda x, f, rho, reg: f ** 2 * rho)
        V = 2 * integral(lambda x, f, rho, reg: f * rho * reg)
        xf = integral(lambda x, f, rho, reg: x * f * rho)
        return ReferenceFunctionals((xf - qh * V) / mh, q, V, trace, rank)


def linear_se_fixed_point(kappa0, L, noise, lam, alpha, start, dps: int = 30, tol: float = 1e-20):
    """Linear-channel SE fixed point (kappa >= 1, Wishart target) to high precision.

    ``start`` = (m, q, V) from any solver; refined by mpmath's multidimensional
    Newton (findroot) on x - T(x) = 0.  Returns the mp values (m, q, V) and the
    errors/hats evaluated there.
    """
    with mp.workdps(dps):
        Q0 = 1 + mp.mpf(kappa0)
        offd = mp.mpf(L * (L - 1)) / 2
        Lm = mp.mpf(L)
        Delta = mp.mpf(noise)
        alpha = mp.mpf(alpha)

        def hats(m, q, V):
            E = Q0 - 2 * m + q
            Vh = 2 * alpha * (2 * Lm / (1 + 2 * V) + offd / (1 + V))
            qh = 2 * alpha * (4 * Lm * (E + Delta / 2) / (1 + 2 * V) ** 2 + offd * (E + Delta) / (1 + V) ** 2)
            return Vh, qh, Vh

        def residual(m, q, V):
            mh, qh, Vh = hats(m, q, V)
            out = psd_functionals(kappa0, mh, qh, Vh, lam, dps)
            return [out.m - m, out.q - q, out.V - V]

        sol = mp.findroot(residual, [mp.mpf(v) for v in start], tol=tol, maxsteps=20)
        m, q, V = sol[0], sol[1], sol[2]
        E = Q0 - 2 * m + q
        e_train = Lm * (2 * E + Delta) / (1 + 2 * V) ** 2 + offd * (E + Delta) / (1 + V) ** 2
        mh, qh, Vh = hats(m, q, V)
        return {"m": m, "q": q, "V": V, "m_hat": mh, "q_hat": qh, "V_hat": Vh,
                "matrix_mse": E, "train_error": e_train, "test_error": (2 * Lm + offd) * E}
