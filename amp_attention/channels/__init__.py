"""Output channels (THEORY 1 and 4.1): one object per channel.

Each channel serves both the state evolution (expectations over the
K-dimensional Gaussian channel of THEORY 4.1) and the finite-size algorithms
(proximal operator, g_out and its Jacobian on data).
"""

from __future__ import annotations

from .base import ChannelSE
from .linear import LinearChannel


def channel_for(task) -> "LinearChannel":
    """The channel object of a :class:`~amp_attention.spec.Task`."""
    if task.channel == "linear":
        return LinearChannel(task.L, task.noise)
    raise NotImplementedError(
        f"channel {task.channel!r} is not yet available in the state evolution "
        "(only 'linear' is implemented; softmax and seq2lab arrive with issue 3)"
    )


__all__ = ["ChannelSE", "LinearChannel", "channel_for"]
