"""Channel-side expectations of the SE by randomised quasi-Monte Carlo (docs/theory.md "Channel
side" and "V_hat where the prox minimiser jumps").

For overlaps (m, q, V) the K-dimensional Gaussian channel is

    u* ~ N(0, Q0 I_K),  omega | u* ~ N((m/Q0) u*, c I_K),  c = q - m^2/Q0,
    y = labels of h* = tau o u* (noise on the outputs or on the logits),
    uhat = prox(y, omega, V),  g_out = (uhat - omega)/V,

and the conjugates and errors are expectations over (u*, omega, noise):

    Vh = -2 alpha E[tr d g_out / d omega],     qh = 2 alpha E ||g_out||^2,
    mh = 2 alpha E[g_out . (u* - (m/q) omega)] / (Q0 - m^2/q),
    e_train = E sum (y - g(h(uhat)))^2,  e_test = E ||g(h(u*)) - g(h(omega))||^2,
    e_test_noisy = E ||y - g(h(omega))||^2,  loss per sample = e_train / 2.

Every RQMC point gives a pair of samples that share u* and the noise,

    omega_+- = centre +- s eta,   centre = (m/Q0) u* + sqrt((1 - theta) c) eta0,
    s^2 = theta c,

each an exact sample of omega | u* (theta = THETA); all averages use both.  The
prox minimiser is a global minimiser of a non-convex problem and jumps where two
local minima exchange (small lam, large V), so Vh is estimated by Gaussian
integration by parts in eta, which counts the jumps, with a zero-mean control
variate built at the eta-independent centre:

    tr d g_out/d omega  ~  (g(omega_+) - g(omega_-)) . eta / (2 s)
                           - (eta^T A_c eta - tr A_c),
    A_c = ((I + V H(uhat_c))^-1 - I) / V  (prox Jacobian at the centre; isotropic
    -tr/(V K) I where the channel has no Hessian batch).

The Hessian trace 2 alpha E[tr(I - (I + V H)^-1)]/V counts only the smooth part
of the derivative; it is used where c = 0 (omega determined by u*: nothing jumps
in a direction the data do not explore; q = 0 itself is evaluated at q = Q_MIN Q0,
where the pairs have a spread, so that the estimator is continuous as q -> 0); both
forms of the last evaluation are kept per replica in
``MonteCarloChannel.last_vhat_forms``.

The standard normals (u*/sqrt Q0, eta, eta0, noise) are drawn ONCE from scrambled
Sobol sequences -- common random numbers across SE iterations, so that the SE
map (m, q, V) -> hats is a deterministic, smooth function and a fixed point
exists -- in ``replicas`` independent scramblings; the spread over replicas gives
the standard error of each field at fixed overlaps.  The test errors of the reported point
need no prox: they are averaged over a separate, larger test-only sample set
(``MonteCarloChannel.test_fields``; u* and omega | u* drawn directly, independent
scramblings), where the SE iteration itself uses those of its own samples.  How that noise
moves the
fixed point itself is propagated by amp_attention.solvers.state_evolution (delta method over
the replicas, ``propagated_mc_stderr``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from amp_attention._channel_kernels import stein_traces, threaded_tasks
from amp_attention.channels.branches import check_prox_branch, teacher_branch, teacher_descent
from amp_attention.channels.base import (ChannelSE, optional_member, overlap_split,
                                         stein_available)

SE_FIELDS = ("m_hat", "q_hat", "V_hat", "train_error", "test_error", "loss_per_sample",
             "test_error_noisy")


@dataclass(frozen=True)
class GaussianDraws:
    """Standard normal draws per replica and RQMC point: ustar (R, N, K) for u*/sqrt(Q0),
    eta (R, N, K) the antithetic direction, eta0 (R, N, K) the centre's spread, noise
    (R, N, P)."""

    ustar: np.ndarray
    eta: np.ndarray
    eta0: np.ndarray
    noise: np.ndarray

    @property
    def replicas(self) -> int:
        return self.ustar.shape[0]

    @property
    def log2_n(self) -> int:
        """log2 of the samples per replica (two per RQMC point)."""
        return int(self.ustar.shape[1]).bit_length()

    def prefix(self, n: int) -> "GaussianDraws":
        """The first n points of every replica."""
        return GaussianDraws(self.ustar[:, :n], self.eta[:, :n], self.eta0[:, :n],
                             self.noise[:, :n])


#: bytes of Sobol draws kept by sobol_normals for reuse (least recently used dropped first)
SOBOL_MEMO_BYTES = 256 * 2**20


class SobolMemo:
    """The last few sobol_normals results, read-only, at most SOBOL_MEMO_BYTES in all.  A sweep
    builds one SE per point (and a fine solve one more), each asking for the same draws; the
    scrambled nets are a pure function of (dim, log2_n, replicas, seed), so the memo changes no
    number, only the ~20 ms each set takes to draw."""

    def __init__(self, budget: int):
        self.budget = budget
        self.items: dict[tuple, np.ndarray] = {}

    def get(self, key: tuple) -> np.ndarray | None:
        arr = self.items.pop(key, None)
        if arr is not None:
            self.items[key] = arr  # most recently used last
        return arr

    def put(self, key: tuple, arr: np.ndarray) -> None:
        if arr.nbytes > self.budget:
            return
        arr.flags.writeable = False
        self.items[key] = arr
        while sum(a.nbytes for a in self.items.values()) > self.budget:
            self.items.pop(next(iter(self.items)))


_SOBOL_MEMO = SobolMemo(SOBOL_MEMO_BYTES)


def clear_draw_memo() -> None:
    """Forget the draws sobol_normals keeps (a benchmark of a cold point calls this first)."""
    _SOBOL_MEMO.items.clear()


def sobol_normals(dim: int, log2_n: int, replicas: int, seed: int) -> np.ndarray:
    """(replicas, 2**log2_n, dim) standard normals from independently scrambled Sobol nets
    (read-only: the same array is handed to every caller with the same arguments)."""
    if dim < 1 or log2_n < 1 or replicas < 2:
        raise ValueError("need dim >= 1, log2_n >= 1 and replicas >= 2 (for an error estimate)")
    key = (int(dim), int(log2_n), int(replicas), int(seed))
    out = _SOBOL_MEMO.get(key)
    if out is None:
        out = _sobol_normals(*key)
        _SOBOL_MEMO.put(key, out)
    return out


def _sobol_normals(dim: int, log2_n: int, replicas: int, seed: int) -> np.ndarray:
    from scipy.stats import qmc  # here: importing scipy.stats costs ~0.5 s at start-up

    seeds = np.random.SeedSequence(seed).spawn(replicas)
    out = np.empty((replicas, 2**log2_n, dim))

    def replica(r: int) -> None:
        pts = qmc.Sobol(d=dim, scramble=True,
                        seed=np.random.default_rng(seeds[r])).random_base2(log2_n)
        # Scrambled points never hit 0 or 1 exactly, but clip against rounding.
        np.clip(pts, 1e-16, 1.0 - 1e-16, out=pts)
        ndtri(pts, out=out[r])

    # the replicas on the row threads: ndtri and most of the scrambling release the GIL
    # (~1.7x on 2 threads at L = 5's 2^15 x 70 coordinates a replica); each replica's
    # numbers are its own seed's, whichever thread draws them
    threaded_tasks(replicas, replica)
    return out


#: largest dimension of scipy's Sobol sequence (its direction numbers)
SOBOL_MAX_DIM = 21201


def check_draw_size(channel, log2_n: int, replicas: int) -> None:
    """Refuse, naming L, channel integrals whose Gaussian draws do not exist or do not fit:
    3K + noise_dim Sobol coordinates per point (K = L(L+1)/2), 2^(log2_n - 1) points
    (pairs of samples), held as replicas x 2^(log2_n - 1) x dim doubles."""
    from amp_attention.resources import gib, memory_shortfall

    dim = draw_dimension(channel)
    L = channel.L
    if dim > SOBOL_MAX_DIM:
        raise ValueError(f"L is too large for the Monte-Carlo channel integrals of the "
                         f"{channel.name} channel: L = {L} needs 3K + {channel.noise_dim} = "
                         f"{dim} Sobol coordinates per point (K = L(L+1)/2), more than the "
                         f"{SOBOL_MAX_DIM} of scipy's Sobol sequence")
    need = draw_bytes(channel, log2_n, replicas)
    why = memory_shortfall(need)
    if why:
        raise ValueError(f"L = {L}: the Monte-Carlo channel integrals hold {replicas} replicas "
                         f"x 2^{log2_n - 1} points x {dim} coordinates ({gib(need)}) and {why}; "
                         "lower L, the points (log2_n) or the replicas")


#: Gaussian coordinates per u-coordinate and point: u*, eta, eta0
DRAWS_PER_K = 3


def draw_dimension(channel) -> int:
    """Sobol coordinates per point of the channel integrals: 3K + noise_dim."""
    return DRAWS_PER_K * channel.K + channel.noise_dim


def draw_bytes(channel, log2_n: int, replicas: int) -> int:
    """Bytes of the Gaussian draws: replicas x 2^(log2_n - 1) points x draw_dimension doubles."""
    return 8 * replicas * 2**(log2_n - 1) * draw_dimension(channel)

#: how V_hat is estimated (MonteCarloChannel.vhat_form)
VHAT_FORMS = ("by_parts", "hessian")


def channel_draws(K: int, noise_dim: int, log2_n: int, replicas: int, seed: int) -> GaussianDraws:
    """The draws of 2**log2_n samples per replica: 2**(log2_n - 1) points, each a pair."""
    if log2_n < 2:
        raise ValueError(f"log2_n must be >= 2 (2^log2_n samples in pairs), got {log2_n!r}")
    g = sobol_normals(DRAWS_PER_K * K + noise_dim, log2_n - 1, replicas, seed)
    return GaussianDraws(g[..., :K], g[..., K:2 * K], g[..., 2 * K:3 * K], g[..., 3 * K:])


#: the test-only sample set (MonteCarloChannel.test_fields): by default 2^TEST_LOG2_N_EXTRA
#: times the SE's own samples, at most 2^TEST_LOG2_N_MAX per replica and TEST_DRAW_BUDGET
#: bytes of draws
TEST_LOG2_N_EXTRA = 3
TEST_LOG2_N_MAX = 16
TEST_DRAW_BUDGET = 64 * 2**20


def test_draw_dimension(channel) -> int:
    """Gaussian coordinates per test-only sample: u* and omega's own spread (K each) and the
    label noise (noise_dim), or those of one row (the channel's ``row_draw_dimension``) where
    the channel has ``row_test_terms``."""
    if optional_member(channel, "row_test_terms") is not None:
        return int(channel.row_draw_dimension)
    return 2 * channel.K + channel.noise_dim


#: the control variate's own samples (MonteCarloChannel.step_log2_n): by default 2^3 times
#: the SE's own, at most 2^STEP_LOG2_N_MAX per replica and STEP_DRAW_BUDGET bytes of draws
STEP_LOG2_N_EXTRA = 3
STEP_LOG2_N_MAX = 16
STEP_DRAW_BUDGET = 128 * 2**20


def auto_step_log2_n(channel, replicas: int, log2_n: int) -> int:
    """log2 of the control variate's samples per replica chosen by default (0: the channel
    has no ``newton_step`` or no convexity certificate ``convex_below``): the largest k <= min(log2_n + STEP_LOG2_N_EXTRA,
    STEP_LOG2_N_MAX) whose draws (draw_bytes) fit STEP_DRAW_BUDGET, at least log2_n."""
    from amp_attention.channels.base import optional_member

    if optional_member(channel, "newton_step") is None or optional_member(
            channel, "convex_below") is None:
        return 0
    k = min(log2_n + STEP_LOG2_N_EXTRA, STEP_LOG2_N_MAX)
    while k > log2_n and draw_bytes(channel, k, replicas) > STEP_DRAW_BUDGET:
        k -= 1
    return k


def test_draw_bytes(channel, test_log2_n: int, replicas: int) -> int:
    """Bytes of the test-only draws: replicas x 2^test_log2_n x test_draw_dimension doubles."""
    return 8 * replicas * 2**test_log2_n * test_draw_dimension(channel)


def check_test_draw_size(channel, test_log2_n: int, replicas: int) -> None:
    """Refuse a test-only sample set whose draws do not fit in memory (naming test_log2_n)."""
    from amp_attention.resources import gib, memory_shortfall

    need = test_draw_bytes(channel, test_log2_n, replicas)
    why = memory_shortfall(need)
    if why:
        raise ValueError(f"test_log2_n = {test_log2_n}: the test-only samples hold {replicas} "
                         f"replicas x 2^{test_log2_n} samples x {test_draw_dimension(channel)} "
                         f"coordinates ({gib(need)}) and {why}; lower test_log2_n")


def auto_test_log2_n(channel, replicas: int, log2_n: int) -> int:
    """log2 of the test-only samples per replica chosen by default: the largest k <=
    min(log2_n + TEST_LOG2_N_EXTRA, TEST_LOG2_N_MAX) whose draws (replicas x 2^k x
    test_draw_dimension doubles) fit TEST_DRAW_BUDGET (at least 2^4)."""
    k = min(log2_n + TEST_LOG2_N_EXTRA, TEST_LOG2_N_MAX)
    while k > 4 and test_draw_bytes(channel, k, replicas) > TEST_DRAW_BUDGET:
        k -= 1
    return k


def extra_sample_sizes(channel, replicas: int, log2_n: int, test_log2_n: int | None,
                       step_log2_n: int | None) -> tuple[int, int]:
    """(test_log2_n, step_log2_n) of the test-only and control-variate sample sets, None
    resolved to :func:`auto_test_log2_n` and :func:`auto_step_log2_n` (what
    :class:`MonteCarloChannel` uses and the CLI reports)."""
    test = auto_test_log2_n(channel, replicas, log2_n) if test_log2_n is None else int(test_log2_n)
    step = auto_step_log2_n(channel, replicas, log2_n) if step_log2_n is None else int(step_log2_n)
    return test, step


def sample_set_bytes(channel, log2_n: int, replicas: int, test_log2_n: int,
                     step_log2_n: int) -> int:
    """Bytes of every sample set of a :class:`MonteCarloChannel`: its own draws, the test-only
    draws and the control variate's draws (a size 0: that set is off)."""
    need = draw_bytes(channel, log2_n, replicas)
    if test_log2_n:
        need += test_draw_bytes(channel, test_log2_n, replicas)
    if step_log2_n:
        need += draw_bytes(channel, step_log2_n, replicas)
    return need


