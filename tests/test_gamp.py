"""GAMP on data (issue 4): its fixed point is the ERM minimiser, failures are reported."""

import json
import math

import numpy as np
import pytest

from amp_attention.channels import channel_for
from amp_attention.data import generate_dataset
from amp_attention.denoisers import denoiser_for
from amp_attention.erm import direct_erm, kkt_residual, objective_S
from amp_attention.gamp import DenseSensing, GAMPOptions, TokenSensing, gamp, u_adjoint, u_of
from amp_attention.operators import sensing_norms, tau
from amp_attention.spec import Learner, Problem, Task, WishartTarget


def test_u_adjoint_is_the_adjoint_and_sensing_norms_are_the_row_norms():
    rng = np.random.default_rng(0)
    n, L, d = 7, 3, 9
    X = rng.standard_normal((n, L, d))
    S = rng.standard_normal((d, d))
    S = S + S.T
    g = rng.standard_normal((n, L * (L + 1) // 2))
    t = tau(L)
    assert np.sum(g * u_of(X, S, t)) == pytest.approx(np.sum(u_adjoint(X, g, t) * S), rel=1e-12)
    # Row norm of measurement (mu, k): ||A*(e_mu,k)||_F^2 (an isometry of Sym(d) to matrices).
    r = sensing_norms(X)
    for mu, k in [(0, 0), (3, 1), (6, 5)]:
        e = np.zeros_like(g)
        e[mu, k] = 1.0
        M = u_adjoint(X, e, t)
        assert r[mu, k] == pytest.approx(np.sum(M * M) / ((d + 1) / 2), rel=1e-12)


def test_dense_reference_operator_is_the_same_operator():
    """The explicit n K x N sensing matrix (the naive formulation of the benchmark)
    and the token GEMMs give the same forward map, adjoint, row norms and GAMP run."""
    p = Problem(Task("softmax", L=2, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.2),
                alpha=0.5)
    ch = channel_for(p.task)
    data = generate_dataset(p, 12, 0, channel=ch)
    tok, dense = TokenSensing(data.X), DenseSensing(data.X)
    rng = np.random.default_rng(1)
    S = rng.standard_normal((12, 12))
    S = S + S.T
    g = rng.standard_normal((data.n, 3))
    assert np.allclose(dense.forward(S), tok.forward(S), rtol=1e-11, atol=1e-12)
    assert np.allclose(dense.adjoint(g), tok.adjoint(g), rtol=1e-11, atol=1e-11)
    assert np.allclose(dense.row_norms(), tok.row_norms(), rtol=1e-11)
    opts = GAMPOptions(max_iter=15)
    a = gamp(tok, data.y, ch, denoiser_for(p.learner), options=opts)
    b = gamp(dense, data.y, ch, denoiser_for(p.learner), options=opts)
    assert np.allclose(a.S, b.S, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("L, learner, noise", [(1, Learner(1.0, 0.1), 0.5),
                                               (2, Learner(1.5, 0.05), 0.1),
                                               (2, Learner(1.0, 0.3, "elementwise"), 0.2)])
def test_linear_fixed_point_is_the_direct_erm_minimiser(L, learner, noise):
    p = Problem(Task("linear", L=L, noise=noise), WishartTarget(0.5), learner, alpha=0.6)
    d = 40
    data = generate_dataset(p, d, 3)
    erm = direct_erm(p, d, 3, data=data, tol=1e-12, max_iter=100000)
    assert erm.converged
    res = gamp(data.X, data.y, channel_for(p.task), denoiser_for(p.learner),
               options=GAMPOptions(max_iter=5000, tol=1e-12), S0=data.S0)
    assert res.converged, res.status
    dist = np.linalg.norm(res.S - erm.S) / np.linalg.norm(erm.S)
    assert dist <= 1e-6, dist
    last = res.history[-1]
    assert last.m == pytest.approx(erm.m, rel=1e-6) and last.q == pytest.approx(erm.q, rel=1e-6)


def test_softmax_fixed_point_satisfies_kkt_and_is_not_worse_than_restarted_erm():
    p = Problem(Task("softmax", L=2, beta=1.0, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.2),
                alpha=0.5)
    d = 40
    ch = channel_for(p.task)
    data = generate_dataset(p, d, 1, "quantile", channel=ch)
    res = gamp(data.X, data.y, ch, denoiser_for(p.learner), options=GAMPOptions(tol=1e-11),
               S0=data.S0)
    assert res.converged, res.status
    assert kkt_residual(data.X, data.y, res.S, ch, 0.2) <= 1e-6
    erm = direct_erm(p, d, 1, channel=ch, data=data, restarts=3, tol=1e-9)
    R, _ = objective_S(data.X, data.y, res.S, ch, 0.2)
    assert R / data.n <= min(erm.restart_losses) + 1e-9


class _ExplodingDenoiser:
    """A denoiser whose V blows up at the third call: divergence must be caught."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def matrix_map(self, B, Vh):
        self.calls += 1
        S, V = self.real.matrix_map(B, Vh)
        return (S, V * 1e12) if self.calls >= 3 else (S, V)


def test_divergence_is_reported_with_its_iteration_and_no_estimate():
    p = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)
    data = generate_dataset(p, 24, 0)
    res = gamp(data.X, data.y, channel_for(p.task), _ExplodingDenoiser(denoiser_for(p.learner)))
    assert not res.converged and res.S is None
    assert res.status == "diverged" and res.message.startswith("at iteration 2")
    assert "--" not in res.message  # command-line advice is the CLI's, not the result's
    json.dumps(res.to_dict())  # the record up to the failure stays usable


def test_history_records_every_iteration_and_the_held_out_error():
    p = Problem(Task("linear", L=2, noise=0.1), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)
    d = 24
    data = generate_dataset(p, d, 0)
    test = generate_dataset(p, d, 1)
    seen = []
    res = gamp(data.X, data.y, channel_for(p.task), denoiser_for(p.learner),
               options=GAMPOptions(max_iter=7, tol=1e-14), S0=data.S0,
               test=(test.X, data.S0), callback=seen.append)
    assert not res.converged and res.status.startswith("max_iter") and res.S is not None
    assert len(seen) == 7 and len(res.history) == 8 and res.iterations == 7
    assert [h.t for h in res.history] == list(range(8))
    last = res.history[-1]
    # Clean test error of the linear channel: (2L + L(L-1)/2) ||S - S0||^2/d exactly in
    # expectation; the held-out estimate on n = alpha d^2 samples is within a few %.
    exact = (2 * 2 + 1) * np.sum((res.S - data.S0) ** 2) / d
    assert last.test_error == pytest.approx(exact, rel=0.1)
    assert all(math.isfinite(h.train_error) for h in res.history)


@pytest.mark.parametrize("kw, name", [({"damping": 0.0}, "damping"), ({"max_iter": 0}, "max_iter"),
                                      ({"tol": -1.0}, "tol"), ({"V0": math.inf}, "V0")])
def test_bad_options_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        GAMPOptions(**kw)


def test_bad_shapes_are_rejected():
    ch = channel_for(Task("linear", L=2, noise=0.1))
    den = denoiser_for(Learner(1.0, 0.1))
    X = np.zeros((5, 2, 4))
    with pytest.raises(ValueError, match="y must have shape"):
        gamp(X, np.zeros((5, 2)), ch, den)
    with pytest.raises(ValueError, match="L = 3"):
        gamp(np.zeros((5, 3, 4)), np.zeros((5, 3)), ch, den)


def _g_mean_attention(h):
    # seq2lab's default label, written as a user channel: (1/L) Tr softmax_rows(h)
    L = h.shape[0]
    tot = 0.0
    for a in range(L):
        m = h[a, 0]
        for b in range(1, L):
            m = max(m, h[a, b])
        s = 0.0
        for b in range(L):
            s += math.exp(h[a, b] - m)
        tot += math.exp(h[a, a] - m) / s
    out = np.empty(1)
    out[0] = tot / L
    return out


@pytest.mark.parametrize("kind", ["seq2lab", pytest.param("custom", marks=pytest.mark.slow)])
def test_seq2lab_and_user_channels_reach_erm_stationary_points(kind):
    """GAMP runs with every channel object: seq2lab, and a user-defined output
    function (Numba, finite-difference Jacobian) that is seq2lab at beta = 1 --
    both reach the same ERM stationary point."""
    from numba import njit

    from amp_attention.channels import CustomChannel

    p = Problem(Task("seq2lab", L=2, beta=1.0, noise=0.05), WishartTarget(0.5),
                Learner(1.0, 0.01), alpha=0.5)
    d = 20
    builtin = channel_for(p.task)
    ch = builtin if kind == "seq2lab" else CustomChannel(2, 1, njit(_g_mean_attention), noise=0.05)
    data = generate_dataset(p, d, 2, "quantile", channel=builtin)
    # The user channel's Hessian is a finite difference (~1e-7 relative), which
    # limits how far its fixed point can be resolved.
    tol = 1e-10 if kind == "seq2lab" else 1e-7
    res = gamp(data.X, data.y, ch, denoiser_for(p.learner), options=GAMPOptions(tol=tol))
    assert res.converged, res.status
    assert kkt_residual(data.X, data.y, res.S, ch, 0.01) <= (1e-6 if kind == "seq2lab" else 1e-5)
    ref = gamp(data.X, data.y, builtin, denoiser_for(p.learner), options=GAMPOptions(tol=1e-10))
    assert np.linalg.norm(res.S - ref.S) <= 1e3 * tol * np.linalg.norm(ref.S)
