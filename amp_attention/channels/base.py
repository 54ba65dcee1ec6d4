"""What every channel provides to the state evolution (THEORY 4.1)."""

from __future__ import annotations

from dataclasses import dataclass

#: relative slack of the constraint m^2 <= q Q0 (Cauchy-Schwarz for the overlaps):
#: next to perfect recovery a fixed point sits at m^2 = q Q0 up to rounding.
OVERLAP_RTOL = 1e-9


def overlap_split(m: float, q: float, Q0: float) -> tuple[float, float]:
    """(slope, rest) of u* = slope omega + sqrt(rest) z with omega ~ N(0, q), z ~ N(0, 1)
    independent: slope = m/q, rest = Q0 - m^2/q (THEORY 4.1; q = 0 needs m = 0 and gives
    slope 0).  Overlaps with m^2 <= q Q0 (1 + OVERLAP_RTOL) are accepted and rest is
    clipped at 0; beyond that ValueError names the violated constraint."""
    if q == 0 and m != 0:
        raise ValueError(f"overlaps violate m^2 <= q Q0 (m={m!r}, q=0)")
    slope = m / q if q > 0 else 0.0
    rest = Q0 - m * slope
    if rest < -OVERLAP_RTOL * Q0:
        raise ValueError(f"overlaps violate m^2 <= q Q0 (m={m!r}, q={q!r}, Q0={Q0!r})")
    return slope, max(rest, 0.0)


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
