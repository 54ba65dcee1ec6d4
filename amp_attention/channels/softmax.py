"""Seq2seq softmax channel, and the machinery shared by all non-linear channels.

Conventions (THEORY 1-4, docs/theory.md): h is the symmetric L x L matrix of
pre-activations of one sample, u its K = L(L+1)/2 coordinates
u_k = h_ab / tau_k (k = (a, b), a <= b, row-major; tau_aa = sqrt 2,
tau_ab = 1), and a channel maps h to M outputs g(h), with the loss
l(y, h) = 1/2 ||y - g(h)||^2 and label noise of variance Delta either on the
outputs (y = g(h*) + sqrt(Delta) xi, xi ~ N(0, I_M)) or on the logits
(y = g(h* + sqrt(Delta) E), E symmetric with E_ab = E_ba i.i.d. N(0, 1) for
a <= b, so every upper-triangle logit gets variance Delta).

Every channel object offers the same interface to the finite-size algorithms
and to the state evolution: ``outputs``, ``sample_labels``,
``loss_grad_hess`` (one sample, in u), ``batch_loss_and_grad_h`` (all L^2
entries of h treated as independent, as ERM needs before the adjoint of the
measurement operator), ``prox_batch`` (the proximal operator of THEORY 4.1 with
g_out and the trace term of V_hat), ``train_terms``, ``loss_terms`` and
``test_terms``.

The proximal problem uhat = argmin_u l(y, h(u)) + ||u - omega||^2 / (2V) is
not convex for these channels; it is solved by multi-start modified Newton in
:mod:`amp_attention._channel_kernels`: runs from omega, from a data-consistent
point and from their midpoint, plus a continuation in V (V' = 100 V, 10 V, V)
from the data-consistent point; the lowest objective wins, and samples whose
winner is not a converged local minimum are flagged ``failed``.  "Global" is
a heuristic claim: against 30 random restarts (SE-like inputs, noise 0.1,
V in [0.5, 10]) the four runs missed a lower minimum in 0 % of samples at
beta = 1, <= 0.15 % at beta = 3 and 0.5-1 % at beta = 6 (L = 3); such samples
end at converged local minima and are not flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import _channel_kernels as ck
from ..checks import check_choice, check_integer, check_nonnegative, check_positive
from ..spec import NOISE_LOCATIONS

# Newton tolerance on ||grad F||_inf relative to the scale of its terms, and
# the iteration cap per start (quadratic convergence needs far fewer).
GTOL = 1e-12
MAXIT = 100


@dataclass(frozen=True)
class ProxBatch:
    """Proximal operator of n samples (THEORY 4.1).

    uhat (n, K): argmin_u l(y, h(u)) + ||u - omega||^2 / (2V);
    g_out (n, K): (uhat - omega) / V;
    trace_term (n,): tr(I - (I + V H)^{-1}), H the Hessian of l in u at uhat,
        so that V_hat = 2 alpha E[trace_term] / V;
    objective (n,): the minimised value F(uhat);
    failed (n,): the returned point is not a converged local minimum;
    n_failed: number of failed samples;
    ends (n, 4, K) or None: the end points of the multi-start's Newton runs,
        to warm-start the next call on a nearby problem (``warm_from``).
    """

    uhat: np.ndarray
    g_out: np.ndarray
    trace_term: np.ndarray
    objective: np.ndarray
    failed: np.ndarray
    n_failed: int
    ends: np.ndarray | None = None


def as_2d(name: str, x: np.ndarray, cols: int) -> np.ndarray:
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != cols:
        raise ValueError(f"{name} must have shape (n, {cols}), got {np.shape(x)}")
    return a


def variance_matrix(V, n: int, K: int) -> np.ndarray:
    """V as a contiguous (n, K) array of output variances, all finite and > 0.

    Accepts a scalar (the state evolution: one V for all), one value per sample
    (n,), or one per component (n, K) (GAMP: the K measurements of a sample
    have sensing vectors of different norms, so different variances).
    """
    if np.ndim(V) == 0:
        v = check_positive("V", V)
        return np.full((n, K), v)
    a = np.asarray(V, dtype=np.float64)
    if a.shape == (n,):
        a = np.repeat(a[:, None], K, axis=1)
    if a.shape != (n, K):
        raise ValueError(f"V must be a scalar or have shape ({n},) or ({n}, {K}), got {a.shape}")
    if not np.all(np.isfinite(a) & (a > 0)):
        raise ValueError("V must be finite and > 0 (allowed range (0, inf)) in every entry")
    return np.ascontiguousarray(a)


def symmetric_h(U: np.ndarray, ka: np.ndarray, kb: np.ndarray, tau: np.ndarray, L: int) -> np.ndarray:
    """(n, K) u-coordinates -> (n, L, L) symmetric h with h_ab = h_ba = tau_k u_k (THEORY 3)."""
    H = np.empty((U.shape[0], L, L))
    H[:, ka, kb] = U * tau
    H[:, kb, ka] = U * tau
    return H


def softmax_rows(H: np.ndarray, beta: float) -> np.ndarray:
    """Row-wise softmax of beta H over the last axis (numerically stable)."""
    Z = beta * H
    Z = Z - Z.max(axis=-1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=-1, keepdims=True)


class NewtonChannel:
    """Interface shared by the channels whose prox is found by multi-start Newton.

    Subclasses provide ``outputs``, ``batch_loss_and_grad_h`` and the four
    kernel hooks ``_prox_raw``, ``_newton_raw``, ``_starts_raw``, ``_lgh_raw``.
    """

    name: str
    M: int

    def __init__(self, L: int, noise: float, noise_at: str):
        self.L = check_integer("L", L, 1)
        self.noise = check_nonnegative("noise", noise)
        self.noise_at = check_choice("noise_at", noise_at, NOISE_LOCATIONS)
        a, b = np.triu_indices(self.L)
        self._ka = np.ascontiguousarray(a, dtype=np.int64)
        self._kb = np.ascontiguousarray(b, dtype=np.int64)
        self._tau = np.where(a == b, math.sqrt(2.0), 1.0)

    @property
    def K(self) -> int:
        """Number of u-coordinates per sample, L(L+1)/2."""
        return self._tau.size

    @property
    def tau(self) -> np.ndarray:
        """tau_k of the u -> h map (copy)."""
        return self._tau.copy()

    # ------------------------------------------------------------ hooks
    def outputs(self, H: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def _prox_raw(self, Y, Omega, V, Uprev, warm):  # pragma: no cover - abstract
        raise NotImplementedError

    def _newton_raw(self, Y, Omega, U0, V):  # pragma: no cover - abstract
        raise NotImplementedError

    def _starts_raw(self, Y, Omega, V):  # pragma: no cover - abstract
        raise NotImplementedError

    def _lgh_raw(self, y, u):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ shared
    def h_from_u(self, U: np.ndarray) -> np.ndarray:
        """(n, K) u-coordinates -> (n, L, L) symmetric h, h_ab = h_ba = tau_k u_k."""
        return symmetric_h(as_2d("u", U, self.K), self._ka, self._kb, self._tau, self.L)

    @property
    def noise_dim(self) -> int:
        """Standard normals per sample of the noise model: K (logit) or M (output)."""
        return self.K if self.noise_at == "logit" else self.M

    def labels_from_noise(self, H_star: np.ndarray, noise_std: np.ndarray) -> np.ndarray:
        """Labels from given standard normals (n, noise_dim) -- the one noise model,
        shared by :meth:`sample_labels` and the SE's common random numbers.

        ``noise_at="output"``: y = g(h*) + sqrt(Delta) xi, xi ~ N(0, I_M);
        ``noise_at="logit"``: y = g(h* + sqrt(Delta) E), E symmetric with
        E_ab = E_ba i.i.d. N(0, 1) for a <= b.
        """
        H_star = self._check_H(H_star)
        s = math.sqrt(self.noise)
        if self.noise_at == "logit":
            E = self.h_from_u(noise_std / self._tau)
            return self.outputs(H_star + s * E)
        return self.outputs(H_star) + s * noise_std

    def _check_H(self, H: np.ndarray) -> np.ndarray:
        H = np.ascontiguousarray(H, dtype=np.float64)
        if H.ndim != 3 or H.shape[1:] != (self.L, self.L):
            raise ValueError(f"H must have shape (n, {self.L}, {self.L}), got {H.shape}")
        return H

    def sample_labels(self, H_star: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy labels (n, M) of the pre-activations H_star (n, L, L)
        (noise model: :meth:`labels_from_noise`)."""
        H_star = self._check_H(H_star)
        return self.labels_from_noise(H_star, rng.standard_normal((H_star.shape[0], self.noise_dim)))

    def loss_grad_hess(self, y: np.ndarray, u: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(l, grad_u l (K,), Hessian_u l (K, K)) of one sample y (M,), u (K,)."""
        y = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
        u = np.ascontiguousarray(u, dtype=np.float64).reshape(-1)
        if y.size != self.M or u.size != self.K:
            raise ValueError(f"need y of size M = {self.M} and u of size K = {self.K}")
        l, g, h = self._lgh_raw(y, u)
        return float(l), g, h

    def prox_batch(self, y: np.ndarray, omega: np.ndarray, V,
                   warm_from: np.ndarray | None = None) -> ProxBatch:
        """Multi-start Newton prox of every sample: y (n, M), omega (n, K), V > 0
        (scalar, per sample (n,) or per component (n, K); see :func:`variance_matrix`).

        ``warm_from``: the ``ends`` of a previous call on the same samples at
        nearby (y, omega, V) -- an SE or GAMP iteration earlier.  The data-side
        runs then restart from their previous end points instead of being
        rebuilt through the continuation (about 4x cheaper); the run from
        omega is always fresh.  A minimiser that none of the previous runs led
        to and that only a rebuilt start would find is missed; pass None
        (the default) for the full multi-start.
        """
        Y = as_2d("y", y, self.M)
        Omega = as_2d("omega", omega, self.K)
        n = Omega.shape[0]
        if Y.shape[0] != n:
            raise ValueError("y and omega must have the same number of rows")
        Vm = variance_matrix(V, n, self.K)
        if warm_from is None:
            Uprev, warm = np.empty((n, 4, self.K)), False
        else:
            Uprev = np.ascontiguousarray(warm_from, dtype=np.float64)
            if Uprev.shape != (n, 4, self.K):
                raise ValueError(f"warm_from must have shape ({n}, 4, {self.K}), got {Uprev.shape}")
            warm = True
        uhat, gout, trace, obj, failed, ends = self._prox_raw(Y, Omega, Vm, Uprev, warm)
        return ProxBatch(uhat, gout, trace, obj, failed, int(np.count_nonzero(failed)), ends)

    def prox_starts(self, y: np.ndarray, omega: np.ndarray, V) -> np.ndarray:
        """The prox's starting points, shape (n, 3, K): omega, data-consistent, midpoint.

        The fourth run of the prox starts at the data-consistent point and
        follows the continuation V' = c V for c in
        ``amp_attention._channel_kernels.CONTINUATION`` and then V.
        """
        Y = as_2d("y", y, self.M)
        Omega = as_2d("omega", omega, self.K)
        return self._starts_raw(Y, Omega, variance_matrix(V, Omega.shape[0], self.K))

    def newton_from(
        self, y: np.ndarray, omega: np.ndarray, V, u0: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Single-start modified Newton on F from u0 (n, K): (u, F(u), converged).

        ``converged``: ||grad F|| below tolerance and Hessian of F positive
        definite (a strict local minimum).
        """
        Y = as_2d("y", y, self.M)
        Omega = as_2d("omega", omega, self.K)
        U0 = as_2d("u0", u0, self.K)
        U, F, status = self._newton_raw(Y, Omega, U0, variance_matrix(V, Omega.shape[0], self.K))
        return U, F, status == ck.CONVERGED

    def prox_objective(self, y: np.ndarray, omega: np.ndarray, V, u: np.ndarray) -> np.ndarray:
        """F(u) = l(y, h(u)) + sum_k (u_k - omega_k)^2 / (2 V_k) per sample."""
        U = as_2d("u", u, self.K)
        Omega = as_2d("omega", omega, self.K)
        Vm = variance_matrix(V, Omega.shape[0], self.K)
        return self.loss_terms(y, U) + np.sum((U - Omega) ** 2 / (2.0 * Vm), axis=1)

    def train_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray:
        """sum over output entries of (y - g(h(uhat)))^2, shape (n,)."""
        Y = as_2d("y", y, self.M)
        r = Y - self.outputs(self.h_from_u(uhat))
        return np.sum(r * r, axis=1)

    def loss_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray:
        """l(y, h(uhat)) = train_terms / 2."""
        return 0.5 * self.train_terms(y, uhat)

    def test_terms(self, u_star: np.ndarray, u_pred: np.ndarray) -> np.ndarray:
        """||g(h(u_star)) - g(h(u_pred))||^2 per sample (clean target)."""
        r = self.outputs(self.h_from_u(u_star)) - self.outputs(self.h_from_u(u_pred))
        return np.sum(r * r, axis=1)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(L={self.L}, noise={self.noise}, "
                f"noise_at={self.noise_at!r})")


class BuiltinNewtonChannel(NewtonChannel):
    """A channel compiled into the kernels (``kind``), parameter beta."""

    _kind: int

    def __init__(self, L: int, beta: float, noise: float = 0.0, noise_at: str = "output"):
        super().__init__(L, noise, noise_at)
        self.beta = check_positive("beta", beta)
        self._par = np.array([self.beta, float(self._kind)])
        self._wsize = ck.work_size(self.L)

    def _prox_raw(self, Y, Omega, V, Uprev, warm):
        return ck.prox_batch(Y, Omega, V, self._par, self._ka, self._kb, self._tau, GTOL, MAXIT,
                             self._wsize, Uprev, warm)

    def _newton_raw(self, Y, Omega, U0, V):
        return ck.newton_batch(Y, Omega, U0, V, self._par, self._ka, self._kb, self._tau, GTOL,
                               MAXIT, self._wsize)

    def _starts_raw(self, Y, Omega, V):
        return ck.starts_batch(Y, Omega, V, self._par, self._ka, self._kb, self._tau, self._wsize)

    def _lgh_raw(self, y, u):
        return ck.loss_grad_hess_one(y, u, self._par, self._ka, self._kb, self._tau, self._wsize)

    def hessian_batch(self, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Hessian of l in u at every row of u, shape (n, K, K) (Numba, parallel)."""
        return ck.hessian_batch(as_2d("y", y, self.M), as_2d("u", u, self.K), self._par,
                                self._ka, self._kb, self._tau, self._wsize)

    def row_softmax_jacobian(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A, D): A = softmax_rows(beta h(u)) (n, L, L) and D (n, K, L, L) with
        D[:, k] = dA/du_k: dA_ab/dh_ac = beta A_ab (delta_bc - A_ac), and u_k moves
        h_ij and h_ji (k = (i, j)) with factor tau_k."""
        U = as_2d("u", U, self.K)
        A = softmax_rows(self.h_from_u(U), self.beta)
        n, L = U.shape[0], self.L
        D = np.zeros((n, self.K, L, L))
        eye = np.eye(L)
        for k, (i, j) in enumerate(zip(self._ka, self._kb)):
            D[:, k, i, :] += self.beta * A[:, i, :] * (eye[j] - A[:, i, j, None])
            if i != j:
                D[:, k, j, :] += self.beta * A[:, j, :] * (eye[i] - A[:, j, i, None])
            D[:, k] *= self.tau[k]
        return A, D

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(L={self.L}, beta={self.beta}, noise={self.noise}, "
                f"noise_at={self.noise_at!r})")


class SoftmaxChannel(BuiltinNewtonChannel):
    """Seq2seq channel g(h) = softmax_rows(beta h), all M = L^2 entries row-major.

    l(y, h) = 1/2 sum_ab (y_ab - A_ab)^2 with A_a = softmax(beta h_a).  Per row,
    dA_ab/dh_ac = beta A_ab (delta_bc - A_ac), so with r = A - y and
    rbar_a = sum_b r_ab A_ab,

        dl/dh_ac = beta A_ac (r_ac - rbar_a)

    (all L^2 entries independent); the exact Hessian is in
    :mod:`amp_attention._channel_kernels`.  A constant added to every entry of h
    leaves g unchanged (the only symmetric row shift), so l is flat along that
    direction of u; the quadratic term of the prox fixes it.

    Small beta: log A_ab = beta (h_ab - hbar_a) - beta^2 v_a / 2 - log L + O(beta^3),
    with hbar_a = mean_b h_ab and v_a = mean_b (h_ab - hbar_a)^2, hence

        A_ab = 1/L + (beta/L)(h_ab - hbar_a)
               + (beta^2 / (2L)) ((h_ab - hbar_a)^2 - v_a) + O(beta^3).

    Data-consistent start of the prox (y clipped to [1e-12, 1]):
    h0_ab = (log y_ab + log y_ba + c_a + c_b)/(2 beta) off the diagonal and
    (log y_aa + c_a)/beta on it, with c_b = (1/L) sum_a (log y_ab - log y_ba)
    the least-squares row normalisers (so that g(h0) = y exactly when y is the
    row softmax of a symmetric matrix), u0 = h0/tau, plus the constant shift of
    all of h that minimises ||u0 - omega||.
    """

    name = "softmax"
    _kind = ck.SOFTMAX

    @property
    def M(self) -> int:  # type: ignore[override]
        return self.L * self.L

    def outputs(self, H: np.ndarray) -> np.ndarray:
        """softmax_rows(beta H) flattened row-major, shape (n, L^2)."""
        H = self._check_H(H)
        return softmax_rows(H, self.beta).reshape(H.shape[0], self.M)

    def output_jacobian(self, U: np.ndarray) -> np.ndarray:
        """d g(h(u)) / du, shape (n, M, K)."""
        _, D = self.row_softmax_jacobian(U)
        return D.reshape(D.shape[0], self.K, self.M).transpose(0, 2, 1)

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """l per sample (n,) and G_ab = dl/dh_ab (n, L, L), all L^2 entries independent."""
        H = self._check_H(H)
        Y = as_2d("y", y, self.M).reshape(H.shape)
        A = softmax_rows(H, self.beta)
        R = A - Y
        rbar = np.sum(R * A, axis=-1, keepdims=True)
        return 0.5 * np.sum(R * R, axis=(1, 2)), self.beta * A * (R - rbar)
