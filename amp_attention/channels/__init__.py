"""Output channels (THEORY 1 and 4.1): one object per channel.

Each channel serves both the state evolution (expectations over the
K-dimensional Gaussian channel of THEORY 4.1) and the finite-size algorithms
(proximal operator, g_out and its Jacobian on data).
"""

from __future__ import annotations

from typing import Union

from .base import ChannelSE
from .custom import CustomChannel
from .linear import LinearChannel
from .seq2lab import Seq2LabChannel
from .softmax import NewtonChannel, ProxBatch, SoftmaxChannel

Channel = Union[LinearChannel, SoftmaxChannel, Seq2LabChannel, CustomChannel]


def channel_for(task) -> Channel:
    """The channel object of a :class:`~amp_attention.spec.Task`.

    A :class:`CustomChannel` is built by the user directly (it needs g).
    """
    if task.channel == "linear":
        return LinearChannel(task.L, task.noise, noise_at=task.noise_at)
    if task.channel == "softmax":
        return SoftmaxChannel(task.L, task.beta, task.noise, task.noise_at)
    if task.channel == "seq2lab":
        return Seq2LabChannel(task.L, task.beta, task.noise, task.noise_at)
    raise NotImplementedError(f"channel {task.channel!r} is not available")


__all__ = ["Channel", "ChannelSE", "CustomChannel", "LinearChannel", "NewtonChannel",
           "ProxBatch", "Seq2LabChannel", "SoftmaxChannel", "channel_for"]