def check_sample_sets(channel, log2_n: int, replicas: int, test_log2_n: int,
                      step_log2_n: int) -> None:
    """Refuse sample sets that fit one by one but not together (each set is checked on its
    own first: check_draw_size, check_test_draw_size), naming the three sizes."""
    from amp_attention.resources import gib, memory_shortfall

    need = sample_set_bytes(channel, log2_n, replicas, test_log2_n, step_log2_n)
    why = memory_shortfall(need)
    if why:
        raise ValueError(f"the Monte-Carlo channel integrals' sample sets together (2^{log2_n} "
                         f"own, 2^{test_log2_n} test-only and 2^{step_log2_n} control-variate "
                         f"samples per replica, {replicas} replicas: {gib(need)}) and {why}; "
                         "lower test_log2_n or step_log2_n (0 turns that set off) or log2_n")


@dataclass(frozen=True)
class PairedSamples:
    """The samples of every replica at overlaps (m, q), replica-major: row block r of
    ``ustar`` and ``omega`` (2N, K each) holds replica r's N points' omega_+ rows, then their
    omega_- rows; ``centre`` and ``eta`` (R N, K) the centres and directions, s the spread."""

    ustar: np.ndarray
    omega: np.ndarray
    centre: np.ndarray
    s: float
    eta: np.ndarray
    replicas: int

    @property
    def n_points(self) -> int:
        """Points (pairs) per replica."""
        return self.centre.shape[0] // self.replicas

    def per_replica(self, v: np.ndarray) -> np.ndarray:
        """Per-sample values (R 2N,) or per-point values (R N,) -> their replica means (R,)."""
        return v.reshape(self.replicas, -1).mean(axis=1)


