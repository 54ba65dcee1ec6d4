"""Adam (and plain gradient descent) on the tied-attention layer (issue 5; docs/theory.md
"Learners and the objective").

The layer is trained as a user would train it, in the trainable weights of the
learner's penalty (:mod:`amp_attention.penalties`): W in R^{p x d} (factorised,
S_W = W^T W / sqrt(p d), weight decay (lam / sqrt(kappa)) ||W||_F^2 = lam d Tr S_W),
S itself (element-wise, penalty lam d ||S||_F^2 / 2) or U, V in R^{p x d} (symmetric,
S = (U^T U - V^T V)/sqrt(p d), weight decay (lam / sqrt(kappa)) (||U||^2 + ||V||^2)),
on the exact objective of docs/theory.md "Learners and the objective",

    R = sum_mu 1/2 ||y_mu - g(h_mu(S))||^2 + penalty.

Gradients are the analytic ones of :mod:`amp_attention.erm` through the penalty's
chain rule (``objective_W``: one forward GEMM, one adjoint GEMM; checked
against finite differences in tests/test_erm_channels.py).  Mini-batches of B
samples estimate R by (n/B) sum_{mu in batch} l + penalty, so that every
batch sees the same regulariser as the full objective.

Stopping: the relative gradient norm ||grad R|| / ||grad R(start)|| <= tol
(full batch), or a plateau -- no relative decrease of the full-batch loss by
more than ``plateau_rtol`` over ``patience`` iterations (mini-batches: the
full loss evaluated once per epoch, patience in epochs = max(2, patience B / n))
-- after which the learning rate is halved (reduce on plateau); the run ends
when it falls below ``lr_min``.  Each recorded row holds the
loss, the gradient norm and the learning rate.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .checks import Integer, OneOf, Real, check_args
from .data import generate_dataset
from .erm import N_TEST_MIN, ChannelEvaluator, objective_W, penalty_of, population_error
from .penalties import Penalty
from .operators import check_token_dtype, preactivations, tokens_in
from .result import Result, Status
from .spec import check_problem
from .seq2seq import (TASKS, Seq2SeqEvaluator, check_seq2seq_channel, seq2seq_population_error,
                      seq2seq_train_error)
from .threads import under_thread_policy

OPTIMISERS = ("adam", "gd")


@dataclass(frozen=True)
class AdamOptions:
    """Optimiser settings (see the module docstring).

    optimiser "adam" or "gd"; lr the initial learning rate (Adam: per-coordinate
    step size); beta1, beta2, eps Adam's constants; batch_size None for full
    batch; max_iter the iteration cap; tol the relative gradient-norm target;
    patience, plateau_rtol, lr_min the reduce-on-plateau rule; seed for the
    mini-batch order.
    """

    optimiser: str = "adam"
    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-12
    batch_size: int | None = None
    max_iter: int = 50000
    tol: float = 1e-7
    patience: int = 100
    plateau_rtol: float = 1e-9
    lr_min: float = 1e-7
    seed: int = 0

    def __post_init__(self) -> None:
        positive = Real(0.0, math.inf, lo_open=True, hi_open=True)
        check_args({"optimiser": OneOf(OPTIMISERS), "lr": positive, "eps": positive, "tol": positive,
                    "plateau_rtol": positive, "lr_min": positive,
                    "beta1": Real(0.0, 1.0, hi_open=True), "beta2": Real(0.0, 1.0, hi_open=True),
                    "max_iter": Integer(1), "patience": Integer(1), "seed": Integer(0)},
                   optimiser=self.optimiser, lr=self.lr, eps=self.eps, tol=self.tol,
                   plateau_rtol=self.plateau_rtol, lr_min=self.lr_min, beta1=self.beta1,
                   beta2=self.beta2, max_iter=self.max_iter, patience=self.patience, seed=self.seed)
        if self.batch_size is not None:
            Integer(1).check("batch_size", self.batch_size)


@dataclass(frozen=True, eq=False)
class AdamRun(Result):
    """Outcome of :func:`train`: the parameter (W or S), S, the final full-batch
    objective R and its relative gradient norm, status, iterations, and the
    history rows (iteration, loss R/n, relative gradient norm, learning rate)."""

    #: the trained weights: W (p x d, factorised), S (element-wise) or [U; V] (symmetric)
    params: np.ndarray
    #: the learned query-key matrix S
    S: np.ndarray
    #: final full-batch objective R
    objective: float
    #: final relative gradient norm
    grad_norm: float
    #: Adam iterations run
    iterations: int
    #: (iteration, loss R/n, relative gradient norm, learning rate) every record_every
    history: tuple[tuple[int, float, float, float], ...] = field(repr=False, default=())
    #: wall time
    seconds: float = field(default=0.0, compare=False)  # wall time is not a result

    _NOT_IN_DICT: ClassVar[tuple[str, ...]] = ("params", "S")


def _objective(X, y, P, channel, penalty: Penalty, task: str = "label"):
    evaluator = Seq2SeqEvaluator if task == "seq2seq" else ChannelEvaluator
    return objective_W(X, y, P, channel, penalty, evaluator)


def adam_update(P: np.ndarray, G: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
                opts: AdamOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam step at iteration t >= 1: (new P, new m, new v), bias-corrected moments."""
    m = opts.beta1 * m + (1 - opts.beta1) * G
    v = opts.beta2 * v + (1 - opts.beta2) * G * G
    mh = m / (1 - opts.beta1**t)
    vh = v / (1 - opts.beta2**t)
    return P - lr * mh / (np.sqrt(vh) + opts.eps), m, v


