"""Linear channel y_ab = h_ab(S0) + sqrt(Delta) xi_ab, a <= b (THEORY 4.1).

In u-coordinates (u = h / tau) component k = (a, b) of the loss
l = 1/2 sum_{a<=b} (y_ab - h_ab)^2 reads c_k (y_k - u_k)^2 with
c_k = tau_k^2 / 2 (1 on the diagonal, 1/2 off it), and the label noise has
variance Delta / (2 c_k).  Per component (docs/theory.md derives it):

    uhat = (omega + 2 c V y) / (1 + 2 c V),   g_out = 2 c (y - omega)/(1 + 2 c V),
    d g_out / d omega = -2 c / (1 + 2 c V),

and with E = Q0 - 2m + q,

    Vh = mh = 2 alpha sum_k 2 c_k / (1 + 2 c_k V)
    qh = 2 alpha sum_k 4 c_k^2 (E + Delta/(2 c_k)) / (1 + 2 c_k V)^2
    e_train = sum_k (2 c_k E + Delta) / (1 + 2 c_k V)^2,   e_test = sum_k 2 c_k E.
"""

from __future__ import annotations

import math

import numpy as np

from .base import ChannelSE


class LinearChannel:
    """The linear (quadratic-network for L = 1) channel with K = L(L+1)/2 outputs."""

    name = "linear"

    def __init__(self, L: int, noise: float):
        if int(L) != L or L < 1:
            raise ValueError(f"L must be an integer >= 1, got {L!r}")
        if not (math.isfinite(noise) and noise >= 0):
            raise ValueError(f"noise must be in [0, inf), got {noise!r}")
        self.L = int(L)
        self.noise = float(noise)
        iu = np.triu_indices(self.L)
        self.c = np.where(iu[0] == iu[1], 1.0, 0.5)

    @property
    def K(self) -> int:
        return self.c.size

    # ------------------------------------------------------------ state evolution
    def se(self, m: float, q: float, V: float, Q0: float, alpha: float) -> ChannelSE:
        """Closed-form channel expectations at overlaps (m, q, V)."""
        c, D = self.c, self.noise
        E = Q0 - 2.0 * m + q
        den = 1.0 + 2.0 * c * V
        Vh = 2.0 * alpha * float(np.sum(2.0 * c / den))
        qh = 2.0 * alpha * float(np.sum(4.0 * c * c * (E + D / (2.0 * c)) / den**2))
        e_train = float(np.sum((2.0 * c * E + D) / den**2))
        e_test = float(np.sum(2.0 * c) * E)
        return ChannelSE(Vh, qh, Vh, e_train, e_test, 0.5 * e_train)

    # ------------------------------------------------------------- finite size
    def prox(self, y: np.ndarray, omega: np.ndarray, V: float) -> np.ndarray:
        """uhat = argmin_u sum_k c_k (y_k - u_k)^2 + ||u - omega||^2/(2V); arrays (n, K)."""
        return (omega + 2.0 * self.c * V * y) / (1.0 + 2.0 * self.c * V)

    def g_out(self, y: np.ndarray, omega: np.ndarray, V: float) -> np.ndarray:
        """(uhat - omega)/V."""
        return 2.0 * self.c * (y - omega) / (1.0 + 2.0 * self.c * V)

    def dg_out_trace(self, y: np.ndarray, omega: np.ndarray, V: float) -> np.ndarray:
        """tr d g_out / d omega per sample, shape (n,)."""
        val = float(np.sum(-2.0 * self.c / (1.0 + 2.0 * self.c * V)))
        return np.full(np.shape(y)[0], val)
