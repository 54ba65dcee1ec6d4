"""Bayes-optimal state evolution (docs/theory.md "Bayes-optimal baseline"): the anchors of
THEORY section 10, the thresholds against parameter counting, and the prior side of
the SE curve against sampled finite-d denoising that shares no code with the package."""

import math

import numpy as np
import pytest

from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.bayes_optimal import (PR_RESOLUTION, bayes_perfect_recovery_threshold,
                                                 bayes_test_errors, bayes_weak_recovery_slope,
                                                 solve_bayes_optimal)
from amp_attention.targets import MarchenkoPasturMeasure


def softmax_problem(alpha, L=2, k0=0.5, beta=1.0):
    return Problem(Task("softmax", L=L, beta=beta, noise=0.0), WishartTarget(k0),
                   Learner(0.5, 0.0), alpha=alpha)


def linear_problem(alpha, L=1, k0=0.5, noise=0.0):
    return Problem(Task("linear", L=L, noise=noise), WishartTarget(k0), Learner(1.0, 0.0),
                   alpha=alpha)


def oracle_mse(k0, qhat, d, draws, seed):
    """Errors of the oracle rotation-invariant estimator sum_i (u_i^T S0 u_i) u_i u_i^T
    on Y = S0 + Z/sqrt(qhat), S0 a sampled Wishart matrix W^T W/sqrt(p0 d): NumPy only."""
    rng = np.random.default_rng(seed)
    p0 = int(round(k0 * d))
    out = []
    for _ in range(draws):
        W = rng.standard_normal((p0, d))
        S0 = W.T @ W / math.sqrt(p0 * d)
        G = rng.standard_normal((d, d)) / math.sqrt(d)
        _, U = np.linalg.eigh(S0 + (G + G.T) / math.sqrt(2.0 * qhat))
        xi = np.einsum("ij,ik,kj->j", U, S0, U)
        out.append((np.sum(S0 * S0) - np.sum(xi * xi)) / d)
    return np.array(out)


ALPHAS = np.linspace(0.01, 0.18, 10)


@pytest.fixture(scope="module")
def softmax_curve():
    return [solve_bayes_optimal(softmax_problem(a)) for a in ALPHAS]


def test_softmax_anchor_curve(softmax_curve):
    """Noiseless L = 2 softmax, kappa0 = 0.5: MMSE from Q0 - kappa0 = 1 at alpha -> 0,
    decreasing, every point a converged fixed point of qhat = 4 alpha / MMSE (K - 1 = 2
    equations per sample: the channel side checked by hand)."""
    small = solve_bayes_optimal(softmax_problem(1e-4))
    assert small.matrix_mse == pytest.approx(1.0, abs=2e-3)
    mmse = [r.matrix_mse for r in softmax_curve]
    assert all(r.converged and r.estimator == "bayes" for r in softmax_curve)
    assert np.all(np.diff(mmse) < 0) and mmse[0] < 1.0
    for a, r in zip(ALPHAS, softmax_curve):
        assert r.q_hat == pytest.approx(4 * a / r.matrix_mse, rel=1e-8)
        assert r.m == r.q == pytest.approx(1.5 - r.matrix_mse, rel=1e-12)
        # the Bayes predictor beats the plug-in of the posterior mean
        assert r.test_error <= r.plugin_test_error + 3 * r.mc_stderr["plugin_test_error"]


def test_softmax_curve_prior_side_against_sampled_denoising(softmax_curve):
    """At each of the 10 alphas, the SE's qhat fixes the prior side: the MMSE of
    denoising a sampled Wishart S0 (d = 400) at that snr, by the oracle estimator,
    matches the SE's MMSE within 3 seed standard errors plus 3 MMSE/d."""
    d, draws = 400, 2
    for k, r in enumerate(softmax_curve):
        errs = oracle_mse(0.5, r.q_hat, d, draws, seed=k)
        tol = 3 * errs.std(ddof=1) / math.sqrt(draws) + 3 * r.matrix_mse / d
        assert abs(errs.mean() - r.matrix_mse) < tol, (ALPHAS[k], errs.mean(), r.matrix_mse, tol)


