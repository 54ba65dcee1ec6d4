"""Interpolation with logit noise (issue 3): below a threshold alpha the training
error vanishes as lam -> 0+, above it does not -- in the SE and in finite-d ERM.

Softmax L = 2, beta = 1, Wishart kappa0 = 0.5, kappa = 1, logit noise Delta = 0.5
(labels inside the range of the softmax).  Below the threshold (alpha = 0.1)
the train error is proportional to lam (ratio ~ 10 between lam = 1e-3 and
1e-4); above (alpha = 0.4) it stays O(1) and changes little.  The full curves
are in docs/figures/softmax_interpolation.png (benchmarks/softmax_interpolation.py).
"""

import pytest

from amp_attention.spec import Learner, Problem, Task, WishartTarget
from amp_attention.erm import erm_statistics
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution


def _problem(alpha, lam):
    return Problem(Task("softmax", L=2, beta=1.0, noise=0.5, noise_at="logit"), WishartTarget(0.5),
                   Learner(1.0, lam), alpha=alpha)


def _se_train(alpha, lam):
    r = solve_state_evolution(_problem(alpha, lam), start="informative",
                              mc=MonteCarloOptions(10, 4, 0, coarse_log2_n=10), tol=1e-7, max_iter=400)
    assert r.converged, r.status
    return r.train_error


def _erm_train(alpha, lam, d=40):
    st = erm_statistics(_problem(alpha, lam), d, [0, 1], restarts=1, keep_matrix=False)
    assert st.all_converged
    return st.mean["train_error"]


@pytest.mark.parametrize("train", [_se_train, pytest.param(_erm_train, marks=pytest.mark.slow)],
                         ids=["SE", "ERM d=40"])
def test_train_error_vanishes_with_lam_below_the_threshold_only(train):
    below = train(0.1, 1e-3) / train(0.1, 1e-4)
    above = train(0.4, 1e-3) / train(0.4, 1e-4)
    assert below > 5.0, below       # ~ lam: interpolation
    assert above < 1.5, above       # no interpolation
    assert train(0.4, 1e-4) > 1e-2  # a finite training error remains above the threshold
