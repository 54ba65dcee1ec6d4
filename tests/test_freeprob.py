"""Free convolution with a semicircle (issue 2, item 3; acceptance: spectral functionals)."""

import math

import numpy as np
import pytest

from amp_attention.freeprob import SemicircleFreeConvolution
from amp_attention.targets import DiscreteMeasure, MarchenkoPasturMeasure

CASES = [(k0, mh, qh) for k0 in (0.2, 0.5, 1.0, 2.0) for mh, qh in ((1.3, 1e-3), (0.7, 0.1), (2.0, 1.0), (1.0, 5.0))]


def _moments(law):
    vals, err, _ = law.integrate(lambda r: np.vstack([np.ones_like(r.x), r.x, r.x**2]))
    return vals, err


@pytest.mark.parametrize("kappa0, mh, qh", CASES)
def test_wishart_density_has_unit_mass_and_exact_moments(kappa0, mh, qh):
    nu = MarchenkoPasturMeasure(1 / kappa0, math.sqrt(kappa0)).scaled(mh)
    law = SemicircleFreeConvolution(nu, qh)
    (mass, m1, m2), err = _moments(law)
    # Free convolution with sc(qh): mean unchanged, variance adds qh.
    assert abs(mass - 1) < 1e-10
    assert abs(m1 - nu.moment(1)) < 1e-9
    assert abs(m2 - (nu.moment(2) + qh)) < 1e-9 * (1 + m2)
    assert err < 1e-9


def test_discrete_measure_density_has_unit_mass_and_exact_moments():
    rng = np.random.default_rng(1)
    pts = np.concatenate([np.zeros(20), rng.gamma(2.0, 0.5, 60), [6.0, 9.0]])
    nu = DiscreteMeasure(pts)
    for qh in (0.05, 0.5, 3.0):
        law = SemicircleFreeConvolution(nu, qh)
        (mass, m1, m2), _ = _moments(law)
        assert abs(mass - 1) < 1e-9
        assert abs(m1 - nu.moment(1)) < 1e-9
        assert abs(m2 - nu.moment(2) - qh) < 1e-8


@pytest.mark.parametrize("qh", [0.01, 1.0, 7.0])
def test_zero_target_gives_the_semicircle(qh):
    law = SemicircleFreeConvolution(DiscreteMeasure([0.0]), qh)
    r = 2 * math.sqrt(qh)
    assert law.edges.shape == (1, 2)
    assert np.allclose(law.edges[0], [-r, r], rtol=1e-12, atol=1e-12)
    x = np.linspace(-0.99 * r, 0.99 * r, 41)
    expected = np.sqrt(4 * qh - x**2) / (2 * math.pi * qh)
    assert np.allclose(law.density(x), expected, rtol=1e-9, atol=1e-12)
    # Re g of the semicircle on its support: x / (2 qh).
    assert np.allclose(law.stieltjes_real(x).real, x / (2 * qh), rtol=1e-9, atol=1e-12)


def test_small_qh_recovers_the_target_spectrum():
    nu = MarchenkoPasturMeasure(1 / 0.7, math.sqrt(0.7))
    law = SemicircleFreeConvolution(nu, 1e-7)
    lo, hi = nu.singular_components()[-1]
    # Edges of the bulk move by O(qh^(2/3)); the atom at 0 becomes a tiny semicircle.
    assert abs(law.edges[-1, 0] - lo) < 1e-3 and abs(law.edges[-1, 1] - hi) < 1e-3
    assert abs(law.mass_above(0.5 * lo) - 0.7) < 1e-9
    x = np.linspace(lo + 0.05 * (hi - lo), hi - 0.05 * (hi - lo), 15)
    assert np.allclose(law.density(x), nu.density(x), rtol=1e-4)


def _cubic_stieltjes(kappa0, mh, qh, x):
    """g_B(x + i0) from the cubic that subordination + the MP quadratic give:
    -c a qh g^3 + (c a z + qh) g^2 - (z - a + c a) g + 1 = 0, a = mh sqrt(kappa0)."""
    c, a = 1 / kappa0, mh * math.sqrt(kappa0)
    out = []
    for z in x:
        roots = np.roots([-c * a * qh, c * a * z + qh, -(z - a + c * a), 1.0])
        cplx = roots[np.abs(roots.imag) > 1e-12]
        out.append(cplx[np.argmin(cplx.imag)] if cplx.size else np.nan)
    return np.array(out)


