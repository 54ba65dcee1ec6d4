"""Bayes-optimal state evolution (docs/theory.md "Bayes-optimal baseline"): the best error any
estimator can reach on the same data.

The Nishimori identities collapse the SE to one scalar: with e = Q0 - q the MMSE
(= V, the posterior variance of every u-coordinate),

    qhat = channel.bayes_q_hat(e, Q0, alpha)    (posterior output function)
    e'   = mmse(qhat)                             (Bayes-optimal matrix denoising)

and a fixed point is e = e'.  The map e -> mmse(qhat(e)) is increasing (a
larger posterior variance gives a smaller qhat, hence a larger mmse), so the
plain iteration is monotone and never jumps over the nearest fixed point; it
is accelerated by secant steps that are kept only while they stay on the same
side, and finished by Brent's method once a fixed point is bracketed.  Two
starts: uninformative (e = Q0 - m1^2, the prior mean sqrt-like I*Tr(S0)/d) and
informative (e = 1e-6 of that).  When they end at different points the one of
larger free entropy is the equilibrium: along the channel's curve
qhat = qhat(q) the replica potential changes by

    dPhi = (1/2) (F(q) - q) dqhat,     F(q) = Q0 - mmse(qhat(q)),

so Phi(b) - Phi(a) = (1/2) int_{e_a}^{e_b} G(e) qhat'(e) de with G = e - mmse
(Gauss-Legendre in log e).  A perfect-recovery point (e -> 0 with
mmse(qhat(e))/e -> r < 1) has Phi = +inf relative to any other and wins.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from amp_attention.channels import channel_for
from amp_attention.channels.base import optional_member
from amp_attention.checks import InstanceOf, check_args
from amp_attention.denoisers import BayesDenoiserFunctionals, BayesOptimal
from amp_attention.result import Status
from amp_attention.spec import Problem
from amp_attention.targets import target_measure

from .bayes_channel_integrals import BayesMonteCarloOptions, MonteCarloBayesChannel
from .se_driver import SOLVER_OPTIONS, choose_and_compare, reported_start_fields, start_names
from .state_evolution import SEResult, t_halfwidths

#: the informative start: e0 = this times the prior variance Q0 - m1^2
INFORMATIVE_START = 1e-6
#: the same for Monte-Carlo channels: their estimate of qhat has a relative error
#: ~ 1/sqrt(V N) at posterior variance V (the posterior shift is ~ V times the score),
#: and with label noise there is no perfect recovery to look for near e = 0
MC_INFORMATIVE_START = 0.05
#: the smallest MMSE the SE resolves, relative to Q0: below it (qhat ~ 1e7 and more) the
#: free-convolution quadrature of the denoiser needs thousands of nodes per panel, so an
#: iteration still contracting there is reported as perfect recovery
PR_RESOLUTION = 1e-7
#: the loosest relative residual of a Monte-Carlo channel's fixed point: the sampled map
#: (common random numbers) is solved to max(tol, MC_TOL), four orders below the Monte-Carlo
#: error of the defaults (~1e-3 relative on the MMSE); a tighter solve moves the MMSE by
#: less than 1e-7 relative and costs one more fine-level evaluation (~20 % of a point)
MC_TOL = 1e-7
#: the relative residual of the coarse level's solve: it only supplies the fine solve's
#: start and first secant slope, and its fixed point differs from the fine one by the
#: coarse Monte-Carlo error (~1e-3 relative); two starts whose coarse fixed points agree
#: to 20 times this are one fixed point (one fine solve serves both)
COARSE_TOL = 1e-5


def perfect_recovery_message(e: float, G: float, Q0: float) -> str:
    """What a perfect-recovery stop means, and what its residual is (not a distance to tol)."""
    return (f"perfect recovery: the MMSE fell to {e / Q0:.2g} Q0, below the SE's resolution "
            f"{PR_RESOLUTION:g} Q0, with the map still contracting (mmse(qhat(e))/e = "
            f"{1.0 - G / e:.3g} < 1), so the fixed point is MMSE = 0 to that resolution; the "
            f"residual |e - mmse(qhat(e))|/e = {G / e:.3g} is that contraction, not a "
            "distance to tol, and the values are those of the last iterate")


@dataclass(frozen=True)
class ScalarSolve:
    """One start of the scalar BO fixed point: e (the MMSE), the denoiser's output there,
    iterations, residual |e - mmse(qhat(e))| / Q0, status and message."""

    e: float
    den: BayesDenoiserFunctionals
    q_hat: float
    iterations: int
    residual: float
    status: Status
    message: str = ""

    @property
    def converged(self) -> bool:
        """A fixed point found: to tol, or e* = 0 below the resolution (perfect recovery)."""
        return self.status in (Status.CONVERGED, Status.PERFECT_RECOVERY)


class BayesStateEvolution:
    """The scalar BO SE map of one problem (module docstring); the learner is not used."""

    def __init__(self, problem: Problem, mc: BayesMonteCarloOptions | None = None,
                 *, mc_channel: MonteCarloBayesChannel | None = None):
        self.problem = problem
        #: the task's channel object (a user channel is given to the Task as an instance)
        self.channel = channel = channel_for(problem.task)
        self.target = target_measure(problem.target)
        self.denoiser = BayesOptimal(self.target)
        self.Q0 = self.target.moment(2)
        self.m1 = self.target.moment(1)
        self.e_max = self.Q0 - self.m1 * self.m1
        self.alpha = problem.alpha
        self.options = mc or BayesMonteCarloOptions()
        self.mc: MonteCarloBayesChannel | None = mc_channel
        if mc_channel is not None:
            self._q_hat = mc_channel.bayes_q_hat
            return
        closed = optional_member(channel, "bayes_q_hat")
        why = "it provides no closed form (bayes_q_hat)"
        if closed is not None:
            try:
                closed(self.e_max, self.Q0, self.alpha)
            except ValueError as exc:
                closed, why = None, str(exc)
        if closed is not None:
            self._q_hat = closed
            return
        try:
            self.mc = MonteCarloBayesChannel.from_options(channel, self.options)
        except ValueError as exc:
            raise ValueError(f"{exc}; and {why}") from None
        self._q_hat = self.mc.bayes_q_hat

    def coarse(self) -> "BayesStateEvolution | None":
        """The same map on the coarse prefix of the Monte-Carlo points (None: closed form)."""
        if self.mc is None or self.options.coarse_log2_n >= self.mc.log2_n:
            return None
        return BayesStateEvolution(self.problem, self.options,
                                   mc_channel=self.mc.prefix(self.options.coarse_log2_n))

    def q_hat(self, e: float) -> float:
        """qhat of the posterior output function at posterior variance e."""
        qh = float(self._q_hat(e, self.Q0, self.alpha))
        if not (math.isfinite(qh) and qh > 0):
            more = (f" (a Monte-Carlo estimate from 2^{self.mc.log2_n} points: raise "
                    "--mc-log2n)" if self.mc is not None else "")
            raise ValueError(f"the Bayes-optimal channel gives qhat = {qh!r} <= 0 at "
                             f"posterior variance V = {e:.3g}{more}")
        return qh

    def evaluate(self, e: float) -> tuple[float, BayesDenoiserFunctionals, float]:
        """(G(e) = e - mmse(qhat(e)), the denoiser's output, qhat)."""
        qh = self.q_hat(e)
        den = self.denoiser.bayes_functionals(qh)
        return e - den.mmse, den, qh

    # ------------------------------------------------------------------ solve
    def slope(self, e: float) -> float:
        """G'(e) by a central difference (rel. step 1e-4; one-sided at e_max)."""
        h = 1e-4 * e
        hi = min(e + h, self.e_max)
        return (self.evaluate(hi)[0] - self.evaluate(e - h)[0]) / (hi - e + h)

    def solve_from(self, e0: float, *, tol: float, max_iter: int,
                   slope: float | None = None) -> ScalarSolve:
        """Monotone iteration with same-side secant steps, then Illinois regula falsi on a
        bracket.  Converged when |G(e)| <= tol * e (a relative fixed point), or with
        perfect recovery when e <= PR_RESOLUTION * Q0 while still decreasing (e* = 0 to
        the SE's resolution)."""
        floor = PR_RESOLUTION * self.Q0
        e = float(e0)
        G, den, qh = self.evaluate(e)
        prev: tuple[float, float] | None = None
        evals = 1

        def done(e: float, G: float) -> bool:
            return abs(G) <= tol * e or (e <= floor and G >= 0.0)

        def report(e, G, den, qh, status=Status.CONVERGED, msg=""):
            return ScalarSolve(e, den, qh, evals, abs(G) / max(e, floor), status, msg)

        while not done(e, G):
            if evals >= max_iter:
                return report(e, G, den, qh, Status.MAX_ITER,
                              f"not converged in {max_iter} map evaluations")
            side = math.copysign(1.0, G)  # > 0: above the nearest fixed point, moving down
            cand = None
            secant = None
            if prev is not None and prev[1] != G:
                secant = (G - prev[1]) / (e - prev[0])
            elif slope is not None and slope > 0:
                secant = slope  # e.g. the coarse level's G' at its fixed point
            if secant is not None:
                cand = e - G / secant
                # stay between the current point and the plain iterate's direction, in (0, e_max]
                if side > 0:
                    cand = cand if 0.0 < cand < e else (1e-3 * e if cand <= 0.0 else None)
                    if cand is not None:
                        # below the resolution the quadrature is slow and nothing is learned
                        cand = max(cand, 0.9 * floor)
                else:
                    cand = cand if e < cand <= self.e_max else None
            if cand is None:
                cand = min(max(e - G, 1e-3 * e, min(0.9 * floor, e)), self.e_max)  # mmse(qhat(e))
                if side < 0:
                    # moving up from a small e, where mmse(qhat(e)) ~ r e with r slightly
                    # above 1: expand by factors of 2 (a bracket catches the overshoot)
                    cand = max(cand, min(2.0 * e, self.e_max))
            Gc, denc, qhc = self.evaluate(cand)
            evals += 1
            if math.copysign(1.0, Gc) != side and Gc != 0.0:
                return self._bracketed((e, G, den, qh), (cand, Gc, denc, qhc), tol, evals,
                                       max_iter)
            prev = (e, G)
            e, G, den, qh = cand, Gc, denc, qhc
        if abs(G) > tol * e:  # stopped by the resolution, still contracting: e* = 0
            return ScalarSolve(e, den, qh, evals, abs(G) / e, Status.PERFECT_RECOVERY,
                               perfect_recovery_message(e, G, self.Q0))
        return report(e, G, den, qh)

    def _bracketed(self, a, b, tol, evals, max_iter) -> ScalarSolve:
        """Illinois regula falsi between points a, b = (e, G, den, qhat) with G of opposite
        signs, until |G| <= tol * e."""
        wa = wb = 1.0  # Illinois weights: halve the end point kept twice in a row
        kept = ""
        while True:
            best = a if abs(a[1]) < abs(b[1]) else b
            rel = abs(best[1]) / best[0]
            closed = abs(b[0] - a[0]) <= 4e-16 * max(a[0], b[0])
            if rel <= tol or closed or evals >= max_iter:
                status, msg = Status.CONVERGED, ""
                if rel > tol:
                    status, msg = ((Status.UNRESOLVED, f"bracket closed at |e - mmse|/e = "
                                    f"{rel:.2e} > tol (the map's rounding error)") if closed else
                                   (Status.MAX_ITER, f"not converged in {max_iter} map evaluations"))
                return ScalarSolve(best[0], best[2], best[3], evals, rel, status, msg)
            Ga, Gb = wa * a[1], wb * b[1]
            ec = (a[0] * Gb - b[0] * Ga) / (Gb - Ga)
            if not (min(a[0], b[0]) < ec < max(a[0], b[0])):
                ec = 0.5 * (a[0] + b[0])
            c = (ec, *self.evaluate(ec))
            evals += 1
            if math.copysign(1.0, c[1]) == math.copysign(1.0, b[1]):
                b, wb = c, 1.0
                wa = 0.5 * wa if kept == "a" else 1.0
                kept = "a"
            else:
                a, wa = c, 1.0
                wb = 0.5 * wb if kept == "b" else 1.0
                kept = "b"

    def free_entropy_gap(self, e_a: float, e_b: float, n: int = 32) -> float:
        """Phi(e_b) - Phi(e_a) = (1/2) int_{e_a}^{e_b} G(e) qhat'(e) de (module docstring),
        Gauss-Legendre in log e; both points > 0."""
        t, w = np.polynomial.legendre.leggauss(n)
        la, lb = math.log(e_a), math.log(e_b)
        total = 0.0
        for ti, wi in zip(t, w):
            lx = 0.5 * (la + lb) + 0.5 * (lb - la) * ti
            x = math.exp(lx)
            h = 1e-6 * x
            dqh = (self.q_hat(x + h) - self.q_hat(x - h)) / (2 * h)
            total += wi * self.evaluate(x)[0] * dqh * x
        return 0.25 * (lb - la) * total


def bayes_se_iterates(problem: Problem, n_iter: int, e0: float | None = None, *,
                      mc: BayesMonteCarloOptions | None = None) -> np.ndarray:
    """The undamped Bayes-optimal SE trajectory e_0 = e0 (default Q0 - m1^2, the prior
    mean), e_(t+1) = mmse(qhat(e_t)), shape (n_iter + 1,): what the matrix MSE of
    BO-AMP's iterates follows (:func:`amp_attention.gamp.bayes_gamp_on_problem`)."""
    if int(n_iter) != n_iter or n_iter < 0:
        raise ValueError(f"n_iter must be an integer >= 0, got {n_iter!r}")
    se = BayesStateEvolution(problem, mc)
    es = [se.e_max if e0 is None else float(e0)]
    for _ in range(int(n_iter)):
        es.append(se.evaluate(es[-1])[1].mmse)
    return np.array(es)


def bayes_test_errors(channel, q: float, V: float, *, log2_n: int = 14, replicas: int = 8,
                      seed: int = 0) -> tuple[float, float, float, float]:
    """(test error of the Bayes predictor E[g(h*) | data], test error of the plug-in
    g(h(E[S0 | data])), and their Monte-Carlo standard errors) at the BO point:
    omega ~ N(0, q I_K) is u of the posterior mean, u* = omega + sqrt(V) z.

    Bayes predictor: E Var[g | omega] = E (1/2)||g(u1) - g(u2)||^2 with u1, u2 two
    independent draws given omega.  Closed form sum_k tau_k^2 V when the outputs are
    the entries of h (``outputs_are_h``)."""
    if optional_member(channel, "outputs_are_h"):
        tau2 = np.asarray(channel.tau, dtype=float) ** 2
        err = float(np.sum(tau2)) * V
        return err, err, 0.0, 0.0
    from .channel_integrals import sobol_normals

    K = channel.K
    draws = sobol_normals(3 * K, log2_n, replicas, seed)
    bayes, plugin = np.empty(replicas), np.empty(replicas)
    sq, sv = math.sqrt(max(q, 0.0)), math.sqrt(max(V, 0.0))
    for r in range(replicas):
        w, z1, z2 = draws[r, :, :K], draws[r, :, K:2 * K], draws[r, :, 2 * K:]
        omega = sq * w
        g0 = channel.outputs(channel.h_from_u(omega))
        g1 = channel.outputs(channel.h_from_u(omega + sv * z1))
        g2 = channel.outputs(channel.h_from_u(omega + sv * z2))
        bayes[r] = 0.5 * float(np.mean(np.sum((g1 - g2) ** 2, axis=1)))
        plugin[r] = 0.5 * float(np.mean(np.sum((g1 - g0) ** 2, axis=1)
                                        + np.sum((g2 - g0) ** 2, axis=1)))
    k = math.sqrt(replicas)
    return (float(bayes.mean()), float(plugin.mean()), float(bayes.std(ddof=1) / k),
            float(plugin.std(ddof=1) / k))


#: RQMC points (2**TEST_LOG2_N per replica) of the Bayes predictor's test error
TEST_LOG2_N = 14


@dataclass(frozen=True, eq=False)
class BayesSEResult(SEResult):
    """The Bayes-optimal fixed point: an :class:`SEResult` (``estimator = "bayes"``) with the
    fields of the MMSE estimator alone."""

    estimator: str = "bayes"
    #: the clean test error of g(h(posterior mean)) (test_error is that of the Bayes
    #: predictor E[g(h*) | data])
    plugin_test_error: float | None = None
    #: the MMSE vanished (to the SE's resolution)
    perfect_recovery: bool | None = None


def solve_bayes_optimal(problem: Problem, *, tol: float = 1e-10, max_iter: int = 200,
                        start: str = "both",
                        mc: BayesMonteCarloOptions | None = None) -> BayesSEResult:
    """The Bayes-optimal fixed point of ``problem`` as a :class:`BayesSEResult`
    (docs/theory.md "Bayes-optimal baseline"; the learner is not used).

    Fields: matrix_mse = V = the MMSE, m = q = Q0 - MMSE (Nishimori),
    m_hat = q_hat = V_hat = qhat, test_error = the error of the Bayes predictor
    E[g(h*) | data] (closed form for outputs that are the entries of h, else RQMC
    with 2**TEST_LOG2_N points x ``mc.replicas``), plugin_test_error = that of
    g(h(posterior mean)), trace_per_d = Tr(S0)/d (known exactly), rank_fraction = 1;
    train_error and loss are not defined (NaN).  ``start``: "both" (uninformative
    and informative; the larger free entropy is reported, ``metastable`` flags
    distinct fixed points), "uninformative" or "informative"; "auto" is "both" (the
    Bayes-optimal SE can have several fixed points for any channel).

    Channels without a closed-form posterior output function (output noise on
    softmax, seq2lab, user channels) are integrated by nested RQMC
    (:class:`~amp_attention.solvers.bayes_channel_integrals.BayesMonteCarloOptions`
    ``mc``); the spread of its replicas is propagated through the scalar fixed
    point (delta method) into ``mc_stderr``, and their fixed point is solved to the
    relative residual max(tol, MC_TOL).
    """
    InstanceOf((Problem,), "a Problem").check("problem", problem)
    check_args(SOLVER_OPTIONS, start=start, tol=tol, max_iter=max_iter)
    t0 = time.perf_counter()
    se = BayesStateEvolution(problem, mc)
    if se.mc is not None:
        tol = max(tol, MC_TOL)
    coarse = se.coarse()
    low = MC_INFORMATIVE_START if se.mc is not None else INFORMATIVE_START
    starts = {"uninformative": se.e_max, "informative": low * se.e_max}
    names = start_names(start, ("uninformative", "informative"))
    runs, n_coarse, coarse_ends, slopes = {}, 0, {}, {}
    for name in names:
        e0, slope = starts[name], None
        if coarse is not None:
            rc = coarse.solve_from(e0, tol=max(tol, COARSE_TOL), max_iter=int(max_iter))
            n_coarse += rc.iterations
            if rc.converged:
                e0 = min(max(rc.e, PR_RESOLUTION * se.Q0), se.e_max)
                same = [k for k, ec in coarse_ends.items()
                        if abs(ec - e0) <= 20.0 * max(tol, COARSE_TOL) * e0]
                if same:  # the other start's coarse fixed point: one fine solve serves both
                    runs[name] = runs[same[0]]
                    slopes[name] = slopes.get(same[0])
                    continue
                coarse_ends[name] = e0
                if e0 > PR_RESOLUTION * se.Q0:
                    slope = slopes[name] = coarse.slope(e0)
        runs[name] = se.solve_from(e0, tol=tol, max_iter=int(max_iter), slope=slope)
    best = _equilibrium(se, runs, tol)
    run = runs[best]
    alternative, metastable = choose_and_compare(
        runs, best, converged=lambda r: r.converged, same=lambda a, b: _same(se, a, b, tol),
        describe=lambda name, other: {"status": other.status.value, "message": other.message,
                                      "matrix_mse": other.den.mmse,
                                      "q": se.Q0 - other.den.mmse})
    e = run.den.mmse  # the map's output at the final iterate (= run.e to tol)
    q = se.Q0 - e
    replicas = se.options.replicas
    test, plugin, s_test, s_plugin = bayes_test_errors(se.channel, q, e, log2_n=TEST_LOG2_N,
                                                       replicas=replicas, seed=se.options.seed)
    closed = bool(optional_member(se.channel, "outputs_are_h"))
    stderr, how = None, ""
    if se.mc is not None:
        stderr, how = _propagated_stderr(se, run, test, plugin, s_test, s_plugin,
                                         slopes.get(best))
    elif not closed:
        stderr = {"test_error": s_test, "plugin_test_error": s_plugin}
        how = (f"spread over {replicas} RQMC replicas of 2^{TEST_LOG2_N} points of the test "
               "error (the fixed point is in closed form)")
    nan = float("nan")
    return BayesSEResult(
        m=q, q=q, V=e, m_hat=run.q_hat, q_hat=run.q_hat, V_hat=run.q_hat, train_error=nan,
        test_error=test, matrix_mse=e, loss=nan, rank_fraction=1.0, trace_per_d=se.m1,
        quadrature_error=run.den.quadrature_error, mc_stderr=stderr, mc_error_method=how,
        mc_dof=None if stderr is None else replicas - 1,
        mc_halfwidth95=t_halfwidths(stderr, None if stderr is None else replicas - 1),
        **reported_start_fields(
            run, start=best, t0=t0, alternative=alternative, metastable=metastable,
            policy=("both starts: the Bayes-optimal SE can have several fixed points"
                    if len(names) == 2 else f"{start} start"), iterations_coarse=n_coarse,
            method="monotone iteration with same-side secant steps, Illinois on a bracket"
                   + ("; channel by nested RQMC, two levels" if se.mc is not None else "")),
        plugin_test_error=plugin, perfect_recovery=bool(e <= PR_RESOLUTION * se.Q0))


def _propagated_stderr(se: BayesStateEvolution, run: ScalarSolve, test: float, plugin: float,
                       s_test: float, s_plugin: float,
                       slope: float | None = None) -> tuple[dict[str, float], str]:
    """Delta method through the scalar fixed point e = mmse(qhat(e)): replica r shifts
    qhat by delta_r, hence e by mmse'(qhat) delta_r / (1 - mmse'(qhat) qhat'(e)); the
    test errors move with e (finite differences on the same draws) and carry their own
    RQMC spread (independent draws, added in quadrature)."""
    e, qh = run.e, run.q_hat
    R = se.options.replicas
    reps = se.mc.replica_q_hats(e, se.Q0, se.alpha)
    delta = reps - reps.mean()
    h = 1e-4 * qh
    dm_dq = (se.denoiser.bayes_functionals(qh + h).mmse
             - se.denoiser.bayes_functionals(qh - h).mmse) / (2.0 * h)
    he = -1e-3 * e if e + 1e-3 * e > se.e_max else 1e-3 * e
    # qhat'(e) to a few digits is all an error estimate needs: the coarse level's, from
    # its G' = 1 - mmse'(qhat) qhat'(e) at its fixed point when the solve measured it
    if slope is not None and slope > 0:
        dq_de = (1.0 - slope) / dm_dq
    else:
        lvl = se.coarse() or se
        dq_de = (lvl.q_hat(e + he) - lvl.q_hat(e)) / he
    de = dm_dq * delta / (1.0 - dm_dq * dq_de)
    dqh = delta + dq_de * de

    def err(x: np.ndarray) -> float:
        return float(np.std(x, ddof=1) / math.sqrt(R))

    s_e, s_qh = err(de), err(dqh)
    t2, p2, _, _ = bayes_test_errors(se.channel, se.Q0 - e - he, e + he, log2_n=TEST_LOG2_N,
                                     replicas=R, seed=se.options.seed)
    s_t = math.hypot(s_test, (t2 - test) / he * s_e)
    s_p = math.hypot(s_plugin, (p2 - plugin) / he * s_e)
    out = {"m": s_e, "q": s_e, "V": s_e, "matrix_mse": s_e, "m_hat": s_qh, "q_hat": s_qh,
           "V_hat": s_qh, "test_error": s_t, "plugin_test_error": s_p}
    return out, (f"delta method over {R} replicas of the nested RQMC channel "
                 f"(2^{se.mc.log2_n} x 2^{se.mc.inner_log2_n} points, smallest effective "
                 f"inner sample {se.mc.min_ess:.1f}) through the scalar fixed point; test "
                 f"errors add their own spread over 2^{TEST_LOG2_N} points")


def _equilibrium(se: BayesStateEvolution, runs: dict[str, ScalarSolve], tol: float) -> str:
    """The start whose fixed point has the larger free entropy (module docstring)."""
    ok = [k for k, r in runs.items() if r.converged]
    if len(ok) < 2:
        return ok[0] if ok else min(runs, key=lambda k: runs[k].residual)
    a, b = (runs[k] for k in ok)
    if _same(se, a, b, tol):
        return ok[0]
    if min(a.e, b.e) <= PR_RESOLUTION * se.Q0:  # perfect recovery is stable there: Phi = +inf
        return ok[0] if a.e < b.e else ok[1]
    return ok[1] if se.free_entropy_gap(a.e, b.e) > 0 else ok[0]


def _same(se: BayesStateEvolution, a: ScalarSolve, b: ScalarSolve, tol: float) -> bool:
    """Two converged starts found the same fixed point (or both perfect recovery)."""
    floor = PR_RESOLUTION * se.Q0
    if a.e <= floor and b.e <= floor:
        return True
    return abs(a.e - b.e) <= 1e3 * tol * max(a.e, b.e)


# ------------------------------------------------------------------ thresholds
#: signal-to-noise ratios of the Richardson extrapolation of qhat * mmse(qhat)
HIGH_SNR = (1e5, 1e6)


def bayes_perfect_recovery_threshold(problem: Problem):
    """alpha_PR of the Bayes-optimal estimator for noiseless labels (the problem's noise
    is set to 0; its alpha and learner are ignored), from the SE: perfect recovery
    (e = 0) is a stable fixed point iff mmse(qhat(e))/e -> c / (2 alpha r) < 1 as
    e -> 0, where c = lim qhat mmse(qhat) (the prior side: Richardson from
    qhat = 1e5, 1e6) and qhat(e) e -> 2 alpha r (the channel: r equations per
    sample).  So alpha_PR = c / (2 r).  Parameter counting predicts
    c = 2 rho - rho^2 for a target of rank fraction rho (the tangent space of the
    rank-rho d PSD matrices), i.e. alpha_PR = (rho - rho^2/2) / r
    (docs/theory.md "Bayes-optimal baseline")."""
    import dataclasses

    from .thresholds import ThresholdResult

    task = dataclasses.replace(problem.task, noise=0.0)
    se = BayesStateEvolution(dataclasses.replace(problem, task=task, alpha=1.0))
    e = 1e-9 * se.Q0
    r_eq = e * se.q_hat(e) / 2.0  # alpha = 1
    c1, c2 = (qh * se.denoiser.bayes_functionals(qh).mmse for qh in HIGH_SNR)
    ratio = HIGH_SNR[1] / HIGH_SNR[0]
    c = (ratio * c2 - c1) / (ratio - 1.0)
    rho = se.target.positive_mass()
    count = "" if rho is None else (f"; parameter counting (rho - rho^2/2)/r = "
                                    f"{(rho - rho * rho / 2) / r_eq:.10g} at rank fraction "
                                    f"rho = {rho:.6g}")
    method = (f"Bayes-optimal SE, noiseless: alpha_PR = c/(2r), c = lim qhat mmse(qhat) = {c:.10g} "
              f"(Richardson from qhat = {HIGH_SNR[0]:g}, {HIGH_SNR[1]:g}; change {abs(c - c2):.1e}), "
              f"r = {r_eq:.6g} equations per sample{count}")
    return ThresholdResult("bayes_perfect_recovery", c / (2.0 * r_eq), 0.0, math.nan,
                           int(round(r_eq)), 0.0, method, residual=abs(c - c2) / (2.0 * r_eq),
                           success=True, status=Status.CONVERGED, message="")


def bayes_weak_recovery_slope(problem: Problem) -> float:
    """d MMSE / d alpha at alpha -> 0+ (the problem's alpha is ignored): the prior side's
    linear response d mmse/d qhat = -(Q0 - m1^2)^2 times qhat(e_max)/alpha.  It is
    non-zero, so the traceless part of S0 is learned from alpha = 0+ on (no
    weak-recovery threshold for these targets, whose prior mean Tr(S0)/d I is
    non-zero)."""
    import dataclasses

    se = BayesStateEvolution(dataclasses.replace(problem, alpha=1.0))
    return -se.e_max ** 2 * se.q_hat(se.e_max)
