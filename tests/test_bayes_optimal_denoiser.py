"""The Bayes-optimal denoiser (docs/theory.md "Bayes-optimal baseline"): the MMSE from
int rho_Y^3 against the error of the eigenvalue map, exact limits, and sampled
finite-d denoising with an implementation that shares no code with the package
(the oracle rotation-invariant estimator, which needs no density at all)."""

import math

import numpy as np
import pytest

from amp_attention.data import haar_orthogonal
from amp_attention.denoisers import BayesOptimal
from amp_attention.targets import DiscreteMeasure, MarchenkoPasturMeasure


def wishart(k0):
    return MarchenkoPasturMeasure(1.0 / k0, math.sqrt(k0))


def power_law(gamma=1.0, p=200):
    s = np.arange(1.0, p + 1) ** -gamma
    return DiscreteMeasure(s / math.sqrt(np.mean(s * s)))


LAWS = {"wishart0.5": wishart(0.5), "wishart2": wishart(2.0), "wishart1": wishart(1.0),
        "power_law": power_law(), "custom": DiscreteMeasure(np.array([0.0, 0.3, 1.0, 2.5]),
                                                             np.array([0.4, 0.2, 0.3, 0.1]))}


@pytest.mark.parametrize("name", LAWS)
@pytest.mark.parametrize("qhat", [0.05, 0.7, 4.0, 60.0])
def test_mmse_from_density_equals_error_of_eigenvalue_map(name, qhat):
    """Two independent formulas: 1/qhat - (4 pi^2/(3 qhat^2)) int rho_Y^3 and
    Q0 - 2m + q of y - (2/qhat) Re g_Y(y) agree to 1e-8 (and m = q: Nishimori)."""
    den = BayesOptimal(LAWS[name])
    r = den.bayes_functionals(qhat)
    assert abs(r.mmse - r.mmse_from_map) < 1e-8
    f = den.functionals(den.prior, qhat, qhat, qhat)
    assert abs(f.m - f.q) < 1e-8
    assert abs(f.q - r.q) < 1e-8
    # V = mmse at the Bayes-optimal point (the divergence of the posterior mean)
    assert abs(f.V - r.mmse) < 1e-8


@pytest.mark.parametrize("name", LAWS)
def test_mmse_bounds_and_monotone(name):
    """0 <= mmse <= min(prior variance Q0 - m1^2, 1/qhat) (the prior mean and the
    observation itself are estimators), decreasing in qhat."""
    den = BayesOptimal(LAWS[name])
    mu = LAWS[name]
    var = mu.moment(2) - mu.moment(1) ** 2
    prev = math.inf
    for qhat in np.geomspace(1e-2, 1e3, 12):
        mmse = den.bayes_functionals(qhat).mmse
        assert 0 <= mmse <= min(var, 1 / qhat) * (1 + 1e-10)
        assert mmse < prev
        prev = mmse


def test_limits_small_and_large_snr():
    """qhat -> 0: mmse -> Q0 - m1^2 = 1 (the prior mean sqrt(kappa0) I);
    qhat -> inf: mmse ~ 2 (kappa0 - kappa0^2/2) / qhat (the tangent space of the rank
    kappa0 d PSD matrices, a fraction 2 kappa0 - kappa0^2 of Sym(d))."""
    for k0 in (0.25, 0.5):
        den = BayesOptimal(wishart(k0))
        assert den.bayes_functionals(1e-4).mmse == pytest.approx(1.0, rel=2e-4)
        for qhat in (1e4, 1e6):
            assert qhat * den.bayes_functionals(qhat).mmse == pytest.approx(
                2 * k0 - k0 * k0, rel=20 / math.sqrt(qhat))
    # full rank: the noise is not reduced at high snr (mmse ~ 1/qhat)
    den = BayesOptimal(wishart(2.0))
    assert 1e5 * den.bayes_functionals(1e5).mmse == pytest.approx(1.0, rel=1e-3)


def oracle_mse(s, qhat, d, rng):
    """The oracle rotation-invariant estimator sum_i (u_i^T S0 u_i) u_i u_i^T on the
    eigenvectors u_i of Y = S0 + Z/sqrt(qhat): pure NumPy, no density; its error
    converges to the MMSE as d grows (it is the best estimator with these
    eigenvectors)."""
    O = haar_orthogonal(d, rng)
    S0 = (O * s) @ O.T
    G = rng.standard_normal((d, d)) / math.sqrt(d)
    Z = (G + G.T) / math.sqrt(2.0)
    _, U = np.linalg.eigh(S0 + Z / math.sqrt(qhat))
    xi = np.einsum("ij,ik,kj->j", U, S0, U)
    return (np.sum(S0 * S0) - np.sum(xi * xi)) / d, S0, Z


@pytest.mark.parametrize("k0, qhat", [(0.5, 0.5), (0.5, 5.0), (2.0, 2.0)])
def test_sampled_denoising_matches_mmse(k0, qhat):
    """GOE draws at d = 300: the error of the package's finite-d map and that of the
    oracle estimator agree with mmse(qhat) within 3 standard errors plus a 1/d
    allowance (4 * mmse / d)."""
    mu = wishart(k0)
    den = BayesOptimal(mu)
    mmse = den.bayes_functionals(qhat).mmse
    d, draws = 300, 4
    s = mu.quantiles(d)
    rng = np.random.default_rng(7)
    oracle, ours = [], []
    for _ in range(draws):
        o, S0, Z = oracle_mse(s, qhat, d, rng)
        oracle.append(o)
        S, V = den.matrix_map(qhat * S0 + math.sqrt(qhat) * Z, qhat)
        ours.append(np.sum((S - S0) ** 2) / d)
        # the divergence of the posterior mean is its error (Nishimori), up to O(1/d)
        assert V == pytest.approx(mmse, rel=0.05)
    for errs in (oracle, ours):
        tol = 3 * np.std(errs, ddof=1) / math.sqrt(draws) + 4 * mmse / d
        assert abs(np.mean(errs) - mmse) < tol, (np.mean(errs), mmse, tol)


def test_functionals_need_the_prior():
    den = BayesOptimal(wishart(0.5))
    with pytest.raises(ValueError, match="target"):
        den.functionals(wishart(1.0), 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="m_hat"):
        den.bayes_functionals(0.0)
