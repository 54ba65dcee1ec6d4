"""The channel contract (amp_attention.channels.base), checked the same way for every
registered channel and for a user-defined one (issue 15) with the public checker
(amp_attention.channels.checks, issue 31), whose checks are each against an independent
path (finite differences, the prox objective's stationarity, the outputs, Monte Carlo)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from amp_attention.channels import CustomChannel, channel_class, channel_for, channel_names
from amp_attention.channels.checks import check_channel_contract, parametrize_with_checks
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


@parametrize_with_checks([channel_for(c[1]) for c in CASES], ids=[c[0] for c in CASES])
def test_channel_contract(channel, check):
    """Every check of the public checker (amp_attention.channels.checks) on every case."""
    check(channel)


class _OffGradient:
    """A channel whose loss gradient is 1 % off (everything else delegated)."""

    def __init__(self, channel):
        self._channel = channel

    def __getattr__(self, name):
        return getattr(self._channel, name)

    def loss_grad_hess(self, y, u):
        loss, g, H = self._channel.loss_grad_hess(y, u)
        return loss, 1.01 * g, H


def test_the_checker_catches_a_wrong_gradient_and_reports_skips():
    """The user channel of the cases passes, with the optional capabilities it lacks
    reported as skipped; the same channel with a gradient 1 % off fails, naming the check."""
    good = dict(CASES)["user-tanh"].channel_object
    report = check_channel_contract(good)
    assert report["check_prox"] == "passed"
    assert report["check_closed_form_se"].startswith("skipped")
    with pytest.raises(AssertionError, match="check_loss_derivatives: gradient"):
        check_channel_contract(_OffGradient(good))


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
