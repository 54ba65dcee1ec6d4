"""The Bayes-optimal channel side (docs/theory.md "Bayes-optimal baseline"): posterior output
functions on data against brute-force posterior sampling and finite differences, the
closed-form conjugates against the same Monte-Carlo estimator, and the nested RQMC
channel against the linear channel's closed form."""

import math

import numpy as np
import pytest

from amp_attention.channels import LinearChannel, Seq2LabChannel, SoftmaxChannel
from amp_attention.solvers.bayes_channel_integrals import (BayesMonteCarloOptions,
                                                           MonteCarloBayesChannel)

CLOSED = [LinearChannel(1, 0.0), LinearChannel(2, 0.3), LinearChannel(3, 0.0),
          SoftmaxChannel(2, 1.0, 0.0), SoftmaxChannel(3, 2.0, 0.0),
          SoftmaxChannel(2, 1.0, 0.2, "logit"), SoftmaxChannel(3, 0.5, 0.05, "logit")]


def labels(ch, u_star, rng):
    return ch.sample_labels(ch.h_from_u(u_star), rng)


@pytest.mark.parametrize("ch", CLOSED, ids=repr)
def test_posterior_batch_is_the_posterior_mean(ch):
    """For one (y, omega) the posterior mean E[u* | y, omega] of u* ~ N(omega, diag V) is
    estimated by brute force: draw many (u*, noise), keep the label equivalence class
    of y through a Gaussian kernel of small width; compared with posterior_batch."""
    if ch.noise == 0 and (isinstance(ch, LinearChannel) or ch.K > 3):
        pytest.skip("noiseless labels fix u* up to a line (or exactly): a kernel estimate "
                    "in K - 1 >= 5 dimensions has no effective sample")
    rng = np.random.default_rng(1)
    K = ch.K
    V = np.array([0.6, 0.9, 0.4, 1.1, 0.7, 0.5][:K])
    omega = rng.standard_normal(K) * 0.5
    u_true = omega + np.sqrt(V) * rng.standard_normal(K)
    y = labels(ch, u_true[None], rng)
    px = ch.posterior_batch(y, omega[None], V[None])
    # brute force: posterior over u* via importance weights of the exact likelihood
    N = 1_000_000
    U = omega + np.sqrt(V) * rng.standard_normal((N, K))
    if isinstance(ch, LinearChannel):
        s2 = ch.noise
        r = y - ch.outputs(ch.h_from_u(U))
        logw = -np.sum(r * r, axis=1) / (2 * s2)
    else:
        # labels fix A(u* + eps): Gaussian likelihood of the class, eps ~ N(0, D)
        A = ch._constrained_basis()
        D = ch.noise / ch.tau**2
        z = ch.consistent_u(y)[0] @ A.T
        # noiseless: a Gaussian kernel of variance 1e-3 (bias O(1e-3), inside the 0.01 slack)
        C = (A * D) @ A.T + (1e-3 if ch.noise == 0 else 0.0) * np.eye(K - 1)
        diff = U @ A.T - z
        logw = -0.5 * np.sum(diff @ np.linalg.inv(C) * diff, axis=1)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ U
    ess = 1 / np.sum(w * w)
    assert ess > 200
    tol = 5 * np.sqrt(np.sum(w[:, None] ** 2 * (U - mean) ** 2, axis=0)) + 0.01
    assert np.all(np.abs(px.uhat[0] - mean) < tol), (px.uhat[0], mean, tol)


@pytest.mark.parametrize("ch", CLOSED, ids=repr)
def test_posterior_trace_term_is_the_divergence(ch):
    """trace_term = -sum_k V_k d g_k / d omega_k, by central differences in omega."""
    rng = np.random.default_rng(2)
    K = ch.K
    n = 5
    V = 0.3 + rng.random((n, K))
    omega = rng.standard_normal((n, K))
    y = labels(ch, omega + np.sqrt(V) * rng.standard_normal((n, K)), rng)
    px = ch.posterior_batch(y, omega, V)
    h = 1e-6
    div = np.zeros(n)
    for k in range(K):
        e = np.zeros(K)
        e[k] = h
        gp = ch.posterior_batch(y, omega + e, V).g_out[:, k]
        gm = ch.posterior_batch(y, omega - e, V).g_out[:, k]
        div -= V[:, k] * (gp - gm) / (2 * h)
    assert np.allclose(px.trace_term, div, rtol=1e-6, atol=1e-8)
    assert np.allclose(px.g_out, (px.uhat - omega) / V)


