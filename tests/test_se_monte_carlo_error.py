"""Monte-Carlo error of the non-linear SE: two-level solve and the propagated error.

The SE of a non-linear channel is the fixed point of a map integrated by RQMC.
Its reported ``mc_stderr`` must be the standard error of the *fixed point*
(the noise of the hats moves m, q, V, and the errors with them), which the
delta method over replicas estimates; these tests compare it with the actual
spread of fixed points over independent RQMC seeds.
"""

import math

import numpy as np
import pytest

from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.fixed_point import solve_fixed_point_quasi_newton
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

# Small lam: the denoiser amplifies the noise of the hats strongly here, so the
# fixed-overlap replica spread alone underestimates the error several-fold.
PROBLEM = Problem(Task("softmax", L=2, beta=1.0, noise=0.1), WishartTarget(0.5),
                  Learner(1.0, 0.05), alpha=1.0)


def test_quasi_newton_solves_a_linear_map_with_a_rough_jacobian():
    rng = np.random.default_rng(0)
    A = 0.5 * rng.standard_normal((3, 3)) / math.sqrt(3)
    b = rng.standard_normal(3)
    x_star = np.linalg.solve(np.eye(3) - A, b)
    rep = solve_fixed_point_quasi_newton(lambda x: A @ x + b, np.zeros(3), A + 0.1, tol=1e-12)
    assert rep.converged and rep.iterations <= 8
    assert np.allclose(rep.x, x_star, rtol=1e-10, atol=1e-12)


def test_quasi_newton_reports_failure():
    rep = solve_fixed_point_quasi_newton(lambda x: x + 1.0, np.zeros(2), np.eye(2), max_iter=3)
    assert not rep.converged and rep.status == "failed" and "singular" in rep.message
    with pytest.raises(ValueError, match="jacobian"):
        solve_fixed_point_quasi_newton(lambda x: x, np.zeros(2), np.eye(3))


def test_two_level_solve_finds_the_fixed_point_of_the_fine_map():
    """Same draws, two routes: plain Anderson on 2^11 points per replica and the
    coarse (2^8) + quasi-Newton solve must reach the same fixed point -- to a small
    fraction of the Monte-Carlo error, which is all the two-level solve resolves
    (MC_TOL_FRACTION)."""
    fine = dict(log2_n=11, replicas=4, seed=3)
    plain = solve_state_evolution(PROBLEM, start="informative", tol=1e-9,
                                  mc=MonteCarloOptions(**fine, coarse_log2_n=11))
    two = solve_state_evolution(PROBLEM, start="informative", tol=1e-9,
                                mc=MonteCarloOptions(**fine, coarse_log2_n=8))
    assert plain.converged and two.converged
    assert plain.iterations_coarse == 0 and two.iterations_coarse > 0
    assert two.iterations < plain.iterations
    for k in ("m", "q", "V", "train_error", "test_error"):
        gap = abs(getattr(two, k) - getattr(plain, k))
        assert gap <= 0.1 * two.mc_stderr[k] + 1e-9 * abs(getattr(plain, k)), k


def test_propagated_stderr_matches_the_spread_over_rqmc_seeds():
    seeds = range(10)
    vals, errs = [], []
    for s in seeds:
        r = solve_state_evolution(PROBLEM, start="informative", tol=1e-8,
                                  mc=MonteCarloOptions(log2_n=10, replicas=8, seed=s,
                                                       coarse_log2_n=7))
        assert r.converged and r.mc_error_method.startswith("delta method")
        vals.append([r.test_error, r.train_error, r.m, r.q])
        errs.append([r.mc_stderr[k] for k in ("test_error", "train_error", "m", "q")])
    spread = np.std(vals, axis=0, ddof=1)
    reported = np.sqrt(np.mean(np.square(errs), axis=0))
    # 10 seeds: the sample std has ~23 % relative error; [0.5, 2] is a > 99 %
    # interval for a correct estimate.  The unpropagated spread is 3-5x too small.
    assert np.all(reported > 0.5 * spread) and np.all(reported < 2.0 * spread), (spread, reported)


