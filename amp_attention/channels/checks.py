"""The channel contract as a public checker (like scikit-learn's ``parametrize_with_checks``):
run it on your own channel before trusting the SE, ERM or GAMP with it.

Each check compares the channel against an independent path: finite differences of the
loss for its derivatives, the stationarity condition of the prox objective for the prox,
the outputs for the label model and the error terms, Monte-Carlo integration of the prox
for a closed-form SE, a sampled test set for an exact population error.

* :func:`check_channel_contract` runs every check and returns ``{name: "passed" |
  "skipped: why"}`` (an AssertionError names the first failure);
* :func:`channel_checks` yields ``(name, check)`` pairs, ``check(channel)``;
* :func:`parametrize_with_checks` is a pytest decorator over channels x checks::

      @parametrize_with_checks([my_channel])
      def test_my_channel(channel, check):
          check(channel)
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Iterator

import numpy as np

from .base import Channel, check_channel, optional_member


class CheckSkipped(Exception):
    """A check that does not apply to this channel (an optional capability it lacks)."""


def _close(a, b, rtol: float, atol: float) -> bool:
    return bool(np.all(np.abs(np.asarray(a) - np.asarray(b)) <= atol + rtol * np.abs(b)))


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)


def _points(ch, n=6, seed=0):
    rng = np.random.default_rng(seed)
    U = 0.7 * rng.standard_normal((n, ch.K))
    y = ch.sample_labels(ch.h_from_u(0.7 * rng.standard_normal((n, ch.K))), rng)
    return y, U


def check_protocol(channel: Channel) -> None:
    """The members of :class:`~amp_attention.channels.base.Channel`, K = L(L+1)/2."""
    _require(isinstance(channel, Channel), "not a Channel (a member of the protocol is missing)")
    check_channel(channel)
    _require(channel.K == channel.L * (channel.L + 1) // 2, f"K = {channel.K} != L(L+1)/2")
    _require(channel.noise_dim in (channel.K, channel.M), "noise_dim is neither K nor M")


def check_loss_derivatives(channel: Channel) -> None:
    """loss_grad_hess: gradient and Hessian against central differences, the loss against
    train_terms / 2, a symmetric Hessian."""
    y, U = _points(channel)
    eps = 1e-5
    for i in range(len(U)):
        l, g, H = channel.loss_grad_hess(y[i], U[i])
        half = 0.5 * channel.train_terms(y[i:i + 1], U[i:i + 1])[0]
        _require(_close(l, half, 1e-12, 0.0), f"loss {l} != train_terms/2 = {half}")
        fd_g, fd_H = np.empty(channel.K), np.empty((channel.K, channel.K))
        for k in range(channel.K):
            e = np.zeros(channel.K)
            e[k] = eps
            lp, gp, _ = channel.loss_grad_hess(y[i], U[i] + e)
            lm, gm, _ = channel.loss_grad_hess(y[i], U[i] - e)
            fd_g[k] = (lp - lm) / (2 * eps)
            fd_H[:, k] = (gp - gm) / (2 * eps)
        _require(_close(g, fd_g, 0.0, 1e-6 * (1.0 + np.abs(g).max())),
                 f"gradient {g} != finite differences {fd_g}")
        _require(_close(H, fd_H, 0.0, 1e-5 * (1.0 + np.abs(H).max())),
                 "Hessian != finite differences of the gradient")
        _require(_close(H, H.T, 0.0, 1e-9 * (1.0 + np.abs(H).max())), "Hessian not symmetric")


def check_batch_gradient(channel: Channel) -> None:
    """ERM's dl/dh_ab (batch_loss_and_grad_h), mapped to u, is grad_u l."""
    y, U = _points(channel, seed=1)
    loss, G = channel.batch_loss_and_grad_h(y, channel.h_from_u(U))
    a, b = np.triu_indices(channel.L)
    tau = np.where(a == b, math.sqrt(2.0), 1.0)
    grad_u = tau * np.where(a == b, G[:, a, b], G[:, a, b] + G[:, b, a])
    for i in range(len(U)):
        l, g, _ = channel.loss_grad_hess(y[i], U[i])
        _require(_close(loss[i], l, 1e-12, 1e-15), f"batch loss {loss[i]} != {l}")
        _require(_close(grad_u[i], g, 1e-7, 1e-9), "batch gradient in h != gradient in u")


