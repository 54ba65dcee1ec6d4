"""RQMC channel expectations (amp_attention.solvers.channel_integrals) against closed forms."""

import numpy as np
import pytest

from amp_attention.channels import LinearChannel
from amp_attention.solvers.channel_integrals import SE_FIELDS, MonteCarloChannel, sobol_normals


def test_sobol_normals_are_standard_normal_and_reproducible():
    g = sobol_normals(5, 12, 4, seed=3)
    assert g.shape == (4, 4096, 5)
    assert np.allclose(g.mean(axis=1), 0, atol=2e-3)
    assert np.allclose(g.var(axis=1), 1, atol=5e-3)
    assert np.array_equal(g, sobol_normals(5, 12, 4, seed=3))
    assert not np.array_equal(g[0], g[1])


def test_sobol_replicas_do_not_depend_on_the_thread_count():
    """The replicas are drawn on the row threads; each is its own seed's scrambled net,
    equal to scipy's serial draw of that seed whichever thread count ran it."""
    from numba import get_num_threads, set_num_threads
    from scipy.special import ndtri
    from scipy.stats import qmc

    from amp_attention.solvers.channel_integrals import clear_draw_memo

    seeds = np.random.SeedSequence(7).spawn(5)
    want = np.stack([ndtri(qmc.Sobol(d=3, scramble=True, seed=np.random.default_rng(s))
                           .random_base2(9)) for s in seeds])
    before = get_num_threads()
    try:
        for threads in (1, min(2, before)):
            set_num_threads(threads)
            clear_draw_memo()  # drawn afresh, not the memo's copy
            assert np.array_equal(sobol_normals(3, 9, 5, 7), want)
    finally:
        set_num_threads(before)


@pytest.mark.parametrize("L", [1, 2])
def test_monte_carlo_reproduces_the_linear_closed_forms(L):
    """The generic RQMC path (prox, g_out, trace term, train/test terms) applied to
    the linear channel must agree with its closed-form expectations within the
    replica standard error."""
    ch = LinearChannel(L, 0.3)
    mc = MonteCarloChannel(ch, log2_n=12, replicas=8, seed=1)
    args = (0.9, 1.1, 0.7, 1.5, 0.8)  # m, q, V, Q0, alpha
    exact = ch.se(*args)
    est = mc.se(*args)
    for name in SE_FIELDS:
        err = mc.last_stderr[name]
        assert abs(getattr(est, name) - getattr(exact, name)) <= 4 * err + 1e-12, name
        # RQMC at 2^12 points x 8 replicas is far better than plain MC (1/sqrt(N) ~ 1e-2).
        assert err <= 2e-3 * abs(getattr(exact, name)) + 1e-12, name


def test_common_random_numbers_make_the_map_deterministic():
    """The same draws give the same map: re-evaluated after a different point (so the
    one-point cache is bypassed), and from a second object with the same seed.  A
    different seed must give a different value, or the check could not fail."""
    args, other = (0.5, 0.8, 0.4, 1.5, 0.5), (0.3, 0.9, 0.6, 1.5, 0.5)
    mc = MonteCarloChannel(LinearChannel(2, 0.5), log2_n=8, replicas=4, seed=2)
    a = mc.se(*args)
    mc.se(*other)
    assert mc.se(*args) == a
    assert MonteCarloChannel(LinearChannel(2, 0.5), log2_n=8, replicas=4, seed=2).se(*args) == a
    b = MonteCarloChannel(LinearChannel(2, 0.5), log2_n=8, replicas=4, seed=3).se(*args)
    assert b.q_hat != a.q_hat and abs(b.q_hat - a.q_hat) < 0.05 * a.q_hat


def test_invalid_overlaps_are_rejected():
    mc = MonteCarloChannel(LinearChannel(1, 0.0), log2_n=6, replicas=2)
    with pytest.raises(ValueError, match="m\\^2 <= q Q0"):
        mc.se(2.0, 1.0, 0.5, 1.5, 0.5)
    with pytest.raises(ValueError, match="q >= 0"):
        mc.se(0.0, -1.0, 0.5, 1.5, 0.5)
    with pytest.raises(ValueError, match="m\\^2 <= q Q0"):
        mc.se(0.1, 0.0, 0.5, 1.5, 0.5)


def test_trivial_point_q_and_V_zero_is_the_limit_of_the_closed_forms():
    """At Shat = 0 (q = V = 0; large lam) the expectations are the V -> 0 limits:
    g_out = -grad l(omega), Vh = 2 alpha E tr H.  Checked on the linear channel."""
    ch = LinearChannel(2, 0.3)
    mc = MonteCarloChannel(ch, log2_n=10, replicas=4, seed=3)
    est = mc.se(0.0, 0.0, 0.0, 1.5, 0.8)
    exact = ch.se(0.0, 0.0, 0.0, 1.5, 0.8)
    for name in SE_FIELDS:
        assert abs(getattr(est, name) - getattr(exact, name)) <= 4 * mc.last_stderr[name] + 1e-6 * abs(getattr(exact, name)), name


