"""Denoisers: asymptotic functionals vs exact identities and finite-d GOE averages."""

import math

import numpy as np
import pytest

from amp_attention.data import haar_orthogonal
from amp_attention.denoisers import Frobenius, NuclearNormPSD, SymmetricNuclearNorm
from amp_attention.freeprob import SemicircleFreeConvolution
from amp_attention.targets import DiscreteMeasure, MarchenkoPasturMeasure

TARGETS = [MarchenkoPasturMeasure(1 / k0, math.sqrt(k0)) for k0 in (0.3, 1.0, 2.5)] + [
    DiscreteMeasure(np.array([0.0, 0.2, 0.5, 1.0, 3.0]))
]


@pytest.mark.parametrize("target", TARGETS, ids=repr)
@pytest.mark.parametrize("mh, qh, Vh", [(1.0, 0.5, 2.0), (2.5, 0.1, 0.7), (0.4, 3.0, 5.0)])
def test_identity_function_gives_theory_check(target, mh, qh, Vh):
    """THEORY 4.2 check: f(x) = x/Vh gives m = mh Q0/Vh and V = 1/Vh, here computed
    through the same quadrature (Re g, rho_B) that the PSD denoiser uses."""
    law = SemicircleFreeConvolution(target.scaled(mh), qh)
    vals, _, _ = law.integrate(lambda r: np.vstack([r.x / Vh * r.re_g, r.x * r.x / Vh]))
    V = 2 * vals[0]
    m = (vals[1] - qh * V) / mh
    assert abs(V - 1 / Vh) < 1e-10 / Vh
    assert abs(m - mh * target.moment(2) / Vh) < 1e-10 * (1 + abs(m))


def test_psd_denoiser_in_its_affine_regime_matches_closed_forms():
    """When every eigenvalue of B exceeds 2 lam, f(x) = (x - 2 lam)/Vh is affine and
    q, V, m, Tr/d have closed forms in the moments of S0."""
    target = MarchenkoPasturMeasure(1 / 4.0, 2.0)  # kappa0 = 4: spectrum in [1, 9] * ...
    mh, qh, Vh, lam = 1.5, 0.02, 1.7, 0.05
    den = NuclearNormPSD(lam, kappa=1.0)
    out = den.functionals(target, mh, qh, Vh)
    m1, Q0 = target.moment(1), target.moment(2)
    assert out.rank_fraction == pytest.approx(1.0, abs=1e-12)
    assert out.V == pytest.approx(1 / Vh, rel=1e-10)
    assert out.m == pytest.approx((mh * Q0 - 2 * lam * m1) / Vh, rel=1e-10)
    assert out.trace_per_d == pytest.approx((mh * m1 - 2 * lam) / Vh, rel=1e-10)
    q = (mh**2 * Q0 + qh - 4 * lam * mh * m1 + 4 * lam**2) / Vh**2
    assert out.q == pytest.approx(q, rel=1e-10)


def test_frobenius_closed_forms_agree_with_generic_quadrature():
    target = MarchenkoPasturMeasure(2.0, math.sqrt(0.5))
    mh, qh, Vh, lam = 1.2, 0.6, 1.4, 0.3
    out = Frobenius(lam).functionals(target, mh, qh, Vh)
    c = 1 / (Vh + 2 * lam)
    law = SemicircleFreeConvolution(target.scaled(mh), qh)
    vals, _, _ = law.integrate(lambda r: np.vstack([c * r.x, (c * r.x) ** 2, c * r.x * r.re_g, c * r.x**2]))
    assert out.trace_per_d == pytest.approx(vals[0], rel=1e-10)
    assert out.q == pytest.approx(vals[1], rel=1e-10)
    assert out.V == pytest.approx(2 * vals[2], rel=1e-10)
    assert out.m == pytest.approx((vals[3] - qh * 2 * vals[2]) / mh, rel=1e-10)


def test_rank_cap_binds_at_kappa():
    target = MarchenkoPasturMeasure(1 / 0.5, math.sqrt(0.5))
    den = NuclearNormPSD(0.05, kappa=0.3)
    out = den.functionals(target, 1.6, 0.7, 1.6)
    assert out.rank_fraction == pytest.approx(0.3, abs=1e-10)
    assert out.cutoff > 0.1
    uncapped = NuclearNormPSD(0.05, kappa=1.0).functionals(target, 1.6, 0.7, 1.6)
    assert uncapped.rank_fraction > 0.3 and uncapped.q > out.q


def _finite_d(den, target_q, mh, qh, Vh, d, seed):
    rng = np.random.default_rng(seed)
    O = haar_orthogonal(d, rng)
    S0 = (O * target_q) @ O.T
    G = rng.standard_normal((d, d))
    Z = (G + G.T) / math.sqrt(2 * d)
    S, V = den.matrix_map(mh * S0 + math.sqrt(qh) * Z, Vh)
    return np.array([np.sum(S0 * S) / d, np.sum(S * S) / d, V, np.trace(S) / d])


@pytest.mark.parametrize("den", [NuclearNormPSD(0.15, 1.0), NuclearNormPSD(0.05, 0.4), Frobenius(0.2),
                                 SymmetricNuclearNorm(0.15)], ids=repr)
def test_finite_d_goe_averages_converge_to_the_asymptotic_functionals(den):
    """m, q, V, Tr/d of the finite-d map on sampled B = mh S0 + sqrt(qh) Z approach
    the asymptotic functionals as d grows (deterministic MP-quantile spectrum for
    S0, so the remaining error is the O(1/d) finite-size effect plus noise)."""
    target = MarchenkoPasturMeasure(1 / 0.5, math.sqrt(0.5))
    mh, qh, Vh = 1.3, 0.5, 1.5
    out = den.functionals(target, mh, qh, Vh)
    exact = np.array([out.m, out.q, out.V, out.trace_per_d])
    errs = []
    for d in (60, 120, 480):
        seeds = range(6 if d < 480 else 2)
        est = np.mean([_finite_d(den, target.quantiles(d), mh, qh, Vh, d, s) for s in seeds], axis=0)
        errs.append(np.max(np.abs(est - exact) / np.abs(exact)))
    assert errs[-1] < errs[0]
    assert errs[-1] < 0.01, errs


def test_functionals_match_the_independent_high_precision_reference():
    """Issue 2: spectral functionals accurate to <= 1e-8.  The reference solves the
    cubic for g_B with mpmath and integrates by tanh-sinh (amp_attention.reference),
    sharing no code with freeprob.py."""
    from amp_attention.reference import psd_functionals

    kappa0, mh, qh, Vh, lam = 0.5, 1.2, 0.4, 1.3, 0.1
    ref = psd_functionals(kappa0, mh, qh, Vh, lam, dps=20)
    out = NuclearNormPSD(lam, 1.0).functionals(MarchenkoPasturMeasure(1 / kappa0, math.sqrt(kappa0)), mh, qh, Vh)
    for name in ("m", "q", "V", "trace_per_d", "rank_fraction"):
        r = float(getattr(ref, name))
        assert abs(getattr(out, name) - r) <= 1e-8 * abs(r), name