@dataclass(frozen=True)
class StepTerms:
    """The control variate's terms per sample (``m``, ``q``, ``stein``: (R 2N,)) and per pair
    (``X``: (R, N), the V_hat integration by parts) on the SE's own samples
    (:meth:`MonteCarloChannel._step_terms`); ``stein`` None without Stein's form."""

    m: np.ndarray
    q: np.ndarray
    X: np.ndarray
    stein: np.ndarray | None


def student_given_teacher(m: float, q: float, Q0: float) -> tuple[float, float]:
    """(a, c) of omega | u* = a u* + sqrt(c) z, z ~ N(0, 1): a = m/Q0, c = q - m^2/Q0 (clipped
    at 0), so that (u*, omega) has covariance [[Q0, m], [m, q]] (Q0 = 0: a = 0, c = q)."""
    if Q0 > 0:
        return m / Q0, max(q - m * m / Q0, 0.0)
    return 0.0, q


def paired_samples(draws: GaussianDraws, m: float, q: float, Q0: float,
                   theta: float) -> PairedSamples:
    """u* = sqrt(Q0) zeta, omega_+- = (m/Q0) u* + sqrt((1 - theta) c) eta0 +- sqrt(theta c) eta
    with c = q - m^2/Q0: each (u*, omega_+-) has covariance [[Q0, m], [m, q]]."""
    a, c = student_given_teacher(m, q, Q0)
    ustar = math.sqrt(Q0) * draws.ustar
    centre = a * ustar + math.sqrt((1.0 - theta) * c) * draws.eta0
    s = math.sqrt(theta * c)
    eta = draws.eta
    R, N, K = ustar.shape
    omega = np.concatenate([centre + s * eta, centre - s * eta], axis=1).reshape(2 * R * N, K)
    return PairedSamples(np.concatenate([ustar, ustar], axis=1).reshape(2 * R * N, K), omega,
                         centre.reshape(R * N, K), s, eta.reshape(R * N, K), R)