def check_prox(channel: Channel, Vs: Iterable[float] = (0.3, 2.0)) -> None:
    """prox_batch: a stationary local minimum of l(y, u) + |u - omega|^2/(2V), its g_out,
    objective and trace term consistent, and not above the objective at omega."""
    y, omega = _points(channel, n=32, seed=2)
    for V in Vs:
        px = channel.prox_batch(y, omega, V)
        _require(px.n_failed == 0, f"{px.n_failed} prox solves failed at V = {V}")
        _require(_close(px.g_out, (px.uhat - omega) / V, 1e-12, 1e-14), "g_out != (uhat - omega)/V")
        obj = channel.loss_terms(y, px.uhat) + np.sum((px.uhat - omega) ** 2, axis=1) / (2 * V)
        _require(_close(px.objective, obj, 1e-10, 1e-14), "objective inconsistent with uhat")
        for i in range(len(y)):
            _, g, H = channel.loss_grad_hess(y[i], px.uhat[i])
            stat = g + (px.uhat[i] - omega[i]) / V
            _require(np.abs(stat).max() <= 1e-6 * (1.0 + np.abs(g).max()),
                     f"prox not stationary at V = {V}: residual {np.abs(stat).max():.2e}")
            _require(np.linalg.eigvalsh(H + np.eye(channel.K) / V).min() > 0,
                     "prox point is not a local minimum")
            trace = channel.K - np.trace(np.linalg.inv(np.eye(channel.K) + V * H))
            _require(_close(px.trace_term[i], trace, 1e-6, 1e-9), "trace term inconsistent")
            _require(px.objective[i] <= channel.loss_terms(y[i:i + 1], omega[i:i + 1])[0] + 1e-12,
                     "prox objective above its value at omega")


def check_label_model(channel: Channel) -> None:
    """outputs, labels_from_noise, sample_labels (output noise of variance Delta), and the
    per-sample error terms follow from the outputs."""
    rng = np.random.default_rng(3)
    n = 4000
    U_star = 0.5 * rng.standard_normal((n, channel.K))
    H_star = channel.h_from_u(U_star)
    clean = channel.outputs(H_star)
    _require(clean.shape == (n, channel.M), f"outputs shape {clean.shape} != ({n}, {channel.M})")
    _require(_close(channel.labels_from_noise(H_star, np.zeros((n, channel.noise_dim))), clean,
                    1e-12, 1e-12), "labels with zero noise != outputs")
    y = channel.sample_labels(H_star, rng)
    _require(y.shape == (n, channel.M), "sample_labels shape")
    if channel.noise_at == "output" or optional_member(channel, "outputs_are_h"):
        var, tol = float(np.var(y - clean)), 4 * math.sqrt(2 / (n * channel.M))
        _require(abs(var - channel.noise) <= tol * max(channel.noise, 1e-300) or
                 (channel.noise == 0 and var == 0), f"label noise variance {var} != {channel.noise}")
    U = U_star + 0.3 * rng.standard_normal(U_star.shape)
    pred = channel.outputs(channel.h_from_u(U))
    _require(_close(channel.train_terms(y, U), np.sum((y - pred) ** 2, axis=1), 1e-9, 1e-12),
             "train_terms != ||y - g(h(u))||^2")
    _require(_close(channel.loss_terms(y, U), 0.5 * channel.train_terms(y, U), 1e-12, 1e-15),
             "loss_terms != train_terms / 2")
    _require(_close(channel.test_terms(U_star, U), np.sum((clean - pred) ** 2, axis=1), 1e-9, 1e-12),
             "test_terms != ||g(h(u*)) - g(h(u))||^2")


