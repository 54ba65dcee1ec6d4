"""The channel contract (amp_attention.channels.base), checked the same way for every
registered channel and for a user-defined one (issue 15).

Each check is against an independent path: finite differences of the loss for its
derivatives, the stationarity condition of the prox objective for the prox, the
outputs for the label model and the error terms, and Monte-Carlo integration of
the prox for a closed-form SE.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from amp_attention.channels import (Channel, CustomChannel, channel_class, channel_for,
                                    channel_names, check_channel, optional_member)
from amp_attention.solvers.channel_integrals import SE_FIELDS, MonteCarloChannel
from amp_attention.spec import Task


@njit(cache=True)
def _g_tanh_upper(h):
    """A saturating channel: tanh of the upper-triangle entries (M = K)."""
    L = h.shape[0]
    out = np.empty(L * (L + 1) // 2)
    k = 0
    for a in range(L):
        for b in range(a, L):
            out[k] = math.tanh(h[a, b])
            k += 1
    return out


def _tasks():
    cases = [(name, Task(name, L=2, beta=1.5, noise=0.2)) for name in channel_names()]
    cases.append(("softmax-logit", Task("softmax", L=3, noise=0.1, noise_at="logit")))
    cases.append(("user-tanh", Task(CustomChannel(2, 3, _g_tanh_upper, noise=0.2, name="tanh"))))
    return cases


CASES = _tasks()


@pytest.fixture(params=[c[1] for c in CASES], ids=[c[0] for c in CASES])
def channel(request) -> Channel:
    return channel_for(request.param)


def _points(ch, n=6, seed=0):
    rng = np.random.default_rng(seed)
    U = 0.7 * rng.standard_normal((n, ch.K))
    y = ch.sample_labels(ch.h_from_u(0.7 * rng.standard_normal((n, ch.K))), rng)
    return y, U


def test_every_channel_meets_the_protocol(channel):
    assert isinstance(channel, Channel)
    assert check_channel(channel) is channel
    assert channel.K == channel.L * (channel.L + 1) // 2
    assert channel.noise_dim in (channel.K, channel.M)


def test_loss_derivatives_agree_with_finite_differences(channel):
    y, U = _points(channel)
    eps = 1e-5
    for i in range(len(U)):
        l, g, H = channel.loss_grad_hess(y[i], U[i])
        assert l == pytest.approx(0.5 * channel.train_terms(y[i:i + 1], U[i:i + 1])[0], rel=1e-12)
        fd_g = np.empty(channel.K)
        fd_H = np.empty((channel.K, channel.K))
        for k in range(channel.K):
            e = np.zeros(channel.K)
            e[k] = eps
            lp, gp, _ = channel.loss_grad_hess(y[i], U[i] + e)
            lm, gm, _ = channel.loss_grad_hess(y[i], U[i] - e)
            fd_g[k] = (lp - lm) / (2 * eps)
            fd_H[:, k] = (gp - gm) / (2 * eps)
        scale = 1.0 + np.abs(g).max()
        assert np.allclose(g, fd_g, atol=1e-6 * scale), (g, fd_g)
        assert np.allclose(H, fd_H, atol=1e-5 * (1.0 + np.abs(H).max())), (H, fd_H)
        assert np.allclose(H, H.T, atol=1e-9 * (1.0 + np.abs(H).max()))


def test_batch_gradient_in_h_is_the_u_gradient(channel):
    """ERM's dl/dh_ab, mapped to u (u_k moves h_ab and h_ba by tau_k), is grad_u l."""
    y, U = _points(channel, seed=1)
    H = channel.h_from_u(U)
    loss, G = channel.batch_loss_and_grad_h(y, H)
    a, b = np.triu_indices(channel.L)
    tau = np.where(a == b, math.sqrt(2.0), 1.0)
    grad_u = tau * np.where(a == b, G[:, a, b], G[:, a, b] + G[:, b, a])
    for i in range(len(U)):
        l, g, _ = channel.loss_grad_hess(y[i], U[i])
        assert loss[i] == pytest.approx(l, rel=1e-12, abs=1e-15)
        assert np.allclose(grad_u[i], g, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("V", [0.3, 2.0])
def test_prox_is_a_stationary_point_of_its_objective(channel, V):
    y, omega = _points(channel, n=32, seed=2)
    px = channel.prox_batch(y, omega, V)
    assert px.n_failed == 0
    assert np.allclose(px.g_out, (px.uhat - omega) / V, rtol=1e-12, atol=1e-14)
    obj = channel.loss_terms(y, px.uhat) + np.sum((px.uhat - omega) ** 2, axis=1) / (2 * V)
    assert np.allclose(px.objective, obj, rtol=1e-10, atol=1e-14)
    for i in range(len(y)):
        _, g, H = channel.loss_grad_hess(y[i], px.uhat[i])
        stationarity = g + (px.uhat[i] - omega[i]) / V
        assert np.abs(stationarity).max() <= 1e-6 * (1.0 + np.abs(g).max())
        # local minimum: the Hessian of the objective is positive definite
        assert np.linalg.eigvalsh(H + np.eye(channel.K) / V).min() > 0
        trace = channel.K - np.trace(np.linalg.inv(np.eye(channel.K) + V * H))
        assert px.trace_term[i] == pytest.approx(trace, rel=1e-6, abs=1e-9)
        # no start-independent lower point nearby: F at uhat below F at omega
        assert px.objective[i] <= channel.loss_terms(y[i:i + 1], omega[i:i + 1])[0] + 1e-12


def test_label_model_and_error_terms_follow_from_the_outputs(channel):
    rng = np.random.default_rng(3)
    n = 4000
    U_star = 0.5 * rng.standard_normal((n, channel.K))
    H_star = channel.h_from_u(U_star)
    clean = channel.outputs(H_star)
    assert clean.shape == (n, channel.M)
    assert np.allclose(channel.labels_from_noise(H_star, np.zeros((n, channel.noise_dim))), clean)
    y = channel.sample_labels(H_star, rng)
    assert y.shape == (n, channel.M)
    if channel.noise_at == "output" or optional_member(channel, "outputs_are_h"):
        # output noise: y - g(h*) has variance Delta per output (4 standard errors of a
        # sample variance of n M normals)
        assert np.var(y - clean) == pytest.approx(channel.noise,
                                                  rel=4 * math.sqrt(2 / (n * channel.M)))
    U = U_star + 0.3 * rng.standard_normal(U_star.shape)
    pred = channel.outputs(channel.h_from_u(U))
    assert np.allclose(channel.train_terms(y, U), np.sum((y - pred) ** 2, axis=1))
    assert np.allclose(channel.loss_terms(y, U), 0.5 * channel.train_terms(y, U))
    assert np.allclose(channel.test_terms(U_star, U), np.sum((clean - pred) ** 2, axis=1))


def test_closed_form_se_agrees_with_monte_carlo_integration(channel):
    se = optional_member(channel, "se")
    if se is None:
        pytest.skip("no closed-form SE: the SE integrates the prox (checked above)")
    mc = MonteCarloChannel(channel, log2_n=12, replicas=8, seed=4)
    args = (0.6, 0.9, 0.8, 1.4, 0.7)
    exact, est = se(*args), mc.se(*args)
    for name in SE_FIELDS:
        assert abs(getattr(est, name) - getattr(exact, name)) <= 4 * mc.last_stderr[name] + 1e-12


def test_exact_population_error_agrees_with_a_test_set(channel):
    exact = optional_member(channel, "population_error")
    if exact is None:
        pytest.skip("no exact population error: ERM samples a test set")
    from amp_attention.data import sample_tokens
    from amp_attention.operators import preactivations

    rng = np.random.default_rng(5)
    d = 40
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    S0, S = A @ A.T, 0.5 * (A + A.T)
    X = sample_tokens(40000, channel.L, d, rng)
    e = np.sum((channel.outputs(preactivations(X, S0)) - channel.outputs(preactivations(X, S))) ** 2,
               axis=1)
    assert exact(S0, S) == pytest.approx(e.mean(), abs=4 * e.std() / math.sqrt(e.size))


def test_zero_loss_geometry_counts_the_equations_when_affine(channel):
    geometry = optional_member(channel, "zero_loss_geometry")
    if geometry is None:
        pytest.skip("zero-loss set not affine")
    geo = geometry(0.0)
    assert 1 <= geo.rank <= channel.K and geo.noise_energy == 0.0
    if channel.noise_at == "logit" or optional_member(channel, "outputs_are_h"):
        assert geometry().noise_energy > 0


def test_registry_builds_each_class_from_a_task_and_rejects_unknown_names():
    for name in channel_names():
        ch = channel_for(Task(name, L=2, beta=2.0, noise=0.1))
        assert isinstance(ch, channel_class(name)) and ch.name == name and ch.L == 2
        assert ch.noise == 0.1
    with pytest.raises(ValueError, match="channel must be one of"):
        Task("relu")
    with pytest.raises(ValueError, match="channel must be one of"):
        channel_class("relu")
    with pytest.raises(ValueError, match="lacks"):
        Task(object())


def test_a_channel_instance_carries_its_own_parameters():
    ch = CustomChannel(2, 3, _g_tanh_upper, noise=0.2, noise_at="logit", name="tanh")
    t = Task(ch)
    assert (t.L, t.noise, t.noise_at, t.channel_name, t.channel_object) == (2, 0.2, "logit",
                                                                              "tanh", ch)
    with pytest.raises(ValueError, match="L=3 conflicts"):
        Task(ch, L=3)
    with pytest.raises(ValueError, match="noise=0.5 conflicts"):
        Task(ch, noise=0.5)
