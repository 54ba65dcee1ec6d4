"""Prox branches: which minimiser of a non-convex prox the state evolution follows
(docs/theory.md 16.8).

The channel side of the SE needs, for every sample (omega, u*, y),

    uhat = argmin_u F(u),   F(u) = l(y, h(u)) + ||u - omega||^2 / (2V).

Where F has one minimiser (every convex loss; the softmax below its curvature
certificate, docs/theory.md 16.5) this is unambiguous.  Where F has competing minima
(softmax at small lam or large beta, where V is large) two deterministic maps are in use:

``"global"``
    the global minimiser (multi-start Newton, :meth:`NewtonChannel.prox_batch`): the
    replica-symmetric computation of the ERM's global minimum;
``"teacher"``
    the local minimiser reached by descent from the teacher's logits u* (the noiseless
    teacher field; modified Newton with Armijo backtracking,
    :meth:`NewtonChannel.newton_from`): the convention of the paper's own SE code (one
    local minimisation started at ``zstar``), the description of a training run that
    stays in the basin the teacher's logits lie in.

Both are functions of (omega, u*, y, V) alone, so under common random numbers both SE
maps are deterministic.  Where the two minimisers coincide (the same local minimum,
reached from different starts) :func:`teacher_branch` returns the global branch's numbers
bit for bit, so that wherever the prox has one minimiser the two branches give the same
SE to the last digit.
"""

from __future__ import annotations

import numpy as np

from .base import ProxBatch, optional_member

#: the prox branches of the SE (MonteCarloOptions.prox_branch, ``--prox-branch``)
PROX_BRANCHES = ("global", "teacher")

#: two Newton end points closer than this (relative to 1 + |u|, every coordinate) are one
#: minimiser: both runs stop at ||grad F|| <= 1e-12 x its scale, where a strict local
#: minimum is resolved to ~1e-12, while distinct minima of the softmax prox lie O(0.01-1)
#: apart
SAME_MINIMISER_RTOL = 1e-7


def check_prox_branch(branch: str) -> str:
    """``branch`` if it is one of PROX_BRANCHES, else ValueError naming the choices."""
    if branch not in PROX_BRANCHES:
        raise ValueError(f"prox_branch must be one of {', '.join(PROX_BRANCHES)}, "
                         f"got {branch!r}")
    return branch


def same_minimiser(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row: True where the end points a and b (n, K) are one minimiser
    (SAME_MINIMISER_RTOL)."""
    return np.all(np.abs(a - b) <= SAME_MINIMISER_RTOL * (1.0 + np.abs(b)), axis=1)


def _trace_terms(channel, y: np.ndarray, u: np.ndarray, V: float) -> np.ndarray:
    """tr(I - (I + V H)^-1) per row, H the Hessian of l(y, .) at u (the Hessian form of
    V_hat's per-sample term, :class:`ProxBatch.trace_term`)."""
    hess = optional_member(channel, "hessian_batch")
    if hess is not None:
        H = np.asarray(hess(y, u), dtype=np.float64)
    else:
        H = np.stack([channel.loss_grad_hess(yi, ui)[2] for yi, ui in zip(y, u)]) if len(u) \
            else np.empty((0, u.shape[1], u.shape[1]))
    K = u.shape[1]
    A = np.eye(K)[None, :, :] + V * H
    return K - np.trace(np.linalg.inv(A), axis1=1, axis2=2)


def _newton_from(channel):
    newton = optional_member(channel, "newton_from")
    if newton is None:
        raise ValueError("prox_branch='teacher' needs a channel with newton_from (a local "
                         "Newton descent of the prox objective); "
                         f"{getattr(channel, 'name', type(channel).__name__)} has none")
    return newton


def teacher_descent(channel, y: np.ndarray, omega: np.ndarray, V: float,
                    ustar: np.ndarray) -> ProxBatch:
    """The teacher branch of the prox by the descent from u* alone, without the global
    minimiser :func:`teacher_branch` compares it with: one Newton run per row instead of the
    global prox's four plus this one.  Where the two minimisers coincide its rows equal the
    global branch's to the descent's tolerance (not bit for bit); the fresh draws of the
    averaged solve (docs/theory.md 16.9), which only feed an average, use it."""
    U, F, converged = _newton_from(channel)(y, omega, V, ustar)
    failed = ~converged
    return ProxBatch(U, (U - omega) / V, _trace_terms(channel, y, U, V), F, failed,
                     int(np.count_nonzero(failed)))


def teacher_branch(channel, y: np.ndarray, omega: np.ndarray, V: float, ustar: np.ndarray,
                   global_px: ProxBatch) -> tuple[ProxBatch, np.ndarray]:
    """The teacher branch of the prox (module docstring) and, per row, True where it
    differs from the global minimiser ``global_px`` (the same samples' global prox).

    One modified-Newton descent of F from u* per row; where it ends at the global
    minimiser (:func:`same_minimiser`) the row is ``global_px``'s, bit for bit; elsewhere
    its end point, g_out = (u - omega)/V, the Hessian trace there, F(u), and ``failed``
    where the descent did not end at a strict local minimum."""
    U, F, converged = _newton_from(channel)(y, omega, V, ustar)
    split = ~same_minimiser(U, global_px.uhat)
    if not split.any():
        return global_px, split
    rows = np.flatnonzero(split)
    fix = ProxBatch(U[rows], (U[rows] - omega[rows]) / V,
                    _trace_terms(channel, y[rows], U[rows], V), F[rows], ~converged[rows], 0)
    return global_px.with_rows(rows, fix), split
