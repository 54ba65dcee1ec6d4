"""The built-in channels by name (docs/theory.md "Data model"): what ``Task(channel="...")``,
the CLI's
``--channel`` choices and ``spec`` read.

Adding a built-in channel = one module implementing :class:`.base.Channel`
(with a ``from_task(task)`` class method) + one line in ``_BUILTIN``.  A user
channel needs no registration: pass the instance, ``Task(channel=my_channel)``.
The classes are imported on first use, so that reading the names (the CLI's
``--help``) does not load the compiled kernels.
"""

from __future__ import annotations

from ..registry import Registry
from .base import Channel

#: name -> (module in this package, class, one-line description for --help)
_BUILTIN: dict[str, tuple[str, str, str]] = {
    "linear": ("linear", "LinearChannel",
               "y_ab = h_ab(S0), a <= b (K = L(L+1)/2 outputs)"),
    "softmax": ("softmax", "SoftmaxChannel",
                "seq2seq y = softmax_rows(beta h(S0)) (L^2 outputs)"),
    "seq2lab": ("seq2lab", "Seq2LabChannel",
                "y = (1/L) Tr softmax_rows(beta h(S0)) (1 output)"),
}

CHANNELS = Registry(__package__, "channel", _BUILTIN, "or a channel instance")


def channel_names() -> tuple[str, ...]:
    """The registered channel names, in registry order."""
    return CHANNELS.names()


def channel_summary(name: str) -> str:
    """The registered channel's one-line description (its output function)."""
    return CHANNELS.summary(name)


def channel_class(name: str) -> type:
    """The class registered under ``name``."""
    return CHANNELS.cls(name)


def channel_for(task) -> Channel:
    """The channel object of a :class:`~amp_attention.spec.Task`: the instance it
    holds, or the registered class of its name built from its L, beta, noise and
    noise_at (``from_task``)."""
    if not isinstance(task.channel, str):
        return task.channel
    return channel_class(task.channel).from_task(task)