def check_closed_form_se(channel: Channel) -> None:
    """A closed-form ``se`` against RQMC integration of the prox (4 standard errors)."""
    se = optional_member(channel, "se")
    if se is None:
        raise CheckSkipped("no closed-form SE: the SE integrates the prox")
    from ..solvers.channel_integrals import SE_FIELDS, MonteCarloChannel

    mc = MonteCarloChannel(channel, log2_n=12, replicas=8, seed=4)
    args = (0.6, 0.9, 0.8, 1.4, 0.7)
    exact, est = se(*args), mc.se(*args)
    for name in SE_FIELDS:
        _require(abs(getattr(est, name) - getattr(exact, name)) <= 4 * mc.last_stderr[name] + 1e-12,
                 f"closed-form SE {name} disagrees with Monte Carlo")


def check_population_error(channel: Channel) -> None:
    """An exact ``population_error`` against a sampled test set (4 standard errors)."""
    exact = optional_member(channel, "population_error")
    if exact is None:
        raise CheckSkipped("no exact population error: ERM samples a test set")
    from ..data import sample_tokens
    from ..operators import preactivations

    rng = np.random.default_rng(5)
    d = 40
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    S0, S = A @ A.T, 0.5 * (A + A.T)
    X = sample_tokens(40000, channel.L, d, rng)
    e = np.sum((channel.outputs(preactivations(X, S0)) - channel.outputs(preactivations(X, S))) ** 2,
               axis=1)
    _require(abs(exact(S0, S) - e.mean()) <= 4 * e.std() / math.sqrt(e.size),
             f"population_error {exact(S0, S)} != test-set mean {e.mean()}")


def check_zero_loss_geometry(channel: Channel) -> None:
    """``zero_loss_geometry``: 1 <= rank <= K equations, no noise energy at Delta = 0."""
    geometry = optional_member(channel, "zero_loss_geometry")
    if geometry is None:
        raise CheckSkipped("zero-loss set not affine")
    geo = geometry(0.0)
    _require(1 <= geo.rank <= channel.K and geo.noise_energy == 0.0,
             f"zero-loss geometry at Delta = 0: rank {geo.rank}, noise energy {geo.noise_energy}")
    if channel.noise > 0 and (channel.noise_at == "logit" or optional_member(channel, "outputs_are_h")):
        _require(geometry().noise_energy > 0, "noisy labels but no noise energy off the zero-loss set")


CHECKS: tuple[Callable[[Channel], None], ...] = (
    check_protocol, check_loss_derivatives, check_batch_gradient, check_prox,
    check_label_model, check_closed_form_se, check_population_error, check_zero_loss_geometry)


def channel_checks(channel: Channel | None = None) -> Iterator[tuple[str, Callable[[Channel], None]]]:
    """(name, check) for every check of the contract."""
    for check in CHECKS:
        yield check.__name__, check


def check_channel_contract(channel: Channel) -> dict[str, str]:
    """Run every check on ``channel``: {name: "passed" or "skipped: why"}; the first failing
    check raises AssertionError naming itself."""
    report = {}
    for name, check in channel_checks(channel):
        try:
            check(channel)
        except CheckSkipped as why:
            report[name] = f"skipped: {why}"
            continue
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
        report[name] = "passed"
    return report


def parametrize_with_checks(channels: Iterable[Channel], ids: Iterable[str] | None = None):
    """A pytest decorator: the test receives ``channel`` and ``check`` for every pair; a
    check that does not apply is skipped."""
    import pytest

    channels = list(channels)
    names = list(ids) if ids is not None else [str(getattr(c, "name", i)) for i, c in enumerate(channels)]

    def skipping(check):
        def run(channel):
            try:
                check(channel)
            except CheckSkipped as why:
                pytest.skip(str(why))
        run.__name__ = check.__name__
        return run

    params = [pytest.param(c, skipping(check), id=f"{n}-{name}")
              for c, n in zip(channels, names) for name, check in channel_checks(c)]
    return pytest.mark.parametrize("channel, check", params)
