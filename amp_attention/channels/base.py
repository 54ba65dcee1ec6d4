"""What every channel provides to the state evolution (THEORY 4.1)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChannelSE:
    """Channel-side quantities at overlaps (m, q, V).

    m_hat, q_hat, V_hat: conjugate order parameters (THEORY 4.1);
    train_error: E sum over output entries (y - yhat)^2 at the prox point;
    test_error: E ||g(h(S0)) - g(h(Shat))||^2 on a fresh sample (clean);
    loss_per_sample: E[l(y, uhat)] (channel part of R/n).
    """

    m_hat: float
    q_hat: float
    V_hat: float
    train_error: float
    test_error: float
    loss_per_sample: float