@under_thread_policy
def train(
    X: np.ndarray,
    y: np.ndarray,
    channel,
    lam: float | Penalty,
    P0: np.ndarray,
    *,
    parameterisation: str = "factorised",
    options: AdamOptions | None = None,
    record_every: int = 10,
    task: str = "label",
) -> AdamRun:
    """Minimise R from the start P0 by Adam or GD; see the module docstring.  ``lam`` is
    the penalty (a :class:`~amp_attention.penalties.Penalty`, or the weight decay of the
    registered ``parameterisation``); P0 its trainable weights (``penalty.weights_shape``:
    W0 of shape (p, d) factorised, S0 of shape (d, d) element-wise, [U0; V0] of shape
    (2p, d) symmetric).  ``task`` "label" trains
    the channel's loss 1/2 ||y - g(h)||^2; "seq2seq" the paper's 1/2 ||(A - A*) X||_F^2 / d
    (:mod:`amp_attention.seq2seq`; softmax channel, y = A*).  Overflow is
    detected and reported as divergence (no floating-point warnings)."""
    _check_task(task, channel)
    penalty = penalty_of(lam, parameterisation)
    with np.errstate(over="ignore", invalid="ignore"):
        return _train(X, y, channel, penalty, P0, options, record_every, task)


def _check_task(task: str, channel) -> None:
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if task == "seq2seq":
        check_seq2seq_channel(channel)


