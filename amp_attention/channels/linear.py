"""Linear channel y_ab = h_ab(S0) + sqrt(Delta) xi_ab, a <= b (docs/theory.md "Channel side").

In u-coordinates (u = h / tau) component k = (a, b) of the loss
l = 1/2 sum_{a<=b} (y_ab - h_ab)^2 reads c_k (y_k - u_k)^2 with
c_k = tau_k^2 / 2 (1 on the diagonal, 1/2 off it), and the label noise has
u-variance v_k = Delta / (2 c_k) (noise on the outputs, or "logit": variance Delta on
every y_ab) or v_k = Delta / 2 ("logit_goe": variance Delta on the diagonal entries,
Delta/2 off it).  Per component (docs/theory.md derives it):

    uhat = (omega + 2 c V y) / (1 + 2 c V),   g_out = 2 c (y - omega)/(1 + 2 c V),
    d g_out / d omega = -2 c / (1 + 2 c V),

and with E = Q0 - 2m + q,

    Vh = mh = 2 alpha sum_k 2 c_k / (1 + 2 c_k V)
    qh = 2 alpha sum_k 4 c_k^2 (E + v_k) / (1 + 2 c_k V)^2
    e_train = sum_k 2 c_k (E + v_k) / (1 + 2 c_k V)^2,   e_test = sum_k 2 c_k E.

Besides these closed forms the class offers the interface common to all
channels (see :mod:`.base`): outputs are the M = K upper-triangle entries
y_ab of h (output units, not u-units), l = 1/2 sum_{a<=b} (y_ab - h_ab)^2, its
u-Hessian is diag(2 c_k) = diag(tau_k^2), and the prox is the closed form
above with y_u = y / tau.  Noise on the outputs and "logit" noise are the same
thing here (both add sqrt(Delta) xi_ab to each y_ab, a <= b); "logit_goe" adds
sqrt(Delta) xi_aa and sqrt(Delta/2) xi_ab (a < b).
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import check_choice, check_integer, check_nonnegative
from .base import (NOISE_LOCATIONS, ChannelSE, ProxBatch, ZeroLossGeometry, as_2d,
                   logit_noise_u_std, symmetric_h, variance_matrix)


class LinearChannel:
    """The linear (quadratic-network for L = 1) channel with K = L(L+1)/2 outputs."""

    name = "linear"
    #: l is quadratic in u: one ERM start suffices
    convex = True
    #: g(h) = (h_ab)_{a<=b}: ERM is least squares in S (the dedicated linear path)
    outputs_are_h = True
    #: closed forms at every L; checked against ERM at L = 1, 2 (docs/validation.md)
    validated_tokens = None

    def __init__(self, L: int, noise: float, noise_at: str = "output"):
        self.L = check_integer("L", L, 1)
        self.noise = check_nonnegative("noise", noise)
        self.noise_at = check_choice("noise_at", noise_at, NOISE_LOCATIONS)
        iu = np.triu_indices(self.L)
        self._ka, self._kb = iu
        self.c = np.where(iu[0] == iu[1], 1.0, 0.5)
        self.tau = np.sqrt(2.0 * self.c)
        # label-noise variance per u-coordinate and unit of Delta: 1/tau_k^2 (variance
        # Delta on every y_ab: output or "logit" noise) or 1/2 ("logit_goe")
        self._u_var_per_delta = (logit_noise_u_std(self.noise_at, self.tau) ** 2
                                 if self.noise_at == "logit_goe" else 1.0 / self.tau**2)
        #: label-noise variance per u-coordinate, v_k
        self.u_noise_var = self.noise * self._u_var_per_delta

    @property
    def K(self) -> int:
        return self.c.size

    @property
    def M(self) -> int:
        """Number of outputs: the K upper-triangle entries."""
        return self.c.size

    @classmethod
    def from_task(cls, task) -> "LinearChannel":
        """The channel of a :class:`~amp_attention.spec.Task` (its L, noise, noise_at)."""
        return cls(task.L, task.noise, task.noise_at)

    # ------------------------------------------------------------ state evolution
    def se(self, m: float, q: float, V: float, Q0: float, alpha: float) -> ChannelSE:
        """Closed-form channel expectations at overlaps (m, q, V)."""
        c, v = self.c, self.u_noise_var
        E = Q0 - 2.0 * m + q
        den = 1.0 + 2.0 * c * V
        Vh = 2.0 * alpha * float(np.sum(2.0 * c / den))
        qh = 2.0 * alpha * float(np.sum(4.0 * c * c * (E + v) / den**2))
        e_train = float(np.sum(2.0 * c * (E + v) / den**2))
        e_test = float(np.sum(2.0 * c) * E)
        return ChannelSE(Vh, qh, Vh, e_train, e_test, 0.5 * e_train,
                         e_test + float(np.sum(2.0 * c * v)))

    # ---------------------------------------------------------- Bayes-optimal
    def bayes_q_hat(self, V: float, Q0: float, alpha: float) -> float:
        """qhat = 2 alpha sum_k 1/(V + v_k): y_k/tau_k = u*_k + noise of variance
        v_k (Delta/tau_k^2, or Delta/2 for "logit_goe"), so g_out = (y_k/tau_k - omega_k)/(V + v_k)
        and E g_out^2 = 1/(V + v_k) (docs/theory.md "Bayes-optimal baseline")."""
        with np.errstate(divide="ignore"):
            return 2.0 * alpha * float(np.sum(1.0 / (V + self.u_noise_var)))

    def posterior_batch(self, y: np.ndarray, omega: np.ndarray, V) -> ProxBatch:
        """E[u* | y, omega] for u* ~ N(omega, V), y = tau (u* + sqrt(v) xi):
        g_out = (y/tau - omega)/(V + v), d g_out/d omega = -1/(V + v)."""
        Y = as_2d("y", y, self.K)
        Omega = as_2d("omega", omega, self.K)
        n = Y.shape[0]
        Vm = variance_matrix(V, n, self.K)
        den = Vm + self.u_noise_var
        g = (Y / self.tau - Omega) / den
        trace = np.sum(Vm / den, axis=1)
        return ProxBatch(Omega + Vm * g, g, trace, np.zeros(n), np.zeros(n, dtype=bool), 0)

    def zero_loss_geometry(self, noise: float | None = None) -> ZeroLossGeometry:
        """K equations per sample, label noise (variance ``noise``, default the
        channel's Delta) of u-variance v_k each (Delta / tau_k^2, or Delta/2 for
        "logit_goe")."""
        noise = self.noise if noise is None else noise
        return ZeroLossGeometry(self.K, noise * float(np.sum(self._u_var_per_delta)),
                                "linear channel: K = L(L+1)/2 equations, noise v_k each")

    # ------------------------------------------------------------- finite size
    def population_error(self, S0: np.ndarray, S: np.ndarray) -> float:
        """Exact clean test error E||h(S0) - h(S)||^2 over the K outputs for Gaussian
        tokens: Var(x^T D x) = 2 ||D||_F^2, E(x_a^T D x_b)^2 = ||D||_F^2 (a != b), so
        it is sum_k 2 c_k ||S - S0||_F^2 / d (docs/theory.md "Errors and the reported loss":
        e_test = sum_k 2 c_k E)."""
        D = np.asarray(S, dtype=float) - np.asarray(S0, dtype=float)
        return float(np.sum(2.0 * self.c)) * float(np.sum(D * D)) / D.shape[0]

    # ------------------------------------------------- common channel interface
    def h_from_u(self, U: np.ndarray) -> np.ndarray:
        """(n, K) u-coordinates -> (n, L, L) symmetric h, h_ab = h_ba = tau_k u_k."""
        return symmetric_h(as_2d("u", U, self.K), self._ka, self._kb, self.tau, self.L)

    def outputs(self, H: np.ndarray) -> np.ndarray:
        """The upper-triangle entries h_ab, a <= b, row-major: shape (n, K)."""
        H = np.asarray(H, dtype=np.float64)
        if H.ndim != 3 or H.shape[1:] != (self.L, self.L):
            raise ValueError(f"H must have shape (n, {self.L}, {self.L}), got {H.shape}")
        return H[:, self._ka, self._kb]

    @property
    def noise_dim(self) -> int:
        """Standard normals per sample: K (one per output y_ab, a <= b)."""
        return self.K

    def labels_from_noise(self, H_star: np.ndarray, noise_std: np.ndarray) -> np.ndarray:
        """y_k = h*_k + tau_k sqrt(v_k) xi_k, a <= b, from given normals xi (n, K): noise of
        variance Delta on every output ("output", "logit"), or Delta tau_k^2 / 2 ("logit_goe")."""
        if self.noise_at == "logit_goe":
            return self.outputs(H_star) + (self.tau * np.sqrt(self.u_noise_var)) * noise_std
        return self.outputs(H_star) + math.sqrt(self.noise) * noise_std

    def sample_labels(self, H_star: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy labels of the pre-activations (noise model: :meth:`labels_from_noise`)."""
        return self.labels_from_noise(H_star, rng.standard_normal((np.shape(H_star)[0], self.K)))

    def loss_grad_hess(self, y: np.ndarray, u: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """l = 1/2 sum_k (y_k - tau_k u_k)^2, its u-gradient and u-Hessian diag(tau^2)."""
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        u = np.asarray(u, dtype=np.float64).reshape(-1)
        if y.size != self.K or u.size != self.K:
            raise ValueError(f"need y and u of size K = {self.K}")
        r = y - self.tau * u
        return 0.5 * float(r @ r), -self.tau * r, np.diag(self.tau**2)

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """l (n,) and G_ab = dl/dh_ab (n, L, L): h_ab - y_ab for a <= b, 0 below the diagonal."""
        Y = as_2d("y", y, self.K)
        R = self.outputs(H) - Y
        G = np.zeros((R.shape[0], self.L, self.L))
        G[:, self._ka, self._kb] = R
        return 0.5 * np.sum(R * R, axis=1), G

    def prox_batch(self, y: np.ndarray, omega: np.ndarray, V, warm_from=None) -> ProxBatch:
        """Closed-form prox with labels y in output units (y_u = y / tau); never fails.

        V: scalar, per sample (n,) or per component (n, K) (:func:`variance_matrix`);
        ``warm_from`` is accepted for interface compatibility and ignored (closed form)."""
        Y = as_2d("y", y, self.K)
        Omega = as_2d("omega", omega, self.K)
        n = Y.shape[0]
        Vm = variance_matrix(V, n, self.K)
        yu = Y / self.tau
        den = 1.0 + 2.0 * self.c * Vm
        uhat = (Omega + 2.0 * self.c * Vm * yu) / den
        obj = np.sum(self.c * (yu - uhat) ** 2 + (uhat - Omega) ** 2 / (2 * Vm), axis=1)
        trace = np.sum(2 * self.c * Vm / den, axis=1)
        return ProxBatch(uhat, (uhat - Omega) / Vm, trace, obj, np.zeros(n, dtype=bool), 0)

    def train_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray:
        """sum_k (y_k - tau_k uhat_k)^2 per sample."""
        r = as_2d("y", y, self.K) - self.tau * as_2d("uhat", uhat, self.K)
        return np.sum(r * r, axis=1)

    def loss_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray:
        """l(y, h(uhat)) = train_terms / 2."""
        return 0.5 * self.train_terms(y, uhat)

    def test_terms(self, u_star: np.ndarray, u_pred: np.ndarray) -> np.ndarray:
        """sum_k tau_k^2 (u*_k - u_k)^2 = ||h(u*) - h(u)||^2 over the K outputs."""
        r = self.tau * (as_2d("u_star", u_star, self.K) - as_2d("u_pred", u_pred, self.K))
        return np.sum(r * r, axis=1)