def test_softmax_perfect_recovery_at_parameter_count():
    """MMSE vanishes at alpha = (kappa0 - kappa0^2/2)/(K - 1) = 0.1875 within the SE's
    resolution: positive just below, zero (perfect_recovery) just above."""
    below = solve_bayes_optimal(softmax_problem(0.185))
    above = solve_bayes_optimal(softmax_problem(0.19))
    assert below.converged and not below.perfect_recovery and below.matrix_mse > 1e-3
    assert above.success and not above.converged and above.perfect_recovery
    assert above.matrix_mse <= PR_RESOLUTION * 1.5


@pytest.mark.parametrize("channel, L, k0", [("softmax", 2, 0.5), ("softmax", 3, 0.25),
                                            ("softmax", 2, 2.0), ("linear", 1, 0.5),
                                            ("linear", 2, 0.3), ("linear", 1, 1.5)])
def test_perfect_recovery_threshold_is_parameter_count(channel, L, k0):
    """The SE's stability threshold c/(2r) equals (rho - rho^2/2)/r, rho = min(kappa0, 1),
    r = K - 1 (softmax) or K (linear)."""
    K = L * (L + 1) // 2
    r = K - 1 if channel == "softmax" else K
    rho = min(k0, 1.0)
    task = Task(channel, L=L, noise=0.0)
    res = bayes_perfect_recovery_threshold(Problem(task, WishartTarget(k0), Learner(), 0.1))
    assert res.converged and res.rank == r
    assert res.alpha == pytest.approx((rho - rho * rho / 2) / r, rel=1e-7)


def test_linear_bayes_threshold_below_erm():
    """Linear L = 1, kappa0 = 0.5: BO perfect recovery at 0.375, where ERM's (lam -> 0+)
    is 0.4222 (THEORY 10)."""
    from amp_attention.solvers.thresholds import perfect_recovery_threshold

    bo = bayes_perfect_recovery_threshold(linear_problem(0.3))
    erm = perfect_recovery_threshold(linear_problem(0.3))
    assert bo.alpha == pytest.approx(0.375, rel=1e-7)
    assert erm.alpha == pytest.approx(0.4222, abs=1e-4)
    assert solve_bayes_optimal(linear_problem(0.38)).perfect_recovery
    r = solve_bayes_optimal(linear_problem(0.37))
    assert not r.perfect_recovery and r.matrix_mse > 1e-3
    # linear channel: the Bayes predictor's test error is sum_k tau_k^2 MMSE = 2 MMSE at L = 1
    assert r.test_error == pytest.approx(2 * r.matrix_mse, rel=1e-12)


def test_linear_noisy_closed_form_fixed_point():
    """L = 2 with noise: qhat = 2 alpha sum_k 1/(e + Delta/tau_k^2) at the reported e."""
    r = solve_bayes_optimal(linear_problem(0.4, L=2, noise=0.3))
    e = r.matrix_mse
    assert r.converged and not r.perfect_recovery
    assert r.q_hat == pytest.approx(0.8 * (2 / (e + 0.15) + 1 / (e + 0.3)), rel=1e-8)


def test_weak_recovery_slope():
    """d MMSE/d alpha at 0+ = -(Q0 - m1^2)^2 qhat(e_max)/alpha = -2 (K - 1) for the
    noiseless softmax at kappa0 = 0.5 (e_max = 1): compared with the SE at small alpha."""
    p = softmax_problem(1e-4)
    slope = bayes_weak_recovery_slope(p)
    assert slope == pytest.approx(-4.0, rel=1e-12)
    a = 1e-4
    assert (solve_bayes_optimal(softmax_problem(a)).matrix_mse - 1.0) / a == pytest.approx(
        slope, rel=0.01)