def _train(X, y, channel, penalty, P0, options, record_every, task) -> AdamRun:
    opts = options or AdamOptions()
    t0 = time.perf_counter()
    n, _, d = X.shape
    P = np.array(P0, dtype=np.float64)
    penalty.check_weights(P, d)
    rng = np.random.default_rng([opts.seed, 0xADA])
    B = n if opts.batch_size is None else min(int(opts.batch_size), n)
    m = np.zeros_like(P)
    v = np.zeros_like(P)
    lr = float(opts.lr)
    R, G = _objective(X, y, P, channel, penalty, task)
    g0 = max(float(np.linalg.norm(G)), 1e-300)
    best, since, history = R, 0, [(0, R / n, 1.0, lr)]
    order = rng.permutation(n)
    pos = 0
    patience = opts.patience if B == n else max(2, opts.patience * B // n)
    converged, it = False, 0
    status, message = Status.MAX_ITER, f"not converged in {opts.max_iter} iterations"
    for it in range(1, opts.max_iter + 1):
        epoch_end = False
        if B < n:
            if pos + B > n:
                order, pos, epoch_end = rng.permutation(n), 0, True
            idx = np.sort(order[pos:pos + B])
            pos += B
            _, Gb = _objective(X[idx], y[idx], P, channel, penalty, task)
            gpen = penalty.weights_penalty(P)[1]
            G = (n / B) * (Gb - gpen) + gpen
        if opts.optimiser == "adam":
            P, m, v = adam_update(P, G, m, v, it, lr, opts)
        else:
            P = P - lr * G
        if not np.all(np.isfinite(P)):
            status, message = Status.DIVERGED, (f"at iteration {it}: non-finite parameters "
                                                "(lower the learning rate)")
            break
        if B == n:
            R, G = _objective(X, y, P, channel, penalty, task)
            if not (math.isfinite(R) and np.all(np.isfinite(G))):
                status, message = Status.DIVERGED, (f"at iteration {it}: non-finite loss "
                                                    "(lower the learning rate)")
                break
            gnorm = float(np.linalg.norm(G)) / g0
            if gnorm <= opts.tol:
                converged, status, message = True, Status.CONVERGED, ""
                history.append((it, R / n, gnorm, lr))
                break
        elif epoch_end:
            R, _ = _objective(X, y, P, channel, penalty, task)
            gnorm = math.nan
        else:
            continue
        if it % record_every == 0 or B < n:
            history.append((it, R / n, gnorm, lr))
        if R < best * (1.0 - opts.plateau_rtol) - 1e-300:
            best, since = R, 0
        else:
            since += 1
            if since >= patience:
                lr, since = 0.5 * lr, 0
                if lr < opts.lr_min:
                    # the loss-plateau criterion: no decrease left at any step size
                    status = Status.PLATEAU
                    message = f"learning rate below lr_min = {opts.lr_min:g}"
                    converged = True
                    break
    R, G = _objective(X, y, P, channel, penalty, task)
    gnorm = float(np.linalg.norm(G)) / g0
    return AdamRun(P, penalty.S_from_weights(P), R, gnorm, it, tuple(history), time.perf_counter() - t0,
                   success=converged, status=status, message=message)


# ------------------------------------------------------------- one trained layer

INITS = ("small", "random")
#: seed tag of the initial weights
INIT_SEED_TAG = 0x1A17


@dataclass(frozen=True, eq=False)
class LayerResult(Result):
    """One Adam-trained layer at dimension d on one data set.

    train_error (1/n) sum ||y - g(h(S_W))||^2; test_error the clean population
    error on a fresh test set (its Monte-Carlo ``test_error_stderr``), test_error_noisy
    against fresh noisy labels of the same test inputs;
    matrix_mse ||S_W - S0||_F^2 / d; m = Tr(S0 S_W)/d, q = Tr(S_W^2)/d;
    loss R/n; grad_norm the final relative gradient norm; eigenvalues_S the
    eigenvalues of S_W (ascending); singular_values_W those of W (factorised
    learner; None element-wise); history as in :class:`AdamRun`.
    """

    #: dimension
    d: int
    #: training samples n = round(alpha d^2)
    n: int
    #: seed of the data set and the initialisation
    seed: int
    train_error: float
    test_error: float
    test_error_stderr: float
    matrix_mse: float
    m: float
    q: float
    loss: float
    grad_norm: float
    #: Adam iterations run
    iterations: int
    #: wall time of the training
    seconds: float = field(compare=False)  # wall time is not a result
    eigenvalues_S: np.ndarray = field(repr=False, default=None)  # type: ignore[assignment]
    singular_values_W: np.ndarray | None = field(repr=False, default=None)
    history: tuple = field(repr=False, default=())
    test_error_noisy: float = math.nan


def train_layer(
    problem,
    d: int,
    seed: int,
    *,
    options: AdamOptions | None = None,
    init: str = "random",
    init_scale: float = 0.3,
    target_spectrum: str = "sampled",
    n_test: int | None = None,
    dtype: str = "float64",
    task: str = "label",
) -> LayerResult:
    """Draw a data set (as :func:`~amp_attention.data.generate_dataset`),
    train the layer of ``problem.learner`` with :func:`train`, and measure it.

    init "small": W0 = 1e-3 N(0, 1) (element-wise: S0 = 0); "random":
    W0 = init_scale N(0, 1) (element-wise: symmetric N(0, init_scale^2 / d)), the
    penalty's ``small_weights`` / ``initial_weights`` (symmetric: [U0; V0] likewise),
    from default_rng([seed, INIT_SEED_TAG]).  p = max(1, round(kappa d)).  The
    test set has max(n, 20000) samples unless ``n_test`` is given.  ``dtype="float32"``
    trains on float32 tokens: the GEMMs over the data run in float32, the weights,
    the Adam moments and everything d x d stay float64 (:mod:`amp_attention.operators`).
    ``task="seq2seq"`` trains the paper's seq2seq loss on the same data (labels A*,
    outputs A X; :mod:`amp_attention.seq2seq`), and train_error, test_error and
    test_error_noisy are then ||(A - A*) X||_F^2 / d per input.
    """
    check_problem(problem)
    check_args({"init": OneOf(INITS), "init_scale": Real(0.0, math.inf, lo_open=True, hi_open=True)},
               init=init, init_scale=init_scale)
    ch = problem.task.channel_object
    _check_task(task, ch)
    check_token_dtype(dtype)
    data = generate_dataset(problem, d, seed, target_spectrum, channel=ch)
    learner = problem.learner
    penalty = learner.penalty
    rng = np.random.default_rng([seed, INIT_SEED_TAG])
    P0 = (penalty.small_weights(d, rng) if init == "small"
          else penalty.initial_weights(d, init_scale, rng))
    run = train(tokens_in(data.X, dtype), data.y, ch, penalty, P0, options=options, task=task)
    S, S0 = run.S, data.S0
    nt = max(data.n, N_TEST_MIN) if n_test is None else int(n_test)
    if task == "seq2seq":
        train_err = seq2seq_train_error(data.X, data.y, S, ch)
        test, test_se, test_noisy = seq2seq_population_error(ch, S0, S, nt, problem.task.L, seed)
    else:
        train_err = float(np.mean(np.sum((data.y - ch.outputs(preactivations(data.X, S))) ** 2, axis=1)))
        test, test_se, test_noisy = population_error(ch, S0, S, nt, problem.task.L, seed)
    return LayerResult(
        d=d, n=data.n, seed=seed, train_error=train_err, test_error=test,
        test_error_stderr=test_se, test_error_noisy=test_noisy, matrix_mse=float(np.sum((S - S0) ** 2)) / d,
        m=float(np.sum(S0 * S)) / d, q=float(np.sum(S * S)) / d, loss=run.objective / data.n,
        grad_norm=run.grad_norm, success=run.success, status=run.status, message=run.message,
        iterations=run.iterations, seconds=run.seconds,
        eigenvalues_S=np.linalg.eigvalsh(S),
        singular_values_W=penalty.singular_values(run.params),
        history=run.history)
