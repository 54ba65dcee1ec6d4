"""State evolution for the softmax channel: the small-beta limit (issue 3).

softmax_rows(beta h)_ab = 1/L + (beta/L)(h_ab - mean_c h_ac) + O(beta^2), so as
beta -> 0 the channel becomes the linear-output channel y = B u* + noise with
B = (beta/L) P T (LinearOutputChannel.softmax_small_beta; docs/theory.md).
Scaling the noise and the penalty with beta^2 (Delta = D0 beta^2,
lam = lam0 beta^2) makes the linearised problem beta-independent (the whole
objective is multiplied by beta^2), so the softmax SE must converge to one
beta-independent linear SE, with an error that shrinks like beta^2.
"""


import pytest

from amp_attention.channels.linear_outputs import LinearOutputChannel
from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution

D0, LAM0 = 0.5, 0.5


def _pair(beta, L=2):
    p = Problem(Task("softmax", L=L, beta=beta, noise=D0 * beta**2), WishartTarget(0.5),
                Learner(1.0, LAM0 * beta**2), alpha=0.5)
    soft = solve_state_evolution(p, start="informative", mc=MonteCarloOptions(11, 4, 0, coarse_log2_n=10), tol=1e-9)
    lin = solve_state_evolution(p, start="informative",
                                integrals=LinearOutputChannel.softmax_small_beta(L, beta, D0 * beta**2))
    assert soft.converged and lin.converged
    return soft, lin


def test_softmax_se_tends_to_the_linearised_se_as_beta_goes_to_zero():
    rel = []
    lin_mse = []
    for beta in (0.5, 0.25, 0.125):
        soft, lin = _pair(beta)
        rel.append(abs(soft.matrix_mse - lin.matrix_mse) / lin.matrix_mse)
        lin_mse.append(lin.matrix_mse)
        # The train error (itself ~ beta^2) converges in relative terms too
        # (measured: 1.9 %, 1.0 %, 0.3 % at beta = 1/2, 1/4, 1/8).
        assert abs(soft.train_error - lin.train_error) / lin.train_error < 0.1 * beta
    assert max(lin_mse) - min(lin_mse) < 1e-9  # the linearised SE is beta-independent
    # Quadratic convergence: halving beta divides the gap by about 4 (>= 3 here).
    assert rel[0] / rel[1] > 2.5 and rel[1] / rel[2] > 3.0
    assert rel[2] < 0.05


def test_two_starts_share_the_fine_level_when_their_coarse_fixed_points_coincide():
    # Non-convex channel: start="auto" runs both starts; on the coarse level they reach
    # the same point here, so only the informative one is refined (same numbers as
    # start="informative"), and the result says so.
    p = Problem(Task("softmax", L=2, noise=0.0), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)
    # without the fine level's control variate and test-only samples: the fine error is
    # then 2^1.5 times smaller than the coarse level's (8 times the same estimator's samples)
    mc = MonteCarloOptions(log2_n=10, replicas=4, coarse_log2_n=7, step_log2_n=0, test_log2_n=0)
    auto = solve_state_evolution(p, mc=mc)
    alone = solve_state_evolution(p, mc=mc, start="informative")
    assert auto.converged and not auto.metastable and auto.start == "informative"
    # no competing prox minima at lam = 0.1: no jump share, no replica-symmetry warning
    # (docs/theory.md 16.3; tests/test_vhat_jumps.py checks the share where it jumps)
    assert auto.vhat_jump_share is not None and auto.vhat_jump_stderr > 0
    assert abs(auto.vhat_jump_share) < 3 * auto.vhat_jump_stderr + 1e-4
    assert auto.replica_symmetry_warning == ""
    assert auto.alternative["level"] == "coarse" and auto.alternative["converged"]
    assert "only the informative one was refined" in auto.start_policy
    for k in ("m", "q", "V", "train_error", "test_error"):
        # the same fine solve (the shared coarse level's warm starts move the last digits)
        assert getattr(auto, k) == pytest.approx(getattr(alone, k), rel=1e-9)
        # the coarse point of the other start agrees within the coarse level's error
        assert abs(auto.alternative[k] - getattr(auto, k)) < 10 * auto.mc_stderr[k] * 2 ** 1.5