def test_warm_started_integrals_equal_the_cold_ones_at_beta_1():
    from amp_attention.channels import channel_for
    from amp_attention.solvers.channel_integrals import MonteCarloChannel

    ch = channel_for(PROBLEM.task)
    cold = MonteCarloChannel(ch, log2_n=9, replicas=3, seed=4)
    warm = MonteCarloChannel(ch, log2_n=9, replicas=3, seed=4, warm_start=True)
    for x in [(1.1, 1.0, 0.9), (1.11, 1.01, 0.91), (1.12, 1.0, 0.92)]:
        a, b = cold.se(*x, 1.5, 1.0), warm.se(*x, 1.5, 1.0)
        for k in ("m_hat", "q_hat", "V_hat", "train_error"):
            assert getattr(b, k) == pytest.approx(getattr(a, k), rel=1e-10), k
    # every evaluation is warm (the first from the prox's own starting points, without
    # the continuation), 3 evaluations x 3 replicas, and the guard never fired
    assert warm.n_warm == 9 and warm.n_warm_fallback == 0


class _WorseWhenWarm:
    """A channel whose warm-started prox is (artificially) worse on every sample."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def prox_batch(self, y, omega, V, warm_from=None):
        px = self.real.prox_batch(y, omega, V)
        if warm_from is None:
            return px
        return px.__class__(px.uhat, px.g_out + 1.0, px.trace_term, px.objective + 1.0, px.failed,
                            px.n_failed, px.ends)


def test_warm_start_guard_falls_back_to_the_cold_solve():
    from amp_attention.channels import channel_for
    from amp_attention.solvers.channel_integrals import MonteCarloChannel

    ch = channel_for(PROBLEM.task)
    ref = MonteCarloChannel(ch, log2_n=8, replicas=2, seed=1)
    bad = MonteCarloChannel(_WorseWhenWarm(ch), log2_n=8, replicas=2, seed=1, warm_start=True)
    for x in [(1.1, 1.0, 0.9), (1.11, 1.01, 0.91)]:
        a, b = ref.se(*x, 1.5, 1.0), bad.se(*x, 1.5, 1.0)
    assert bad.n_warm_fallback == 4  # both replicas of both evaluations
    assert b.q_hat == pytest.approx(a.q_hat, rel=1e-12)


def test_stein_estimate_of_m_hat_agrees_with_the_direct_one_and_is_less_noisy():
    """m_hat = 2 alpha E[g_out . (u* - (m/q) omega)] / rest (direct) and its Stein
    form 2 alpha E tr[(I + V H)^-1 J(uhat)^T J(u*)] estimate the same number;
    at this point (unique prox minimisers) the second has a far smaller spread."""
    from amp_attention.channels import SoftmaxChannel
    from amp_attention.solvers.channel_integrals import MonteCarloChannel

    ch = SoftmaxChannel(3, 1.0, 0.1)
    x = (0.988, 0.726, 0.888, 1.5, 0.5)  # m, q, V, Q0, alpha near the L = 3 benchmark point
    direct = MonteCarloChannel(ch, log2_n=11, replicas=8, seed=2)
    direct.stein = False
    direct.se(*x)
    stein = MonteCarloChannel(ch, log2_n=11, replicas=8, seed=2)
    stein.se(*x)
    d, s = direct.last_replicas[:, 0], stein.last_replicas[:, 0]
    se_d, se_s = d.std(ddof=1) / math.sqrt(8), s.std(ddof=1) / math.sqrt(8)
    assert stein.n_stein == 1 and stein.n_stein_rejected == 0
    assert abs(d.mean() - s.mean()) <= 4 * math.hypot(se_d, se_s)
    assert se_s < se_d / 3