@pytest.mark.parametrize("kappa0, mh, qh", [(0.5, 1.2, 0.3), (1.0, 0.8, 1.0), (2.0, 1.5, 0.2), (0.2, 2.0, 0.05)])
def test_density_and_re_g_match_the_independent_cubic(kappa0, mh, qh):
    nu = MarchenkoPasturMeasure(1 / kappa0, math.sqrt(kappa0)).scaled(mh)
    law = SemicircleFreeConvolution(nu, qh)
    xs = np.concatenate([np.linspace(a + 1e-3 * (b - a), b - 1e-3 * (b - a), 25) for a, b in law.edges])
    g_cubic = _cubic_stieltjes(kappa0, mh, qh, xs)
    g_ours = law.stieltjes_real(xs)
    assert np.all(np.isfinite(g_cubic))
    assert np.allclose(g_ours, g_cubic, rtol=1e-8, atol=1e-10)
    # Outside the support the cubic has three real roots and our density is zero.
    outside = np.array([law.edges[0, 0] - 0.1, law.edges[-1, 1] + 0.1])
    assert np.all(law.density(outside) == 0)


def test_off_axis_newton_agrees_with_the_real_axis_parametrisation():
    nu = MarchenkoPasturMeasure(2.0, math.sqrt(0.5)).scaled(1.1)
    law = SemicircleFreeConvolution(nu, 0.4)
    x = np.linspace(law.edges[0, 0] + 0.01, law.edges[-1, 1] - 0.01, 30)
    g_axis = law.stieltjes_real(x)
    g_near = law.stieltjes(x + 1e-9j)
    assert np.allclose(g_near, g_axis, atol=1e-6)
    # Far from the axis g ~ 1/z.
    z = np.array([50 + 50j])
    assert abs(law.stieltjes(z)[0] * z[0] - 1) < 0.05


def test_density_matches_sampled_random_matrices():
    """Kolmogorov distance between eigenvalues of mh S0 + sqrt(qh) Z at d = 1200
    and the predicted CDF: fluctuations of eigenvalue counts are O(log d / d)."""
    rng = np.random.default_rng(7)
    d, kappa0, mh, qh = 1200, 0.5, 1.3, 0.4
    p0 = int(kappa0 * d)
    W0 = rng.standard_normal((p0, d))
    S0 = W0.T @ W0 / math.sqrt(p0 * d)
    G = rng.standard_normal((d, d))
    Z = (G + G.T) / math.sqrt(2 * d)
    ev = np.sort(np.linalg.eigvalsh(mh * S0 + math.sqrt(qh) * Z))
    law = SemicircleFreeConvolution(MarchenkoPasturMeasure(1 / kappa0, math.sqrt(kappa0)).scaled(mh), qh)
    probes = np.quantile(ev, np.linspace(0.02, 0.98, 25))
    cdf = np.array([1 - law.mass_above(x) for x in probes])
    emp = np.searchsorted(ev, probes, side="right") / d
    assert np.max(np.abs(cdf - emp)) < 0.01


def test_discrete_stieltjes_kernel_matches_the_partial_fraction_sums():
    rng = np.random.default_rng(3)
    nu = DiscreteMeasure(rng.gamma(2.0, size=60), rng.uniform(0.5, 1.5, size=60))
    w = rng.normal(size=(5, 4)) * 3 + 1j * np.abs(rng.normal(size=(5, 4)))
    w[0, 0] = 2.5 + 0.0j                      # on the real axis, off the atoms
    r = 1.0 / (w[..., None] - nu.points)
    G, G1, G2 = nu.stieltjes_derivatives(w)
    for got, want in ((G, np.sum(nu.weights * r, -1)), (G1, -np.sum(nu.weights * r**2, -1)),
                      (G2, 2 * np.sum(nu.weights * r**3, -1))):
        assert got.shape == w.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(nu.stieltjes(w), G)


