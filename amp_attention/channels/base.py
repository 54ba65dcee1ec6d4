"""The channel contract (docs/theory.md "Data model", "Why the problem is a GLM", "Channel
side"): what every output channel provides.

A channel maps the symmetric L x L pre-activation matrix h of one sample to M
outputs g(h); the loss is l(y, h) = 1/2 ||y - g(h)||^2.  Its u-coordinates are
u_k = h_ab / tau_k (k = (a, b), a <= b, row-major; tau_aa = sqrt 2, tau_ab = 1),
K = L(L+1)/2 of them.  One object serves both the finite-size algorithms
(ERM, GAMP, Adam on data) and the state evolution: the same proximal operator
and loss derivatives underlie both.

:class:`Channel` lists the required members.  The optional capabilities
below are looked up in this module only (``optional_member``); a channel
without one falls back to the generic path:

``se(m, q, V, Q0, alpha) -> ChannelSE``
    closed-form channel expectations (else: RQMC integration of ``prox_batch``);
``population_error(S0, S) -> float``
    exact clean test error for Gaussian tokens (else: a Monte-Carlo test set);
``zero_loss_geometry(noise=None) -> ZeroLossGeometry``
    the zero-loss set as V -> infinity when it is affine, at label-noise
    variance ``noise`` (default: the channel's); interpolation and recovery
    thresholds in closed form (else: lam-continuation);
``output_jacobian(U)`` and ``hessian_batch(y, U)``
    dg/du (n, M, K) and the u-Hessian of l (n, K, K): Stein's identity for
    m_hat in the SE (variance reduction); ``hessian_batch`` with ``newton_from``
    also gives the control variate of V_hat's integration-by-parts estimate;
``stein_traces(y, u, ustar, V)``
    per row tr[(I + V H(u))^-1 J(u)^T J(u*)] in one pass (the same numbers as from
    ``output_jacobian`` and ``hessian_batch``, without their arrays in memory);
``centre_jacobian_cv(y, centre, V, eta)``
    the control variate below (``newton_from`` then ``hessian_batch``) in one pass;
``newton_from(y, omega, V, u0)``
    one local Newton run of the prox objective from u0, (u, F(u), converged): the
    SE's control variate at the pairs' centres (docs/theory.md section 16.2);
``newton_step(y, omega, V, eta=None, steps=1, report_raised=False)``
    ``steps`` Newton iterations of the prox objective from omega with the eigenvalues of
    I + V H raised to at least a floor (continuous in omega and V), (G, CV) with G = (u -
    omega)/V (one step: -(I + V H)^-1 grad l): the output function of the SE's two-level
    control variate (section 16.6); ``report_raised=True`` appends a boolean per row, True
    where the floor was applied on the way;
``newton_step_stein(y, omega, ustar, V, steps=1, report_raised=False)``
    ``newton_step``'s G and the Stein traces at omega with the first step's (floored)
    matrix in one pass, (G, traces) (and the booleans, as above);
``test_and_train_terms(ustar, z, y, a, s)``
    per row (``test_terms(ustar, omega)``, ``train_terms(y, omega)``) with omega = a ustar +
    s z, shape (n, 2), in one pass: the SE's test-only samples (the same numbers as the two
    members, without omega in memory); ``y=None`` stands for the noiseless labels
    y = g(h(ustar)) (Delta = 0), whose train term is the test term: both columns hold it;
``row_test_terms(G, sqrt_Q0, a, s)`` with ``row_draw_dimension``
    the same expectations as ``test_and_train_terms`` (clean and noisy test error) as L
    times one row's, from G (n, row_draw_dimension) standard normals: for channels whose
    outputs are row-wise functions of h's rows (the rows of (h*, h, y) exchangeable),
    an integral over one row's coordinates (docs/theory.md 16.7);
``convex_below(y)``
    the V below which the prox objective is certified strictly convex for every omega at
    the label rows of y (docs/theory.md 16.5): one Newton run suffices there, and the SE's
    two-level control variate runs only for channels that have it;
``convex_below_every_label``
    the same for every label the channel's noise model can produce (0.0, the default,
    where that set is unbounded or the channel has no bound): below it Stein's m_hat is
    exact and used without the consistency guard (docs/theory.md section 10);
``convex``
    True when l is convex in u (ERM starts once; restarts are refused);
``outputs_are_h``
    True when g(h) = (h_ab)_{a<=b}: ERM is least squares in S and takes the
    dedicated linear path;
``parameters``
    the :class:`~amp_attention.spec.Task` fields the channel reads besides
    ``L``, ``noise`` and ``noise_at`` (e.g. ``("beta",)``);
``validated_tokens``
    the token counts L at which the channel's SE has been checked against
    simulation (docs/validation.md); None: every L (absent: none);
``bayes_q_hat(V, Q0, alpha) -> float``
    the Bayes-optimal conjugate qhat = 2 alpha E||g_out||^2 of the posterior output
    function at posterior variance V = Q0 - q per u-coordinate, in closed form
    (docs/theory.md "Bayes-optimal baseline"); absent or raising ValueError: no
    closed form at these parameters;
``posterior_batch(y, omega, V)``
    the posterior output function on data (Bayes-optimal GAMP): a
    :class:`ProxBatch` with uhat = E[u* | y, omega] for the prior u* ~ N(omega, V),
    g_out = (uhat - omega)/V and trace_term = -V tr dg_out/domega.

Built-in channels are listed in :mod:`.registry`; a user channel is any object
with these members (usually a :class:`~amp_attention.channels.custom.CustomChannel`
or a subclass of :class:`~amp_attention.channels.newton.NewtonChannel`) and is
passed as ``Task(channel=instance)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..checks import check_positive

#: where label noise enters and with which covariance (docs/theory.md "Data model"):
#: "output": sqrt(Delta) xi added to each of the M outputs;
#: "logit": to the logits h before g, sqrt(Delta) E with E symmetric, E_ab i.i.d. N(0, 1)
#: for a <= b (variance Delta on every logit);
#: "logit_goe": to the logits, sqrt(Delta/2) G with G a GOE matrix (G_aa ~ N(0, 2),
#: G_ab ~ N(0, 1)): variance Delta on the diagonal and Delta/2 off it, i.e. i.i.d.
#: N(0, Delta/2) on every u-coordinate -- the model of arXiv 2509.24914 and its code.
NOISE_LOCATIONS = ("output", "logit", "logit_goe")

#: the noise locations that perturb the logits (labels stay in the range of g)
LOGIT_NOISE = ("logit", "logit_goe")


def is_logit_noise(noise_at: str) -> bool:
    """True if the label noise is added to the logits h (before the output function)."""
    return noise_at in LOGIT_NOISE


def logit_noise_u_std(noise_at: str, tau: np.ndarray) -> np.ndarray:
    """Standard deviation, per unit of sqrt(Delta), of the logit noise in u-coordinates
    (u_k = h_k / tau_k): 1/tau_k for "logit" (variance Delta on every h_ab),
    1/sqrt(2) for "logit_goe" (variance Delta tau_k^2 / 2 on h_ab)."""
    tau = np.asarray(tau, dtype=np.float64)
    if noise_at == "logit":
        return 1.0 / tau
    if noise_at == "logit_goe":
        return np.full(tau.shape, 1.0 / math.sqrt(2.0))
    raise ValueError(f"noise_at must be one of {LOGIT_NOISE} for logit noise, got {noise_at!r}")

#: relative slack of the constraint m^2 <= q Q0 (Cauchy-Schwarz for the overlaps):
#: next to perfect recovery a fixed point sits at m^2 = q Q0 up to rounding.
OVERLAP_RTOL = 1e-9


def overlap_split(m: float, q: float, Q0: float) -> tuple[float, float]:
    """(slope, rest) of u* = slope omega + sqrt(rest) z with omega ~ N(0, q), z ~ N(0, 1)
    independent: slope = m/q, rest = Q0 - m^2/q (docs/theory.md "Channel side"; q = 0
    needs m = 0 and gives slope 0).  Overlaps with m^2 <= q Q0 (1 + OVERLAP_RTOL) are accepted and rest is
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

    m_hat, q_hat, V_hat: conjugate order parameters (docs/theory.md "Channel side");
    train_error: E sum over output entries (y - yhat)^2 at the prox point;
    test_error: E ||g(h(S0)) - g(h(Shat))||^2 on a fresh sample (clean);
    loss_per_sample: E[l(y, uhat)] (channel part of R/n);
    test_error_noisy: E ||y - g(h(Shat))||^2 on a fresh sample with its noisy label
    (test_error + Delta M for output noise; NaN where a channel does not provide it).
    """

    m_hat: float
    q_hat: float
    V_hat: float
    train_error: float
    test_error: float
    loss_per_sample: float
    test_error_noisy: float = float("nan")


@dataclass(frozen=True)
class ProxBatch:
    """Proximal operator of n samples (docs/theory.md "Channel side").

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

    def with_rows(self, rows: np.ndarray, fix: "ProxBatch") -> "ProxBatch":
        """This batch with the given rows replaced by ``fix``'s (a prox of those rows only,
        in their order); a field ``fix`` does not carry (None) keeps this batch's rows, and
        one this batch does not carry stays None."""
        fields = {}
        for name in ("uhat", "g_out", "trace_term", "objective", "failed", "ends"):
            a, b = getattr(self, name), getattr(fix, name)
            if a is not None and b is not None:
                a = np.array(a, copy=True)
                a[rows] = b
            fields[name] = a
        return ProxBatch(**fields, n_failed=int(np.count_nonzero(fields["failed"])))