@pytest.mark.parametrize("ch", CLOSED, ids=repr)
def test_closed_form_q_hat_is_the_expected_squared_output_function(ch):
    """bayes_q_hat(V) = 2 alpha E||g_out||^2 over the Bayes-optimal channel
    (omega ~ N(0, q), u* = omega + sqrt(V) z, labels), estimated with posterior_batch."""
    rng = np.random.default_rng(3)
    n, V, Q0, alpha = 200_000, 0.4, 1.5, 0.7
    omega = math.sqrt(Q0 - V) * rng.standard_normal((n, ch.K))
    y = labels(ch, omega + math.sqrt(V) * rng.standard_normal((n, ch.K)), rng)
    g = ch.posterior_batch(y, omega, V).g_out
    sq = 2 * alpha * np.sum(g * g, axis=1)
    assert abs(sq.mean() - ch.bayes_q_hat(V, Q0, alpha)) < 4 * sq.std() / math.sqrt(n)


def test_consistent_u_inverts_the_softmax():
    ch = SoftmaxChannel(3, 1.7, 0.0)
    rng = np.random.default_rng(4)
    U = rng.standard_normal((50, ch.K))
    y = ch.outputs(ch.h_from_u(U))
    assert np.allclose(ch.outputs(ch.h_from_u(ch.consistent_u(y))), y, atol=1e-12)


class WithoutClosedForm:
    """The linear channel seen through the generic Monte-Carlo path."""

    def __init__(self, ch):
        self._ch = ch
        for a in ("K", "M", "noise", "noise_at", "L"):
            setattr(self, a, getattr(ch, a))
        self.name = "linear-generic"

    def outputs(self, H):
        return self._ch.outputs(H)

    def h_from_u(self, U):
        return self._ch.h_from_u(U)

    def prox_batch(self, *a, **k):
        return self._ch.prox_batch(*a, **k)

    def output_jacobian(self, U):
        return np.broadcast_to(np.diag(self._ch.tau), (U.shape[0], self.K, self.K)).copy()


@pytest.mark.parametrize("L, noise, V", [(1, 0.5, 0.05), (1, 0.5, 0.8), (2, 0.1, 0.5),
                                         (2, 0.01, 0.05)])
def test_nested_monte_carlo_reproduces_linear_closed_form(L, noise, V):
    """The mixture importance sampler (prior + Laplace) on the linear channel's outputs
    with Gaussian output noise gives 2 alpha sum_k 1/(V + Delta/tau_k^2) within 4
    replica standard errors, with a healthy effective inner sample."""
    ch = LinearChannel(L, noise)
    mc = MonteCarloBayesChannel(WithoutClosedForm(ch), log2_n=10, inner_log2_n=6, replicas=8)
    reps = mc.replica_q_hats(V, 1.5, 1.0)
    exact = ch.bayes_q_hat(V, 1.5, 1.0)
    assert abs(reps.mean() - exact) < 4 * reps.std(ddof=1) / math.sqrt(8) + 1e-3 * exact
    assert mc.min_ess > 10


def test_nested_monte_carlo_converges_in_the_inner_sample():
    """Noisy softmax (output noise): 2^5 vs 2^8 inner points agree within the MC error."""
    ch = SoftmaxChannel(2, 1.0, 0.1)
    vals = []
    for inner in (5, 8):
        mc = MonteCarloBayesChannel(ch, log2_n=10, inner_log2_n=inner, replicas=8)
        r = mc.replica_q_hats(0.5, 1.5, 1.0)
        vals.append((r.mean(), r.std(ddof=1) / math.sqrt(8)))
    (a, sa), (b, sb) = vals
    assert abs(a - b) < 4 * math.hypot(sa, sb)


def test_nested_monte_carlo_refuses_what_it_cannot_integrate():
    with pytest.raises(ValueError, match="noise"):
        MonteCarloBayesChannel(Seq2LabChannel(2, 1.0, 0.0))
    with pytest.raises(ValueError, match="noise"):
        MonteCarloBayesChannel(Seq2LabChannel(2, 1.0, 0.1, "logit"))
    with pytest.raises(ValueError, match="inner_log2_n"):
        BayesMonteCarloOptions(inner_log2_n=2)


@pytest.mark.slow  # 25 s: compiling the user channel's Newton kernels
def test_user_channel_through_the_monte_carlo_path():
    """A CustomChannel re-implementing the linear channel (L = 2, output noise) has no
    output_jacobian: the finite-difference Jacobian feeds the Laplace proposal, and
    the conjugate matches the linear closed form within 4 replica standard errors."""
    from test_user_channel import upper, upper_jacobian

    from amp_attention.channels import CustomChannel

    user = CustomChannel(2, 3, upper, upper_jacobian, noise=0.1, name="my-linear")
    assert not hasattr(user, "output_jacobian")
    mc = MonteCarloBayesChannel(user, log2_n=6, inner_log2_n=5, replicas=4)
    reps = mc.replica_q_hats(0.5, 1.5, 1.0)
    exact = LinearChannel(2, 0.1).bayes_q_hat(0.5, 1.5, 1.0)
    assert abs(reps.mean() - exact) < 4 * reps.std(ddof=1) / 2 + 1e-3 * exact