def test_bayes_test_error_monte_carlo_matches_closed_form_for_linear_outputs():
    """The RQMC estimator of E Var[g | omega] (two draws given omega), run on the linear
    channel's outputs with the closed form switched off, agrees with sum tau^2 V."""
    from amp_attention.channels import LinearChannel

    class NoClosedForm:
        def __init__(self, ch):
            self._ch = ch
            self.K, self.tau = ch.K, ch.tau

        def outputs(self, H):
            return self._ch.outputs(H)

        def h_from_u(self, U):
            return self._ch.h_from_u(U)

    ch = LinearChannel(2, 0.0)
    exact = bayes_test_errors(ch, 0.7, 0.3)
    mc = bayes_test_errors(NoClosedForm(ch), 0.7, 0.3, log2_n=12)
    assert exact[0] == pytest.approx(0.3 * 5)  # tau^2 = 2, 1, 2
    assert abs(mc[0] - exact[0]) < 4 * mc[2] + 1e-12
    # plug-in g(h(omega)) errs by sum tau^2 V as well for linear outputs
    assert abs(mc[1] - exact[1]) < 4 * mc[3] + 1e-12


def test_unavailable_channels_say_why():
    """Noiseless seq2lab (no closed form, no noise to integrate against) and logit noise
    on seq2lab are refused, naming the noise; so are bad solver options."""
    for noise, at in ((0.0, "output"), (0.1, "logit")):
        with pytest.raises(ValueError, match="noise"):
            solve_bayes_optimal(Problem(Task("seq2lab", L=2, noise=noise, noise_at=at),
                                        WishartTarget(0.5), Learner(), 0.2))
    with pytest.raises(ValueError, match="start"):
        solve_bayes_optimal(linear_problem(0.2), start="warm")


def test_monte_carlo_channel_fixed_point_and_error_bars():
    """Noisy softmax (output noise) through the nested RQMC channel, small settings: a
    converged fixed point with propagated errors, MMSE below the prior variance and
    above the noiseless MMSE, the Bayes predictor no worse than the plug-in."""
    from amp_attention.solvers.bayes_channel_integrals import BayesMonteCarloOptions

    mc = BayesMonteCarloOptions(log2_n=9, inner_log2_n=5, replicas=4, coarse_log2_n=7)
    p = Problem(Task("softmax", L=2, noise=0.1), WishartTarget(0.5), Learner(), 0.1)
    r = solve_bayes_optimal(p, mc=mc)
    clean = solve_bayes_optimal(softmax_problem(0.1))
    assert r.converged and r.mc_stderr["matrix_mse"] > 0 and "delta method" in r.mc_error_method
    assert clean.matrix_mse < r.matrix_mse < 1.0
    assert r.test_error <= r.plugin_test_error + 3 * r.mc_stderr["plugin_test_error"]
    assert r.iterations_coarse > 0


def test_perfect_recovery_is_its_own_status_not_converged():
    """Issue 29: above alpha_PR the solve stopped at the resolution with a residual of
    0.56 >> tol and said status "converged".  Now "converged" means residual <= tol;
    a stop at the resolution is status perfect_recovery (a success), whose message says
    what the residual is there."""
    r = solve_bayes_optimal(linear_problem(1.0), tol=1e-10)
    assert r.perfect_recovery and r.success and not r.converged
    assert r.status == "perfect_recovery" and r.residual > 1e-10
    assert "not a distance to tol" in r.message and "MMSE = 0" in r.message
    # the residual is the relative one, |e - mmse(qhat(e))|/e = 1 - contraction ratio
    assert f"{r.residual:.3g}" in r.message
    assert r.to_dict()["status"] == "perfect_recovery" and r.to_dict()["converged"] is False
    below = solve_bayes_optimal(linear_problem(0.3), tol=1e-10)
    assert below.status == "converged" and below.residual <= 1e-10 and below.converged


def test_perfect_recovery_resolution_is_reported_not_hidden():
    """Beyond alpha_PR the MMSE is below PR_RESOLUTION * Q0 and flagged; below it, not."""
    r = solve_bayes_optimal(linear_problem(0.6))
    assert r.perfect_recovery and r.matrix_mse <= PR_RESOLUTION * 1.5 and r.success
    assert MarchenkoPasturMeasure(2.0, math.sqrt(0.5)).moment(2) == pytest.approx(1.5)