@dataclass(frozen=True)
class ZeroLossGeometry:
    """The zero-loss set of a channel in u-coordinates as V -> infinity (docs/theory.md
    "Thresholds").

    ``rank`` r: independent equations per sample; ``noise_energy`` N: the
    expected squared norm of the label noise projected on the constrained
    directions (u-units); ``description`` says where they come from.
    """

    rank: int
    noise_energy: float
    description: str


@runtime_checkable
class Channel(Protocol):
    """The members every channel provides (shapes per batch of n samples).

    ``name``, ``L``, ``K`` = L(L+1)/2, ``M`` (outputs), ``noise`` (Delta >= 0),
    ``noise_at`` (in :data:`NOISE_LOCATIONS`), ``noise_dim`` (standard normals
    per sample of the noise model);
    ``outputs(H)``: g(h), (n, L, L) -> (n, M);
    ``h_from_u(U)``: (n, K) -> (n, L, L);
    ``labels_from_noise(H_star, xi)`` and ``sample_labels(H_star, rng)``: labels (n, M);
    ``loss_grad_hess(y, u)``: (l, grad_u l, Hessian_u l) of one sample;
    ``batch_loss_and_grad_h(y, H)``: (l (n,), dl/dh_ab (n, L, L)), all L^2 entries
    independent (what ERM applies the adjoint of the measurement operator to);
    ``prox_batch(y, omega, V, warm_from=None)``: :class:`ProxBatch`;
    ``train_terms(y, uhat)``, ``loss_terms(y, uhat)``, ``test_terms(u_star, u)``:
    per-sample squared output errors, losses and clean test errors (n,).
    """

    name: str
    L: int
    K: int
    M: int
    noise: float
    noise_at: str
    noise_dim: int

    def outputs(self, H: np.ndarray) -> np.ndarray: ...

    def h_from_u(self, U: np.ndarray) -> np.ndarray: ...

    def labels_from_noise(self, H_star: np.ndarray, noise_std: np.ndarray) -> np.ndarray: ...

    def sample_labels(self, H_star: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...

    def loss_grad_hess(self, y: np.ndarray, u: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]: ...

    def batch_loss_and_grad_h(self, y: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def prox_batch(self, y: np.ndarray, omega: np.ndarray, V: Any,
                   warm_from: np.ndarray | None = None) -> ProxBatch: ...

    def train_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray: ...

    def loss_terms(self, y: np.ndarray, uhat: np.ndarray) -> np.ndarray: ...

    def test_terms(self, u_star: np.ndarray, u_pred: np.ndarray) -> np.ndarray: ...


#: the members of :class:`Channel`, checked by :func:`check_channel`
REQUIRED_MEMBERS = ("name", "L", "K", "M", "noise", "noise_at", "noise_dim", "outputs",
                    "h_from_u", "labels_from_noise", "sample_labels", "loss_grad_hess",
                    "batch_loss_and_grad_h", "prox_batch", "train_terms", "loss_terms",
                    "test_terms")

#: optional capabilities (module docstring) and their value when absent
OPTIONAL_MEMBERS: dict[str, Any] = {"se": None, "population_error": None,
                                    "zero_loss_geometry": None, "output_jacobian": None,
                                    "hessian_batch": None, "convex": False, "outputs_are_h": False,
                                    "parameters": (), "validated_tokens": (),
                                    "bayes_q_hat": None, "posterior_batch": None,
                                    "newton_from": None, "newton_step": None,
                                    "convex_below": None, "convex_below_every_label": 0.0,
                                    "stein_traces": None,
                                    "centre_jacobian_cv": None, "newton_step_stein": None,
                                    "test_and_train_terms": None, "row_test_terms": None,
                                    "row_draw_dimension": 0}


#: the members that direct ERM and Adam on data use (a channel for data only needs these)
DATA_MEMBERS = ("name", "L", "M", "noise", "outputs", "sample_labels", "batch_loss_and_grad_h")


def check_channel(channel: object, L: int | None = None,
                  members: tuple[str, ...] = REQUIRED_MEMBERS) -> Channel:
    """``channel`` itself when it has ``members`` (default: all of :class:`Channel`)
    and ``L`` tokens if given; ValueError naming the missing members otherwise."""
    missing = [a for a in members if not hasattr(channel, a)]
    if missing:
        raise ValueError(f"channel must provide the members of amp_attention.channels.Channel "
                         f"({', '.join(members)}); {type(channel).__name__} lacks "
                         f"{', '.join(missing)}")
    if L is not None and int(channel.L) != int(L):  # type: ignore[attr-defined]
        raise ValueError(f"channel has L={channel.L} tokens but the problem has L={L}")  # type: ignore[attr-defined]
    return channel  # type: ignore[return-value]


def optional_member(channel: object, name: str) -> Any:
    """The optional capability ``name`` of ``channel`` (module docstring), or its
    value when absent (None for methods)."""
    if name not in OPTIONAL_MEMBERS:
        raise ValueError(f"name must be one of {', '.join(OPTIONAL_MEMBERS)}; got {name!r}")
    return getattr(channel, name, OPTIONAL_MEMBERS[name])


def validation_note(channel: object) -> str:
    """'' when the channel's SE is validated against simulation at its L, else one line
    saying at which L it is (``validated_tokens``)."""
    valid = optional_member(channel, "validated_tokens")
    L = channel.L  # type: ignore[attr-defined]
    if valid is None or L in valid:
        return ""
    where = ("at no L" if not valid else "only at L = " + ", ".join(str(v) for v in valid))
    return (f"the {channel.name} channel's state evolution is validated against simulation "  # type: ignore[attr-defined]
            f"{where} (docs/validation.md); L = {L} is not validated")


def stein_available(channel: object) -> bool:
    """Stein's identity for m_hat needs dg/du through the labels: output noise and
    both ``output_jacobian`` and ``hessian_batch``."""
    return (optional_member(channel, "output_jacobian") is not None
            and optional_member(channel, "hessian_batch") is not None
            and channel.noise_at == "output")  # type: ignore[attr-defined]


# ------------------------------------------------ helpers shared by the channels


def as_2d(name: str, x: np.ndarray, cols: int) -> np.ndarray:
    """``x`` as a contiguous float64 (n, cols) array; ValueError naming ``name`` otherwise."""
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


def u_coordinates(L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ka, kb, tau): the row-major upper-triangle index pairs k = (ka_k, kb_k) and
    tau_k = sqrt 2 on the diagonal, 1 off it (docs/theory.md "Why the problem is a GLM")."""
    a, b = np.triu_indices(L)
    tau = np.where(a == b, math.sqrt(2.0), 1.0)
    return (np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(b, dtype=np.int64),
            tau)


def symmetric_h(U: np.ndarray, ka: np.ndarray, kb: np.ndarray, tau: np.ndarray, L: int) -> np.ndarray:
    """(n, K) u-coordinates -> (n, L, L) symmetric h with h_ab = h_ba = tau_k u_k
    (docs/theory.md "Why the problem is a GLM")."""
    from .._channel_kernels import symmetric_h_batch  # compiled; imported on first use

    U = np.ascontiguousarray(U, dtype=np.float64)
    return symmetric_h_batch(U, np.ascontiguousarray(ka, dtype=np.int64),
                             np.ascontiguousarray(kb, dtype=np.int64),
                             np.ascontiguousarray(tau, dtype=np.float64), int(L))
