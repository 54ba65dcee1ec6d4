"""A user-defined channel runs through every path via Problem: SE, ERM, GAMP, Adam (issue 15).

The user channel below re-implements the linear channel as a Numba output function
(no closed forms: the SE integrates its prox by RQMC, ERM and Adam use its
compiled loss, GAMP its Newton prox).  Its labels are drawn from the same random
numbers as the built-in linear channel's, so every path must reproduce the
built-in closed-form / least-squares results: to the RQMC error for the SE, to the
solvers' tolerances on data.
"""

import numpy as np
import pytest
from numba import njit

from amp_attention.adam import AdamOptions, train_layer
from amp_attention.channels import CustomChannel
from amp_attention.erm import direct_erm
from amp_attention.gamp import GAMPOptions, gamp_on_problem
from amp_attention.solvers.state_evolution import MonteCarloOptions, solve_state_evolution
from amp_attention.spec import Learner, Problem, Task, WishartTarget


# ---- the user's channel: g(h) = (h_ab)_{a <= b} and its Jacobian (the whole definition)
@njit(cache=True)
def upper(h):
    L = h.shape[0]
    out, k = np.empty(L * (L + 1) // 2), 0
    for a in range(L):
        for b in range(a, L):
            out[k], k = h[a, b], k + 1
    return out


@njit(cache=True)
def upper_jacobian(h):
    L = h.shape[0]
    J, k = np.zeros((L * (L + 1) // 2, L, L)), 0
    for a in range(L):
        for b in range(a, L):
            J[k, a, b], k = 1.0, k + 1
    return J
# ---- end of the user's code


NOISE, D, SEED = 0.1, 20, 3


def _problems():
    user = CustomChannel(2, 3, upper, upper_jacobian, noise=NOISE, name="my-linear")
    rest = (WishartTarget(0.5), Learner(1.0, 0.05), 0.8)
    return Problem(Task(user), *rest), Problem(Task("linear", L=2, noise=NOISE), *rest)


@pytest.fixture(scope="module")
def problems():
    return _problems()


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_state_evolution_of_a_user_channel_matches_the_closed_form(problems):
    user, builtin = problems
    got = solve_state_evolution(user, mc=MonteCarloOptions(log2_n=10, replicas=8, seed=1, coarse_log2_n=10),
                                start="informative")
    ref = solve_state_evolution(builtin, start="informative")
    assert got.success and ref.success
    for name in ("m", "q", "V", "train_error", "test_error"):
        err = got.mc_stderr[name]
        assert 0 < err < 0.02 * abs(getattr(ref, name))   # not vacuous: 2 % at most
        # 4 standard errors of the seed-to-seed spread, which is 1.5 times the reported
        # replica error here (16 RQMC seeds at the fixed point's overlaps: the z-scores of
        # the hats against the closed form have mean -0.2 and standard deviation 1.5;
        # 8 replicas estimate a standard error only to ~25 %)
        assert abs(getattr(got, name) - getattr(ref, name)) <= 4 * 1.5 * err, name


def test_erm_gamp_and_adam_on_data_reproduce_the_builtin_channel(problems):
    user, builtin = problems
    erm = direct_erm(user, D, SEED, restarts=0, tol=1e-7)
    ref = direct_erm(builtin, D, SEED, tol=1e-11)
    assert erm.success and erm.channel == "my-linear"
    # a relative projected gradient of 1e-7 leaves ~1e-6 in the solution
    assert erm.matrix_mse == pytest.approx(ref.matrix_mse, rel=1e-4)
    assert erm.train_error == pytest.approx(ref.train_error, rel=1e-4)
    assert erm.test_error == pytest.approx(ref.test_error, rel=0.05)   # MC test set vs exact

    opts = GAMPOptions(tol=1e-9, max_iter=200)
    g_user, g_ref = gamp_on_problem(user, D, SEED, options=opts), gamp_on_problem(builtin, D, SEED,
                                                                                   options=opts)
    assert g_user.result.success and g_ref.result.success
    assert np.allclose(g_user.result.S, g_ref.result.S, atol=1e-6 * np.abs(g_ref.result.S).max())
    assert np.allclose(g_user.result.S, ref.S, atol=1e-4 * np.abs(ref.S).max())

    adam = AdamOptions(max_iter=300, lr=1e-2)
    a_user = train_layer(user, D, SEED, options=adam, n_test=2000)
    a_ref = train_layer(builtin, D, SEED, options=adam, n_test=2000)
    assert a_user.iterations == a_ref.iterations
    assert np.allclose(a_user.eigenvalues_S, a_ref.eigenvalues_S, rtol=0, atol=1e-8)
    assert a_user.loss == pytest.approx(a_ref.loss, rel=1e-10)


def test_threaded_batch_drivers_do_not_depend_on_the_thread_count(problems):
    """A user channel's prox, Newton and outputs split their rows over Numba's thread count
    (Python threads over nogil kernels): every row is the same on 1 thread and on 2."""
    from numba import get_num_threads, set_num_threads

    ch = problems[0].task.channel
    rng = np.random.default_rng(0)
    n = 1000  # not a multiple of the blocks
    u = rng.standard_normal((n, ch.K))
    om = u + 0.7 * rng.standard_normal((n, ch.K))
    y = ch.sample_labels(ch.h_from_u(u), rng)
    old = get_num_threads()
    runs = []
    try:
        for threads in (1, min(2, old)):
            set_num_threads(threads)
            px = ch.prox_batch(y, om, 0.8)
            runs.append((px.uhat, px.objective, ch.newton_from(y, om, 0.8, om)[0],
                         ch.outputs(ch.h_from_u(om))))
    finally:
        set_num_threads(old)
    for a, b in zip(*runs):
        assert np.array_equal(a, b)