def test_warm_started_subordination_solve_equals_the_cold_solve():
    # solve_v warm-starts Newton from the previous node; each node's answer must
    # not depend on its neighbours.
    s = np.arange(1, 201, dtype=float) ** -1.0
    nu = DiscreteMeasure(s * 10.0)
    fc = SemicircleFreeConvolution(nu, 0.3)
    u = fc.rule_from_panels(fc._panels(), 8).u
    warm = fc.solve_v(u)
    cold = np.array([fc.solve_v(np.array([x]))[0] for x in u])
    np.testing.assert_allclose(warm, cold, rtol=1e-12, atol=1e-300)


def test_isolated_top_atoms_integrate_to_the_exact_moments_at_small_qh():
    # A power-law list at small qh: ~100 separate u-intervals, the top ones narrow
    # semicircles around atoms far from 0 (the case where differentiating x(u) on a
    # panel lost digits to |x| before x - mean(x) was differentiated).
    s = np.arange(1, 401, dtype=float) ** -1.0
    nu = DiscreteMeasure(s * math.sqrt(400 / np.sum(s**2)) * 3.0)
    qh = 1e-3
    law = SemicircleFreeConvolution(nu, qh)
    assert law.intervals_u.shape[0] > 50
    (mass, m1, m2), err = _moments(law)
    assert err <= law.rtol
    assert abs(mass - 1) < 1e-11
    assert abs(m1 - nu.moment(1)) < 1e-11 * nu.moment(1)
    assert abs(m2 - nu.moment(2) - qh) < 1e-11 * nu.moment(2)


def test_gap_bound_skips_only_gaps_that_can_neither_split_nor_nearly_split():
    # support_u skips a gap between atoms of masses a, b a distance g apart when
    # qh (a^(1/3) + b^(1/3))^3 / g^2 >= 4; with the masses hidden (0: no bound) every
    # gap is examined, and the support and the panel breaks must come out the same.
    from amp_attention import _subordination_kernels as k

    rng = np.random.default_rng(5)
    pts = np.sort(np.concatenate([rng.gamma(1.5, 1.0, 150), np.arange(1, 61) ** -1.5 * 20]))
    nu = DiscreteMeasure(pts, rng.uniform(0.2, 2.0, pts.size))
    kind, c, scale, p, w, lo, hi, mass = nu.kernel_args()
    for qh in (1e-4, 1e-2, 0.3):
        fast = k.support_u(kind, qh, c, scale, p, w, lo, hi, mass)
        full = k.support_u(kind, qh, c, scale, p, w, lo, hi, np.zeros_like(mass))
        for a, b in zip(fast, full):
            np.testing.assert_array_equal(a, b)
        assert fast[0].shape[0] > 1 or qh == 0.3


@pytest.mark.parametrize("nu, qh", [
    (MarchenkoPasturMeasure(2.0, math.sqrt(0.5)).scaled(1.3), 0.4),
    (MarchenkoPasturMeasure(0.5, math.sqrt(2.0)), 1e-3),
    (DiscreteMeasure(np.arange(1, 301, dtype=float) ** -1.0 * 9.0), 2e-3),
])
def test_compiled_spectral_integrals_equal_the_generic_quadrature(nu, qh):
    # The denoisers' integrals run compiled (fixed rows, one kernel call); any other
    # integrand goes through integrate() with Python callables.  Same rule, same numbers.
    from amp_attention._subordination_kernels import FAMILY_BAYES, FAMILY_SHIFTED

    law = SemicircleFreeConvolution(nu, qh)
    shift, fscale = 0.3, 0.7
    u_cut = law.u_cut(shift)
    got, err = law.spectral_integrals(FAMILY_SHIFTED, shift, fscale, u_cut)

    def shifted(r):
        f = (r.x - shift) / fscale
        return np.vstack([np.ones_like(f), f, f * f, r.x * f, f * r.re_g])

    want, err_py, _ = law.integrate_u(shifted, u_cut)
    assert err <= law.rtol and err_py <= law.rtol
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    got, _ = law.spectral_integrals(FAMILY_BAYES, 0.0, fscale)

    def bayes(r):
        f = (2 * r.u - r.x) / fscale
        rho = r.v / (math.pi * qh)
        return np.vstack([f, f * f, r.x * f, f * r.re_g, rho * rho])

    np.testing.assert_allclose(got, law.integrate(bayes)[0], rtol=1e-12, atol=1e-14)
