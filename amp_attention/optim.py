"""Minimisers of the ERM objective (docs/theory.md "Learners and the objective") and the one
stopping rule.

Everything here works on an :class:`Evaluator` -- f(S) = sum_mu l(y_mu, h_mu(S))
through a linear map h(S) and its adjoint -- and knows nothing of channels:

* :func:`apg`: accelerated proximal gradient for f + P with the penalty's prox (PSD and
  rank cap, or two-sided);
* :func:`lbfgs_over` / :func:`lbfgs_minimise`: scipy L-BFGS-B over any
  parameterisation of S, stopped by our criterion;
* :func:`conjugate_gradient`: the ridge normal equations (least-squares f);
* :class:`ProjectedGradientCriterion`: the relative projected-gradient norm
  every minimiser stops on (zero exactly at stationary points).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np
from scipy.optimize import minimize



class Evaluator(Protocol):
    """f(S) = sum_mu l(y_mu, h_mu(S)) through a linear map h = forward(S).

    ``forward(S)`` -> h; ``loss_from_h(h)`` -> (f, G) with G = dl/dh;
    ``adjoint(G)`` -> grad f on Sym(d); ``f_and_grad(S)``; ``d``;
    ``operator_norm_sq(rng)``: lambda_max(A*A) on Sym(d).
    """

    d: int

    def forward(self, S: np.ndarray) -> np.ndarray: ...

    def loss_from_h(self, H: np.ndarray) -> tuple[float, np.ndarray]: ...

    def adjoint(self, G: np.ndarray) -> np.ndarray: ...

    def f_and_grad(self, S: np.ndarray) -> tuple[float, np.ndarray]: ...

    def operator_norm_sq(self, rng: np.random.Generator) -> float: ...


def _inner(A: np.ndarray, B: np.ndarray) -> float:
    return float(np.vdot(A, B))


# ---------------------------------------------------------------- stopping rule


@dataclass
class ProjectedGradientCriterion:
    """The one ERM stopping rule: the relative projected-gradient norm, for any
    :class:`~amp_attention.penalties.Penalty` P.

    P with a prox: res = ||S - prox_t(S - t grad f(S))||_F / (t g0),
                   prox_t = ``penalty.prox(., t)`` (argmin ||S - B||^2/2 + t P(S)),
                   t = 1 / lambda_max(A*A),  g0 = ||grad f(0)||_F + ||dP/dS(0)||_F;
    smooth P:      res = ||grad f(S) + dP/dS||_F / g0,  g0 = ||grad f(0)||_F.
    """

    penalty: Any
    t: float
    g0: float

    def __call__(self, S: np.ndarray, gradf: np.ndarray) -> float:
        if self.penalty.smooth:
            return float(np.linalg.norm(gradf + self.penalty.gradient(S))) / self.g0
        P, _ = self.penalty.prox(S - self.t * gradf, self.t)
        return float(np.linalg.norm(S - P)) / (self.t * self.g0)

    def support(self, S: np.ndarray, gradf: np.ndarray) -> int:
        """Number of nonzero eigenvalues identified at the solution: of the prox-gradient
        point (a prox penalty), or of S above 1e-9 of the largest (a smooth one)."""
        if self.penalty.smooth:
            ev_abs = np.abs(np.linalg.eigvalsh(S))
            return int(np.sum(ev_abs > 1e-9 * max(1.0, float(ev_abs.max(initial=0.0)))))
        _, fv = self.penalty.prox(S - self.t * gradf, self.t)
        return int(np.sum(fv != 0))


def projected_gradient_criterion(ev: "Evaluator", penalty: Any,
                                 rng: np.random.Generator) -> ProjectedGradientCriterion:
    """The criterion of the ERM objective f + P on ``ev``'s data: t from the top
    eigenvalue of the evaluator's A*A (power iteration driven by ``rng``), g0 from the
    gradient at S = 0."""
    d = ev.d
    lip = max(ev.operator_norm_sq(rng), 1e-300)
    _, g_at_0 = ev.f_and_grad(np.zeros((d, d)))
    g0 = float(np.linalg.norm(g_at_0)) + penalty.gradient_scale(d)
    if not g0 > 0.0:
        g0 = 1.0  # labels equal g(h(0)) and lam = 0: S = 0 is exact, any scale works
    return ProjectedGradientCriterion(penalty=penalty, t=1.0 / lip, g0=g0)


# ------------------------------------------------------------------ minimisers


@dataclass
class OptimRun:
    """End point of one minimisation: S, R(S), converged, iterations, residual, grad f(S)."""

    #: the end point
    S: np.ndarray
    #: the objective R(S) there
    objective: float
    #: the stopping rule held
    converged: bool
    #: iterations run
    iterations: int
    #: the projected-gradient residual at S
    residual: float
    #: the gradient of the smooth part f at S
    gradf: np.ndarray


class _Converged(Exception):
    """Raised from the L-BFGS callback to stop as soon as the criterion holds."""


def lbfgs_minimise(
    fun: Callable[[np.ndarray], tuple[float, np.ndarray]],
    x0: np.ndarray,
    state: dict,
    check: Callable[[np.ndarray], float],
    tol: float,
    max_iter: int,
    progress: bool,
    label: str,
) -> tuple[np.ndarray, bool, int, float]:
    """scipy L-BFGS-B driven by our own stopping rule.

    scipy's own tests (ftol, gtol) are switched off; the callback evaluates the
    criterion after every iteration and stops through an exception.  If L-BFGS
    ends early (line-search failure, usually rounding near the minimum) it is
    restarted with a fresh memory from the current point, as long as the
    objective still decreases.
    """
    x = x0.copy()
    its = 0
    res = math.inf
    t_start = time.time()
    last_obj = math.inf
    for _attempt in range(12):
        if its >= max_iter:
            break
        found: dict[str, Any] = {}

        def callback(xk: np.ndarray) -> None:
            nonlocal its
            its += 1
            r = check(xk)
            found["x"], found["res"] = xk.copy(), r
            if progress and its % 100 == 0:
                print(f"[erm/{label}] it={its} R={state['f']:.12e} res={r:.2e} "
                      f"{time.time() - t_start:.1f}s", file=sys.stderr)
            if r <= tol:
                raise _Converged

        try:
            out = minimize(
                fun, x, jac=True, method="L-BFGS-B", callback=callback,
                options=dict(maxiter=max_iter - its, maxfun=10 * (max_iter - its) + 100,
                             ftol=0.0, gtol=0.0, maxcor=20, maxls=50),
            )
            x = np.asarray(out.x, dtype=float)
        except _Converged:
            return found["x"], True, its, found["res"]
        res = check(x)
        if res <= tol:
            return x, True, its, res
        obj = fun(x)[0]
        # stop retrying once a fresh-memory restart no longer lowers R
        if not obj < last_obj - 1e-15 * abs(obj):
            break
        last_obj = obj
    return x, False, its, res


def lbfgs_over(
    ev: "Evaluator",
    x0: np.ndarray,
    to_S: Callable[[np.ndarray], np.ndarray],
    penalty: Callable[[np.ndarray, np.ndarray], float],
    grad_x: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    crit: ProjectedGradientCriterion,
    tol: float,
    max_iter: int,
    progress: bool,
    label: str,
) -> OptimRun:
    """L-BFGS over a parameter x with S = to_S(x), R = f(S) + penalty(x, S) and
    dR/dx = grad_x(x, S, grad f(S)); one evaluation per distinct x (L-BFGS, the
    stopping rule and the result share it)."""
    cache: dict[str, Any] = {"x": None}
    state: dict[str, Any] = {"f": math.nan}

    def evaluate(x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        if cache["x"] is not None and np.array_equal(x, cache["x"]):
            return cache["R"], cache["S"], cache["gf"]
        S = to_S(x)
        f, gf = ev.f_and_grad(S)
        R = f + penalty(x, S)
        cache.update(x=x.copy(), R=R, S=S, gf=gf)
        state["f"] = R
        return R, S, gf

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        R, S, gf = evaluate(x)
        return R, grad_x(x, S, gf).ravel()

    def check(x: np.ndarray) -> float:
        _, S, gf = evaluate(x)
        return crit(S, gf)

    x, ok, its, res = lbfgs_minimise(fun, x0.ravel(), state, check, tol, max_iter, progress, label)
    R, S, gf = evaluate(x)
    return OptimRun(S=S.copy(), objective=R, converged=ok, iterations=its, residual=res, gradf=gf)


def apg(
    ev: "Evaluator",
    S_init: np.ndarray,
    penalty: Any,
    crit: ProjectedGradientCriterion,
    tol: float,
    max_iter: int,
    progress: bool,
    step_growth: float = 1.05,
) -> OptimRun:
    """Accelerated proximal gradient for f(S) + P(S) with the penalty's prox (f need not be
    convex; e.g. P = lam d Tr S over PSD S of rank <= p, or lam d ||S||_*).

    FISTA with (i) backtracking on the sufficient-decrease inequality
    f(z) <= f(y) + <grad f(y), z - y> + ||z - y||^2 / (2t), (ii) a monotone
    safeguard (a momentum step that raises R is discarded and the momentum
    reset; the plain prox-gradient step that follows cannot raise R), (iii)
    O'Donoghue-Candes adaptive restart, and (iv) a slow step growth
    (x ``step_growth`` per accepted iteration) so that the step tracks the local
    curvature, which for a saturating channel (softmax) is well below the
    linear-channel bound (pass 1 for a quadratic f, whose bound is tight).
    h is linear in S, so h(y_k) is extrapolated from the cached h(x_k),
    h(x_{k-1}): one forward and one adjoint product per iteration.
    """
    t = crit.t
    x = S_init.copy()
    hx = ev.forward(x)
    fx, Gx = ev.loss_from_h(hx)
    Fx = fx + penalty.value(x)
    gx: np.ndarray | None = None
    x_prev, hx_prev = x, hx
    tk = 1.0
    res = math.inf
    t_start = time.time()
    it = 0
    while it < max_iter:
        it += 1
        tn = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
        b = (tk - 1.0) / tn
        if b > 0.0:
            yv = x + b * (x - x_prev)
            hy = hx + b * (hx - hx_prev)
            fy, Gy = ev.loss_from_h(hy)
            gy = ev.adjoint(Gy)
        else:
            yv, hy, fy = x, hx, fx
            if gx is None:
                gx = ev.adjoint(Gx)
            gy = gx
        backtracked = False
        while True:
            z, _ = penalty.prox(yv - t * gy, t)
            hz = ev.forward(z)
            fz, Gz = ev.loss_from_h(hz)
            diff = z - yv
            model = fy + float(np.vdot(gy, diff)) + float(np.sum(diff * diff)) / (2.0 * t)
            # relative slack: near convergence both sides agree to rounding only
            if fz <= model + 1e-12 * max(abs(model), 1.0):
                break
            t *= 0.5
            backtracked = True
        Fz = fz + penalty.value(z)
        if Fz > Fx and b > 0.0:
            tk = 1.0
            x_prev, hx_prev = x, hx
            continue
        restart = float(np.vdot(yv - z, z - x)) > 0.0
        x_prev, hx_prev = x, hx
        x, hx, fx, Gx, Fx, gx = z, hz, fz, Gz, Fz, None
        tk = 1.0 if restart else tn
        cheap = float(np.linalg.norm(diff)) / (t * crit.g0)
        if not backtracked:
            t *= step_growth
        if progress and it % 200 == 0:
            print(f"[erm/apg] it={it} R={Fx:.12e} step-res={cheap:.2e} t={t:.3e} "
                  f"{time.time() - t_start:.1f}s", file=sys.stderr)
        if cheap < tol:
            gx = ev.adjoint(Gx)
            res = crit(x, gx)
            if res <= tol:
                return OptimRun(S=x, objective=Fx, converged=True, iterations=it, residual=res, gradf=gx)
    if gx is None:
        gx = ev.adjoint(Gx)
    res = crit(x, gx)
    return OptimRun(S=x, objective=Fx, converged=res <= tol, iterations=it, residual=res, gradf=gx)


def conjugate_gradient(
    op: Callable[[np.ndarray], np.ndarray], b: np.ndarray, tol: float, max_iter: int,
    progress: bool,
) -> tuple[np.ndarray, bool, int, float]:
    """Solve op(S) = b on Sym(d) by conjugate gradient (op symmetric positive
    semi-definite for the Frobenius inner product), from S = 0.

    When the recursive residual passes ``tol`` the true residual is recomputed
    and, if it has drifted above ``tol``, CG is restarted from the current
    iterate.  A non-positive curvature <p, op(p)> (a singular op) stops the
    iteration as not converged.  Returns (S, converged, iterations, relative
    residual ||b - op(S)||/||b||): for the ridge problem op = B*B + lam d I,
    b = B* y this is the stopping rule's element-wise residual.
    """
    bnorm = float(np.linalg.norm(b))
    S = np.zeros_like(b)
    if bnorm == 0.0:
        return S, True, 0, 0.0
    r = b.copy()
    p = r.copy()
    rs = _inner(r, r)
    it = 0
    while it < max_iter:
        it += 1
        Ap = op(p)
        curv = _inner(p, Ap)
        if not curv > 0.0:
            break
        a = rs / curv
        S += a * p
        r -= a * Ap
        rs_new = _inner(r, r)
        if progress and it % 100 == 0:
            print(f"[erm/cg] it={it} res={math.sqrt(rs_new) / bnorm:.2e}", file=sys.stderr)
        if math.sqrt(rs_new) / bnorm < tol:
            r = b - op(S)
            rs_new = _inner(r, r)
            if math.sqrt(rs_new) / bnorm < tol:
                return S, True, it, math.sqrt(rs_new) / bnorm
            p = r.copy()
            rs = rs_new
            continue
        p = r + (rs_new / rs) * p
        rs = rs_new
    res = float(np.linalg.norm(b - op(S))) / bnorm
    return S, res < tol, it, res
