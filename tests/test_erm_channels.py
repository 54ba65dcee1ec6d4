"""Finite-d ERM for non-linear output channels (THEORY 2; issue 3, item 4).

The channels used here are small independent reference implementations written
for this file (pure NumPy, the duck-typed interface of
``amp_attention.channels.base.DATA_MEMBERS``), so that the ERM code is tested
against the interface and not against the production channel objects.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_attention.channels import channel_for
from amp_attention.data import generate_dataset
from amp_attention.erm import ERMResult, direct_erm, objective_S, objective_W
from amp_attention.operators import preactivations
from amp_attention.spec import Learner, Problem, Task, WishartTarget


# ------------------------------------------------------------- reference channels


def _softmax_rows(Z: np.ndarray) -> np.ndarray:
    Z = Z - Z.max(axis=-1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=-1, keepdims=True)


class RefSoftmax:
    """seq2seq: g(h) = softmax_rows(beta h) flattened row-major (M = L^2), output noise."""

    name = "softmax"
    noise_at = "output"

    def __init__(self, L: int, beta: float = 1.0, noise: float = 0.0):
        self.L, self.beta, self.noise = L, beta, noise
        self.K = L * (L + 1) // 2
        self.M = L * L

    def outputs(self, H: np.ndarray) -> np.ndarray:
        return _softmax_rows(self.beta * H).reshape(H.shape[0], -1)

    def sample_labels(self, H_star: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        g = self.outputs(H_star)
        return g + math.sqrt(self.noise) * rng.standard_normal(g.shape)

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray):
        n, L = H.shape[0], self.L
        P = _softmax_rows(self.beta * H)                    # (n, L, L)
        r = P - y.reshape(n, L, L)                          # dl/dg
        loss = 0.5 * np.sum(r * r, axis=(1, 2))
        # row a: dg/dh = beta (diag p - p p^T), symmetric
        G = self.beta * P * (r - np.sum(P * r, axis=2, keepdims=True))
        return loss, G


class RefSeq2Lab:
    """seq2lab: g(h) = (1/L) Tr softmax_rows(beta h) (M = 1), output noise."""

    name = "seq2lab"
    noise_at = "output"

    def __init__(self, L: int, beta: float = 1.0, noise: float = 0.0):
        self.L, self.beta, self.noise = L, beta, noise
        self.K = L * (L + 1) // 2
        self.M = 1

    def outputs(self, H: np.ndarray) -> np.ndarray:
        P = _softmax_rows(self.beta * H)
        return np.trace(P, axis1=1, axis2=2)[:, None] / self.L

    def sample_labels(self, H_star: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        g = self.outputs(H_star)
        return g + math.sqrt(self.noise) * rng.standard_normal(g.shape)

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray):
        L = self.L
        P = _softmax_rows(self.beta * H)
        diag = np.diagonal(P, axis1=1, axis2=2)             # p_a[a], (n, L)
        r = diag.sum(axis=1) / L - y[:, 0]                  # (n,)
        # d p_a[a] / d h_ac = beta p_a[a] (delta_ac - p_a[c])
        G = -P * diag[:, :, None]
        idx = np.arange(L)
        G[:, idx, idx] += diag
        G *= (self.beta / L) * r[:, None, None]
        return 0.5 * r * r, G


class RefLinear:
    """The linear channel in the same interface: g(h) = upper triangle of h (M = K)."""

    name = "linear"
    noise_at = "output"

    def __init__(self, L: int, noise: float = 0.0):
        self.L, self.noise = L, noise
        self.K = self.M = L * (L + 1) // 2
        self._iu = np.triu_indices(L)

    def outputs(self, H: np.ndarray) -> np.ndarray:
        return H[:, self._iu[0], self._iu[1]]

    def sample_labels(self, H_star: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        g = self.outputs(H_star)
        return g + math.sqrt(self.noise) * rng.standard_normal(g.shape)

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray):
        r = self.outputs(H) - y
        G = np.zeros_like(H)
        G[:, self._iu[0], self._iu[1]] = r                  # lower triangle: d l / d h_ab = 0
        return 0.5 * np.sum(r * r, axis=1), G


def _problem(channel: str = "softmax", L: int = 2, kappa: float = 1.0, lam: float = 0.05,
             alpha: float = 0.5, noise: float = 0.1, param: str = "factorised",
             kappa0: float = 0.5) -> Problem:
    return Problem(Task(channel, L=L, noise=noise), WishartTarget(kappa0),
                   Learner(kappa=kappa, lam=lam, parameterisation=param), alpha=alpha)


def _random_data(channel, d: int, n: int, seed: int):
    """Tokens and labels from a random PSD target (small, for derivative checks)."""
    rng = np.random.default_rng(seed)
    W0 = rng.standard_normal((d // 2, d))
    S0 = W0.T @ W0 / math.sqrt(d * d / 2)
    X = rng.standard_normal((n, channel.L, d))
    y = channel.sample_labels(preactivations(X, S0), rng)
    return X, y, rng


def _central_difference(fun, x: np.ndarray, direction: np.ndarray, eps: float) -> float:
    return (fun(x + eps * direction) - fun(x - eps * direction)) / (2.0 * eps)


# ------------------------------------------------------------------------ tests


@pytest.mark.parametrize("make", [lambda: RefSoftmax(2, 1.3, 0.1), lambda: RefSoftmax(3, 0.7, 0.05),
                                  lambda: RefSeq2Lab(2, 1.0, 0.1), lambda: RefSeq2Lab(3, 2.0, 0.0),
                                  # the production channels Adam trains with (channel_for)
                                  lambda: channel_for(Task("linear", L=1, noise=0.1)),
                                  lambda: channel_for(Task("linear", L=3, noise=0.1)),
                                  lambda: channel_for(Task("softmax", L=2, beta=1.3, noise=0.1)),
                                  lambda: channel_for(Task("softmax", L=3, beta=0.7, noise=0.1,
                                                           noise_at="logit")),
                                  lambda: channel_for(Task("seq2lab", L=2, beta=1.0, noise=0.1))],
                         ids=["ref-softmax-L2", "ref-softmax-L3", "ref-seq2lab-L2", "ref-seq2lab-L3",
                              "linear-L1", "linear-L3", "softmax-L2", "softmax-L3-logit",
                              "seq2lab-L2"])
def test_gradients_match_finite_differences(make) -> None:
    ch = make()
    d, lam = 7, 0.07
    X, y, rng = _random_data(ch, d, 40, 11)
    # dR/dS, both penalties, at a generic symmetric (not PSD) point
    A = rng.standard_normal((d, d))
    S = 0.4 * (A + A.T) / math.sqrt(d)
    for param in ("factorised", "elementwise"):
        _, grad = objective_S(X, y, S, ch, lam, param)
        assert np.allclose(grad, grad.T)
        for _ in range(3):
            E = rng.standard_normal((d, d))
            E = E + E.T
            fd = _central_difference(lambda T: objective_S(X, y, T, ch, lam, param)[0], S, E, 1e-5)
            exact = float(np.sum(grad * E))
            assert abs(fd - exact) <= 1e-6 * abs(exact), (param, fd, exact)
    # dR/dW for a rank-capped (p < d) and a square W
    for p in (3, d):
        W = 0.7 * rng.standard_normal((p, d))
        _, gW = objective_W(X, y, W, ch, lam)
        for _ in range(3):
            E = rng.standard_normal((p, d))
            fd = _central_difference(lambda V: objective_W(X, y, V, ch, lam)[0], W, E, 1e-5)
            exact = float(np.sum(gW * E))
            assert abs(fd - exact) <= 1e-6 * abs(exact), (p, fd, exact)
    # the W-objective is the S-objective at S = W^T W / sqrt(p d), penalty (lam/sqrt(kappa))||W||^2
    W = rng.standard_normal((3, d))
    R_W, _ = objective_W(X, y, W, ch, lam)
    R_S, _ = objective_S(X, y, W.T @ W / math.sqrt(3 * d), ch, lam, "factorised")
    assert R_W == pytest.approx(R_S, rel=1e-13)
    f0, _ = objective_S(X, y, W.T @ W / math.sqrt(3 * d), ch, 0.0, "factorised")
    assert R_W - f0 == pytest.approx(lam / math.sqrt(3 / d) * np.sum(W * W), rel=1e-10)


@pytest.mark.parametrize("chname,alpha,kappa", [("softmax", 2.0, 1.0), ("softmax", 2.0, 0.5),
                                                ("seq2lab", 4.0, 1.0)])
def test_noiseless_teacher_student(chname: str, alpha: float, kappa: float) -> None:
    """Noiseless labels, tiny lam, enough samples: the student interpolates and finds S0."""
    d, L = 16, 2
    ch = RefSoftmax(L, 1.0, 0.0) if chname == "softmax" else RefSeq2Lab(L, 1.0, 0.0)
    prob = _problem(chname, L=L, kappa=kappa, lam=1e-6, alpha=alpha, noise=0.0)
    res = direct_erm(prob, d, 3, channel=ch, restarts=1)
    assert res.converged and res.residual <= 1e-7
    assert res.train_error < 1e-8
    assert res.test_error < 1e-7
    assert res.matrix_mse < 1e-5 * (1 + prob.target.kappa0)
    assert res.rank_fraction == pytest.approx(0.5)       # rank of S0 = kappa0 d = 8


@pytest.mark.parametrize("kappa,param", [(0.3, "factorised"), (1.0, "factorised"), (1.0, "elementwise")])
def test_restarts_keep_the_best(kappa: float, param: str) -> None:
    d = 24
    ch = RefSoftmax(2, 1.0, 0.1)
    prob = _problem(kappa=kappa, lam=0.05 if param == "factorised" else 0.002, param=param)
    res = direct_erm(prob, d, 0, channel=ch, restarts=3)
    assert len(res.restart_losses) == len(res.restart_converged) == len(res.restart_iterations) == 4
    assert all(res.restart_converged)
    assert res.loss == min(res.restart_losses)
    assert res.restart_losses[res.best_restart] == res.loss
    # the reported loss is R(Shat)/n of the returned matrix
    data = generate_dataset(prob, d, 0, channel=ch)
    R, _ = objective_S(data.X, data.y, res.S, ch, prob.learner.lam, param)
    assert R / data.n == pytest.approx(res.loss, rel=1e-10)
    # every start is reproducible on its own: a single-start run equals start 0
    single = direct_erm(prob, d, 0, channel=ch, restarts=0, data=data)
    assert single.restart_losses == res.restart_losses[:1]
    assert res.loss <= single.loss


@pytest.mark.parametrize("L,kappa,method", [(1, 1.0, "auto"), (1, 1.0, "lbfgs"), (2, 1.0, "auto"),
                                            (2, 2.0, "auto"), (2, 2.0, "lbfgs")])
def test_linear_channel_matches_direct_erm(L: int, kappa: float, method: str) -> None:
    """Convex case: the channel-generic ERM equals training.direct_erm on the same data."""
    d, noise = 20, 0.3
    prob = _problem("linear", L=L, kappa=kappa, lam=0.05, alpha=0.5, noise=noise)
    data = generate_dataset(prob, d, 2)
    ch = RefLinear(L, noise)
    # same draws: the generic generator reproduces the linear-channel dataset
    data2 = generate_dataset(prob, d, 2, channel=ch)
    assert np.array_equal(data.S0, data2.S0) and np.array_equal(data.X, data2.X)
    assert np.array_equal(data.y, data2.y)
    ref = direct_erm(prob, d, 2, data=data)
    res = direct_erm(prob, d, 2, channel=ch, data=data, restarts=1, tol=1e-8, method=method)
    assert res.converged
    assert res.matrix_mse == pytest.approx(ref.matrix_mse, rel=1e-5)
    assert res.loss == pytest.approx(ref.loss, rel=1e-9)
    assert res.train_error == pytest.approx(ref.train_error, rel=1e-5)
    assert res.rank_fraction == ref.rank_fraction
    # Monte-Carlo population error vs the exact linear-channel value
    assert abs(res.test_error - ref.test_error) <= 5.0 * res.test_error_stderr
    assert res.test_error_stderr < 0.05 * res.test_error


def test_elementwise_linear_matches_direct_erm() -> None:
    d, noise = 20, 0.3
    prob = _problem("linear", L=2, lam=0.01, noise=noise, param="elementwise")
    data = generate_dataset(prob, d, 5)
    ref = direct_erm(prob, d, 5, data=data, tol=1e-12)
    res = direct_erm(prob, d, 5, channel=RefLinear(2, noise), data=data, restarts=1, tol=1e-8)
    assert res.converged and res.method == "lbfgs-S"
    assert res.matrix_mse == pytest.approx(ref.matrix_mse, rel=1e-5)
    assert res.loss == pytest.approx(ref.loss, rel=1e-9)


def test_result_fields_and_nonconvergence() -> None:
    d = 12
    ch = RefSeq2Lab(2, 1.0, 0.1)
    prob = _problem("seq2lab", kappa=0.5)
    res = direct_erm(prob, d, 1, channel=ch, restarts=1, keep_matrix=False)
    assert isinstance(res, ERMResult) and isinstance(res, ERMResult)
    assert res.S is None and res.method == "lbfgs-W" and res.channel == "seq2lab"
    assert res.n_test == 20000 and res.test_error_stderr > 0
    # noisy test error = clean + noise variance x #outputs, up to Monte-Carlo error
    assert res.test_error_noisy == pytest.approx(res.test_error + 0.1 * ch.M, rel=0.05)
    out = res.to_dict()
    assert "S" not in out and isinstance(out["restart_losses"], list)
    import json
    json.dumps(out)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        bad = direct_erm(prob, d, 1, channel=ch, restarts=0, max_iter=2)
    assert not bad.converged and bad.residual > 1e-7 and bad.iterations <= 2


def test_bad_input() -> None:
    ch = RefSoftmax(2, 1.0, 0.1)
    prob = _problem()
    with pytest.raises(ValueError, match="d must"):
        direct_erm(prob, 8.0, 0, channel=ch)
    with pytest.raises(ValueError, match="seed"):
        direct_erm(prob, 8, -1, channel=ch)
    with pytest.raises(ValueError, match="restarts"):
        direct_erm(prob, 8, 0, channel=ch, restarts=-1)
    with pytest.raises(ValueError, match="restarts"):
        direct_erm(prob, 8, 0, channel=ch, restarts=True)
    with pytest.raises(ValueError, match="tol"):
        direct_erm(prob, 8, 0, channel=ch, tol=0.0)
    with pytest.raises(ValueError, match="max_iter"):
        direct_erm(prob, 8, 0, channel=ch, max_iter=0)
    with pytest.raises(ValueError, match="method"):
        direct_erm(prob, 8, 0, channel=ch, method="adam")
    with pytest.raises(ValueError, match="init_scale"):
        direct_erm(prob, 8, 0, channel=ch, init_scale=-1.0)
    with pytest.raises(ValueError, match="problem"):
        direct_erm("softmax", 8, 0, channel=ch)
    with pytest.raises(ValueError, match="channel must provide"):
        direct_erm(prob, 8, 0, channel=object())
    with pytest.raises(ValueError, match="channel has L=3"):
        direct_erm(prob, 8, 0, channel=RefSoftmax(3, 1.0, 0.1))
    with pytest.raises(ValueError, match="channel has noise"):
        direct_erm(prob, 8, 0, channel=RefSoftmax(2, 1.0, 0.2))
    with pytest.raises(ValueError, match="channel is 'seq2lab'"):
        direct_erm(prob, 8, 0, channel=RefSeq2Lab(2, 1.0, 0.1))
    data = generate_dataset(prob, 8, 0, channel=ch)
    with pytest.raises(ValueError, match="d=8"):
        direct_erm(prob, 10, 0, channel=ch, data=data)
    with pytest.raises(ValueError, match="data.y"):
        direct_erm(_problem("seq2lab"), 8, 0, channel=RefSeq2Lab(2, 1.0, 0.1), data=data)
    with pytest.raises(ValueError, match="target_spectrum"):
        generate_dataset(prob, 8, 0, target_spectrum="exact", channel=ch)


@pytest.mark.parametrize("L", [1, 3])
def test_linear_population_error_is_exact_and_matches_sampling(L: int) -> None:
    """The linear channel's closed-form test error against a 400k-sample Monte-Carlo
    estimate of the same expectation (a wrapper hides the closed form)."""
    from amp_attention.erm import population_error

    rng = np.random.default_rng(0)
    d = 20
    ch = channel_for(Task("linear", L=L, noise=0.3))
    A, B = rng.standard_normal((d, d)), rng.standard_normal((d, d))
    S0, S = A @ A.T / d, B @ B.T / d
    exact, se, noisy = population_error(ch, S0, S, 1000, L, 0)
    assert se == 0.0 and noisy == pytest.approx(exact + ch.K * 0.3)

    class Sampled:
        def outputs(self, H):
            return ch.outputs(H)

        def sample_labels(self, H, rng):
            return ch.sample_labels(H, rng)

    mc, mc_se, mc_noisy = population_error(Sampled(), S0, S, 400_000, L, 1)
    assert abs(mc - exact) <= 4 * mc_se
    assert abs(mc_noisy - noisy) <= 4 * mc_se + 0.01 * noisy
