"""Channels whose prox is found by multi-start Newton (softmax, seq2lab, user channels).

Conventions and the contract: :mod:`.base`.  Noise model of every channel
here: label noise of variance Delta either on the outputs
(y = g(h*) + sqrt(Delta) xi, xi ~ N(0, I_M)) or on the logits
(y = g(h* + sqrt(Delta) E), E symmetric with E_ab = E_ba i.i.d. N(0, 1) for
a <= b, so every upper-triangle logit gets variance Delta).

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

The loss derivatives exist once, in the compiled evaluator of the kernels:
``loss_grad_hess`` and ``hessian_batch`` call the evaluator the prox uses.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _channel_kernels as ck
from ..checks import check_choice, check_integer, check_nonnegative, check_positive
from .base import (NOISE_LOCATIONS, ProxBatch, as_2d, is_logit_noise, logit_noise_u_std,
                   symmetric_h, u_coordinates, variance_matrix)

# Newton tolerance on ||grad F||_inf relative to the scale of its terms, and
# the iteration cap per start (quadratic convergence needs far fewer).
GTOL = 1e-12
MAXIT = 100


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
        self._ka, self._kb, self._tau = u_coordinates(self.L)

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
        return self.K if is_logit_noise(self.noise_at) else self.M

    def labels_from_noise(self, H_star: np.ndarray, noise_std: np.ndarray) -> np.ndarray:
        """Labels from given standard normals (n, noise_dim) -- the one noise model,
        shared by :meth:`sample_labels` and the SE's common random numbers.

        ``noise_at="output"``: y = g(h*) + sqrt(Delta) xi, xi ~ N(0, I_M);
        ``noise_at="logit"``: y = g(h* + sqrt(Delta) E), E symmetric with
        E_ab = E_ba i.i.d. N(0, 1) for a <= b;
        ``noise_at="logit_goe"``: y = g(h* + sqrt(Delta/2) G), G GOE (G_aa ~ N(0, 2),
        G_ab ~ N(0, 1)): i.i.d. N(0, Delta/2) on every u-coordinate.
        """
        H_star = self._check_H(H_star)
        Z = np.asarray(noise_std, dtype=np.float64)  # a strided view is read in place
        if Z.shape != (H_star.shape[0], self.noise_dim):
            raise ValueError(f"noise_std must have shape ({H_star.shape[0]}, {self.noise_dim}), "
                             f"got {np.shape(noise_std)}")
        if self.noise == 0:
            # y = g(h*): adding 0 * xi (or h* + 0 * E) would only cost (n, M) temporaries
            return self.outputs(H_star)
        s = math.sqrt(self.noise)
        if is_logit_noise(self.noise_at):
            return self.outputs(ck.logit_noisy_h_batch(
                H_star, Z, logit_noise_u_std(self.noise_at, self._tau), s,
                self._ka, self._kb, self._tau))
        return self.outputs(H_star) + s * Z

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
    """A softmax-family channel compiled into the kernels (``kind``), parameter beta.

    L >= 2: a row softmax over one token is the constant 1 (no signal in the labels).
    """

    _kind: int
    parameters = ("beta",)

    def __init__(self, L: int, beta: float, noise: float = 0.0, noise_at: str = "output"):
        super().__init__(L, noise, noise_at)
        if self.L < 2:
            raise ValueError(f"L must be an integer >= 2 for the {self.name} channel (a "
                             f"softmax over one token is constant), got {L!r}")
        self.beta = check_positive("beta", beta)
        self._par = np.array([self.beta, float(self._kind)])
        self._wsize = ck.work_size(self.L)

    @classmethod
    def from_task(cls, task) -> "BuiltinNewtonChannel":
        """The channel of a :class:`~amp_attention.spec.Task` (its L, beta, noise, noise_at)."""
        return cls(task.L, task.beta, task.noise, task.noise_at)

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

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """l per sample (n,) and G_ab = dl/dh_ab (n, L, L), all L^2 entries independent
        (the kernels' loss-gradient helpers, shared with the prox's evaluator)."""
        H = self._check_H(H)
        return ck.loss_grad_h_batch(as_2d("y", y, self.M), H, self._par)

    def hessian_batch(self, y: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Hessian of l in u at every row of u, shape (n, K, K) (Numba, parallel)."""
        return ck.hessian_batch(as_2d("y", y, self.M), as_2d("u", u, self.K), self._par,
                                self._ka, self._kb, self._tau, self._wsize)

    def train_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray:
        """sum over output entries of (y - g(h(uhat)))^2, shape (n,) (compiled, threaded)."""
        U = as_2d("uhat", uhat, self.K)
        return ck.sq_output_residuals(as_2d("y", y, self.M), U, None, self._par, self._ka,
                                      self._kb, self._tau, self._wsize)

    def test_terms(self, u_star: np.ndarray, u_pred: np.ndarray) -> np.ndarray:
        """||g(h(u_star)) - g(h(u_pred))||^2 per sample (clean target; compiled, threaded)."""
        U, Us = as_2d("u_pred", u_pred, self.K), as_2d("u_star", u_star, self.K)
        return ck.sq_output_residuals(np.empty((0, self.M)), U, Us, self._par, self._ka,
                                      self._kb, self._tau, self._wsize)

    def test_and_train_terms(self, ustar: np.ndarray, z: np.ndarray, y: np.ndarray | None,
                             a: float, s: float) -> np.ndarray:
        """Per row (test_terms(u*, omega), train_terms(y, omega)) with omega = a u* + s z,
        shape (n, 2), in one compiled pass (omega formed row by row, its softmax once);
        ``y=None``: the noiseless labels y = g(h(u*)), whose train term is the test term (both
        columns hold it, no labels in memory)."""
        Us, Z = as_2d("ustar", ustar, self.K), as_2d("z", z, self.K)
        Y = np.empty((0, self.M)) if y is None else as_2d("y", y, self.M)
        if not (Us.shape[0] == Z.shape[0] and (y is None or Y.shape[0] == Us.shape[0])):
            raise ValueError(f"ustar, z and y need the same rows, got {Us.shape[0]}, "
                             f"{Z.shape[0]}, {Y.shape[0]}")
        return ck.test_train_residuals(Us, Z, Y, float(a), float(s), self._par, self._ka,
                                       self._kb, self._tau, self._wsize)

    def stein_traces(self, y: np.ndarray, u: np.ndarray, ustar: np.ndarray, V: float) -> np.ndarray:
        """Per row tr[(I + V H(u))^-1 J(u)^T J(u*)], H the Hessian of l(y, .) and J the
        output Jacobian d g / d u: the Stein form of the m_hat estimator
        (:meth:`~amp_attention.solvers.channel_integrals.MonteCarloChannel._stein_terms`),
        fused and threaded (:func:`~amp_attention._channel_kernels.stein_traces_builtin`)."""
        Y, U = as_2d("y", y, self.M), as_2d("u", u, self.K)
        return ck.stein_traces_builtin(Y, U, as_2d("ustar", ustar, self.K), float(V), self._par,
                                       self._ka, self._kb, self._tau, self._wsize)

    def centre_jacobian_cv(self, y: np.ndarray, centre: np.ndarray, V: float,
                           eta: np.ndarray) -> np.ndarray:
        """Per row eta^T A eta - tr A, A = ((I + V H)^-1 - I)/V with H the Hessian of l at the
        end of one Newton run of the prox objective from the centre (the zero-mean control
        variate of the SE's V_hat by parts; docs/theory.md 16.2), fused and threaded
        (:func:`~amp_attention._channel_kernels.centre_cv_batch`)."""
        Y, C = as_2d("y", y, self.M), as_2d("centre", centre, self.K)
        return ck.centre_cv_batch(Y, C, as_2d("eta", eta, self.K), float(V), self._par,
                                  self._ka, self._kb, self._tau, GTOL, MAXIT, self._wsize)

    def newton_step(self, y: np.ndarray, omega: np.ndarray, V: float,
                    eta: np.ndarray | None = None, steps: int = 1,
                    report_raised: bool = False) -> tuple:
        """(G, CV): ``steps`` Newton iterations of the prox objective from omega with the
        eigenvalues of I + V H raised to at least ``STEP_FLOOR``, G = (u - omega)/V per row
        (n, K) (one step: -(I + V H)^-1 grad l at omega), and with ``eta`` (n, K)
        CV = eta^T A eta - tr A per row, A = ((I + V H)^-1 - I)/V
        (:func:`~amp_attention._channel_kernels.newton_step_batch`): the output function and
        Jacobian of the SE's control variate (docs/theory.md 16.6), continuous in omega and
        V.  ``report_raised``: (G, CV, RAISED), RAISED (n,) True where the floor was
        applied on the way."""
        Y, Om = as_2d("y", y, self.M), as_2d("omega", omega, self.K)
        want = eta is not None
        E = as_2d("eta", eta, self.K) if want else Om
        G, CV, _, raised = ck.newton_step_batch(Y, Om, E, float(V), steps, self._par,
                                                self._ka, self._kb, self._tau, self._wsize,
                                                want)
        out = (G, (CV if want else None))
        return (*out, raised) if report_raised else out

    def newton_step_stein(self, y: np.ndarray, omega: np.ndarray, ustar: np.ndarray, V: float,
                          steps: int = 1, report_raised: bool = False) -> tuple:
        """(G, ST): :meth:`newton_step`'s G and, in the same pass, the Stein traces
        tr[(I + V H)^-1 J(omega)^T J(u*)] at omega with the first step's (floored) matrix:
        the control variate's Stein form; ``report_raised`` as in :meth:`newton_step`."""
        Y, Om = as_2d("y", y, self.M), as_2d("omega", omega, self.K)
        G, _, ST, raised = ck.newton_step_batch(Y, Om, Om, float(V), steps, self._par,
                                                self._ka, self._kb, self._tau, self._wsize,
                                                False, as_2d("ustar", ustar, self.K))
        return (G, ST, raised) if report_raised else (G, ST)

    def row_softmax_jacobian(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A, D): A = softmax_rows(beta h(u)) (n, L, L) and D (n, K, L, L) with
        D[:, k] = dA/du_k: dA_ab/dh_ac = beta A_ab (delta_bc - A_ac), and u_k moves
        h_ij and h_ji (k = (i, j)) with factor tau_k (compiled, parallel)."""
        U = as_2d("u", U, self.K)
        return ck.row_softmax_jacobian_batch(U, self.beta, self._ka, self._kb, self._tau)

    def row_softmax(self, H: np.ndarray) -> np.ndarray:
        """softmax_rows(beta H), H (n, L, L) (compiled, parallel)."""
        return ck.softmax_rows_batch(self._check_H(H), self.beta)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(L={self.L}, beta={self.beta}, noise={self.noise}, "
                f"noise_at={self.noise_at!r})")
