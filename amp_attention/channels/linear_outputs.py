"""Channels whose outputs are linear in u: y = B u* + noise (closed-form SE).

The M outputs of a sample are o = B u (B: M x K) and the loss is
l = 1/2 ||y - B u||^2; the label noise has covariance Sigma (M x M).  With
M_V = (I_K + V B^T B)^{-1} (all Gaussian integrals are exact):

    uhat = M_V (omega + V B^T y),   g_out = M_V B^T (y - B omega),
    Vh = mh = 2 alpha tr(M_V B^T B)   (= 2 alpha tr(I - M_V)/V),
    qh = 2 alpha tr(M_V B^T C B M_V),      C = E_m B B^T + Sigma, E_m = Q0 - 2m + q,
    e_train = tr(N_V C N_V),                N_V = (I_M + V B B^T)^{-1},
    e_test = E_m tr(B^T B),                 loss per sample = e_train / 2.

The element-wise linear channel is B = diag(tau), Sigma = Delta I
(:class:`~amp_attention.channels.linear.LinearChannel` has the same numbers in
scalar form).  :meth:`LinearOutputChannel.softmax_small_beta` is the first-order
expansion of the softmax channel, softmax_rows(beta h)_ab = 1/L +
(beta/L)(h_ab - (1/L) sum_c h_ac) + O(beta^2): B = (beta/L) P T with T the
u -> vec(h) map and P the row-centring of an L x L matrix (docs/theory.md).
"""

from __future__ import annotations

import math

import numpy as np

from .base import NOISE_LOCATIONS, ChannelSE, is_logit_noise, logit_noise_u_std


def u_to_h_matrix(L: int) -> np.ndarray:
    """T (L^2 x K): vec(h) = T u with h_ab = h_ba = tau_k u_k (row-major vec)."""
    iu = np.triu_indices(L)
    K = iu[0].size
    T = np.zeros((L * L, K))
    for k, (a, b) in enumerate(zip(*iu)):
        tau = math.sqrt(2.0) if a == b else 1.0
        T[a * L + b, k] = tau
        T[b * L + a, k] = tau
    return T


def row_centring_matrix(L: int) -> np.ndarray:
    """P (L^2 x L^2): (P vec h)_ab = h_ab - (1/L) sum_c h_ac."""
    return np.kron(np.eye(L), np.eye(L) - np.full((L, L), 1.0 / L))


class LinearOutputChannel:
    """y = B u* + noise with noise covariance Sigma; closed-form SE expectations."""

    def __init__(self, B: np.ndarray, noise_cov: np.ndarray, name: str = "linear-outputs"):
        B = np.atleast_2d(np.asarray(B, dtype=float))
        S = np.atleast_2d(np.asarray(noise_cov, dtype=float))
        if S.shape != (B.shape[0], B.shape[0]):
            raise ValueError(f"noise_cov must be {B.shape[0]} x {B.shape[0]}, got {S.shape}")
        if not (np.all(np.isfinite(B)) and np.all(np.isfinite(S))):
            raise ValueError("B and noise_cov must be finite")
        if np.min(np.linalg.eigvalsh(0.5 * (S + S.T))) < -1e-12:
            raise ValueError("noise_cov must be positive semi-definite")
        self.B = B
        self.noise_cov = 0.5 * (S + S.T)
        self.name = name

    @classmethod
    def softmax_small_beta(cls, L: int, beta: float, noise: float, noise_at: str = "output"):
        """First-order (beta -> 0) linearisation of the seq2seq softmax channel."""
        B = (beta / L) * row_centring_matrix(L) @ u_to_h_matrix(L)
        if noise_at == "output":
            cov = noise * np.eye(L * L)
        elif is_logit_noise(noise_at):
            # logit noise in u-units: variance Delta/tau^2 ("logit") or Delta/2 ("logit_goe")
            T = u_to_h_matrix(L)
            tau = np.sqrt(np.sum(T * T, axis=0) / np.count_nonzero(T, axis=0))
            cov = noise * B @ np.diag(logit_noise_u_std(noise_at, tau) ** 2) @ B.T
        else:
            raise ValueError(f"noise_at must be one of {NOISE_LOCATIONS}, got {noise_at!r}")
        return cls(B, cov, name="softmax-small-beta")

    @property
    def K(self) -> int:
        return self.B.shape[1]

    @property
    def M(self) -> int:
        return self.B.shape[0]

    def se(self, m: float, q: float, V: float, Q0: float, alpha: float) -> ChannelSE:
        B, S = self.B, self.noise_cov
        BtB = B.T @ B
        MV = np.linalg.inv(np.eye(self.K) + V * BtB)
        NV = np.linalg.inv(np.eye(self.M) + V * B @ B.T)
        E = Q0 - 2.0 * m + q
        C = E * B @ B.T + S
        Vh = 2.0 * alpha * float(np.trace(MV @ BtB))
        qh = 2.0 * alpha * float(np.trace(MV @ B.T @ C @ B @ MV))
        e_train = float(np.trace(NV @ C @ NV))
        e_test = E * float(np.trace(BtB))
        return ChannelSE(Vh, qh, Vh, e_train, e_test, 0.5 * e_train, e_test + float(np.trace(S)))
