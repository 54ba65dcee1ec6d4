"""Seq2seq softmax channel g(h) = softmax_rows(beta h) (docs/theory.md "Data model").

Contract and conventions: :mod:`.base`; the multi-start Newton prox and the
noise model: :mod:`.newton`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _channel_kernels as ck
from .base import (ProxBatch, ZeroLossGeometry, as_2d, is_logit_noise, logit_noise_u_std,
                   variance_matrix)
from .newton import BuiltinNewtonChannel


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
    #: SE against extrapolated ERM at L = 2 and 3 (docs/validation.md)
    validated_tokens = (2, 3)

    @property
    def M(self) -> int:  # type: ignore[override]
        return self.L * self.L

    def outputs(self, H: np.ndarray) -> np.ndarray:
        """softmax_rows(beta H) flattened row-major, shape (n, L^2)."""
        return self.row_softmax(H).reshape(-1, self.M)

    def convex_below(self, y: np.ndarray) -> float:
        """The V below which the prox objective l(y_i, h(u)) + |u - omega|^2 / (2V) is certified
        strictly convex for every row y_i and every omega: 1 / max_i c(y_i), c the curvature
        bound of docs/theory.md 16.5 (inf where c = 0)."""
        c = float(ck.softmax_curvature_bound_max(as_2d("y", y, self.M), self._par, self.L))
        return math.inf if c == 0.0 else 1.0 / (c * (1.0 + 1e-9))

    @property
    def convex_below_every_label(self) -> float:
        """The V below which the prox objective is certified strictly convex for every omega
        and every label this channel's noise model can produce (0.0 where that set is
        unbounded): without label noise, or with it on the logits, every label row lies in
        the simplex, where the curvature bound of docs/theory.md 16.5 is largest at a vertex
        (L = 2: |y_1 - y_2| = 1; L >= 3: the same for every simplex row); output noise moves
        labels anywhere.  Below it the prox minimiser is unique and smooth in the labels,
        so Stein's identity for m_hat holds exactly (docs/theory.md section 10, "Stein
        estimate of m_hat")."""
        if self.noise > 0 and not is_logit_noise(self.noise_at):
            return 0.0
        vertex = np.zeros((1, self.M))
        vertex[0, ::self.L + 1] = 1.0  # every row at a vertex: y_aa = 1
        return self.convex_below(vertex)

    def output_jacobian(self, U: np.ndarray) -> np.ndarray:
        """d g(h(u)) / du, shape (n, M, K)."""
        _, D = self.row_softmax_jacobian(U)
        return D.reshape(D.shape[0], self.K, self.M).transpose(0, 2, 1)

    # ---------------------------------------------------------- the test error by rows
    @property
    def row_draw_dimension(self) -> int:
        """Standard normals per sample of :meth:`row_test_terms`: row 0's L coordinates of u*
        and of omega's own spread, and (Delta > 0) the row's L label-noise normals."""
        return (3 if self.noise > 0 else 2) * self.L

    def row_test_terms(self, G: np.ndarray, sqrt_Q0: float, a: float, s: float) -> np.ndarray:
        """Per row of the standard normals G (n, row_draw_dimension): L times the first row's
        (||g_0(h*) - g_0(h)||^2, ||y_0 - g_0(h)||^2), with u* = sqrt_Q0 G[:, :L] and omega =
        a u* + s G[:, L:2L] on row 0's coordinates (h_0b = tau_b u_b) and the row's labels
        y_0 from the noise normals G[:, 2L:] (docs/theory.md 16.7).  The rows of (h*, h, y)
        are exchangeable (a permutation of the tokens permutes them and leaves the Gaussian
        law and the noise model unchanged), so the mean of each column equals that of
        test_and_train_terms' over all L rows, an integral in 2L (3L) dimensions instead of
        2K (2K + M or 3K); shape (n, 2)."""
        L = self.L
        G = np.asarray(G, dtype=np.float64)
        if G.ndim != 2 or G.shape[1] != self.row_draw_dimension:
            raise ValueError(f"G must have shape (n, {self.row_draw_dimension}) (row_draw_"
                             f"dimension), got {G.shape}")
        row = np.flatnonzero(self._ka == 0)  # the coordinates k = (0, b), b = 0..L-1
        tau = np.ascontiguousarray(self._tau[row])
        kind = 0 if self.noise == 0 else 2 if is_logit_noise(self.noise_at) else 1
        std = (tau * logit_noise_u_std(self.noise_at, self._tau)[row] if kind == 2
               else np.ones(L))
        return ck.row_test_terms_batch(G, sqrt_Q0, a, s, self.beta, tau, kind,
                                       math.sqrt(self.noise), np.ascontiguousarray(std))

    # ---------------------------------------------------------- Bayes-optimal
    def _constrained_basis(self) -> np.ndarray:
        """A: (K - 1) x K with orthonormal rows spanning the complement of the flat
        direction e_k = 1/tau_k (h + c 11^T gives the same rows)."""
        e = 1.0 / self._tau
        P = np.eye(self.K) - np.outer(e, e) / float(e @ e)
        w, vecs = np.linalg.eigh(P)
        return vecs[:, w > 0.5].T

    def _u_noise_var(self) -> np.ndarray:
        """Variance of the logit noise per u-coordinate (0 without noise)."""
        if self.noise == 0:
            return np.zeros(self.K)
        return self.noise * logit_noise_u_std(self.noise_at, self._tau) ** 2

    def _no_bayes_closed_form(self) -> None:
        if self.noise > 0 and self.noise_at == "output":
            raise ValueError("noise: the Bayes-optimal output function of the softmax channel "
                             "with noise on the outputs has no closed form (y leaves the range "
                             "of the softmax); its Z_out integrals are computed by Monte Carlo "
                             "(amp_attention.solvers.bayes_optimal)")

    def bayes_q_hat(self, V: float, Q0: float, alpha: float) -> float:
        """Noiseless labels, or noise on the logits: y fixes A(u* + eps) exactly (A of
        :meth:`_constrained_basis`; eps ~ N(0, D), D = diag(Delta/tau_k^2) ("logit") or
        (Delta/2) I ("logit_goe") the logit noise in u-units, 0 without noise), a linear
        Gaussian observation of u* ~ N(omega, V I), so
        qhat = 2 alpha tr((V I + A D A^T)^{-1}) = 2 alpha (K - 1)/V without noise, for every
        beta (docs/theory.md "Bayes-optimal baseline")."""
        self._no_bayes_closed_form()
        A = self._constrained_basis()
        M = V * np.eye(self.K - 1) + (A * self._u_noise_var()) @ A.T
        return 2.0 * alpha * float(np.trace(np.linalg.inv(M)))

    def consistent_u(self, y: np.ndarray) -> np.ndarray:
        """A u with softmax_rows(beta h(u)) = y for labels y (n, L^2) in the range of the
        softmax (noiseless, or noise on the logits): the least-squares row normalisers of
        log y (class docstring), exact up to the flat direction."""
        Y = np.log(np.clip(as_2d("y", y, self.M), 1e-300, None)).reshape(-1, self.L, self.L)
        c = np.mean(Y - Y.transpose(0, 2, 1), axis=1)  # c_b = mean_a (log y_ab - log y_ba)
        H = (Y + Y.transpose(0, 2, 1) + c[:, :, None] + c[:, None, :]) / (2.0 * self.beta)
        return H[:, self._ka, self._kb] / self._tau

    def posterior_batch(self, y: np.ndarray, omega: np.ndarray, V) -> ProxBatch:
        """E[u* | y, omega] for u* ~ N(omega, P), P = diag(V_k), observing A u_y = A(u* + eps):
        mean = omega + P A^T M^{-1} A (u_y - omega), M = A (P + D) A^T; g_out = (mean - omega)/V_k
        = A^T M^{-1} A (u_y - omega) and trace_term = -sum_k V_k dg_k/domega_k = tr(M^{-1} A P A^T)."""
        self._no_bayes_closed_form()
        Omega = as_2d("omega", omega, self.K)
        n = Omega.shape[0]
        Vm = variance_matrix(V, n, self.K)
        A = self._constrained_basis()
        D = self._u_noise_var()
        APA = np.einsum("ik,nk,jk->nij", A, Vm, A)
        M = APA + (A * D) @ A.T
        r = (self.consistent_u(y) - Omega) @ A.T
        sol = np.linalg.solve(M, r[:, :, None])[:, :, 0]
        g = sol @ A
        trace = np.einsum("nii->n", np.linalg.solve(M, APA))
        return ProxBatch(Omega + Vm * g, g, trace, np.zeros(n), np.zeros(n, dtype=bool), 0)

    def zero_loss_geometry(self, noise: float | None = None) -> ZeroLossGeometry:
        """K - 1 equations per sample: h and h + c 11^T give the same rows.  The logit
        noise (variance ``noise``, default the channel's Delta), of u-variance
        Delta / tau_k^2 ("logit") or Delta / 2 ("logit_goe") per coordinate, is
        projected off the free direction u = c / tau; with output noise the labels
        leave the range of the softmax and no S fits them (ValueError)."""
        noise = self.noise if noise is None else noise
        if noise > 0 and self.noise_at == "output":
            raise ValueError("softmax with output noise: the labels lie outside the range of "
                             "the softmax, so no S fits them exactly (no interpolation); use "
                             "--noise-at logit or logit_goe")
        energy = 0.0
        if noise > 0:  # logit noise here (output noise was refused above)
            nvec = 1.0 / self._tau
            P = np.eye(self.K) - np.outer(nvec, nvec) / float(nvec @ nvec)
            var = logit_noise_u_std(self.noise_at, self._tau) ** 2
            energy = noise * float(np.trace(P @ np.diag(var)))
        return ZeroLossGeometry(self.K - 1, energy,
                                "softmax: K - 1 equations (h + c 11^T gives the same rows), "
                                "logit noise projected off the free direction")