class MonteCarloChannel:
    """SE channel side of a (non-linear) channel by RQMC with common random numbers.

    2**``log2_n`` samples per replica (2**(log2_n - 1) scrambled-Sobol points, each
    an antithetic pair; module docstring), ``replicas`` independent scramblings.
    ``se(m, q, V, Q0, alpha)`` returns a :class:`ChannelSE` (replica means) and
    stores the replica standard errors in ``last_stderr`` and the per-replica
    values (rows: replicas, columns: ``SE_FIELDS``) in ``last_replicas``; ``n_failed`` counts
    proximal problems whose multi-start Newton did not converge.

    ``warm_start``: from the second evaluation on, each replica's prox restarts
    its data-side Newton runs from the end points of the previous evaluation
    (the points are common random numbers, and successive SE iterates are
    close), ~3x cheaper; the first evaluation starts them from the prox's own
    starting points without the continuation (~1.6x cheaper than cold).  Guard,
    on every evaluation: the full multi-start is rerun on every 16th
    sample; if it finds a lower objective anywhere, the whole replica is
    solved cold (``n_warm_fallback`` counts these; ``n_warm`` the warm tries).
    At beta = 1 warm and cold agree to 1e-12; where the prox has competing
    minima (large beta and V) the guard triggers.
    """

    def __init__(self, channel, *, log2_n: int = 14, replicas: int = 8, seed: int = 0,
                 draws: GaussianDraws | None = None, warm_start: bool = False,
                 vhat_form: str = "by_parts", test_log2_n: int | None = 0,
                 step_log2_n: int | None = 0, prox_branch: str = "global"):
        self.channel = channel
        #: which minimiser of the prox the map takes where it has several: "global" or
        #: "teacher" (descent from u*; amp_attention.channels.branches, docs/theory.md 16.8)
        self.prox_branch = check_prox_branch(prox_branch)
        #: teacher branch: the share of the last evaluation's samples whose teacher-branch
        #: minimiser is not the global one (None for the global branch)
        self.last_branch_split: float | None = None
        #: teacher branch by the descent from u* alone (branches.teacher_descent: ~5x
        #: cheaper, equal to the global branch's rows where the minimisers coincide to the
        #: descent's tolerance instead of bit for bit; last_branch_split then None): the
        #: fresh draws of the averaged solve set it
        self.teacher_alone = False
        self._seed = seed
        self._test_set: tuple | None = None
        self._test_cache: tuple | None = None
        self._step_set: tuple | None = None
        self._probe_set: tuple | None = None
        self._own_label_set: tuple | None = None
        if vhat_form not in VHAT_FORMS:
            raise ValueError(f"vhat_form must be one of {VHAT_FORMS}, got {vhat_form!r}")
        #: "by_parts" (default; counts the jumps of the prox minimiser) or "hessian" (the
        #: smooth part only: what the engine computed before, kept for comparisons)
        self.vhat_form = vhat_form
        if draws is None:
            check_draw_size(channel, log2_n, replicas)
        else:  # a prefix of another channel's draws
            replicas, log2_n = draws.replicas, draws.log2_n
        #: log2 of the test-only samples per replica (test_fields); 0: none, the test
        #: errors come from the SE's own samples; None: auto_test_log2_n.  log2 of the samples
        #: per replica of the Newton-step control variate (docs/theory.md 16.6; 0: none;
        #: None: auto_step_log2_n): m_hat, q_hat and V_hat are its mean on these samples
        #: plus the mean of (prox term - its term) on the SE's own samples
        self.test_log2_n, self.step_log2_n = extra_sample_sizes(
            channel, replicas, log2_n, test_log2_n, step_log2_n)
        if self.test_log2_n and self.test_log2_n < 4:
            raise ValueError(f"test_log2_n must be 0 (no test-only samples) or >= 4, "
                             f"got {test_log2_n!r}")
        if test_log2_n:
            check_test_draw_size(channel, self.test_log2_n, replicas)
        if self.step_log2_n:
            if self.step_log2_n < 2:
                raise ValueError(f"step_log2_n must be 0 (no control variate) or >= 2, "
                                 f"got {step_log2_n!r}")
            check_draw_size(channel, self.step_log2_n, replicas)
        if draws is None:
            check_sample_sets(channel, log2_n, replicas, self.test_log2_n, self.step_log2_n)
        self.draws = (channel_draws(channel.K, channel.noise_dim, log2_n, replicas, seed)
                      if draws is None else draws)
        self.last_stderr: dict[str, float] = {}
        self.last_replicas = np.empty((0, len(SE_FIELDS)))
        self.n_failed = 0
        self.n_evaluated = 0
        self._cache: tuple | None = None
        self.warm_start = bool(warm_start)
        self.n_warm = 0
        self.n_warm_fallback = 0
        # Stein's identity for m_hat needs d g_out / d u* through the labels:
        # available for output noise on channels that expose their Jacobian.
        self.stein = stein_available(channel)
        #: evaluations with Stein's form of m_hat (_prefer_stein), wholly or blended
        self.n_stein = 0
        #: evaluations whose m_hat was not wholly Stein's (_prefer_stein)
        self.n_stein_rejected = 0
        #: rows of the control variate's Newton steps (own and big sets) whose I + V H had
        #: eigenvalues raised to the floor (_channel_kernels.STEP_FLOOR)
        self.n_step_raised = 0
        #: end points of the last evaluation's Newton runs, every replica's rows (warm_start)
        self._ends: np.ndarray | None = None
        #: (m, q, V) at which the control variate's step function is taken (None: at each
        #: evaluation's own overlaps; set_control_variate_reference), and its terms there
        self._cv_reference: tuple[float, float, float] | None = None
        self._cv_frozen: tuple | None = None
        #: control-variate evaluations on the big sample set (each 2^step_log2_n per replica)
        self.n_step_means = 0
        #: per replica (rows) the two V_hat forms of the last evaluation: integration by
        #: parts (used) and the Hessian trace (smooth part only), columns in that order
        self.last_vhat_forms = np.empty((0, 2))
        #: the last two-level evaluation's control-variate weight {"b": b}
        #: (control_variate_weight; empty where the control variate did not run)
        self.last_cv_weights: dict[str, float] = {}
        #: evaluate without the control variate (set_plain_estimators)
        self.plain_estimators = False

    #: share of c = Var(omega | u*) carried by the antithetic direction (the rest is the
    #: centre's spread): smaller theta lowers the variance of the smooth part of the
    #: V_hat estimator, larger theta that of its jump part (docs/theory.md section 16.2)
    THETA = 0.25
    #: theta of the control variate's own samples: any theta gives exact samples of omega | u*
    #: and an exact integration by parts; the step is smooth, so a narrow pair turns its
    #: by-parts term into eta^T (dG/domega) eta, which the centre's term nearly cancels, and
    #: the one-sided difference against the centre (_step_means) leaves O(sqrt(theta)) odd
    #: terms (at 0.01 they raised the V_hat term's spread 1.0-1.5x, at 1e-4 0.99-1.03x)
    STEP_THETA = 1e-4
    #: Newton iterations of the control variate's output function from omega
    STEP_ITERATIONS = 2

    @property
    def log2_n(self) -> int:
        """log2 of the samples per replica (two per RQMC point)."""
        return self.draws.log2_n

    def prefix(self, log2_n: int) -> "MonteCarloChannel":
        """The same channel on the first 2**log2_n samples (2**(log2_n - 1) points) of
        every replica.

        A prefix of a scrambled Sobol sequence of length 2**k is itself a scrambled
        (0, k, s)-net, so the coarse integrals are a valid RQMC estimate whose
        points are a subset of the fine ones (used by the two-level SE solve).
        """
        return MonteCarloChannel(self.channel, draws=self.draws.prefix(2**(int(log2_n) - 1)),
                                 warm_start=self.warm_start, vhat_form=self.vhat_form,
                                 prox_branch=self.prox_branch)

    def _stein_terms(self, y, uhat, ustar, V: float) -> np.ndarray:
        """Per-sample tr[(I + V H)^-1 J(uhat)^T J(u*)]: the Stein form of g_out . z / sqrt(rest).

        z enters only through the labels y = g(h(u*)) + noise, and
        d g_out / d y = (I + V H)^-1 J(uhat)^T (implicit differentiation of the
        prox's stationarity condition), d y / d u* = J(u*), so
        E[g_out . (u* - (m/q) omega)] = rest E[tr(d g_out / d u*)].
        """
        ch = self.channel
        fused = optional_member(ch, "stein_traces")
        if fused is not None:  # the same traces without the Jacobians and Hessians in memory
            return fused(y, uhat, ustar, V)
        Jh = np.ascontiguousarray(ch.output_jacobian(uhat), dtype=np.float64)
        Js = np.ascontiguousarray(ch.output_jacobian(ustar), dtype=np.float64)
        H = np.ascontiguousarray(ch.hessian_batch(y, uhat), dtype=np.float64)
        return stein_traces(Jh, Js, H, float(V))

    @property
    def name(self) -> str:
        return self.channel.name

    # Below this V the prox is evaluated at V_MIN: uhat = omega - V grad l + O(V^2), so
    # g_out -> -grad l(omega) and tr(I - (I + V H)^-1)/V -> tr H with an O(V_MIN |H|)
    # relative bias, far below the Monte-Carlo error.  Needed at the trivial fixed
    # point Shat = 0 (q = V = 0), which a large lam produces.
    V_MIN = 1e-7

    # Below q = Q_MIN Q0 the channel side is evaluated at q = Q_MIN Q0 (m unchanged, which
    # keeps m^2 <= q Q0).  At q = 0 the pairs have no spread (s = 0): neither the by-parts
    # V_hat nor the step control variate exists there, and the plain estimators they replace
    # differ from them by the Monte-Carlo error (~1e-3 in q_hat), so the map jumped at q = 0
    # and could 2-cycle between S = 0 and a tiny S where Shat leaves 0.  The exact map is
    # smooth at q = 0 (omega ~ N(0, q) enters through omega alone), so the floor moves it by
    # O(Q_MIN) relative while making the estimator continuous; the spread s ~ 1e-6 sqrt(Q0)
    # it leaves is far above the prox's rounding (the by-parts term is stable there to 1e-8).
    Q_MIN = 1e-12

    # Warm-started evaluations are checked against the full multi-start on every
    # CHECK_EVERY-th sample; one worse sample sends the replica back to a cold solve.
    CHECK_EVERY = 16

    def _guard_rows(self, R: int, n: int) -> np.ndarray:
        """Rows of the cold guard: every CHECK_EVERY-th sample of each replica's n, from an
        offset that differs between replicas (replica-major rows)."""
        return np.concatenate([r * n + np.arange(r % self.CHECK_EVERY, n, self.CHECK_EVERY)
                               for r in range(R)])

    def _prox(self, y: np.ndarray, omega: np.ndarray, V: float, R: int):
        """Prox of every replica's samples (replica-major rows): cold, or (``warm_start``)
        restarted from the end points of the previous evaluation on the same points, guarded
        per replica by a cold subset; a replica where the cold subset finds a lower objective
        is solved cold as a whole."""
        ch = self.channel
        ends = self._ends
        px = None
        if self.warm_start and ends is None and hasattr(ch, "prox_starts"):
            # First evaluation: the data-side runs start from the prox's own starting
            # points without the continuation (guarded like every warm evaluation).
            s = ch.prox_starts(y, omega, V)
            ends = np.concatenate([s, s[:, 1:2]], axis=1)
        if self.warm_start and ends is not None:
            px = ch.prox_batch(y, omega, V, warm_from=ends)
            n = y.shape[0] // R
            rows = self._guard_rows(R, n)
            cold = ch.prox_batch(y[rows], omega[rows], V)
            F = px.objective[rows]
            worse = cold.objective < F - 1e-10 * (1.0 + np.abs(F))
            self.n_warm += R
            bad = np.unique(rows[worse] // n)
            if bad.size:
                self.n_warm_fallback += int(bad.size)
                redo = (bad[:, None] * n + np.arange(n)).reshape(-1)
                fix = ch.prox_batch(y[redo], omega[redo], V)
                px = px.with_rows(redo, fix)
        if px is None:
            px = ch.prox_batch(y, omega, V)
        self._ends = px.ends if self.warm_start else None
        return px

    def test_error_at(self, m: float, q: float, Q0: float) -> float:
        """E||g(h(u*)) - g(h(omega))||^2 at overlaps (m, q) alone (no proximal solves): on the
        test-only samples where there are some (the reported test error's, :meth:`test_fields`),
        else on the draws of :meth:`se` (common random numbers either way: smooth in m, q)."""
        if not (q > 0 and math.isfinite(q)):
            raise ValueError(f"test_error_at needs q > 0, got q={q!r}")
        overlap_split(m, q, Q0)  # the overlaps' constraint, named
        if self.test_log2_n:
            return float(self.test_fields(m, q, Q0)[:, 0].mean())
        smp = paired_samples(self.draws, m, q, Q0, self.THETA)
        return float(np.mean(smp.per_replica(self.channel.test_terms(smp.ustar, smp.omega))))

    def test_fields(self, m: float, q: float, Q0: float) -> np.ndarray | None:
        """Per replica (rows) the test error E||g(h(u*)) - g(h(omega))||^2 and the noisy one
        E||y - g(h(omega))||^2 at overlaps (m, q) on the test-only samples (no prox:
        2^test_log2_n per replica, scrambled independently of the SE's own samples), shape
        (replicas, 2); None without a test-only set (test_log2_n = 0)."""
        if not self.test_log2_n:
            return None
        key = (m, q, Q0)
        if self._test_cache is not None and self._test_cache[0] == key:
            return self._test_cache[1]
        overlap_split(m, q, Q0)  # the overlaps' constraint, named
        ch = self.channel
        R = self.draws.replicas
        a, c = student_given_teacher(m, q, Q0)
        seed = np.random.SeedSequence([self._seed, 1]).generate_state(1)[0]
        rows = optional_member(ch, "row_test_terms")
        if rows is not None:
            # one row's integral (docs/theory.md 16.7): the draws are the same for every Q0
            g = sobol_normals(test_draw_dimension(ch), self.test_log2_n, R, seed)
            terms = rows(g.reshape(-1, g.shape[-1]), math.sqrt(Q0), a, math.sqrt(c))
        else:
            terms = self._all_rows_test_terms(Q0, a, c, seed)
        out = terms.reshape(R, -1, 2).mean(axis=1)
        self._test_cache = (key, out)
        return out

    def _all_rows_test_terms(self, Q0: float, a: float, c: float, seed) -> np.ndarray:
        """:meth:`test_fields`' per-sample (clean, noisy) test terms over all of h's rows, on
        test-only draws of u*, omega's own spread and the label noise (kept per Q0)."""
        ch = self.channel
        R = self.draws.replicas
        if self._test_set is None or self._test_set[0] != Q0:
            K = ch.K
            g = sobol_normals(test_draw_dimension(ch), self.test_log2_n, R, seed)
            ustar = math.sqrt(Q0) * g[..., :K].reshape(-1, K)
            if ch.noise == 0:
                # no label noise: y = g(h(u*)), the noisy test error is the clean one (the
                # noise normals are drawn all the same: the same Sobol points either way)
                y = None
            else:
                noise = g[..., 2 * K:].reshape(ustar.shape[0], -1)
                y = ch.labels_from_noise(ch.h_from_u(ustar), noise)
            self._test_set = (Q0, ustar, np.ascontiguousarray(g[..., K:2 * K].reshape(-1, K)), y)
        _, ustar, z, y = self._test_set
        fused = optional_member(ch, "test_and_train_terms")
        if fused is not None:
            terms = fused(ustar, z, y, a, math.sqrt(c))
        else:
            omega = a * ustar + math.sqrt(c) * z
            # the noisy test error ||y - g(h(omega))||^2 is the train term at omega
            t = ch.test_terms(ustar, omega)
            terms = np.column_stack([t, t if y is None else ch.train_terms(y, omega)])
        return terms

    def _centre_jacobian_cv(self, y: np.ndarray, smp: PairedSamples, V: float) -> np.ndarray:
        """Per point eta^T A_c eta - tr A_c, A_c = ((I + V H)^-1 - I)/V the prox Jacobian at
        the centre: zero mean (A_c does not depend on eta), close to the integration-by-
        parts term where g_out is smooth.  Any eta-independent A_c keeps the estimator
        exact, so the centre needs no global minimisation: one Newton run from the centre
        itself (the prox's run from omega).  It must not depend on earlier evaluations
        either (no warm start): the SE map stays a function of (m, q, V) alone."""
        ch = self.channel
        eta, K = smp.eta, ch.K
        fused = optional_member(ch, "centre_jacobian_cv")
        if fused is not None:  # the same, without the (n, K, K) Hessians and inverses
            return fused(y, smp.centre, V, eta)
        hess = optional_member(ch, "hessian_batch")
        newton = optional_member(ch, "newton_from")
        if hess is None or newton is None:
            # isotropic: A_c ~ -(tr(I - (I + V H)^-1)/V) I / K from a cold prox
            a = -np.asarray(ch.prox_batch(y, smp.centre, V).trace_term, dtype=np.float64) / (V * K)
            return a * (np.einsum("ni,ni->n", eta, eta) - K)
        uc = newton(y, smp.centre, V, smp.centre)[0]
        H = np.ascontiguousarray(hess(y, uc), dtype=np.float64)
        eye = np.eye(K)
        A = (np.linalg.inv(eye + V * H) - eye) / V
        return np.einsum("ni,nij,nj->n", eta, A, eta) - np.einsum("nii->n", A)

    @staticmethod
    def _pair_differences(smp: PairedSamples, g: np.ndarray) -> np.ndarray:
        """Per point (R, N) (g(omega_+) - g(omega_-)) . eta / (2 s): the integration-by-parts
        term of E[tr dg/domega] (module docstring)."""
        R, N = smp.replicas, smp.n_points
        K = g.shape[1]
        gr = g.reshape(R, 2, N, K)
        return np.einsum("rni,rni->rn", gr[:, 0] - gr[:, 1], smp.eta.reshape(R, N, K)) / (2.0 * smp.s)

    def _by_parts_terms(self, y: np.ndarray, smp: PairedSamples, g: np.ndarray, V: float,
                        centre_cv: bool = True) -> np.ndarray:
        """Per replica E[tr d g_out/d omega] by integration by parts over the pairs (module
        docstring), which counts the jumps of the prox minimiser (V_hat = -2 alpha times it);
        ``centre_cv=False``: without the centre's zero-mean control variate."""
        X = self._pair_differences(smp, g)
        if centre_cv:
            X = X - self._centre_jacobian_cv(y, smp, V).reshape(X.shape)
        return X.mean(axis=1)

    def _step_rows(self, y: np.ndarray, omega: np.ndarray, ustar: np.ndarray, V: float,
                   replicas: int) -> tuple:
        """(G, Stein's traces or None) of the control variate's output function at the
        rows ``omega``: STEP_ITERATIONS Newton steps of the prox objective from omega (I + V H's
        eigenvalues floored: a step function continuous in omega and V), and Stein's m_hat
        term tr[(I + V H)^-1 J(omega)^T J(u*)] where the SE uses Stein's form (0 where
        I + V H(omega) is singular)."""
        ch = self.channel
        fused = optional_member(ch, "newton_step_stein") if self.stein else None
        if fused is not None:  # the steps and Stein's traces at omega in one pass
            G, st, raised = fused(y, omega, ustar, V, steps=self.STEP_ITERATIONS,
                                  report_raised=True)
        else:
            G, _, raised = ch.newton_step(y, omega, V, steps=self.STEP_ITERATIONS,
                                          report_raised=True)
            st = None
            if self.stein:
                # a replica at a time unless the channel fuses the traces (the Jacobians are
                # M x K per sample)
                n = omega.shape[0] // (1 if optional_member(ch, "stein_traces") else replicas)
                st = np.concatenate([self._stein_terms(y[a:a + n], omega[a:a + n],
                                                       ustar[a:a + n], V)
                                     for a in range(0, omega.shape[0], n)])
        if st is not None:
            st = np.where(np.isfinite(st), st, 0.0)
        self.n_step_raised += int(np.count_nonzero(raised))
        return G, st

    def _step_terms(self, y: np.ndarray, smp: PairedSamples, V: float,
                    slope: float) -> "StepTerms":
        """The control variate's terms on the SE's own samples ``smp``, per sample (per pair
        for V_hat): those of m_hat, q_hat and V_hat by parts (and Stein's m_hat where the
        channel has it) with g_out replaced by the steps' G (:meth:`_step_rows`; docs/theory.md
        16.6)."""
        G, st = self._step_rows(y, smp.omega, smp.ustar, V, smp.replicas)
        # row dot products without (n, K) temporaries
        m = np.einsum("ij,ij->i", G, smp.ustar) - slope * np.einsum("ij,ij->i", G, smp.omega)
        return StepTerms(m, np.einsum("ij,ij->i", G, G), self._pair_differences(smp, G), st)

    def _labels(self, draws: GaussianDraws, Q0: float) -> tuple[np.ndarray, np.ndarray]:
        """(labels of every sample (2RN, M), labels of every point (RN, M)) of ``draws`` with
        u* = sqrt(Q0) zeta: the two samples of a point share u* and the noise, and the labels
        do not depend on the overlaps."""
        R, N, _ = draws.ustar.shape
        y1 = self._point_labels(draws, Q0)
        y = np.broadcast_to(y1.reshape(R, 1, N, -1), (R, 2, N, y1.shape[1])).reshape(2 * R * N, -1)
        return y, y1

    def _point_labels(self, draws: GaussianDraws, Q0: float) -> np.ndarray:
        """Labels of every point (RN, M) of ``draws`` with u* = sqrt(Q0) zeta (:meth:`_labels`
        without the per-sample copy)."""
        ch = self.channel
        R, N, K = draws.ustar.shape
        first = (math.sqrt(Q0) * draws.ustar).reshape(R * N, K)
        return ch.labels_from_noise(ch.h_from_u(first), draws.noise.reshape(R * N, -1))

    def _own_labels(self, Q0: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_labels` of the SE's own draws: they depend on Q0 alone (u* = sqrt(Q0)
        zeta and the noise), not on the overlaps, so they are computed once per Q0."""
        if self._own_label_set is None or self._own_label_set[0] != Q0:
            self._own_label_set = (Q0, *self._labels(self.draws, Q0))
        return self._own_label_set[1:]

    def branch_split(self, m: float, q: float, V: float, Q0: float) -> float | None:
        """The share of the SE's own samples at (m, q, V) whose prox minimisers differ between
        the two branches (global and teacher, docs/theory.md 16.8): one cold global prox and
        one descent from u* per sample; None for channels without a local descent."""
        ch = self.channel
        if optional_member(ch, "newton_from") is None:
            return None
        q = max(q, self.Q_MIN * Q0)
        V = max(V, self.V_MIN)
        smp = paired_samples(self.draws, m, q, Q0, self.THETA)
        y, _ = self._own_labels(Q0)
        _, split = teacher_branch(ch, y, smp.omega, V, smp.ustar,
                                  ch.prox_batch(y, smp.omega, V))
        return float(split.mean())

    def _step_samples(self, Q0: float) -> tuple:
        """(Q0, draws, labels per point) of the control variate's own samples, labels computed
        once per Q0."""
        if self._step_set is None or self._step_set[0] != Q0:
            R = self.draws.replicas
            seed = int(np.random.SeedSequence([self._seed, 2]).generate_state(1)[0])
            draws = channel_draws(self.channel.K, self.channel.noise_dim, self.step_log2_n, R, seed)
            self._step_set = (Q0, draws, self._point_labels(draws, Q0))
        return self._step_set

    def _step_means(self, m: float, q: float, Q0: float, V: float, slope: float) -> np.ndarray:
        """Per replica (rows) the means of the control variate's terms on its own samples
        (2^(step_log2_n - 1) points per replica, scrambled independently of the SE's), labels
        computed once per Q0; columns m_hat, q_hat, V_hat (and Stein's m_hat).

        Each point is a centre c = (m/Q0) u* + sqrt((1 - STEP_THETA) C) eta0 and one sample
        omega = c + s eta, s = sqrt(STEP_THETA C), which has the law of omega | u*: the terms
        of m_hat, q_hat and Stein's at omega, V_hat's by parts one-sided against the centre,
        (G(omega) - G(c)) . eta / s, less the centre's zero-mean term eta^T A_c eta - tr A_c.
        Exact: E[G(c) . eta] = 0 (c does not depend on eta) and E[G(omega) . eta] / s =
        E tr dG/domega (Stein's lemma in eta at fixed c; G is Lipschitz); with the narrow
        STEP_THETA the one-sided difference's odd terms, O(s), are below the RQMC noise
        (measured: spreads within 0.99-1.03x of the symmetric pair's), and the centre's steps,
        which its term needs anyway, replace a second run at c - s eta (docs/theory.md 16.6)."""
        self.n_step_means += 1
        _, draws, y1 = self._step_samples(Q0)
        R, N, K = draws.ustar.shape
        a, c = student_given_teacher(m, q, Q0)
        ustar = math.sqrt(Q0) * draws.ustar.reshape(R * N, K)
        eta = draws.eta.reshape(R * N, K)
        centre = a * ustar + math.sqrt((1.0 - self.STEP_THETA) * c) * draws.eta0.reshape(R * N, K)
        s = math.sqrt(self.STEP_THETA * c)
        omega = centre + s * eta
        G, st = self._step_rows(y1, omega, ustar, V, R)
        Gc, cv, raised = self.channel.newton_step(y1, centre, V, eta, steps=self.STEP_ITERATIONS,
                                                  report_raised=True)
        self.n_step_raised += int(np.count_nonzero(raised))
        X = np.einsum("ij,ij->i", G - Gc, eta) / s - cv
        cols = [np.einsum("ij,ij->i", G, ustar) - slope * np.einsum("ij,ij->i", G, omega),
                np.einsum("ij,ij->i", G, G), X] + ([] if st is None else [st])
        return np.column_stack([v.reshape(R, N).mean(axis=1) for v in cols])

    #: the control variate's weight b falls linearly from 1 to 0 as the share of raised rows
    #: (STEP_FLOOR) grows from RAISED_FULL to RAISED_NONE: there the steps stop following the
    #: prox (measured, docs/performance.md tenth round: errors 2-6x smaller at shares
    #: 0.03-0.07, equal at 0.11, up to 2x larger at 0.15-0.25, L = 2)
    RAISED_FULL = 0.08
    RAISED_NONE = 0.14
    #: log2 of the probe samples per replica on which that share is measured
    PROBE_LOG2_N = 9

    def _probe_samples(self, Q0: float) -> tuple:
        """(Q0, draws, labels per sample) of the probe set: 2^PROBE_LOG2_N samples per
        replica scrambled independently of the SE's and of the control variate's, so that
        the weight measured on them is independent of both sets' samples."""
        if self._probe_set is None or self._probe_set[0] != Q0:
            R = self.draws.replicas
            seed = int(np.random.SeedSequence([self._seed, 3]).generate_state(1)[0])
            draws = channel_draws(self.channel.K, self.channel.noise_dim, self.PROBE_LOG2_N, R,
                                  seed)
            self._probe_set = (Q0, draws, self._labels(draws, Q0)[0])
        return self._probe_set

    def control_variate_weight(self, m: float, q: float, Q0: float, V: float) -> float:
        """The weight b in [0, 1] of the two-level estimator at (m, q, V): 1 - (rho -
        RAISED_FULL) / (RAISED_NONE - RAISED_FULL), clipped, rho the share of the probe
        samples' rows whose Newton steps from omega have I + V H's eigenvalues raised.  The
        probe set is independent of the SE's and of the control variate's samples, so any b
        it gives keeps the estimator exact; rho moves by one row's share at a time, so b
        moves by 1 / (n_probe (RAISED_NONE - RAISED_FULL)) (~4e-3) and the map by that
        fraction of the difference between the two estimators (a fraction of their
        Monte-Carlo error): no switch."""
        _, draws, y = self._probe_samples(Q0)
        smp = paired_samples(draws, m, q, Q0, self.THETA)
        raised = self.channel.newton_step(y, smp.omega, V, steps=self.STEP_ITERATIONS,
                                          report_raised=True)[2]
        rho = float(np.mean(raised))
        return min(1.0, max(0.0, (self.RAISED_NONE - rho) / (self.RAISED_NONE - self.RAISED_FULL)))

    def _control_variate(self, m: float, q: float, Q0: float, V: float, slope: float,
                         y: np.ndarray, y1: np.ndarray, smp: PairedSamples
                         ) -> tuple["StepTerms", np.ndarray, float] | None:
        """(terms on the SE's own samples, per sample; their means on the control variate's
        samples, per replica; the weight b) of the two-level estimator (docs/theory.md 16.6),
        or None where b = 0 (the plain estimator, which the two-level one with b = 0 equals).
        The floored Newton steps are continuous in (omega, V) and b
        (:meth:`control_variate_weight`) nearly so, so the SE map has no switch between
        estimators (a switch is a jump of the map the size of the plain estimator's
        Monte-Carlo error, which a fixed-point iteration cannot resolve)."""
        b = self.control_variate_weight(m, q, Q0, V)
        if b == 0.0:
            return None
        own = self._step_terms(y, smp, V, slope)
        return own, self._step_means(m, q, Q0, V, slope), b

    def set_control_variate_reference(self, x=None) -> None:
        """Take the control variate's step function at the overlaps ``x = (m, q, V)`` for every
        evaluation from now on (None: at each evaluation's own overlaps, the default).

        The two-level estimator mean_own(f - s) + mean_big(s) is exact for any step function
        s that does not depend on the samples it is averaged over (docs/theory.md 16.6), so s
        may be the step function of a nearby point: its means on both sample sets are then
        computed once (the expensive 2^step_log2_n per replica) and shared by every
        evaluation, and f - s stays small as long as x is close to where the map is
        evaluated (a fine solve's iterates move by the coarse level's Monte-Carlo error,
        ~1e-3-1e-2 relative).  The map stays a deterministic function of (m, q, V) for a
        given reference; whether the control variate runs (a by-parts direction, a rest) is
        decided at the reference."""
        ref = None if x is None else tuple(float(v) for v in x)
        if ref is not None and (len(ref) != 3 or not all(map(math.isfinite, ref))):
            raise ValueError(f"the control variate's reference must be a finite (m, q, V), "
                             f"got {x!r}")
        if ref != self._cv_reference:
            self._cv_reference = ref
            self._cv_frozen = None
            self._cache = None

    def set_plain_estimators(self, plain: bool) -> None:
        """Evaluate without the Newton-step control variate from now on (``plain``) or with
        it (the default).  Both estimators are exact; the plain one is what the fresh draws
        of the averaged solve use, so a fixed point found by that average is reported with
        it (near zero, e.g. q_hat above the noiseless interpolation threshold, the
        two-level estimator's difference can leave a hat negative)."""
        plain = bool(plain)
        if plain != self.plain_estimators:
            self.plain_estimators = plain
            self._cache = None

    @staticmethod
    def _pairs_spread(smp: PairedSamples, q: float) -> bool:
        """Whether the pairs have a direction to integrate by parts in: at s ~ 0 omega is
        (numerically) a function of u*, and the smooth part is the whole derivative."""
        return smp.s > 1e-7 * math.sqrt(q)

    @property
    def control_variate_reference(self) -> tuple[float, float, float] | None:
        """The (m, q, V) set by :meth:`set_control_variate_reference` (None: none)."""
        return self._cv_reference

    def _step_at_reference(self, Q0: float, y: np.ndarray, y1: np.ndarray):
        """:meth:`_control_variate` at the reference (m, q, V), once per (reference, Q0), or
        None where it does not run there (no by-parts direction, no rest)."""
        key = (self._cv_reference, Q0)
        if self._cv_frozen is not None and self._cv_frozen[0] == key:
            return self._cv_frozen[1]
        m, q, V = self._cv_reference
        q = max(q, self.Q_MIN * Q0)
        V = max(V, self.V_MIN)
        slope, rest = overlap_split(m, q, Q0)
        smp = paired_samples(self.draws, m, q, Q0, self.THETA)
        step = None
        if rest > 0 and self._pairs_spread(smp, q):
            step = self._control_variate(m, q, Q0, V, slope, y, y1, smp)
        self._cv_frozen = (key, step)
        return step

    #: Stein's m_hat is used in full where it is within STEIN_FULL combined standard errors of
    #: the direct estimate, not at all beyond STEIN_NONE, blended linearly in between
    STEIN_FULL = 3.0
    STEIN_NONE = 5.0

    def _prefer_stein(self, direct: np.ndarray, stein: np.ndarray, V: float) -> np.ndarray:
        """Per replica m_hat: Stein's estimate where it is exact, or else where it is
        consistent with the direct one (within STEIN_FULL combined standard errors), the
        direct one beyond STEIN_NONE, a linear blend in between: with competing prox minima
        g_out jumps in z and Stein's identity misses the jumps' contribution.  The blend
        keeps the SE map continuous (a switch would jump it by up to 4 standard errors of
        m_hat).  Exact: below the channel's ``convex_below_every_label`` (the prox strictly
        convex for every label the noise model produces: no minimiser can jump), where the
        test could only be wrong -- its false alarms pull in a direct estimate that is off
        by several of its own errors, because it was picked for being off."""
        self.n_stein += 1
        if V < optional_member(self.channel, "convex_below_every_label"):
            return stein
        R = direct.size
        se_d = direct.std(ddof=1) / math.sqrt(R)
        se_s = stein.std(ddof=1) / math.sqrt(R)
        comb = math.hypot(se_d, se_s)
        z = abs(stein.mean() - direct.mean()) / comb if comb > 0 else 0.0
        w = min(1.0, max(0.0, (self.STEIN_NONE - z) / (self.STEIN_NONE - self.STEIN_FULL)))
        if w < 1.0:
            self.n_stein_rejected += 1
        return stein if w == 1.0 else direct if w == 0.0 else w * stein + (1.0 - w) * direct

    def se(self, m: float, q: float, V: float, Q0: float, alpha: float) -> ChannelSE:
        if not (q >= 0 and V >= 0 and math.isfinite(q) and math.isfinite(V)):
            raise ValueError(f"the channel expectations need q >= 0 and V >= 0, got q={q!r}, V={V!r}")
        overlap_split(m, q, Q0)  # the overlaps' constraint, named, before the floor
        key = (m, q, V, Q0, alpha, self._cv_reference)
        q = max(q, self.Q_MIN * Q0)
        slope, rest = overlap_split(m, q, Q0)
        if self._cache is not None and self._cache[0] == key:
            # The solver, the result assembly and the error propagation all ask
            # for the map at the final point: compute it once.
            self.last_stderr, self.last_replicas = dict(self._cache[2]), self._cache[3]
            self.last_vhat_forms, self.last_branch_split = self._cache[4], self._cache[5]
            return self._cache[1]
        V_eff = max(V, self.V_MIN)
        ch = self.channel
        R = self.draws.replicas
        smp = paired_samples(self.draws, m, q, Q0, self.THETA)
        ustar, omega = smp.ustar, smp.omega
        y, y1 = self._own_labels(Q0)
        if self.prox_branch == "teacher" and self.teacher_alone:
            px = teacher_descent(ch, y, omega, V_eff, ustar)
            self.last_branch_split = None
        else:
            px = self._prox(y, omega, V_eff, R)
            if self.prox_branch == "teacher":
                px, split = teacher_branch(ch, y, omega, V_eff, ustar, px)
                self.last_branch_split = float(split.mean())
        self.n_failed += int(px.n_failed)
        self.n_evaluated += omega.shape[0]
        g = px.g_out
        per_sample = np.empty((6, omega.shape[0]))
        per_sample[0] = np.sum(g * (ustar - slope * omega), axis=1)
        per_sample[1] = np.sum(g * g, axis=1)
        per_sample[2] = px.trace_term
        per_sample[3] = ch.train_terms(y, px.uhat)
        per_sample[4] = ch.test_terms(ustar, omega)
        # a fresh sample's noisy label against the prediction (omega_+ and omega_- share
        # the label: each is an independent fresh sample's student field)
        per_sample[5] = ch.train_terms(y, omega)
        means = per_sample.reshape(6, R, -1).mean(axis=2)
        mh = 2 * alpha * means[0] / rest if rest > 0 else np.zeros(R)
        qh = 2 * alpha * means[1]
        Vh_hess = 2 * alpha * means[2] / V_eff
        by_parts = self.vhat_form == "by_parts" and self._pairs_spread(smp, q)
        # the two-level estimator (_control_variate) wherever the channel has Newton steps
        step = None
        self.last_cv_weights = {}
        if (self.step_log2_n and by_parts and rest > 0 and not self.plain_estimators
                and optional_member(ch, "newton_step") is not None
                and optional_member(ch, "convex_below") is not None):
            step = (self._control_variate(m, q, Q0, V_eff, slope, y, y1, smp)
                    if self._cv_reference is None else self._step_at_reference(Q0, y, y1))
        if step is not None:
            # two levels (docs/theory.md 16.6): mean_own(f - b s) + b mean_big(s) per term,
            # exact for any b; b the regression weight of the prox term f on the step term s
            # over the own samples, near 1 where the steps follow the prox, near 0 where
            # they do not (the plain estimator's variance, not more)
            own, big, b = step
            self.last_cv_weights = {"b": b}
            mh = 2 * alpha * (smp.per_replica(per_sample[0] - b * own.m) + b * big[:, 0]) / rest
            if self.stein:
                # Stein's form of m_hat (far less noisy than the direct one) with the step's
                # Stein form as its control variate, where the two agree (module docstring)
                stein = self._stein_terms(y, px.uhat, ustar, V_eff)
                mh = self._prefer_stein(mh, 2 * alpha * (
                    smp.per_replica(stein - b * own.stein) + b * big[:, 3]), V_eff)
            qh = 2 * alpha * (smp.per_replica(per_sample[1] - b * own.q) + b * big[:, 1])
            if not qh.mean() > 0.0:
                # q_hat = 2 alpha E|g_out|^2 is positive; a two-level mean at or below zero
                # (q_hat near zero, e.g. above the noiseless interpolation threshold, where a
                # few large step terms dominate the difference) is replaced by the plain one
                # rather than failing the map: a switch, only where the map had no value
                qh = 2 * alpha * means[1]
            # V_hat: mean(fX - b sX) + b mean_big - (1 - b) mean(centre), the centre's
            # zero-mean term (the plain estimator's) weighted by what the steps leave; at
            # b = 1 (the usual case) it drops out and its Newton runs are not made
            fX = self._pair_differences(smp, g)
            vterm = (fX - b * own.X).mean(axis=1) + b * big[:, 2]
            if b < 1.0:
                vterm = vterm - (1.0 - b) * self._centre_jacobian_cv(y1, smp, V_eff).reshape(
                    own.X.shape).mean(axis=1)
        elif by_parts:
            vterm = self._by_parts_terms(y1, smp, g, V_eff)
        Vh = -2.0 * alpha * vterm if by_parts else Vh_hess
        forms = np.column_stack([Vh, Vh_hess])
        train, test, test_noisy = means[3], means[4], means[5]
        per = np.column_stack([mh, qh, Vh, train, test, 0.5 * train, test_noisy])
        if self.stein and rest > 0 and step is None:
            mh_stein = 2 * alpha * smp.per_replica(self._stein_terms(y, px.uhat, ustar, V_eff))
            per[:, 0] = self._prefer_stein(per[:, 0], mh_stein, V_eff)
        mean = per.mean(axis=0)
        err = per.std(axis=0, ddof=1) / math.sqrt(per.shape[0])
        self.last_stderr = dict(zip(SE_FIELDS, (float(e) for e in err)))
        self.last_replicas = per
        self.last_vhat_forms = forms
        out = ChannelSE(*(float(v) for v in mean))
        self._cache = (key, out, dict(self.last_stderr), per, forms, self.last_branch_split)
        return out