def test_linear_output_channel_with_diagonal_tau_is_the_linear_channel():
    from amp_attention.channels.linear_outputs import LinearOutputChannel, u_to_h_matrix

    for L in (1, 2, 3):
        iu = np.triu_indices(L)
        tau = np.where(iu[0] == iu[1], np.sqrt(2.0), 1.0)
        gen = LinearOutputChannel(np.diag(tau), 0.4 * np.eye(tau.size)).se(0.7, 1.0, 0.5, 1.4, 0.6)
        ref = LinearChannel(L, 0.4).se(0.7, 1.0, 0.5, 1.4, 0.6)
        for name in SE_FIELDS:
            assert getattr(gen, name) == pytest.approx(getattr(ref, name), rel=1e-12)
    T = u_to_h_matrix(2)
    u = np.array([0.3, -1.2, 0.5])
    h = (T @ u).reshape(2, 2)
    assert np.allclose(h, h.T) and h[0, 0] == pytest.approx(np.sqrt(2) * 0.3) and h[0, 1] == -1.2


def test_overlaps_at_the_perfect_recovery_edge_are_accepted_up_to_rounding():
    """StateEvolution.valid admits m^2 <= q Q0 (1 + 1e-9); the channel must accept the
    same set (an m^2 one ulp-scale above q Q0 next to perfect recovery used to raise),
    and still reject a genuine violation naming the constraint."""
    mc = MonteCarloChannel(LinearChannel(1, 0.3), log2_n=6, replicas=2, seed=0)
    q, Q0 = 1.2996845091789924, 1.3
    m_edge = (q * Q0 * (1 + 1e-10)) ** 0.5
    out = mc.se(m_edge, q, 0.5, Q0, 0.8)
    assert all(np.isfinite(getattr(out, f)) for f in SE_FIELDS)
    with pytest.raises(ValueError, match=r"m\^2 <= q Q0"):
        mc.se((q * Q0 * (1 + 1e-6)) ** 0.5, q, 0.5, Q0, 0.8)
    # the overlap-only test error (decomposition's mismatch) uses the same constraint
    assert np.isfinite(mc.test_error_at(m_edge, q, Q0))
    with pytest.raises(ValueError, match=r"m\^2 <= q Q0"):
        mc.test_error_at((q * Q0 * (1 + 1e-6)) ** 0.5, q, Q0)


def test_compiled_stein_traces_equal_the_batched_linear_algebra():
    from amp_attention._channel_kernels import stein_traces

    rng = np.random.default_rng(7)
    for K, M in ((1, 1), (3, 4), (6, 9)):
        n = 50
        Jh, Js = rng.standard_normal((n, M, K)), rng.standard_normal((n, M, K))
        G = rng.standard_normal((n, K, K))
        H = G @ G.transpose(0, 2, 1) - 0.3 * np.eye(K)  # indefinite too: pivoting matters
        V = 0.7
        want = np.trace(np.linalg.solve(np.eye(K) + V * H, np.einsum("nmk,nml->nkl", Jh, Js)),
                        axis1=1, axis2=2)
        np.testing.assert_allclose(stein_traces(Jh, Js, H, V), want, rtol=1e-10, atol=1e-12)


def test_the_map_is_continuous_as_q_goes_to_zero():
    """At q = 0 the antithetic pairs have no spread, so the by-parts V_hat and the Newton-step
    control variate do not exist there; the channel side is evaluated at q = Q_MIN Q0 below it.
    Without that floor the q = 0 hats were the plain estimators' (q_hat ~2e-3 off the q -> 0+
    limit at this point, logit-noise softmax, Shat leaving 0), and the SE map 2-cycled."""
    from amp_attention.channels import channel_for
    from amp_attention.spec import Task

    ch = channel_for(Task(channel="softmax", L=2, noise=0.5, noise_at="logit"))
    mc = MonteCarloChannel(ch, log2_n=9, replicas=4, seed=0, step_log2_n=None, test_log2_n=None)
    Q0, alpha, V = 1.5, 0.5355, 2e-10
    assert mc.step_log2_n > 0  # the control variate is on at q > 0, or the check is empty
    at0 = mc.se(0.0, 0.0, V, Q0, alpha)
    for q in (1e-16, 1e-14):
        near = mc.se(0.0, q, V, Q0, alpha)
        for name in ("m_hat", "q_hat", "V_hat"):
            assert getattr(near, name) == pytest.approx(getattr(at0, name), rel=1e-9), (name, q)
    # far enough from 0 the map moves, smoothly: q = 1e-6 is within 1e-5 of q = 0
    far = mc.se(0.0, 1e-6, V, Q0, alpha)
    assert far.q_hat != at0.q_hat and far.q_hat == pytest.approx(at0.q_hat, rel=1e-5)


def test_sobol_draws_are_kept_read_only_and_equal_to_fresh_ones():
    """The memo hands out the same read-only array for the same arguments (a sweep's SEs
    share their draws); after clearing it, fresh draws are equal element by element; a
    small budget drops the least recently used set."""
    from amp_attention.solvers.channel_integrals import SobolMemo, clear_draw_memo

    a = sobol_normals(5, 6, 2, 11)
    assert sobol_normals(5, 6, 2, 11) is a and not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0, 0] = 0.0
    clear_draw_memo()
    b = sobol_normals(5, 6, 2, 11)
    assert b is not a and np.array_equal(a, b)
    memo = SobolMemo(budget=2 * a.nbytes)
    for k in range(3):
        memo.put(("k", k), np.ones(a.shape))
    assert memo.get(("k", 0)) is None and memo.get(("k", 1)) is not None
    memo.put(("k", 3), np.ones(a.shape))  # ("k", 1) was used last: ("k", 2) goes
    assert memo.get(("k", 2)) is None and memo.get(("k", 1)) is not None
