"""State evolution of the tied-attention ERM (docs/theory.md "State evolution"): overlaps <-> hats.

One SE point: spec -> target spectrum -> [hats from the channel at (m, q, V)]
-> [overlaps from the denoiser functionals over rho_B] -> fixed point.

    >>> from amp_attention.spec import Problem, Task, WishartTarget, Learner
    >>> from amp_attention.solvers.state_evolution import solve_state_evolution
    >>> r = solve_state_evolution(Problem(Task("linear", L=1, noise=0.5),
    ...                                   WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5))
    >>> r.converged
    True
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from amp_attention.channels import channel_for
from amp_attention.checks import Flag, InstanceOf, Integer, OneOf, check_args
from amp_attention.channels.base import OVERLAP_RTOL, ChannelSE, optional_member
from amp_attention.data import target_eigenvalues
from amp_attention.denoisers import denoiser_for
from amp_attention.finite_size import (RESIDUAL_KURTOSIS_MAX_D, RESIDUAL_KURTOSIS_WARN,
                                       FiniteSizeDenoiser,
                                       FiniteSizeOptions, residual_kurtosis)
from amp_attention.progress import progress_bar
from amp_attention.result import Result, Status
from amp_attention.spec import Problem
from amp_attention.threads import under_thread_policy
from amp_attention.targets import DiscreteMeasure, target_measure

from .fixed_point import (FixedPointReport, relative_residual, solve_fixed_point,
                          solve_fixed_point_quasi_newton)
from .noisy_fixed_point import REL_STEP as NOISY_REL_STEP
from .noisy_fixed_point import BATCHES as AVERAGED_BATCHES
from .noisy_fixed_point import (AveragedReport, central_jacobian, solve_averaged_fresh,
                                solve_noisy_fixed_point)
from .predicted_spectrum import PredictedSpectrum
from .se_driver import SOLVER_OPTIONS, choose_and_compare, reported_start_fields, start_names

RESULT_FIELDS = (
    "m", "q", "V", "m_hat", "q_hat", "V_hat", "train_error", "test_error", "matrix_mse",
    "loss", "rank_fraction", "trace_per_d", "converged", "iterations", "residual",
)


@dataclass(frozen=True)
class SEResult(Result):
    """A state-evolution fixed point and everything derived from it (docs/theory.md "State
    evolution", "Spectra of the learned weights").

    ``success``/``status``/``message`` (:class:`~amp_attention.result.Result`) are
    those of the reported start's fixed-point solve."""

    #: overlap m = Tr(S0 Shat)/d
    m: float
    #: self-overlap q = Tr(Shat^2)/d
    q: float
    #: V: the normalised divergence of the denoiser
    V: float
    #: conjugate m_hat of m
    m_hat: float
    #: conjugate q_hat of q
    q_hat: float
    #: conjugate V_hat of V
    V_hat: float
    #: training error (1/n) sum_mu ||y_mu - yhat_mu||^2
    train_error: float
    #: clean test error E||g(h(S0)) - g(h(Shat))||^2 on a fresh sample
    test_error: float
    #: matrix error ||Shat - S0||_F^2/d = Q0 - 2m + q
    matrix_mse: float
    #: training loss R/n at the minimiser
    loss: float
    #: fraction of nonzero eigenvalues of Shat
    rank_fraction: float
    #: Tr(Shat)/d
    trace_per_d: float
    #: fixed-point iterations of the reported start
    iterations: int
    #: final relative residual of the fixed point
    residual: float
    #: the initialisation of the reported point: 'informative' or 'uninformative'
    start: str
    #: True when the other start converged to a different fixed point
    metastable: bool = False
    #: the other start's fixed point (to_dict of its fields), None with one start
    alternative: dict[str, Any] | None = None
    #: which starts were run and why (start="auto": one start where the fixed point is unique)
    start_policy: str = ""
    #: estimated error of the denoiser-side quadrature
    quadrature_error: float = 0.0
    #: Monte-Carlo channels: the RQMC standard error of every field (None in closed form)
    mc_stderr: dict[str, float] | None = None
    #: how mc_stderr was obtained (replicas, propagated through the fixed point)
    mc_error_method: str = ""
    #: degrees of freedom of mc_stderr (replicas - 1: each error is itself estimated
    #: from the replicas' spread, so value +- t mc_stderr follows Student's law)
    mc_dof: int | None = None
    #: half-widths of the 95 % intervals: t_{0.975, mc_dof} x mc_stderr per field
    #: (2.36 x at the default 8 replicas, where "+- 2 errors" covers ~91 %)
    mc_halfwidth95: dict[str, float] | None = None
    #: Monte-Carlo channels: iterations on the coarse prefix of the RQMC points
    iterations_coarse: int = 0
    #: Monte-Carlo channels: proximal solves flagged in the last evaluation
    mc_failed_prox: int = 0
    #: Monte-Carlo channels: warm-started prox solves that fell back to cold
    mc_warm_fallbacks: int = 0
    #: wall time of the solve
    seconds: float = field(default=0.0, compare=False)  # wall time is not a result
    #: the fixed-point method that produced the point: "anderson", "damped", or
    #: "damped after anderson failed: <its status>" (the safeguarded fallback)
    method: str = ""
    #: finite-d prediction mode: its options (d, draws, seed), None for d -> infinity
    finite_d: dict[str, int] | None = None
    #: finite-d mode: the GOE-sampling error of every field, propagated through the
    #: fixed point, and how it was obtained
    sampling_stderr: dict[str, float] | None = None
    sampling_error_method: str = ""
    #: eigenvalue-list targets: the predicted excess kurtosis of h(Shat - S0) at the list's
    #: d (0 for the Gaussian residual the SE assumes), its sampling error, and a warning
    #: (empty when none) when it is large enough for the SE to be measurably off at that d
    residual_kurtosis: float | None = None
    residual_kurtosis_stderr: float | None = None
    finite_size_warning: str = ""
    #: "erm" (this module) or "bayes" (:class:`~amp_attention.solvers.bayes_optimal.BayesSEResult`,
    #: which adds the Bayes-optimal estimator's own fields)
    estimator: str = "erm"
    #: test error against a fresh sample's noisy label, E||y - g(h(Shat))||^2 (the
    #: convention of arXiv 2509.24914's SE tables; test_error + Delta M for output noise)
    test_error_noisy: float = math.nan
    #: Monte-Carlo channels with V_hat by parts: the share of V_hat carried by the jumps
    #: of the prox minimiser, (by parts - Hessian trace) / by parts, and its standard
    #: error over the replicas (docs/theory.md section 16.3); None otherwise
    vhat_jump_share: float | None = None
    vhat_jump_stderr: float | None = None
    #: non-empty where the prox minimiser jumps (vhat_jump_share > 3 standard errors):
    #: the replica-symmetric fixed point is formally unstable there (section 16.3)
    replica_symmetry_warning: str = ""
    #: which minimiser of the prox the SE took where it has several (docs/theory.md 16.8):
    #: "global" (the ERM's global minimum, replica symmetric) or "teacher" (descent from the
    #: teacher's logits, the paper's convention); one minimiser: the same numbers
    prox_branch: str = "global"
    #: the share of the reported point's Monte-Carlo samples whose teacher-branch minimiser
    #: is not the global one (0: the two branches are one map there); None for closed-form
    #: channels and convex problems
    prox_branch_split: float | None = None
    #: Monte-Carlo channels where the map is noisy and discontinuous (the prox minimiser
    #: jumps) and the fixed point was accepted by the Monte-Carlo rule (docs/theory.md 16.9):
    #: {"rule": "fresh-draw average", "iterates", "drift" (the halves' difference in
    #: combined standard errors, accepted <= 3), "relative_error" (of the mean, largest of
    #: m, q, V, accepted <= 0.1)}; None where the ordinary residual rule accepted it
    mc_convergence: dict[str, Any] | None = None
    spectrum: PredictedSpectrum | None = field(default=None, repr=False)

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("spectrum",)




#: MonteCarloOptions.step_at: where the two-level solve takes the control variate's steps
STEP_AT = ("start", "each")


@dataclass(frozen=True)
class MonteCarloOptions:
    """RQMC settings of non-linear channel expectations (amp_attention.solvers.channel_integrals).

    2**log2_n samples per replica (2**(log2_n - 1) scrambled-Sobol points, each an
    antithetic pair; :mod:`~amp_attention.solvers.channel_integrals`), ``replicas`` independent
    scramblings (their spread, propagated through the fixed point, is the
    reported ``mc_stderr``), ``seed``.  Two-level solve: when coarse_log2_n <
    log2_n the fixed point is first found on the first 2**coarse_log2_n points of
    every replica, then refined on all points by quasi-Newton (Broyden) steps that
    start from the coarse Jacobian (a few expensive evaluations instead of a full iteration);
    coarse_log2_n >= log2_n switches this off.  ``warm_start``: warm-started,
    guarded prox evaluations after the first on each level
    (:class:`~amp_attention.solvers.channel_integrals.MonteCarloChannel`).
    """

    #: 2^11 x 8 with the coarse level at 2^8, the control variate on 2^14 and the test errors
    #: on 2^14: relative Monte-Carlo error of the test error 1.4e-4 at the CLI's default
    #: softmax point (docs/performance.md, issue 32)
    log2_n: int = 11
    replicas: int = 8
    seed: int = 0
    coarse_log2_n: int = 8
    warm_start: bool = True
    #: "by_parts" (integration by parts, counts the jumps of the prox minimiser) or
    #: "hessian" (the smooth part only, the estimate before issue 30; for comparisons)
    vhat_form: str = "by_parts"
    #: log2 of the test-only samples per replica over which the reported point's test
    #: errors are averaged (they need no prox); None: min(log2_n + 3, 16), lowered until the
    #: draws fit 64 MiB (channel_integrals.auto_test_log2_n); 0: the SE's own samples
    test_log2_n: int | None = None
    #: log2 of the samples per replica of the Newton-step control variate of m_hat, q_hat
    #: and V_hat (docs/theory.md 16.6; channels with ``newton_step``); None: min(log2_n + 3,
    #: 16), lowered until the draws fit 128 MiB (channel_integrals.auto_step_log2_n); 0: none
    step_log2_n: int | None = None
    #: where the control variate's step function is taken during the two-level solve's fine
    #: iterations: "start" (at the coarse fixed point the fine level starts from, so its
    #: 2^step_log2_n-sample means are computed once per solve: 36-42 % faster at L = 3, 5, a
    #: 32 x 32 diagram ~40 % faster; the map is then a function of (m, q, V) and of that
    #: coarse fixed point, which is a function of the problem; two solves of one problem that
    #: are compared share it, shared_cv_reference) or "each" (at every evaluation's own
    #: point: one pass over those samples per evaluation; the map is a function of (m, q, V)
    #: alone); docs/theory.md 16.6, docs/performance.md
    step_at: str = "start"
    #: which minimiser of the channel's prox the map takes where it has competing minima
    #: (amp_attention.channels.branches, docs/theory.md 16.8): "global" (the global
    #: minimiser: the replica-symmetric ERM's global minimum) or "teacher" (the local
    #: minimiser reached by descent from the teacher's logits u*: the paper's convention);
    #: where the prox has one minimiser both give the same numbers, bit for bit
    prox_branch: str = "global"
    #: where the prox minimiser jumps and the common-random-numbers iteration stalls: iterates
    #: on fresh draws of 2^log2_n x replicas samples are averaged (docs/theory.md 16.9; Newton
    #: in batches of this many, or Picard in batches of 64); their error falls like 1/sqrt
    #: of their number (64: fewer understate the error of their mean, whose iterates are
    #: correlated over 10-20 steps in the band; noisy_fixed_point.var1_stderr)
    averaged_iterations: int = 64
    #: ... and more of them (averaged_iterations at a time, up to averaged_max) until the mean's
    #: relative Monte-Carlo error in m and q is at most this (None: averaged_iterations only)
    averaged_rtol: float | None = 0.02
    averaged_max: int = 256
    #: when the fixed point is taken as that average: "stall" (where the common-draws
    #: iteration stalls, the band) or "always" (also refine every converged point of a
    #: non-convex channel above its convexity certificate: near the band the common-draws
    #: fixed point at 2^11 scatters over seeds up to 2x its propagated error -- lreg 0.002,
    #: alpha 0.377: 0.185-0.202 for a reported 0.003 -- while the average's error is the
    #: seed-to-seed one by construction; docs/theory.md 16.9)
    fresh_average: str = "stall"

    def __post_init__(self) -> None:
        from amp_attention.channels.branches import PROX_BRANCHES

        from .channel_integrals import VHAT_FORMS

        if self.test_log2_n is not None and self.test_log2_n != 0:
            check_args({"test_log2_n": Integer(4, 24, why="0 for none, None for automatic")},
                       test_log2_n=self.test_log2_n)
        if self.step_log2_n is not None and self.step_log2_n != 0:
            check_args({"step_log2_n": Integer(2, 24, why="0 for none")},
                       step_log2_n=self.step_log2_n)

        check_args({"log2_n": Integer(4, 24, why="Monte-Carlo points 2^log2_n per replica"),
                    "coarse_log2_n": Integer(4, 24), "replicas": Integer(2), "seed": Integer(0),
                    "warm_start": Flag(), "vhat_form": OneOf(tuple(VHAT_FORMS)),
                    "step_at": OneOf(STEP_AT), "prox_branch": OneOf(PROX_BRANCHES),
                    "averaged_iterations": Integer(4, 4096),
                    "averaged_max": Integer(4, 65536),
                    "fresh_average": OneOf(("stall", "always"))},
                   log2_n=self.log2_n, coarse_log2_n=self.coarse_log2_n, replicas=self.replicas,
                   seed=self.seed, warm_start=self.warm_start, vhat_form=self.vhat_form,
                   step_at=self.step_at, prox_branch=self.prox_branch,
                   averaged_iterations=self.averaged_iterations, averaged_max=self.averaged_max,
                   fresh_average=self.fresh_average)
        if self.averaged_rtol is not None and not (0 < self.averaged_rtol < 1):
            raise ValueError(f"averaged_rtol must lie in (0, 1) or be None, got "
                             f"{self.averaged_rtol!r}")


class StateEvolution:
    """The SE map of one problem: (m, q, V) -> hats -> (m, q, V).

    Channels with closed-form expectations (linear) provide ``se`` themselves;
    the others are integrated by RQMC with common random numbers.
    """

    def __init__(self, problem: Problem, mc: MonteCarloOptions | None = None,
                 finite_d: FiniteSizeOptions | None = None, *, integrals=None):
        self.problem = problem
        self.finite_d = finite_d
        #: the prox branch asked for (MonteCarloOptions.prox_branch); a closed-form channel
        #: has a convex loss, one minimiser, and both branches are the same map there
        self.prox_branch = "global" if mc is None else mc.prox_branch
        #: the task's channel object (a user channel is given to the Task as an instance)
        self.model_channel = channel = channel_for(problem.task)
        if integrals is not None:
            # the channel side given as its SE integrals: the coarse RQMC prefix of a finer
            # map, or a channel-side map that is no data channel (a linearisation)
            channel, mc = integrals, None
        elif optional_member(channel, "se") is None:
            from .channel_integrals import MonteCarloChannel

            mc = mc or MonteCarloOptions()
            channel = MonteCarloChannel(channel, log2_n=mc.log2_n, replicas=mc.replicas,
                                        seed=mc.seed, warm_start=mc.warm_start,
                                        vhat_form=mc.vhat_form, test_log2_n=mc.test_log2_n,
                                        step_log2_n=mc.step_log2_n,
                                        prox_branch=mc.prox_branch)
        else:
            mc = None
        self.channel = channel
        self.mc = mc
        self.denoiser = denoiser_for(problem.learner)
        self.target = target_measure(problem.target)
        if finite_d is not None:
            # the prior side at the experiment's d: the target's d eigenvalues, GOE draws
            s = np.sort(target_eigenvalues(problem.target, finite_d.d))
            self.target = DiscreteMeasure(s)
            self.denoiser = FiniteSizeDenoiser(self.denoiser, s, finite_d)
        self.Q0 = self.target.moment(2)
        self.alpha = problem.alpha
        # the last evaluation of either half of the map, for the caller's next question
        # at the same point (the fixed point's fields are assembled where the solve stopped)
        self._last_hats = self._last_overlaps = None
        self._coarse: StateEvolution | None = None

    def coarse(self) -> "StateEvolution | None":
        """The same SE on the coarse RQMC prefix (None: closed-form channel or no coarse
        level); one object for every start, so that a start's first proximal solves are
        warm-started (guarded) from the previous start's."""
        if self.mc is None or self.mc.coarse_log2_n >= self.channel.log2_n:
            return None
        if self._coarse is None:
            self._coarse = StateEvolution(self.problem, finite_d=self.finite_d,
                                          integrals=self.channel.prefix(self.mc.coarse_log2_n))
        return self._coarse

    def hats(self, x: np.ndarray):
        m, q, V = (float(v) for v in x)
        if self._last_hats is not None and self._last_hats[0] == (m, q, V):
            return self._last_hats[1]
        ch = self.channel.se(m, q, V, self.Q0, self.alpha)
        if self.mc is None:  # an RQMC channel keeps per-call state (its replicas): no reuse
            self._last_hats = ((m, q, V), ch)
        return ch

    def set_control_variate_reference(self, x: np.ndarray | None) -> None:
        """The RQMC channel's control variate taken at x for every evaluation (None: at
        each evaluation's own point; ``MonteCarloChannel.set_control_variate_reference``): a
        fine solve sets its start, so the big sample's means are computed once per solve.
        No-op for channels without one."""
        setter = getattr(self.channel, "set_control_variate_reference", None)
        if setter is not None:
            setter(x)

    def set_plain_estimators(self, plain: bool) -> None:
        """The RQMC channel's hats without its control variate from now on (``plain``) or
        with it (``MonteCarloChannel.set_plain_estimators``); no-op for channels without one."""
        setter = getattr(self.channel, "set_plain_estimators", None)
        if setter is not None:
            setter(plain)

    @property
    def plain_estimators(self) -> bool:
        """Whether :meth:`set_plain_estimators` switched the control variate off."""
        return bool(getattr(self.channel, "plain_estimators", False))

    @property
    def control_variate_reference(self) -> tuple[float, float, float] | None:
        """The reference set by :meth:`set_control_variate_reference` (None: none)."""
        return getattr(self.channel, "control_variate_reference", None)

    def reported_hats(self, x: np.ndarray) -> tuple[ChannelSE, np.ndarray | None]:
        """The channel side at a point to report: :meth:`hats`, with the test errors averaged
        over the RQMC channel's test-only samples where it has them, and the per-replica rows
        (``SE_FIELDS``, test columns replaced likewise; None for a channel without replicas)."""
        ch = self.hats(x)
        reps = getattr(self.channel, "last_replicas", None)
        if reps is None:
            return ch, None
        reps = np.array(reps, copy=True)
        m, q, _ = (float(v) for v in x)
        test_fields = getattr(self.channel, "test_fields", None)
        tf = test_fields(m, q, self.Q0) if test_fields is not None else None
        if tf is None:
            return ch, reps
        from .channel_integrals import SE_FIELDS

        reps[:, SE_FIELDS.index("test_error")] = tf[:, 0]
        reps[:, SE_FIELDS.index("test_error_noisy")] = tf[:, 1]
        return replace(ch, test_error=float(tf[:, 0].mean()),
                       test_error_noisy=float(tf[:, 1].mean())), reps

    def overlaps(self, ch):
        if self._last_overlaps is not None and self._last_overlaps[0] == ch:
            return self._last_overlaps[1]
        den = self.denoiser.functionals(self.target, ch.m_hat, ch.q_hat, ch.V_hat)
        if self.finite_d is None:
            self._last_overlaps = (ch, den)
        return den

    def __call__(self, x: np.ndarray) -> np.ndarray:
        d = self.overlaps(self.hats(x))
        return np.array([d.m, d.q, d.V])

    def valid(self, x: np.ndarray) -> bool:
        m, q, V = x
        return bool(q >= 0 and V >= 0 and m * m <= q * self.Q0 * (1 + OVERLAP_RTOL) + 1e-300)

    def unique_fixed_point(self) -> str:
        """Why this SE has a single fixed point ('' when it may have several): the ERM is
        convex when the channel's loss is convex in its argument (``convex``) and the
        learner has no binding rank cap (kappa >= 1, or the element-wise learner); the
        minimiser's overlaps are then unique, and so is the SE fixed point."""
        return unique_fixed_point(self.problem)

    def starts(self) -> dict[str, np.ndarray]:
        Q0 = self.Q0
        return {
            "informative": np.array([0.999 * Q0, Q0, 0.1]),
            "uninformative": np.array([0.0, 1.0, 1.0]),
        }

    def penalty_per_sample(self, penalty_per_d2: float) -> float:
        """P(Shat)/n from the denoiser's P(Shat)/d^2, n = alpha d^2 (nuclear: lam d Tr(S)/n;
        Frobenius: lam d ||S||_F^2 / (2 n))."""
        return penalty_per_d2 / self.alpha

    def spectrum(self, ch, den) -> PredictedSpectrum:
        """The predicted spectra at hats ``ch`` with denoiser functionals ``den``
        (docs/theory.md "Spectra of the learned weights")."""
        return PredictedSpectrum.from_hats(self.target, self.denoiser, self.problem.learner.kappa,
                                           ch.m_hat, ch.q_hat, ch.V_hat, den.rank_fraction,
                                           cutoff=den.cutoff)


def se_iterates(
    problem: Problem,
    x0,
    n_iter: int,
    *,
    mc: MonteCarloOptions | None = None,
) -> np.ndarray:
    """The undamped SE trajectory x_0 = x0 = (m, q, V), x_(t+1) = F(x_t), shape (n_iter + 1, 3).

    This is what GAMP's overlaps follow from an iterate with overlaps x0 (Shat^0
    = 0 and V^0 = V0 give x0 = (0, 0, V0)); a step whose hats cannot be formed
    (e.g. q < 0) ends the trajectory early with ValueError.
    """
    if int(n_iter) != n_iter or n_iter < 0:
        raise ValueError(f"n_iter must be an integer >= 0, got {n_iter!r}")
    se = StateEvolution(problem, mc)
    xs = [np.asarray(x0, dtype=float)]
    if xs[0].shape != (3,):
        raise ValueError(f"x0 must be (m, q, V), got shape {xs[0].shape}")
    for _ in range(int(n_iter)):
        xs.append(np.asarray(se(xs[-1]), dtype=float))
    return np.array(xs)


#: RQMC channels: the fine-level fixed point is solved to a relative residual of
#: MC_TOL_FRACTION times the relative Monte-Carlo error of (m, q, V) (estimated on the coarse
#: level and scaled to the fine one), clipped to [MC_TOL, MC_TOL_MAX] and never below tol's
#: floor MC_TOL: the map is deterministic under common random numbers, but digits of its
#: fixed point beyond a twentieth of the error bar change the error bar by < 0.2 %
MC_TOL = 1e-7
MC_TOL_FRACTION = 0.05
MC_TOL_MAX = 1e-5
#: RQMC channels: the coarse level's fixed point only starts the fine one (whose distance
#: from it is the coarse level's Monte-Carlo error, ~1e-3): 1e-5 is plenty
COARSE_TOL = 1e-5


def _coarse_solve(se: StateEvolution, x0: np.ndarray, *, tol: float, max_iter: int, **kw):
    """(coarse SE, its fixed-point report from x0), or None without a coarse level."""
    coarse = se.coarse()
    if coarse is None:
        return None
    kw.setdefault("stall_after", _stall_after(se))
    return coarse, solve_fixed_point(coarse, x0, valid=coarse.valid, tol=max(tol, COARSE_TOL),
                                     max_iter=max_iter, **kw)


#: non-convex RQMC channels: a plain iteration whose lowest residual has not halved in this
#: many iterations stops there (solve_fixed_point's stall_after) and the Monte-Carlo rule
#: (noisy_fixed_point) takes over: in the band where the prox minimiser jumps Anderson and
#: Picard bounce at a residual of 1e-3 - 1e-1 for their whole budget
NOISY_STALL_AFTER = 40
#: the coarse level's smoothed Newton only starts the fine one: accepted within one of its
#: own standard errors
COARSE_NOISY_ACCEPT = 1.0
#: a start of the fresh-draw average whose relative residual on the common draws exceeds
#: this is first brought closer by smoothed Newton there (the average's Newton steps on
#: single noisy draws can walk from a far start into the domain's boundary)
FAR_START = 0.05


#: quasi-Newton iterations a continued coarse solve (:func:`solve_coarse_level` with a
#: neighbour's Jacobian) may take before it falls back to Anderson mixing: on a 4 x 4 softmax
#: diagram, from continuation starts 10-60 % off (relative residual), they took 4-8
COARSE_QN_ITER = 8


def solve_coarse_level(se: StateEvolution, x0: np.ndarray, *, tol: float = 1e-10,
                       max_iter: int = 500,
                       jacobian: np.ndarray | None = None) -> FixedPointReport | None:
    """The fixed point of ``se``'s coarse level (its first 2^coarse_log2_n RQMC points per
    replica) from x0, to max(tol, COARSE_TOL): Anderson mixing, the damped iteration where
    Anderson fails (as :func:`solve_state_evolution` does); None without a coarse level.
    A sweep solves its points here first (cheap) and refines them with
    ``solve_state_evolution(..., x0=..., coarse_x=report.x)``.

    ``jacobian``: dT/dx of a neighbouring point's coarse map (rows 0..2 of
    :func:`coarse_level_jacobian` there, e.g. the previous point of a sweep): first up to
    COARSE_QN_ITER quasi-Newton steps with it (:func:`solve_fixed_point_quasi_newton`;
    on a 4 x 4 softmax diagram 4-8 evaluations a point against Anderson's 6-11), then, if
    they fail, Anderson from x0 as without it (the iterations reported are both solves')."""
    coarse = se.coarse()
    if coarse is None:
        return None
    spent = 0
    if jacobian is not None:
        J = np.asarray(jacobian, dtype=float)[:3]
        qn = solve_fixed_point_quasi_newton(coarse, np.asarray(x0, dtype=float), J,
                                            tol=max(tol, COARSE_TOL),
                                            max_iter=min(COARSE_QN_ITER, max_iter),
                                            valid=coarse.valid)
        if qn.converged:
            return qn
        spent = qn.iterations
    pre = _coarse_solve(se, x0, tol=tol, max_iter=max_iter, method="anderson")
    rep = pre[1]
    if not rep.converged:
        rep2 = _coarse_solve(se, x0, tol=tol, max_iter=max_iter, method="damped")[1]
        if rep2.converged or rep2.residual < rep.residual:
            rep = rep2
    return replace(rep, iterations=rep.iterations + spent) if spent else rep


def coarse_level_jacobian(se: StateEvolution, x: np.ndarray) -> np.ndarray | None:
    """d(MC_FIELDS)/d(m, q, V) of ``se``'s coarse level at x by forward differences (rows
    0..2: the coarse map's Jacobian), as ``solve_state_evolution(coarse_x=x)`` computes it;
    None without a coarse level or where it is unavailable.  A sweep computes it once a point
    and gives it to the point's refinement (``coarse_jacobian=``) and, as the quasi-Newton
    matrix, to the next point's coarse solve (:func:`solve_coarse_level`)."""
    coarse = se.coarse()
    if coarse is None:
        return None
    grad = _observable_jacobian(coarse, np.asarray(x, dtype=float))
    return grad if isinstance(grad, np.ndarray) else None


def _known_coarse_point(se: StateEvolution, x: np.ndarray, tol: float):
    """(coarse SE, report) of a coarse fixed point solved by the caller: one coarse evaluation
    at x (which the coarse Jacobian there needs anyway) gives its residual; it counts as
    converged within 10 max(tol, COARSE_TOL)."""
    coarse = se.coarse()
    x = np.asarray(x, dtype=float)
    try:
        tx = np.asarray(coarse(x), dtype=float)
        res = relative_residual(x, tx) if np.all(np.isfinite(tx)) else math.inf
    except (ValueError, FloatingPointError, ZeroDivisionError):
        res = math.inf
    ok = res <= 10.0 * max(tol, COARSE_TOL)
    return coarse, FixedPointReport(
        x=x, iterations=0, residual=res, history=(res,), success=ok,
        status=Status.CONVERGED if ok else Status.FAILED,
        message="" if ok else f"coarse_x is no coarse fixed point (relative residual {res:.1e})")


def _solve_once(se: StateEvolution, x0: np.ndarray, *, tol: float, max_iter: int,
                coarse_result=None, fine_x0: np.ndarray | None = None,
                coarse_grad: np.ndarray | None = None, cv_reference=None, **kw):
    """Fixed point from x0; two-level for RQMC channels (see MonteCarloOptions);
    ``coarse_result``: the coarse level's (SE, report) from x0 when already solved;
    ``fine_x0``: the fine level's start (default: the coarse fixed point); ``coarse_grad``:
    the observable Jacobian at the coarse fixed point when the caller has it
    (:func:`coarse_level_jacobian`); ``cv_reference``: with ``mc.step_at = "start"``, the
    (m, q, V) at which the fine level takes the control variate's step function (default:
    the coarse fixed point; a caller that compares two solves of one problem gives both
    the same, so that both solve one map).

    Returns (report, observable Jacobian at the coarse fixed point or None,
    number of coarse iterations).
    """
    se.set_control_variate_reference(None)
    se.set_plain_estimators(False)
    pre = coarse_result or _coarse_solve(se, x0, tol=tol, max_iter=max_iter, **kw)
    if pre is None:
        return solve_fixed_point(se, x0, valid=se.valid, tol=tol, max_iter=max_iter,
                                 report_evaluated=True, **kw), None, 0
    coarse, rc = pre
    tol = max(tol, MC_TOL)
    x_start = x0
    if rc.converged:
        x_start = rc.x if fine_x0 is None else fine_x0
        grad = coarse_grad if coarse_grad is not None else _observable_jacobian(coarse, rc.x)
        if isinstance(grad, np.ndarray):
            tol = _fine_tolerance(se, coarse, rc.x, grad, tol)
            # the iterates stay within the coarse level's error of the coarse fixed point:
            # one control variate (its big sample) for the whole solve, taken there, not at
            # the fine start (a sweep's start is shifted by its neighbours: the map would
            # depend on the path; the coarse fixed point is a function of the problem)
            if se.mc is not None and se.mc.step_at == "start":
                se.set_control_variate_reference(rc.x if cv_reference is None
                                                 else cv_reference)
            rf = solve_fixed_point_quasi_newton(se, x_start, grad[:3], tol=tol, max_iter=12,
                                                valid=se.valid, monitor=kw.get("monitor"))
            if rf.converged:
                if _refine_always(se, rf.x) or _imprecise(se, rf.x, grad):
                    ra = _averaged_solve(se, rf.x, kw.get("monitor"))
                    if ra is not None and ra.converged:
                        return _averaged_result(se, ra, rc.iterations)
                return rf, grad, rc.iterations
            se.set_control_variate_reference(None)
            if se.valid(rf.x) and np.all(np.isfinite(rf.x)):
                x_start = rf.x
    # The coarse level did not help.  Where the map is noisy and discontinuous (the prox
    # minimiser jumps) its fixed point is only defined to within the Monte-Carlo error:
    # smoothed Newton on the coarse level for a start, then Newton iterates on fresh draws,
    # averaged (noisy_fixed_point, docs/theory.md 16.9)
    se.set_control_variate_reference(None)
    if _noisy_rule_applies(se):
        candidates = [x_start, rc.x, x0]
        if not rc.converged:
            # the coarse level's own smoothed Newton, from its best point: cheap evaluations
            # that bring the fine level's start within a few of its errors
            c_start, _ = _best_start(coarse, (rc.x, x0))
            if c_start is not None:
                rcn = solve_noisy_fixed_point(
                    coarse, c_start, lambda x, J: fixed_point_stderr(coarse, x, J),
                    valid=coarse.valid, accept=COARSE_NOISY_ACCEPT)
                candidates.insert(0, rcn.x)
        start, start_res = _best_start(se, candidates)
        if start is not None:
            # the common-random-numbers fixed point is only as good as one sample set, and
            # where the prox jumps its error is large (the map's error amplified ~10x by
            # (I - J)^-1) and its map discontinuous: average Newton iterates over fresh
            # draws instead (the exact map E[T] is smooth; docs/theory.md 16.9), with the
            # slope of the common-draws map at a wide step
            x_start = start
            if start_res > FAR_START:
                # far from the fixed point (e.g. the coarse level went astray): smoothed
                # Newton on the common draws first, which tracks its best point
                rn = solve_noisy_fixed_point(se, start,
                                             lambda x, J: fixed_point_stderr(se, x, J),
                                             valid=se.valid, max_steps=10,
                                             accept=COARSE_NOISY_ACCEPT)
                if np.all(np.isfinite(rn.x)) and se.valid(rn.x):
                    start = rn.x
            ra = _averaged_solve(se, start, kw.get("monitor"))
            if ra is not None:
                if ra.converged:
                    return _averaged_result(se, ra, rc.iterations)
                # the plain iterations stalled before and would again: report this
                return ra, None, rc.iterations
    # iterate on the full sample set
    kw.setdefault("stall_after", _stall_after(se))
    rf = solve_fixed_point(se, x_start, valid=se.valid, tol=tol, max_iter=max_iter, **kw)
    return rf, None, rc.iterations


def _averaged_result(se: StateEvolution, ra: AveragedReport, n_coarse: int):
    """_solve_once's return for a converged fresh-draw average: from here on ``se`` evaluates
    with the plain estimators, those of the fresh draws the average was taken over (the
    point's hats, test errors and error propagation are evaluated with them on the common
    draws)."""
    se.set_control_variate_reference(None)
    se.set_plain_estimators(True)
    return ra, _smoothed_observable_jacobian(se, ra.x), n_coarse


#: seed stride of the fresh draws of the averaged solve (far from any replica's seed)
FRESH_SEED_STRIDE = 104729


def _fresh_map(se: StateEvolution, k: int) -> "StateEvolution":
    """The SE map of ``se``'s problem on the k-th fresh set of RQMC draws (its own scramblings,
    no coarse level, no test-only samples or control variate: the averaged solve needs the
    map's value, and its average over fresh draws is unbiased without them; the teacher
    branch by the descent from u* alone, branches.teacher_descent, where the common draws
    show samples whose minimisers differ)."""
    mc = replace(se.mc, seed=se.mc.seed + FRESH_SEED_STRIDE * (k + 1),
                 coarse_log2_n=se.mc.log2_n, test_log2_n=0, step_log2_n=0, warm_start=False)
    fresh = StateEvolution(se.problem, mc, se.finite_d)
    # the teacher branch's descent alone where the common draws' last evaluation had samples
    # whose two minimisers differ (the branches are different maps there, and the global
    # prox the descent is compared with costs four Newton runs a sample); elsewhere both, so
    # that where the prox has one minimiser the two branches stay one map, bit for bit
    split = getattr(se.channel, "last_branch_split", None)
    fresh.channel.teacher_alone = bool(split is not None and split > 0.0)
    return fresh


def _smoothed_jacobian(se: StateEvolution, x: np.ndarray) -> np.ndarray | None:
    """dT/dx at x by central differences at the noisy rule's step (None where unavailable)."""
    try:
        return central_jacobian(se, np.asarray(x, dtype=float), NOISY_REL_STEP, se.valid)
    except (ValueError, FloatingPointError, ZeroDivisionError):
        return None


def _mc_convergence(rep) -> dict[str, Any] | None:
    """SEResult.mc_convergence of a fixed-point report (None: the ordinary rule)."""
    if isinstance(rep, AveragedReport) and rep.iterates is not None:
        rel = np.asarray(rep.stderr) / np.maximum(np.abs(np.asarray(rep.x)), 1e-12)
        return {"rule": "fresh-draw average", "iterates": int(len(rep.iterates)),
                "drift": float(rep.drift), "relative_error": float(np.max(rel))}
    return None


def _noisy_label(method: str, rep) -> str:
    """The method label of a solve, naming the Monte-Carlo rule where it accepted the point."""
    if isinstance(rep, AveragedReport) and rep.converged:
        return (f"{method}; the fixed point of the fresh-draw average (the common-draws "
                f"iteration stalled or its fixed point was imprecise): {rep.message}")
    return method


#: the fresh-draw Picard fallback: the map's contraction assumed by its stationarity test
#: where the smoothed slope's spectral radius cannot be used (0.9: the band's measured
#: 0.90 +- 0.08 i at lreg 1e-4, alpha 0.25), its burn-in and its first batch of iterates
PICARD_RHO_MAX = 0.95
#: Picard first below this estimated spectral radius of the slope: the estimate from a 3 %
#: central difference at 2^11 scatters (1.1-1.4 in the band where 2^13 gives 0.90 +- 0.08 i),
#: and Picard's iterates, unlike Newton's, cannot be turned around by a wrong slope
PICARD_RADIUS_MAX = 1.5
PICARD_BURN_IN = 24
#: (128: at lag-1 correlations 0.9-0.98 the spread of independent 64-iterate means is up to
#: 4x what any estimate from one of them says; noisy_fixed_point.var1_stderr)
PICARD_AVERAGE = 128


def _averaged_solve(se: StateEvolution, start: np.ndarray, monitor=None) -> AveragedReport | None:
    """The fixed point of the mean map as an average of iterates on fresh draws
    (:func:`solve_averaged_fresh`), from ``start``, with the options of ``se.mc`` (None where
    the smoothed slope J cannot be taken).  Where J's spectral radius is below 1 the plain
    Picard iteration is contracting: its iterates, averaged, need no preconditioner (a slope
    estimated with an eigenvalue on the wrong side of 1 turns a Newton step along it around:
    at lreg 1e-4, alpha 0.248 Newton iterates walked to q = 12-15 while Picard's settled),
    at a correlation time 1 / (1 - radius); Newton steps (gain 1/2) where Picard fails or
    the radius estimate is far above 1 (PICARD_RADIUS_MAX)."""
    J = _smoothed_jacobian(se, start)
    if J is None:
        return None
    radius = float(np.max(np.abs(np.linalg.eigvals(J))))

    def picard() -> AveragedReport:
        return solve_averaged_fresh(
            lambda k: _fresh_map(se, 10_000 + k), start, np.zeros((3, 3)),
            n_average=PICARD_AVERAGE, burn_in=PICARD_BURN_IN, gain=1.0,
            rho=min(max(radius, 0.5), PICARD_RHO_MAX), rounds=2, rtol=se.mc.averaged_rtol,
            max_average=max(se.mc.averaged_max, 2 * PICARD_AVERAGE), valid=se.valid,
            monitor=monitor)

    if radius < PICARD_RADIUS_MAX:
        rp = picard()
        if rp.converged:
            return rp
    ra = solve_averaged_fresh(lambda k: _fresh_map(se, k), start, J,
                              n_average=se.mc.averaged_iterations, rtol=se.mc.averaged_rtol,
                              max_average=se.mc.averaged_max,
                              rejacobian=lambda x: _smoothed_jacobian(se, x),
                              valid=se.valid, monitor=monitor)
    if ra.converged or radius < PICARD_RADIUS_MAX:
        return ra if ra.converged else rp
    rp = picard()  # the radius estimate can be far off: Picard after all
    return rp if rp.converged else ra


def _refine_always(se: StateEvolution, x: np.ndarray) -> bool:
    """MonteCarloOptions.fresh_average "always": a converged point of a non-convex channel
    whose V is above the convexity certificate is refined by the fresh-draw average."""
    return (se.mc is not None and se.mc.fresh_average == "always"
            and _prox_may_jump(se, float(x[2])))


#: a converged common-draws fixed point of a non-convex channel above its convexity
#: certificate whose propagated relative Monte-Carlo error in m or q exceeds this is refined
#: by the fresh-draw average: there the map's (I - J)^-1 amplifies the one sample set's
#: error so much that its fixed point says little (Figure 5, beta 2, Delta 0, alpha
#: 0.25-0.4: test errors 0.12-0.15 +- 0.04-17 from continuation, where the average gives a
#: smooth 0.073 / 0.056 / 0.025 at alpha 0.275 / 0.3 / 0.375, on the authors' Adam points)
IMPRECISE_REL = 0.05


def _imprecise(se: StateEvolution, x: np.ndarray, grad: np.ndarray) -> bool:
    """Whether a converged common-draws fixed point at x must be refined (IMPRECISE_REL, or
    no error can be propagated because a replica's hats leave the denoiser's domain)."""
    if not _prox_may_jump(se, float(x[2])):
        return False
    try:
        err = fixed_point_stderr(se, x, np.asarray(grad, dtype=float)[:3])
    except (ValueError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError):
        # a replica's hats outside the denoiser's domain (q_hat <= 0): they scatter over
        # their own size, no error can be propagated -- imprecise
        return True
    if err is None:
        return False
    rel = np.abs(err[:2]) / np.maximum(np.abs(np.asarray(x, dtype=float)[:2]), 1e-12)
    return not bool(np.all(rel <= IMPRECISE_REL))


def _prox_certified(se: StateEvolution, V: float) -> bool:
    """Whether every sample's prox objective is certified strictly convex at V, for every
    label the channel's noise model produces (``convex_below_every_label``, docs/theory.md
    16.5): one minimiser, no jumps, the two prox branches one map."""
    return V < optional_member(se.model_channel, "convex_below_every_label")


def _prox_may_jump(se: StateEvolution, V: float) -> bool:
    """Whether the map of ``se`` at V may jump: an RQMC channel with a non-convex prox
    (:func:`_noisy_rule_applies`) above its convexity certificate (:func:`_prox_certified`)."""
    return _noisy_rule_applies(se) and not _prox_certified(se, V)


def _stall_after(se: StateEvolution) -> int | None:
    """solve_fixed_point's stall_after for ``se``'s plain iterations: NOISY_STALL_AFTER where
    the Monte-Carlo rule can take over, else None (the whole budget)."""
    return NOISY_STALL_AFTER if _noisy_rule_applies(se) else None


def _noisy_rule_applies(se: StateEvolution) -> bool:
    """The Monte-Carlo convergence rule (noisy_fixed_point) is for RQMC channels whose prox
    has a non-convex objective: their map is a finite sum that jumps where minimisers swap."""
    return se.mc is not None and se.unique_fixed_point() == ""


def _best_start(se: StateEvolution, candidates) -> tuple[np.ndarray | None, float]:
    """(the valid candidate start of lowest relative residual on ``se``'s map, that residual);
    (None, inf) where none is valid."""
    best, best_res = None, math.inf
    for x in candidates:
        if x is None:
            continue
        x = np.asarray(x, dtype=float)
        if not (np.all(np.isfinite(x)) and se.valid(x)):
            continue
        try:
            res = relative_residual(x, np.asarray(se(x), dtype=float))
        except (ValueError, FloatingPointError, ZeroDivisionError):
            continue
        if res < best_res:
            best, best_res = x, res
    return best, best_res


def fixed_point_stderr(se: StateEvolution, x: np.ndarray, J: np.ndarray) -> np.ndarray | None:
    """The Monte-Carlo standard error of (m, q, V) of the fixed point at x, replica r's map
    error e_r propagated by (I - J)^-1 (as :func:`propagated_mc_stderr`, for the three
    overlaps only and with the given Jacobian); None without replicas."""
    ch = se.hats(np.asarray(x, dtype=float))
    reps = getattr(se.channel, "last_replicas", None)
    if reps is None or len(reps) < 2:
        return None
    dev = _replica_deviations(se, ch, reps)[:, :3]
    dx = np.linalg.solve(np.eye(3) - np.asarray(J, dtype=float), dev.T).T
    return np.std(dx, axis=0, ddof=1) / math.sqrt(dx.shape[0])


def _smoothed_observable_jacobian(se: StateEvolution, x: np.ndarray) -> np.ndarray | None:
    """d(MC_FIELDS)/d(m, q, V) by central differences at the noisy rule's step (the error
    propagation of a fixed point found by it: a 1e-3 forward difference of a jumping map
    measures the jumps)."""
    try:
        return central_jacobian(lambda z: _observables(se, se.hats(z)), np.asarray(x, float),
                                NOISY_REL_STEP, se.valid)
    except (ValueError, FloatingPointError, ZeroDivisionError):
        return None


def _fine_tolerance(se: StateEvolution, coarse: StateEvolution, x: np.ndarray, grad: np.ndarray,
                    tol: float) -> float:
    """The fine level's residual target (see MC_TOL_FRACTION): the coarse level's relative
    Monte-Carlo error of (m, q, V), propagated through its fixed point at x and scaled by
    sqrt(coarse points / fine points)."""
    stderr, _ = propagated_mc_stderr(coarse, x, grad)
    if not stderr:
        return tol
    rel = max(stderr[k] / max(abs(v), 1e-12) for k, v in zip(("m", "q", "V"), x))
    rel *= math.sqrt(2.0 ** (coarse.channel.log2_n - se.channel.log2_n))
    if not math.isfinite(rel):
        return tol
    return max(tol, min(MC_TOL_MAX, MC_TOL_FRACTION * rel))


def _solve_from(se: StateEvolution, x0: np.ndarray, *, method: str, damping: float, tol: float,
                max_iter: int, monitor=None, coarse_result=None, fine_x0=None, coarse_grad=None,
                cv_reference=None):
    """:func:`_solve_once`, safeguarded: Anderson mixing can extrapolate far out of the
    basin when the map is strongly non-linear (e.g. below alpha_interp at small lam,
    where V ~ 1/lam grows over hundreds of iterations), so a failed Anderson solve is
    repeated with the damped iteration from the same start.  Returns (report,
    Jacobian, coarse iterations, method label)."""
    rep, grad, n_coarse = _solve_once(se, x0, method=method, damping=damping, tol=tol,
                                      max_iter=max_iter, monitor=monitor,
                                      coarse_result=coarse_result, fine_x0=fine_x0,
                                      coarse_grad=coarse_grad, cv_reference=cv_reference)
    if rep.converged or method != "anderson" or isinstance(rep, AveragedReport):
        # (a failed Monte-Carlo rule: the damped iteration stalls where it did)
        return rep, grad, n_coarse, _noisy_label(method, rep)
    rep2, grad2, n2 = _solve_once(se, x0, method="damped", damping=damping, tol=tol,
                                  max_iter=max_iter, monitor=monitor, cv_reference=cv_reference)
    label = f"damped after anderson failed: {rep.summary}"
    if rep2.converged or rep2.residual < rep.residual:
        return rep2, grad2, n_coarse + n2, _noisy_label(label, rep2)
    return rep, grad, n_coarse + n2, f"anderson (the damped retry failed too: {rep2.summary})"


def unique_fixed_point(problem: Problem) -> str:
    """:meth:`StateEvolution.unique_fixed_point` without building the map: why ``problem``
    has a single SE fixed point, '' when it may have several."""
    channel = channel_for(problem.task)
    learner = problem.learner
    if not optional_member(channel, "convex"):
        return ""
    penalty = learner.penalty
    if not penalty.convex_learner():
        return ""
    return f"convex ERM ({getattr(channel, 'name', 'the')} channel, {penalty.describe()})"


#: two coarse fixed points of one problem closer than this (relative) share the control
#: variate's reference (MonteCarloOptions.step_at "start"): their fine solves then solve
#: one map and can be compared at their residuals.  Beyond it they are distinct fixed points
#: (typically 0.1-1 apart), and a reference that far off would cost the estimator more
#: than it saves (at 1e-2 relative offset the spread of prox term - step term is already
#: 0.9-2.0 of the plain estimator's, docs/theory.md 16.6)
CV_SHARE_RTOL = 1e-2


def _same_solution(a, b, tol: float) -> bool:
    """Whether two starts' runs (report, fields) found one fixed point: within 4 combined
    standard errors where either was averaged over fresh draws (its residual is the
    Monte-Carlo noise of one draw, no measure of distance), else :func:`same_fixed_point`
    at the larger of their residuals."""
    xa = [a[1][k] for k in ("m", "q", "V")]
    xb = [b[1][k] for k in ("m", "q", "V")]
    ea, eb = getattr(a[0], "stderr", None), getattr(b[0], "stderr", None)
    if ea is not None or eb is not None:
        ea = np.zeros(3) if ea is None else np.asarray(ea, dtype=float)
        eb = np.zeros(3) if eb is None else np.asarray(eb, dtype=float)
        return bool(np.all(np.abs(np.subtract(xa, xb)) <= 4.0 * np.hypot(ea, eb)))
    return same_fixed_point(xa, xb, max(tol, float(a[0].residual), float(b[0].residual)))


def shared_cv_reference(a, b) -> np.ndarray | None:
    """The control variate's reference that the fine solves of two coarse fixed-point
    reports ``a`` and ``b`` of one problem share: a's fixed point where both converged
    within CV_SHARE_RTOL (relative) of each other, else None (each its own)."""
    if a is None or b is None or not (a.converged and b.converged):
        return None
    xa = np.asarray(a.x, dtype=float)
    return xa if relative_distance(xa, b.x) <= CV_SHARE_RTOL else None


def relative_distance(a, b) -> float:
    """max_i |a_i - b_i| / max(|a_i|, 1e-12): the distance of two points (m, q, V) relative
    to the first."""
    a = np.asarray(a, dtype=float)
    return float(np.max(np.abs(a - np.asarray(b, dtype=float)) / np.maximum(np.abs(a), 1e-12)))


def same_fixed_point(a: np.ndarray, b: np.ndarray, tol: float) -> bool:
    """Two fixed points (m, q, V) of the same map solved to ``tol``: relative distance
    (to a) at most 1e3 tol + 1e-7 (metastability is its negation)."""
    return relative_distance(a, b) <= 1e3 * tol + 1e-7


V_ELIMINATED_MAX_ITER = 40


def _v_star(se: StateEvolution, m: float, q: float, u_max: float = 60.0) -> float:
    """The V solving V = F_V(m, q, V) for fixed (m, q): root of G(u) = F_V(e^u)/e^u - 1
    (G -> F_V(0)/e^u > 0 as u -> -inf and -> -1 where F_V grows slower than V), bracketed
    by steps of 3 in u = log V from 0; 0 when F_V vanishes on the whole range."""
    from scipy.optimize import brentq

    def G(u: float) -> float:
        return float(se(np.array([m, q, math.exp(u)]))[2]) * math.exp(-u) - 1.0

    lo = hi = 0.0
    g_lo = g_hi = G(0.0)
    while g_lo <= 0.0:
        if lo <= -u_max:
            return 0.0
        hi, g_hi = lo, g_lo
        lo -= 3.0
        g_lo = G(lo)
    while g_hi > 0.0:
        if hi >= u_max:
            raise ValueError(f"no root of the V equation below V = e^{u_max:g}")
        lo, g_lo = hi, g_hi
        hi += 3.0
        g_hi = G(hi)
    return math.exp(brentq(G, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=200))


def solve_with_v_eliminated(se: StateEvolution, x0: np.ndarray, *, tol: float,
                            max_iter: int) -> FixedPointReport:
    """Fixed point of the SE with V eliminated: Anderson on (m, q) -> F_(m,q)(m, q, V*(m, q)),
    V* from :func:`_v_star`; the reported residual is that of the full map at the result."""
    last = {}

    def T2(y: np.ndarray) -> np.ndarray:
        V = _v_star(se, float(y[0]), float(y[1]))
        last["V"] = V
        return se(np.array([y[0], y[1], V]))[:2]

    def valid2(y: np.ndarray) -> bool:
        return se.valid(np.array([y[0], y[1], 1.0]))

    x0 = np.asarray(x0, dtype=float)
    # each outer step costs ~20-40 map evaluations: a last resort gets a short budget
    # (the tiny-alpha points it exists for converge in 10-12 steps)
    rep = solve_fixed_point(T2, x0[:2], method="anderson", tol=tol,
                            max_iter=min(max_iter, V_ELIMINATED_MAX_ITER), valid=valid2)
    if not np.all(np.isfinite(rep.x)) or not valid2(rep.x):
        return FixedPointReport(x=np.array([*x0]), iterations=rep.iterations,
                                residual=math.inf, history=rep.history, success=False,
                                status=rep.status, message=f"V-eliminated solve: {rep.message}")
    try:
        x = np.array([rep.x[0], rep.x[1], _v_star(se, float(rep.x[0]), float(rep.x[1]))])
        res = relative_residual(x, se(x))
    except ValueError as exc:
        return FixedPointReport(x=np.array([*rep.x, last.get("V", math.nan)]),
                                iterations=rep.iterations, residual=math.inf,
                                history=rep.history, success=False, status=Status.INVALID,
                                message=f"V-eliminated solve: {exc}")
    ok = rep.converged and res <= max(tol, 1e-10)
    if ok:
        status, message = Status.CONVERGED, ""
    elif rep.converged:  # (m, q) converged but the full map's residual is above tol
        status, message = Status.MAX_ITER, f"V-eliminated solve: full-map residual {res:.1e}"
    else:
        status, message = rep.status, f"V-eliminated solve: {rep.message}"
    return FixedPointReport(x=x, iterations=rep.iterations, residual=res, history=rep.history,
                            success=ok, status=status, message=message)


def finite_size_warning(kurtosis: float, list_d: int, *, rank_capped: bool) -> str:
    """The warning attached to an SE result whose residual is measurably non-Gaussian at
    the target list's d, quoting what finite-d ERM measured (docs/validation.md,
    "Power-law targets at small alpha").  Convex learners: ERM above the SE by
    0.08-0.26 x kurtosis at eleven points.  Rank-capped learners (non-convex): ERM
    between 0.3 and 1.5 times the SE, in either direction (0.86-0.92 at kappa = 0.035,
    kurtosis 0.55-1.0; 0.30 and 1.51 with one or two columns, kurtosis 3.7-9.8)."""
    head = (f"at d = {list_d} (the target's eigenvalue list) the predicted excess kurtosis "
            f"of the residual h(Shat - S0) is {kurtosis:.2g} > {RESIDUAL_KURTOSIS_WARN:g}: a few "
            "separated modes carry the error and the SE's Gaussian channel does not hold there; ")
    if rank_capped:
        return head + ("with a rank cap finite-d ERM measured between 0.3 and 1.5 times this "
                       "prediction, in either direction (0.86-0.92 at kurtosis 0.55-1.0 with "
                       "7-14 columns; 0.30 and 1.51 with one or two), and different optimisers "
                       "of the non-convex problem stop at different points (docs/validation.md)")
    return head + (f"finite-d ERM measured 0.08-0.26 x kurtosis above this prediction (about "
                   f"{100 * 0.08 * kurtosis:.0f}-{100 * 0.26 * kurtosis:.0f} % on the matrix "
                   "MSE); the gap closes like 1/d at a fixed spectral law (docs/validation.md)")


@contextlib.contextmanager
def _progress_monitor(show: bool, desc: str, tol: float):
    """A monitor(iteration, residual) that drives a progress bar (stderr, terminal only):
    iterations, the residual and the iterations still needed at the current
    geometric rate; None when ``show`` is False."""
    if not show:
        yield None
        return
    bar = progress_bar(desc=desc, unit="it")
    last: list[float] = []

    def monitor(it: int, res: float) -> None:
        bar.update(1)
        text = f"residual {res:.1e}"
        if last and 0 < res < last[-1] and res > tol:
            rate = res / last[-1]
            text += f", ~{math.ceil(math.log(tol / res) / math.log(rate))} it to tol"
        last[:] = [res]
        bar.set_postfix_str(text, refresh=False)

    try:
        yield monitor
    finally:
        bar.close()


@under_thread_policy
def solve_state_evolution(
    problem: Problem,
    *,
    method: str = "anderson",
    tol: float = 1e-10,
    max_iter: int = 500,
    damping: float = 1.0,
    start: str = "auto",
    spectrum: bool = False,
    mc: MonteCarloOptions | None = None,
    integrals=None,
    x0=None,
    coarse_x=None,
    coarse_jacobian=None,
    cv_reference=None,
    finite_d: FiniteSizeOptions | None = None,
    finite_size_check: bool = True,
    progress: bool = False,
) -> SEResult:
    """Solve the SE fixed point of ``problem`` (docs/theory.md "Fixed point").

    ``start="both"`` runs an informative (Shat ~ S0) and an uninformative
    (Shat independent of S0) initialisation; the reported point is the one of
    lower training loss, and ``metastable``/``alternative`` say whether the
    other one converged elsewhere.  ``start="auto"`` (default) runs both only
    where several fixed points are possible (a non-convex channel or a binding
    rank cap, :meth:`StateEvolution.unique_fixed_point`); for a convex ERM it
    runs the informative start alone, and the uninformative one only if that
    fails; ``start_policy`` says which.  ``spectrum=True`` attaches the predicted
    spectra of Shat and W (docs/theory.md "Spectra of the learned weights").  ``mc`` sets the
    RQMC integration of
    non-linear channels; their Monte-Carlo standard errors are reported in
    ``mc_stderr`` (per field) and failed proximal solves in ``mc_failed_prox``.
    A user channel (e.g. a :class:`~amp_attention.channels.custom.CustomChannel`) is
    given to the task as an instance, ``Task(channel=ch)``; ``integrals`` replaces only
    the channel side of the map by an object with ``se(m, q, V, Q0, alpha)`` (e.g.
    :class:`~amp_attention.channels.linear_outputs.LinearOutputChannel`, the small-beta
    linearisation of softmax, which is no channel of data).  ``x0 = (m, q, V)``
    (e.g. the fixed point of a neighbouring problem, for continuation) replaces
    ``start``: one solve from x0, reported with ``start="warm"``.  ``coarse_x``: with x0,
    the coarse level's fixed point when the caller has solved it
    (:func:`solve_coarse_level`, e.g. a phase diagram's sweep on the coarse level): no
    coarse solve here, the fine level starts from x0 with the coarse Jacobian at coarse_x
    (RQMC channels with a coarse level only).  ``coarse_jacobian``: with coarse_x, that
    Jacobian when the caller has computed it (:func:`coarse_level_jacobian` at coarse_x, a
    len(MC_FIELDS) x 3 array): not computed again here.  ``cv_reference``: with
    ``mc.step_at = "start"``, the (m, q, V) at which the fine level takes the control
    variate's step function (default: the solve's own coarse fixed point); a caller that
    compares this solve with another of the same problem (a phase diagram's two sweeps)
    gives both the same, so that they solve one map (:func:`shared_cv_reference`).

    ``finite_d`` (:class:`~amp_attention.finite_size.FiniteSizeOptions`) is the
    finite-d prediction mode: the denoiser functionals are averaged over
    ``finite_d.draws`` sampled GOE matrices at dimension ``finite_d.d`` with
    the target's own d eigenvalues, instead of the deterministic equivalent
    (d -> infinity); ``sampling_stderr`` reports the propagated sampling error.

    ``finite_size_check``: for a target given as an eigenvalue list (power law,
    custom list) the result carries ``residual_kurtosis``, the predicted excess
    kurtosis of h(Shat - S0) at the list's d, and ``finite_size_warning`` when it
    exceeds ``RESIDUAL_KURTOSIS_WARN`` (the deterministic equivalent is then
    measurably below finite-d ERM at that d; docs/validation.md).

    ``progress``: a progress bar per start on stderr (a terminal only: nothing
    is written into logs or pipes) with the iteration, the residual and the
    iterations still needed at the current rate.
    """
    InstanceOf((Problem,), "a Problem").check("problem", problem)
    check_args(SOLVER_OPTIONS, method=method, start=start, tol=tol, max_iter=max_iter,
               damping=damping, spectrum=spectrum, finite_size_check=finite_size_check,
               progress=progress)
    InstanceOf((MonteCarloOptions,), "a MonteCarloOptions", none_ok=True).check("mc", mc)
    InstanceOf((FiniteSizeOptions,), "a FiniteSizeOptions", none_ok=True).check("finite_d", finite_d)
    if finite_d is not None and spectrum:
        raise ValueError("spectrum: the predicted spectra come from the deterministic "
                         "equivalent; solve without finite_d for them")
    t0 = time.perf_counter()
    if (problem.learner.lam == 0.0 and x0 is None and integrals is None and finite_d is None
            and not spectrum):
        from .zero_lam import solve_interpolator, zero_lam_regime

        regime = zero_lam_regime(problem)[0]
        if regime == "interpolating":
            return solve_interpolator(problem, mc, t0=t0)
        if not unique_fixed_point(problem):
            # the lam -> 0+ limit is the end of the path of lam > 0 fixed points: continue
            # along it (from lam = 1e-3, where the prox is tame) rather than start cold at
            # lam = 0, where the default starts can end at another fixed point of the map
            return _lam_zero_by_continuation(
                problem, t0, mc=mc, method=method, tol=tol, max_iter=max_iter,
                damping=damping, start=start, progress=progress)
    se = StateEvolution(problem, mc, finite_d, integrals=integrals)
    starts = se.starts()
    if x0 is not None:
        x0 = _checked_point(se, "x0", x0)
        starts, names = {"warm": x0}, ("warm",)
    elif coarse_x is not None:
        raise ValueError("coarse_x needs x0, the fine level's start")
    else:
        names = start_names(start, ("informative", "uninformative"))
    coarse_jacobian = _checked_coarse_jacobian(coarse_jacobian, coarse_x)
    unique = se.unique_fixed_point() if start == "auto" and x0 is None else ""
    policy = {"both": "both starts (asked for)", "auto": "both starts: several fixed points "
              "are possible (non-convex channel or binding rank cap)"}.get(start, f"{start} start")
    if x0 is not None:
        policy = "warm start from x0" + ("" if coarse_x is None else
                                         ", the coarse fixed point given (coarse_x)")
    opts = {"method": method, "tol": tol, "max_iter": max_iter, "damping": damping,
            "progress": progress,
            "coarse_x": None if coarse_x is None else _checked_coarse_x(se, coarse_x),
            "coarse_jacobian": coarse_jacobian,
            "cv_reference": _checked_cv_reference(se, cv_reference)}
    runs, extra, coarse_only, policy = _run_starts(se, starts, names, unique, policy, opts)
    best_name = min(runs, key=lambda k: (k == coarse_only, not runs[k][0].converged,
                                         runs[k][1]["loss"]))
    rep, fields = runs[best_name]
    grad, n_coarse, used, cv_reference, plain = extra[best_name]
    se.set_control_variate_reference(cv_reference)
    se.set_plain_estimators(plain)
    alternative, metastable = choose_and_compare(
        runs, best_name, converged=lambda run: run[0].converged,
        # each solve is only as close to its fixed point as its own residual (the RQMC fine
        # level stops at 5 % of its Monte-Carlo error, up to 1e-5, not at tol)
        same=lambda a, b: _same_solution(a, b, tol),
        describe=lambda name, run: {
            "status": run[0].status.value, "message": run[0].message,
            "level": "coarse" if name == coarse_only else "fine",
            **{k: run[1][k] for k in ("m", "q", "V", "train_error", "test_error",
                                      "matrix_mse", "loss")}},
        not_comparable=(coarse_only,))
    spec = None
    if spectrum:
        ch = se.hats(rep.x)
        spec = se.spectrum(ch, se.overlaps(ch))
    return SEResult(**fields, mc_convergence=_mc_convergence(rep),
                    **reported_start_fields(rep, start=best_name, policy=policy,
                                            alternative=alternative, metastable=metastable,
                                            t0=t0, method=used, iterations_coarse=n_coarse),
                    **_diagnostics(se, problem, rep, grad, fields, finite_d, finite_size_check),
                    finite_d=None if finite_d is None else asdict(finite_d), spectrum=spec)


#: lam > 0 steps of the path to lam = 0 above alpha_interp (non-convex channels)
LAM_ZERO_PATH = (1e-3, 1e-4, 1e-5)


def teacher_test_error(problem: Problem, mc: MonteCarloOptions | None = None) -> dict[str, float]:
    """The test errors of the teacher itself, overlaps m = q = Q0 (docs/theory.md's test
    error at omega = u*): the alpha -> infinity limit of every learner that recovers S0,
    and the floor of the test error against a fresh noisy label (the clean one is 0
    there).  From the same test-only RQMC draws as the SE's reported test errors (a
    Monte-Carlo channel; ``mc`` as :func:`solve_state_evolution`'s), with their
    replica standard errors: {"test_error", "test_error_noisy", and "..._stderr"}."""
    se = StateEvolution(problem, mc)
    fields = getattr(se.channel, "test_fields", None)
    tf = None if fields is None else fields(se.Q0, se.Q0, se.Q0)
    if tf is None:
        raise ValueError("teacher_test_error needs a Monte-Carlo channel with test-only draws "
                         f"(task {problem.task.channel!r}; mc.test_log2_n = 0 has none)")
    mean = tf.mean(axis=0)
    err = tf.std(axis=0, ddof=1) / math.sqrt(tf.shape[0])
    return {"test_error": float(mean[0]), "test_error_stderr": float(err[0]),
            "test_error_noisy": float(mean[1]), "test_error_noisy_stderr": float(err[1])}


def _lam_zero_by_continuation(problem: Problem, t0: float, **kw) -> SEResult:
    """lam = 0 above the interpolation threshold as the end of the path lam = LAM_ZERO_PATH,
    then 0, each solve started from the previous fixed point (warm start)."""
    x, done = None, []
    for lam in (*LAM_ZERO_PATH, 0.0):
        p = replace(problem, learner=replace(problem.learner, lam=lam))
        opts = dict(kw) if x is None else {**kw, "start": "auto"}
        r = solve_state_evolution(p, x0=x, **opts)
        done.append(f"lam = {lam:g}: {r.status.value}")
        if not r.converged:
            break
        x = np.array([r.m, r.q, r.V])
    policy = ("lam = 0 above the interpolation threshold: the lam -> 0+ limit, continued "
              "along lam (" + "; ".join(done) + "), each from the previous fixed point")
    return replace(r, start_policy=policy, seconds=time.perf_counter() - t0)


def _checked_point(se: StateEvolution, name: str, value) -> np.ndarray:
    """``value`` as an (m, q, V) array in the SE's domain, or ValueError naming ``name``."""
    x = np.asarray(value, dtype=float)
    if x.shape != (3,) or not np.all(np.isfinite(x)) or not se.valid(x):
        raise ValueError(f"{name} must be a valid (m, q, V) with q >= 0, V >= 0, m^2 <= q Q0, "
                         f"got {value!r}")
    return x


def _checked_coarse_x(se: StateEvolution, coarse_x) -> np.ndarray:
    """coarse_x as an array, or ValueError naming it."""
    x = _checked_point(se, "coarse_x", coarse_x)
    if se.coarse() is None:
        raise ValueError("coarse_x: this problem has no coarse level (a closed-form channel, "
                         "or mc.coarse_log2_n >= mc.log2_n)")
    return x


def _checked_cv_reference(se: StateEvolution, x) -> np.ndarray | None:
    """cv_reference as a finite (m, q, V) array (None stays None), or ValueError naming it:
    it needs an RQMC channel solved with mc.step_at = "start"."""
    if x is None:
        return None
    if se.mc is None or se.mc.step_at != "start":
        raise ValueError("cv_reference needs an RQMC channel solved with mc.step_at = "
                         "'start' (MonteCarloOptions)")
    ref = np.asarray(x, dtype=float)
    if ref.shape != (3,) or not np.all(np.isfinite(ref)):
        raise ValueError(f"cv_reference must be a finite (m, q, V), got {x!r}")
    return ref


def _checked_coarse_jacobian(coarse_jacobian, coarse_x) -> np.ndarray | None:
    """coarse_jacobian as a len(MC_FIELDS) x 3 array (None stays None), or ValueError naming
    it: it needs coarse_x, the point it was computed at."""
    if coarse_jacobian is None:
        return None
    if coarse_x is None:
        raise ValueError("coarse_jacobian needs coarse_x, the point it was computed at")
    grad = np.asarray(coarse_jacobian, dtype=float)
    if grad.shape != (len(MC_FIELDS), 3) or not np.all(np.isfinite(grad)):
        raise ValueError(f"coarse_jacobian must be a finite {len(MC_FIELDS)} x 3 array "
                         f"(coarse_level_jacobian at coarse_x), got shape {grad.shape}")
    return grad


def _run_starts(se: StateEvolution, starts: dict, names: tuple[str, ...], unique: str,
                policy: str, opts: dict) -> tuple[dict, dict, str | None, str]:
    """Solve from each start: {name: (report, assembled fields)}, {name: (Jacobian, coarse
    iterations, method)}, the start solved on the coarse level only (or None), and the
    start policy.  RQMC channels with two starts solve both coarse fixed points first;
    where they coincide the (expensive) fine level runs from the informative one only."""
    method, tol, max_iter, damping = (opts[k] for k in ("method", "tol", "max_iter", "damping"))
    runs, extra = {}, {}
    coarse_pre, coarse_only = {}, None
    fine_x0 = None
    coarse_grad = opts.get("coarse_jacobian")
    if opts.get("coarse_x") is not None:
        coarse_pre["warm"] = _known_coarse_point(se, opts["coarse_x"], tol)
        fine_x0 = starts["warm"]
        if not coarse_pre["warm"][1].converged:
            # not the coarse fixed point: solve the coarse level from x0 after all (the fine
            # level's control variate is taken at the coarse fixed point, step_at "start")
            coarse_pre["warm"] = _coarse_solve(se, starts["warm"], tol=tol, max_iter=max_iter,
                                               method=method, damping=damping)
            coarse_grad = None  # the given Jacobian was computed at coarse_x
    if se.mc is not None and len(names) == 2 and not unique:
        for name in names:
            with _progress_monitor(opts["progress"], f"SE, {name} start (coarse)", tol) as monitor:
                coarse_pre[name] = _coarse_solve(se, starts[name], tol=tol, max_iter=max_iter,
                                                 method=method, damping=damping, monitor=monitor)
        pre = [coarse_pre[n] for n in names]
        # same point: relative distance <= 1e3 (0.1 COARSE_TOL) + 1e-7 ~ 1e-3, far below the
        # O(0.1-1) distance of distinct fixed points (a false "different" only costs time)
        if all(p is not None and p[1].converged for p in pre) and same_fixed_point(
                pre[0][1].x, pre[1][1].x, 0.1 * COARSE_TOL):
            coarse_only = names[1]
            cse, crep = coarse_pre[coarse_only]
            runs[coarse_only] = (crep, _assemble(cse, crep, coarse_only))
            extra[coarse_only] = (None, crep.iterations, method, None, False)
            policy += (f"; the {coarse_only} start reached the informative start's fixed "
                       f"point on the coarse level (2^{se.mc.coarse_log2_n} points per "
                       "replica), so only the informative one was refined")
    # Both coarse levels stalled (the prox minimiser jumps: the band): there the coarse
    # level's fixed points are no guide to distinct fine ones (at lreg 1e-4, alpha 0.2484
    # the uninformative start's stalled at m = 14, q = 349 on 2^8 points and its fine
    # averaged solve drifted for ~30 s without settling), so the uninformative start runs
    # only where the informative one fails
    stalled = (se.mc is not None and len(names) == 2 and not unique and coarse_only is None
               and _noisy_rule_applies(se)
               and all(coarse_pre.get(n) is not None and not coarse_pre[n][1].converged
                       for n in names))
    cv_reference = opts.get("cv_reference")
    if cv_reference is None and coarse_only is None and len(coarse_pre) == 2:
        cv_reference = shared_cv_reference(*(None if coarse_pre[n] is None else coarse_pre[n][1]
                                             for n in names))
    for name in names:
        if name == coarse_only:
            continue
        if stalled and runs:
            if any(r.converged for r, _ in runs.values()):
                policy += ("; both starts' coarse levels stalled (the prox minimiser jumps), "
                           "so the fine level ran from the informative start only, which "
                           "converged")
                break
            policy += "; the informative start failed, so the uninformative one ran too"
        if unique and runs:
            if any(r.converged for r, _ in runs.values()):
                policy = f"one start: {unique} has a unique fixed point"
                break
            policy = (f"{unique}: the informative start failed "
                      f"({runs['informative'][0].summary}), so the uninformative one ran too")
        with _progress_monitor(opts["progress"], f"SE, {name} start", tol) as monitor:
            rep, grad, n_coarse, used = _solve_from(se, starts[name], method=method, tol=tol,
                                                    max_iter=max_iter, damping=damping,
                                                    monitor=monitor,
                                                    coarse_result=coarse_pre.get(name),
                                                    fine_x0=fine_x0,
                                                    coarse_grad=coarse_grad,
                                                    cv_reference=cv_reference)
        runs[name] = _checked_run(rep, _assemble(se, rep, name))
        # the control variate's reference of this start's map (its fields were assembled
        # with it; the diagnostics of the reported start are computed with it again)
        extra[name] = (grad, n_coarse, used, se.control_variate_reference,
                       se.plain_estimators)
    if not any(r.converged for r, _ in runs.values()):
        # Last resort, only when no start converged (it costs ~20-40 map evaluations per
        # step): eliminate V by a bracketed scalar root.  At tiny alpha and small lam
        # V ~ 1/lam sits on a cliff of the map (the threshold 2 lam (1 + 2V) crosses the
        # top of rho_B), so Picard and Anderson oscillate over decades of V, while for
        # fixed (m, q) the scalar equation in log V has a clean sign change.
        se.set_control_variate_reference(None)
        se.set_plain_estimators(False)
        for name in names:
            rep3 = solve_with_v_eliminated(se, starts[name], tol=tol, max_iter=max_iter)
            if rep3.converged:
                failed = runs[name][0].summary
                runs[name] = (rep3, _assemble(se, rep3, name))
                extra[name] = (None, extra[name][1], "V eliminated (bracketed root in log V) "
                               f"after anderson and damped failed: {failed}", None, False)
                break
    return runs, extra, coarse_only, policy


def _diagnostics(se: StateEvolution, problem: Problem, rep, grad, fields: dict,
                 finite_d: FiniteSizeOptions | None, finite_size_check: bool) -> dict[str, Any]:
    """The reported point's error estimates and warnings (SEResult fields): Monte-Carlo
    standard errors and prox failures, the V_hat jump share, the residual kurtosis of an
    eigenvalue-list target, the finite-d sampling error."""
    out: dict[str, Any] = {"mc_stderr": None, "mc_error_method": "", "mc_failed_prox": 0,
                           "mc_warm_fallbacks": 0, "mc_dof": None, "mc_halfwidth95": None}
    if se.mc is not None:
        out["mc_failed_prox"] = se.channel.n_failed
        out["mc_warm_fallbacks"] = se.channel.n_warm_fallback
        try:
            if isinstance(rep, AveragedReport) and rep.converged:
                out["mc_stderr"], out["mc_error_method"] = averaged_mc_stderr(se, rep, grad)
                # its (m, q, V) error is the largest of three estimators, one of them
                # batch means over BATCHES batches: counted at that smallest dof
                dof = min(AVERAGED_BATCHES, se.mc.replicas) - 1
            else:
                out["mc_stderr"], out["mc_error_method"] = propagated_mc_stderr(se, rep.x, grad)
                dof = se.mc.replicas - 1
            out["mc_dof"] = dof
            out["mc_halfwidth95"] = t_halfwidths(out["mc_stderr"], dof)
        except ValueError as exc:  # e.g. a failed solve's last iterate: no hats there
            out["mc_error_method"] = f"unavailable: {exc}"
    jump, jump_err, rs_warning = None, None, ""
    if se.mc is not None and rep.converged and se.mc.vhat_form == "by_parts":
        se.hats(rep.x)  # the reported point's channel evaluation (cached by the channel)
        jump, jump_err = vhat_jump_share(se.channel.last_vhat_forms)
        if prox_jumps(jump, jump_err):
            rs_warning = replica_symmetry_warning(jump, jump_err)
    out.update(vhat_jump_share=jump, vhat_jump_stderr=jump_err,
               replica_symmetry_warning=rs_warning)
    out["prox_branch"] = se.prox_branch
    if se.mc is not None and np.all(np.isfinite(rep.x)) and se.valid(rep.x):
        if se.mc.prox_branch == "teacher":
            se.hats(rep.x)
            out["prox_branch_split"] = se.channel.last_branch_split
        elif not se.unique_fixed_point():
            m, q, V = (float(v) for v in rep.x)
            if _prox_certified(se, V):
                out["prox_branch_split"] = 0.0
            else:
                # no certificate of a unique minimiser: say whether the other branch would
                # differ here (one more prox evaluation)
                out["prox_branch_split"] = se.channel.branch_split(m, q, V, se.Q0)
    kurt, kurt_err, warning = None, None, ""
    list_d = problem.target.list_dimension
    if (finite_size_check and finite_d is None and list_d and rep.converged
            and list_d <= RESIDUAL_KURTOSIS_MAX_D):
        # an eigenvalue list describes an experiment at that d: how Gaussian is its residual?
        kurt, kurt_err = residual_kurtosis(se.denoiser,
                                           np.sort(target_eigenvalues(problem.target, list_d)),
                                           fields["m_hat"], fields["q_hat"], fields["V_hat"])
        if kurt > RESIDUAL_KURTOSIS_WARN:
            warning = finite_size_warning(kurt, list_d, rank_capped=problem.learner.rank_capped)
    out.update(residual_kurtosis=kurt, residual_kurtosis_stderr=kurt_err,
               finite_size_warning=warning)
    sampling_stderr, sampling_method = None, ""
    if finite_d is not None:
        try:
            sampling_stderr, sampling_method = propagated_sampling_stderr(se, rep.x)
        except ValueError as exc:
            sampling_method = f"unavailable: {exc}"
    out.update(sampling_stderr=sampling_stderr, sampling_error_method=sampling_method)
    return out


#: |vhat_jump_share| beyond this many standard errors: the prox minimiser jumps
JUMP_WARN_ERRORS = 3.0
#: ... and beyond this share: below it the two V_hat forms differ by rounding and the prox's
#: Newton tolerance alone (e.g. ~1e-9 +- 1e-9 at a trivial fixed point, where a 3-error test
#: on rounding noise fires at random), never by a jump the warning is about
JUMP_SHARE_FLOOR = 1e-6


def prox_jumps(share: float | None, stderr: float | None) -> bool:
    """Whether the V_hat forms say that the prox minimiser jumps: the share carried by the
    jumps (:func:`vhat_jump_share`) beyond JUMP_WARN_ERRORS standard errors and beyond
    JUMP_SHARE_FLOOR."""
    if share is None or stderr is None:
        return False
    return abs(share) > max(JUMP_WARN_ERRORS * stderr, JUMP_SHARE_FLOOR)


def vhat_jump_share(forms: np.ndarray) -> tuple[float | None, float | None]:
    """(share, standard error) of V_hat carried by the jumps of the prox minimiser, from the
    per-replica rows (by parts, Hessian trace) of ``MonteCarloChannel.last_vhat_forms``:
    share = mean(by parts - Hessian) / mean(by parts) (docs/theory.md section 16.3)."""
    forms = np.asarray(forms, dtype=float)
    if forms.ndim != 2 or forms.shape[0] < 2 or forms.shape[1] != 2:
        return None, None
    full = float(np.mean(forms[:, 0]))
    if not math.isfinite(full) or full == 0.0:
        return None, None
    diff = forms[:, 0] - forms[:, 1]
    err = float(np.std(diff, ddof=1) / math.sqrt(diff.size) / abs(full))
    return float(np.mean(diff) / full), err


def replica_symmetry_warning(share: float, stderr: float) -> str:
    """The warning of a fixed point where the prox minimiser jumps (section 16.3)."""
    return (f"the prox minimiser jumps here (share of V_hat from the jumps {share:+.2%} "
            f"+- {stderr:.2%}): with a discontinuous prox the replica-symmetric fixed point "
            "is formally unstable (de Almeida-Thouless), so finite-d ERM and gradient "
            "training can deviate from it beyond finite-size effects (docs/theory.md 16.3)")


MC_FIELDS = ("m", "q", "V", "m_hat", "q_hat", "V_hat", "train_error", "test_error",
             "matrix_mse", "loss", "trace_per_d", "rank_fraction", "test_error_noisy")


#: the two prox branches count as different maps here beyond this share of the samples
#: (a few samples in 10^4 move the map by less than its Monte-Carlo error)
BRANCH_SPLIT_WARN = 1e-3


def prox_branch_warning(result) -> str:
    """Non-empty where the reported point's prox has competing minima on more than
    BRANCH_SPLIT_WARN of the samples: the two branches (docs/theory.md 16.8) are then
    different fixed points, and the user should know which one this is and what training
    was measured to do (docs/validation.md, "Which branch does training follow")."""
    split = getattr(result, "prox_branch_split", None)
    if split is None or not split > BRANCH_SPLIT_WARN:
        return ""
    branch = result.prox_branch
    other = "global" if branch == "teacher" else "teacher"
    what = {"global": "the global minimiser of every sample's prox, the replica-symmetric "
                      "ERM global minimum",
            "teacher": "the descent from the teacher's logits, the paper's SE"}
    return (f"the prox has competing minima on {100 * split:.2g} % of the samples here, so "
            f"the SE's two prox branches are different fixed points; this is the {branch} "
            f"branch ({what[branch]}), --prox-branch {other} gives the other; which one "
            "gradient training approaches as d grows is measured in docs/validation.md "
            "(\"Which branch does training follow\")")


def _observables(se: StateEvolution, ch: ChannelSE, den=None) -> np.ndarray:
    """Every MC_FIELDS quantity from channel-side values ``ch`` and the denoiser's
    output ``den`` (m, q, V, trace_per_d, rank_fraction, penalty_per_d2; default: applied
    to ch)."""
    if den is None:
        d = se.overlaps(ch)
        den = (d.m, d.q, d.V, d.trace_per_d, d.rank_fraction, d.penalty_per_d2)
    m, q, V, trace, rank, pen = den
    return np.array([m, q, V, ch.m_hat, ch.q_hat, ch.V_hat, ch.train_error,
                     ch.test_error, se.Q0 - 2.0 * m + q,
                     ch.loss_per_sample + se.penalty_per_sample(pen), trace, rank,
                     ch.test_error_noisy])


def _observable_jacobian(se: StateEvolution, x: np.ndarray, rel_step: float = 1e-3) -> np.ndarray | str:
    """d(MC_FIELDS)/d(m, q, V) of the mean map at x by forward differences (steps
    rel_step max(|x_i|, 1e-2), flipped when the forward step leaves the domain);
    rows 0..2 are the SE map's Jacobian J.  A string says why it is unavailable."""
    x = np.asarray(x, dtype=float)
    O0 = _observables(se, se.hats(x))
    grad = np.empty((O0.size, 3))
    for i in range(3):
        h = rel_step * max(abs(x[i]), 1e-2)
        for step in (h, -h):
            xs = x.copy()
            xs[i] += step
            if se.valid(xs):
                break
        else:
            return f"no valid finite-difference step in {('m', 'q', 'V')[i]} at the fixed point"
        try:
            grad[:, i] = (_observables(se, se.hats(xs)) - O0) / step
        except ValueError as exc:
            return str(exc)
    return grad


def t_halfwidths(stderr: dict[str, float] | None, dof: int | None,
                 level: float = 0.95) -> dict[str, float] | None:
    """Half-widths t_{(1 + level)/2, dof} x stderr of two-sided intervals at ``level``
    for standard errors estimated with ``dof`` degrees of freedom (Student's law: the
    error estimate of R replicas is itself uncertain, R - 1 dof)."""
    if stderr is None or dof is None or dof < 1:
        return None
    from scipy.stats import t as student

    q = float(student.ppf(0.5 + 0.5 * level, dof))
    return {k: (q * v if v is not None else None) for k, v in stderr.items()}


def propagated_mc_stderr(
    se: StateEvolution, x: np.ndarray, grad: np.ndarray | None = None
) -> tuple[dict[str, float] | None, str]:
    """Monte-Carlo standard error of every reported field, fixed point included.

    With common random numbers, replica r of the RQMC integrals defines its own
    deterministic SE map F_r = F + e_r, and the solver finds the fixed point x* of
    the mean map F.  To first order replica r alone would give
        delta x_r = (I - J)^(-1) e_r(x*),   J = dF/dx at x*,
    and an observable O (errors, loss, hats, trace, rank; O = O(c(x)) with c the
    channel-side means) moves by
        delta O_r = [O(c_r(x*)) - O(c(x*))] + (dO/dx) delta x_r.
    The reported error is std_r(delta O_r)/sqrt(R) (delta method over the R
    replicas).  dO/dx (and J, its first three rows) is ``grad`` if given (e.g.
    from the coarse level of the two-level solve: an error estimate needs no
    more than a few digits of it), else forward differences of the mean map
    (:func:`_observable_jacobian`).  The fixed-overlap spread alone (the first
    bracket) is much smaller than the total wherever the denoiser amplifies
    the noise of the hats, which it does at small lam.

    Returns (stderr per MC_FIELDS name, description of the method), or (the
    fixed-overlap spread, reason) when the propagation is impossible.
    """
    x = np.asarray(x, dtype=float)
    ch, reps = se.reported_hats(x)
    return _propagate(se, x, _replica_deviations(se, ch, reps), grad,
                      "coarse-level" if grad is not None else "fine-level")


def _replica_deviations(se: StateEvolution, ch: ChannelSE, reps: np.ndarray) -> np.ndarray:
    """Every MC_FIELDS quantity of each replica's channel-side values ``reps`` (rows:
    replicas, columns: SE_FIELDS) minus that of their mean ``ch``, at fixed overlaps:
    replica r's map error e_r, the input of the delta method (R x MC_FIELDS)."""
    return (np.array([_observables(se, ChannelSE(*map(float, row))) for row in reps])
            - _observables(se, ch))


def averaged_mc_stderr(se: StateEvolution, rep: AveragedReport,
                       grad: np.ndarray | None) -> tuple[dict[str, float], str]:
    """The Monte-Carlo error of a fixed point found by averaging Newton iterates on fresh
    draws (:func:`solve_averaged_fresh`): m, q, V carry the average's own error (batch
    means over the iterates); every other field, evaluated on the common draws at the
    average, the replica spread there at fixed overlaps plus the average's covariance
    (the iterates' correlations scaled to those errors) propagated by its derivative in
    (m, q, V) (``grad``, the smoothed observable Jacobian)."""
    x = np.asarray(rep.x, dtype=float)
    dev = _replica_deviations(se, *se.reported_hats(x))
    spread = np.std(dev, axis=0, ddof=1) / math.sqrt(dev.shape[0])
    sd = np.std(rep.iterates, axis=0, ddof=1)
    corr = np.corrcoef(rep.iterates.T) if np.all(sd > 0) else np.eye(3)
    cov = corr * np.outer(rep.stderr, rep.stderr)
    G = np.zeros((len(MC_FIELDS), 3)) if grad is None else np.array(grad, dtype=float)
    G[:3] = np.eye(3)  # m, q, V are the average itself
    spread[:3] = 0.0
    spread[MC_FIELDS.index("matrix_mse")] = 0.0  # Q0 - 2 m + q of the average
    prop = np.einsum("ij,jk,ik->i", G, cov, G)
    err = np.sqrt(spread ** 2 + np.maximum(prop, 0.0))
    return ({k: float(v) for k, v in zip(MC_FIELDS, err)},
            f"averaged fixed point: batch means over {len(rep.iterates)} fresh-draw iterates "
            "for (m, q, V), propagated to the other fields with the smoothed Jacobian, plus "
            "their replica spread at the average")


def propagated_sampling_stderr(se: StateEvolution, x: np.ndarray) -> tuple[dict[str, float] | None, str]:
    """Sampling error of the finite-d mode (GOE draws of the denoiser side), propagated
    through the fixed point exactly as :func:`propagated_mc_stderr` does for the RQMC
    replicas of the channel side: draw r alone defines the map F_r = F + e_r."""
    x = np.asarray(x, dtype=float)
    ch = se.hats(x)
    reps = se.denoiser.replica_functionals(ch.m_hat, ch.q_hat, ch.V_hat)
    O0 = _observables(se, ch, tuple(reps.mean(axis=0)))
    dev = np.array([_observables(se, ch, tuple(row)) for row in reps]) - O0
    return _propagate(se, x, dev, None, "fine-level")


def _propagate(se: StateEvolution, x: np.ndarray, dev: np.ndarray, grad, source: str):
    """The delta method of :func:`propagated_mc_stderr` for per-replica deviations
    ``dev`` (R x MC_FIELDS) of the observables at fixed overlaps x."""
    R = dev.shape[0]
    spread = {k: float(v) for k, v in zip(MC_FIELDS, np.std(dev, axis=0, ddof=1) / math.sqrt(R))}
    if grad is None:
        grad = _observable_jacobian(se, x)
    if isinstance(grad, str):
        return spread, f"replica spread at fixed overlaps only (not propagated: {grad})"
    A = np.eye(3) - grad[:3]
    if not np.all(np.isfinite(A)) or np.linalg.cond(A) > 1e12:
        return spread, "replica spread at fixed overlaps only (not propagated: I - J is singular)"
    dx = np.linalg.solve(A, dev[:, :3].T).T  # (R, 3)
    total = dev + dx @ grad.T  # rows m, q, V reduce to dx itself: e_r + J dx_r = dx_r
    err = np.std(total, axis=0, ddof=1) / math.sqrt(R)
    return ({k: float(v) for k, v in zip(MC_FIELDS, err)},
            f"delta method over {R} replicas through the fixed point ({source} Jacobian)")


def _checked_run(rep, fields: dict[str, float]) -> tuple:
    """(report, fields) of one start; a converged report whose point's fields could not be
    evaluated (all NaN: the channel side raised there) is reported as failed, not as a
    converged point without numbers."""
    if rep.converged and not math.isfinite(fields.get("m", math.nan)):
        rep = replace(rep, success=False, status=Status.FAILED,
                      message=f"{rep.message}; but the point's fields could not be evaluated "
                              "there (the channel side raised ValueError)")
    return rep, fields


def _assemble(se: StateEvolution, rep, name: str) -> dict[str, float]:
    """Channel and denoiser quantities at the final iterate (consistent to the residual)."""
    nan = float("nan")
    try:
        ch, _ = se.reported_hats(rep.x)
        den = se.overlaps(ch)
    except ValueError:
        return {k: nan for k in ("m", "q", "V", "m_hat", "q_hat", "V_hat", "train_error",
                                 "test_error", "matrix_mse", "loss", "rank_fraction",
                                 "trace_per_d", "quadrature_error", "test_error_noisy")
                } | {"loss": math.inf}
    m, q, V = den.m, den.q, den.V
    if isinstance(rep, AveragedReport) and rep.converged:
        # the average over fresh draws estimates the fixed point of the mean map better
        # than one common-draws evaluation there: report it (the hats are evaluated at it)
        m, q, V = (float(v) for v in rep.x)
    return {
        "m": m, "q": q, "V": V,
        "m_hat": ch.m_hat, "q_hat": ch.q_hat, "V_hat": ch.V_hat,
        "train_error": ch.train_error, "test_error": ch.test_error,
        "test_error_noisy": ch.test_error_noisy,
        "matrix_mse": se.Q0 - 2.0 * m + q,
        "loss": ch.loss_per_sample + se.penalty_per_sample(den.penalty_per_d2),
        "rank_fraction": den.rank_fraction, "trace_per_d": den.trace_per_d,
        "quadrature_error": den.quadrature_error,
    }
