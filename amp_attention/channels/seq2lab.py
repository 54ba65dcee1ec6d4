"""Seq2lab channel: one scalar label, the mean self-attention (docs/theory.md "Data model").

g(h) = (1/L) Tr softmax_rows(beta h) = (1/L) sum_a softmax(beta h_a)_a, M = 1,
l(y, h) = 1/2 (y - g(h))^2.  With A_a = softmax(beta h_a) and r = g - y,

    dg/dh_ac = (beta/L) A_aa (delta_ac - A_ac),     dl/dh_ac = r dg/dh_ac

(all L^2 entries independent); the Hessian of l is dg dg^T plus r times the
row-block-diagonal Hessian of g (see :mod:`amp_attention._channel_kernels`).

Small beta: g = 1/L + (beta/L^2) sum_a (h_aa - hbar_a) + O(beta^2),
hbar_a = mean_b h_ab.

Data-consistent start of the prox: h(omega) + s I with s solving g = y (y
clipped to [1e-12, 1 - 1e-12]).  Shifting every diagonal logit by s raises
every A_aa, so g is strictly increasing in s from 0 to 1 and the root is
unique; among the data-consistent points it is the one reached from omega by
moving only the diagonal logits, all by the same amount.
"""

from __future__ import annotations

import numpy as np

from .. import _channel_kernels as ck
from .newton import BuiltinNewtonChannel


class Seq2LabChannel(BuiltinNewtonChannel):
    """g(h) = (1/L) Tr softmax_rows(beta h); see the module docstring.

    Arguments as :class:`~amp_attention.channels.softmax.SoftmaxChannel`:
    L >= 2 integer, beta > 0, noise (variance Delta) >= 0, noise_at in
    {"output", "logit", "logit_goe"}.
    """

    name = "seq2lab"
    M = 1
    #: SE against extrapolated ERM at L = 2 (docs/validation.md)
    validated_tokens = (2,)
    _kind = ck.SEQ2LAB

    def outputs(self, H: np.ndarray) -> np.ndarray:
        """(1/L) Tr softmax_rows(beta H), shape (n, 1)."""
        A = self.row_softmax(H)
        return np.trace(A, axis1=1, axis2=2)[:, None] / self.L

    def output_jacobian(self, U: np.ndarray) -> np.ndarray:
        """d g(h(u)) / du with g = (1/L) sum_a A_aa, shape (n, 1, K)."""
        _, D = self.row_softmax_jacobian(U)
        L = self.L
        return (np.trace(D, axis1=2, axis2=3) / L)[:, None, :]
