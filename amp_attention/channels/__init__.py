"""Output channels (docs/theory.md "Data model", "Channel side"): one object per channel.

The contract every channel meets is :class:`Channel` (:mod:`.base`); the
built-in ones are registered by name in :mod:`.registry`.  Each channel serves
both the state evolution (expectations over the K-dimensional Gaussian
channel of docs/theory.md "Channel side") and the finite-size algorithms (proximal operator,
g_out and its Jacobian on data).  The channel classes are imported on first
access (they load the compiled kernels).
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import (Channel, ChannelSE, ProxBatch, ZeroLossGeometry, check_channel,
                   optional_member)
from .registry import channel_class, channel_for, channel_names, channel_summary

_LAZY = {"CustomChannel": "custom", "LinearChannel": "linear", "NewtonChannel": "newton",
         "Seq2LabChannel": "seq2lab", "SoftmaxChannel": "softmax"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Channel", "ChannelSE", "CustomChannel", "LinearChannel", "NewtonChannel",
           "ProxBatch", "Seq2LabChannel", "SoftmaxChannel", "ZeroLossGeometry", "channel_class",
           "channel_for", "channel_names", "channel_summary", "check_channel", "optional_member"]
