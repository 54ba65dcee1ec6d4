"""Shared machinery of the subcommands: exit codes, errors naming the flag, the
problem flags and their Problem, the flag-refusal rule, output helpers."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..channels.base import NOISE_LOCATIONS
from ..jsonsafe import json_safe as _plain
from ..progress import progress_bar as _progress

if TYPE_CHECKING:
    from ..erm import ERMStatistics
    from ..spec import Problem


PROG = "amp-attention"


EXIT_OK = 0


EXIT_USAGE = 2


EXIT_NOT_CONVERGED = 3


MODEL = """\
model (conventions: docs/theory.md)
  A sample is L tokens x_1..x_L in R^d, i.i.d. N(0, I_d); there are n = alpha d^2
  samples. Pre-activations h_ab(S) = (x_a^T S x_b - delta_ab Tr S)/sqrt(d).
  Target S0: PSD with O(1) spectrum (Wishart W0^T W0/sqrt(p0 d), kappa0 = p0/d,
  or a power law s_k ~ k^-gamma). Labels y = g(h(S0)) + noise of variance Delta.
  Learner: tied single-head attention, W in R^{p x d}, kappa = p/d,
  S = W^T W/sqrt(p d), yhat = g(h(S)); it minimises
      R(W) = sum_mu 1/2 ||y_mu - yhat_mu||^2 + lam d Tr S   (= (lam/sqrt kappa)||W||_F^2).
  The SE is the replica-symmetric d -> infinity theory of the minimiser."""


class CLIError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


TASK_FLAGS = {"channel": "--channel", "L": "--L", "beta": "--beta", "noise": "--noise",
               "noise_at": "--noise-at"}


WISHART_FLAGS = {"kappa0": "--kappa0"}


POWERLAW_FLAGS = {"gamma": "--gamma", "d": "--target-d", "p0": "--p0", "Q0": "--Q0"}


LEARNER_FLAGS = {"kappa": "--kappa", "lam": "--lam", "parameterisation": "--learner"}


PROBLEM_FLAGS = {"alpha": "--alpha"}


RANGES = {
    "--L": "integers in [1, 4096]", "--beta": "(0, 1000]", "--noise": "[0, 1e+12]",
    "--kappa0": "[1e-06, 1e+06]", "--gamma": "(0, inf)", "--target-d": "integers >= 1",
    "--p0": "integers in [1, target-d]", "--Q0": "[1e-12, 1e+12]", "--kappa": "[1e-06, 1e+06]",
    "--lam": "0 or [1e-12, 1e+06]", "--alpha": "[1e-09, 1e+09]", "--d": "integers >= 2",
    "--tol": "(0, inf)", "--max-iter": "integers >= 1", "--damping": "(0, 1]",
    "--lam-search": "(0, inf), LO < HI",
}


def one_line(text: str) -> str:
    return " ".join(str(text).split())


GAMP_DIVERGED_HINT = "try a smaller --damping, e.g. 0.5, or a larger --V0"


SE_HINTS = {
    "max_iter": "raise --max-iter, or lower --damping",
    "diverged": "try --damping 0.5 or --method damped",
    "invalid": "try --damping 0.5 or --method damped",
}


def se_failure(result) -> str:
    """One line on a non-converged SE result, with the CLI's hint for its status."""
    hint = SE_HINTS.get(result.status.value)
    return (f"status: {one_line(result.summary)}{'; ' + hint if hint else ''}; residual "
            f"{result.residual:.3g} after {result.iterations} iterations")


def flag_error(exc: Exception, flags: dict[str, str]) -> CLIError:
    """Rewrite a spec ValueError as 'argument --flag: <message> [(allowed range ...)]'."""
    msg = one_line(str(exc))
    flag = flags.get(msg.split(" ", 1)[0])
    if flag is None:
        return CLIError(msg)
    if flag in RANGES and "must" in msg and not any(t in msg for t in ("range", ">=", "lie in",
                                                                       "one of")):
        msg += f" (allowed range {RANGES[flag]})"
    return CLIError(f"argument {flag}: {msg}")


def holds_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt or has one in its __cause__/__context__
    chain (or among the members of an exception group).  A Ctrl-C that lands in
    compiled (Numba) code surfaces as ``SystemError: CPUDispatcher(...) returned a result
    with an exception set`` caused by the KeyboardInterrupt."""
    import builtins

    groups = getattr(builtins, "BaseExceptionGroup", None)  # Python >= 3.11
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        stack += [e.__cause__, e.__context__]
        if groups is not None and isinstance(e, groups):
            stack += list(e.exceptions)
    return False


def _forget_unhandled_interrupt() -> None:
    """A KeyboardInterrupt that passed through ``exec`` of a string (dataclasses build
    their methods that way) sets CPython's _Py_UnhandledKeyboardInterrupt even when it is
    then handled, and ``python -m`` ends such a process by SIGINT (status -2) instead of
    with the exit code chosen: the CLI has handled it, clear the flag (CPython 3.10/3.11;
    a no-op where the symbol does not exist)."""
    if sys.implementation.name != "cpython":
        return
    try:
        import ctypes

        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (ImportError, AttributeError, ValueError, OSError):
        pass


class InterruptGuard:
    """Ctrl-C while a subcommand runs, wherever it lands (issue 29, item 4).

    Installed by :func:`amp_attention.cli.main` in place of Python's default SIGINT
    handler (only in the main thread, and only over the default handler).  The handler
    records the interrupt and raises KeyboardInterrupt as the default one does; then:

    * compiled (Numba) code hands it back as ``SystemError: ... returned a result with
      an exception set`` caused by the KeyboardInterrupt: :meth:`raising` turns any
      exception whose chain holds one (:func:`holds_interrupt`), or raised after an
      interrupt was received, into a KeyboardInterrupt;
    * code that swallows it (the init of a C extension module being imported, a
      weakref callback of the import lock, where Python prints "Exception ignored")
      would let the command run on: while the interrupt is not handled, it is sent
      again to the main thread every RESEND seconds, and the "Exception ignored"
      report of a KeyboardInterrupt is not printed.

    :meth:`stop` (when main handles it) turns the handler into a no-op; :meth:`uninstall`
    restores the previous handler.
    """

    RESEND = 0.5

    def __init__(self) -> None:
        import os
        import threading

        self.received = False
        self._stopped = False
        self._installed = False
        self._pid = os.getpid()
        self._done = threading.Event()
        self._resender: Any = None
        self._old_handler: Any = None
        self._old_hook: Any = None

    def install(self) -> "InterruptGuard":
        import signal
        import threading

        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._old_handler = signal.signal(signal.SIGINT, self._handler)
            self._old_hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable
            self._installed = True
        return self

    def _handler(self, signum, frame) -> None:
        import os
        import threading

        if os.getpid() != self._pid:  # a forked worker: the default behaviour
            raise KeyboardInterrupt
        if self._stopped:
            return
        if not self.received:
            self.received = True
            self._resender = threading.Thread(target=self._resend, daemon=True,
                                              name="amp-attention-interrupt")
            self._resender.start()
        raise KeyboardInterrupt

    def _resend(self) -> None:
        import signal
        import threading

        main = threading.main_thread().ident
        while not self._done.wait(self.RESEND):
            if hasattr(signal, "pthread_kill"):  # wakes a blocking call of the main thread
                signal.pthread_kill(main, signal.SIGINT)
            else:  # pragma: no cover - not POSIX
                import _thread

                _thread.interrupt_main()

    def _unraisable(self, unraisable) -> None:
        if self.received and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return  # swallowed where it landed: _resend raises it again
        self._old_hook(unraisable)

    @contextlib.contextmanager
    def raising(self):
        """Re-raise, as KeyboardInterrupt, an exception that holds one in its chain or
        that comes after an interrupt was received."""
        try:
            yield
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            if self.received or holds_interrupt(exc):
                raise KeyboardInterrupt from exc
            raise
        if self.received:  # swallowed, and the command finished before it came again
            raise KeyboardInterrupt

    def stop(self) -> None:
        """The interrupt is being handled: no more re-sending, the handler does nothing."""
        import threading

        self._stopped = True
        self._done.set()
        if self._resender is not None and self._resender is not threading.current_thread():
            self._resender.join()
        if self.received:
            _forget_unhandled_interrupt()

    def uninstall(self) -> None:
        import signal

        self.stop()
        if self._installed:
            self._installed = False
            # signal.signal first runs the handlers of pending signals (a last re-sent
            # one: the no-op), then restores the previous handler
            signal.signal(signal.SIGINT, self._old_handler)
            sys.unraisablehook = self._old_hook


def check_environment(environ=None) -> None:
    """The environment variables the CLI's libraries read at import, checked before any
    of them is imported: NUMBA_NUM_THREADS must be an integer >= 1 (Numba rejects 0 with a
    message that does not name it, and prints a traceback for a non-integer)."""
    import os

    environ = os.environ if environ is None else environ
    value = environ.get("NUMBA_NUM_THREADS")
    if value is None:
        return
    try:
        ok = int(value) >= 1  # Numba's own parse: int()
    except ValueError:
        ok = False
    if not ok:
        raise CLIError(f"environment variable NUMBA_NUM_THREADS must be an integer >= 1, "
                       f"got {value!r}")


def print_error(message: str) -> int:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return EXIT_USAGE


def closed_form(channel: str) -> bool:
    """The registered channel has closed-form SE integrals (no Monte-Carlo flags)."""
    from ..channels import channel_class, optional_member

    return optional_member(channel_class(channel), "se") is not None


class _GivenStore(argparse._StoreAction):
    """``store`` that also records the flag as given on the command line."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark_given(namespace, self.dest)


class _GivenStoreTrue(argparse._StoreTrueAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark_given(namespace, self.dest)


def _mark_given(namespace: argparse.Namespace, dest: str) -> None:
    given = set(getattr(namespace, "_given", ()))
    given.add(dest)
    namespace._given = given


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the flag with destination ``dest`` was typed by the user (not a default)."""
    return dest in getattr(args, "_given", ())


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose store actions remember which flags the user gave.

    A flag that does not apply to the problem at hand is refused when given
    (exit 2) instead of being accepted and ignored.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `--n 100` must not silently become `--n-values 100`
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", "store", _GivenStore)
        self.register("action", None, _GivenStore)
        self.register("action", "store_true", _GivenStoreTrue)

    # Usage errors: one line naming the (sub)command's --help, not argparse's usage block.
    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, "_prog"):  # the innermost (sub)command parsed sets it
            namespace._prog = self.prog
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:  # gathered by the subcommand's parser, reported for that subcommand
            self._fail(getattr(namespace, "_prog", self.prog),
                       f"unrecognized arguments: {' '.join(extras)}")
        return namespace

    def error(self, message: str):
        self._fail(self.prog, message)

    def _fail(self, prog: str, message: str):
        self.exit(EXIT_USAGE, f"{PROG}: error: {one_line(message)} (see `{prog} --help`)\n")


def refuse_given(args: argparse.Namespace, dests: Sequence[str], why: str) -> None:
    """CLIError naming the first flag of ``dests`` the user gave, with ``why`` it does not apply."""
    for dest in dests:
        if given(args, dest):
            raise CLIError(f"argument --{dest.replace('_', '-')}: {why}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        import shutil

        width = min(100, shutil.get_terminal_size((92, 24)).columns - 2)
        super().__init__(prog, max_help_position=30, width=max(width, 60))


class OmittingArgumentGroup:
    """An argument group of ``parser`` whose ``add_argument`` skips the flags whose
    destinations are in ``omit``: parents shared by several subcommands leave out
    what one of them does not read."""

    def __init__(self, parser: argparse.ArgumentParser, title: str, omit: Sequence[str]) -> None:
        self._group = parser.add_argument_group(title)
        self._omit = frozenset(omit)

    def add_argument(self, flag: str, **kw: Any) -> None:
        if flag.lstrip("-").replace("-", "_") not in self._omit:
            self._group.add_argument(flag, **kw)


def problem_parent(omit: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The problem flags shared by the subcommands, without those in ``omit`` (dests).

    A subcommand that sets a parameter itself (a grid over alpha, lam -> 0+)
    omits its flag, so that ``--help`` shows only the flags that apply.
    """
    p = Parser(add_help=False)
    g = OmittingArgumentGroup(p, "problem (task, target, learner, sample ratio)", omit)
    from ..channels.registry import channel_names, channel_summary

    g.add_argument("--channel", choices=channel_names(), default="linear",
                   help="output function g of h: "
                        + "; ".join(f"{c}: {channel_summary(c)}" for c in channel_names())
                        + ". Channels without closed-form integrals (all but linear) use "
                          "Monte-Carlo channel integrals, see --mc-* (default: linear)")
    g.add_argument("--L", type=int, default=1, metavar="L",
                   help="tokens per sample; L = 1 with the linear channel is the quadratic "
                        "network (default: 1)")
    g.add_argument("--beta", type=float, default=1.0, metavar="BETA",
                   help="softmax inverse temperature beta, softmax/seq2lab only (default: 1)")
    g.add_argument("--alpha", type=float, default=0.5, metavar="ALPHA",
                   help="sample ratio alpha = n/d^2 (default: 0.5)")
    g.add_argument("--kappa", type=float, default=1.0, metavar="KAPPA",
                   help="learner width kappa = p/d, W in R^{p x d}; kappa < 1 caps rank(S) "
                        "at p (default: 1)")
    g.add_argument("--lam", type=float, default=0.1, metavar="LAM",
                   help="regularisation lam in R = sum_mu 1/2||y_mu - yhat_mu||^2 + lam d Tr S "
                        "(weight decay (lam/sqrt kappa)||W||_F^2; lam = lt/2 in the "
                        "(1/d^2) sum (yhat-y)^2 + lt Tr S/d convention); elementwise learner: "
                        "lam d ||S||_F^2/2 (default: 0.1)")
    g.add_argument("--noise", type=float, default=0.0, metavar="DELTA",
                   help="label-noise variance Delta, added to every output entry "
                        "(default: 0)")
    g.add_argument("--noise-at", choices=NOISE_LOCATIONS, default="output",
                   help="where the noise enters: 'output' adds it to every output entry; "
                        "'logit' to the pre-activations h, variance Delta on every h_ab "
                        "(the same as 'output' for the linear channel); 'logit_goe' to h as "
                        "sqrt(Delta/2) x GOE, variance Delta on h_aa and Delta/2 on h_ab "
                        "(a != b): the paper's model (arXiv 2509.24914) (default: output)")
    g.add_argument("--target", choices=("wishart", "powerlaw", "spiked"), default="wishart",
                   help="target S0: wishart S0 = W0^T W0/sqrt(p0 d), W0 in R^{p0 x d} "
                        "i.i.d. N(0,1); powerlaw S0 = O diag(s) O^T, s_k = c k^-gamma for "
                        "k <= p0, O Haar; spiked: a wishart bulk whose top eigenvalues are "
                        "replaced by --spikes (default: wishart)")
    g.add_argument("--spikes", type=float, nargs="+", default=None, metavar="S",
                   help="spiked target: the planted eigenvalues (default: 6 9 12)")
    g.add_argument("--kappa0", type=float, default=None, metavar="KAPPA0",
                   help="Wishart target width kappa0 = p0/d; Q0 = Tr(S0^2)/d = 1 + kappa0 "
                        "(default: 0.5)")
    g.add_argument("--gamma", type=float, default=None, metavar="GAMMA",
                   help="power-law exponent gamma, s_k ~ k^-gamma (default: 1)")
    g.add_argument("--p0", type=int, default=None, metavar="P0",
                   help="power-law target rank p0 <= target-d (default: target-d, full rank)")
    g.add_argument("--Q0", type=float, default=None, metavar="Q0",
                   help="power-law normalisation Q0 = Tr(S0^2)/d (default: 1)")
    g.add_argument("--target-d", type=int, default=None, metavar="D0",
                   help="dimension at which the power-law spectrum is tabulated for the "
                        "deterministic equivalent (default: 400)")
    g.add_argument("--learner", choices=("factorised", "elementwise"), default="factorised",
                   help="factorised: S = W^T W/sqrt(p d), PSD, nuclear-norm penalty lam d Tr S; "
                        "elementwise: S symmetric, unconstrained, penalty lam d ||S||_F^2/2, "
                        "kappa ignored (default: factorised)")
    return p


MC_DESTS = ("mc_log2n", "mc_replicas", "mc_seed", "mc_coarse_log2n")


def add_mc_group(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Monte-Carlo channel integrals (softmax, seq2lab)")
    g.add_argument("--mc-log2n", type=int, default=14, metavar="M",
                   help="2^M samples per replica for the K-dimensional channel expectations "
                        "(common random numbers across iterations): 2^(M-1) scrambled-Sobol "
                        "points, each an antithetic pair of samples of the student field "
                        "(V_hat by integration by parts) (default: 14)")
    g.add_argument("--mc-replicas", type=int, default=8, metavar="R",
                   help="independent scramblings; their spread, propagated through the "
                        "fixed point, is the reported mc_stderr (default: 8)")
    g.add_argument("--mc-seed", type=int, default=0, metavar="SEED",
                   help="seed of the scramblings (default: 0)")
    g.add_argument("--mc-coarse-log2n", type=int, default=10, metavar="C",
                   help="two-level solve: find the fixed point on the first 2^C points of "
                        "every replica, then refine on all 2^M by a few quasi-Newton steps; "
                        "C >= M iterates on all points throughout (default: 10)")


def problem_from_args(args: argparse.Namespace, alpha: float | None = None) -> Problem:
    """Build and validate the :class:`Problem` of the common flags (CLIError on bad input)."""
    from ..channels import channel_class, optional_member
    from ..channels.base import validation_note
    from ..spec import Learner, PowerLawTarget, Problem, SpikedTarget, Task, WishartTarget

    if "beta" not in optional_member(channel_class(args.channel), "parameters"):
        refuse_given(args, ("beta",), f"applies only to a channel with a temperature (the "
                                       f"{args.channel} channel has none)")
    if closed_form(args.channel):
        refuse_given(args, MC_DESTS, f"applies only to channels integrated by Monte Carlo (the "
                                      f"{args.channel} channel's integrals are in closed form)")
    if args.learner == "elementwise":
        refuse_given(args, ("kappa",), "applies only to --learner factorised (the elementwise "
                                        "learner has no width)")
    try:
        task = Task(channel=args.channel, L=args.L, beta=args.beta, noise=args.noise,
                    noise_at=args.noise_at)
    except ValueError as exc:
        raise flag_error(exc, TASK_FLAGS) from None
    if not closed_form(args.channel) and hasattr(args, "mc_log2n"):
        from ..solvers.channel_integrals import check_draw_size

        opts = mc_options(args)
        try:  # before any work: the Gaussian draws of the channel integrals must fit
            check_draw_size(task.channel_object, opts.log2_n, opts.replicas)
        except ValueError as exc:
            raise draw_size_error(exc, task.channel_object, opts) from None
    if args.spikes is not None and args.target != "spiked":
        raise CLIError(f"argument --spikes: applies only to --target spiked (got --target {args.target})")
    if args.target in ("wishart", "spiked"):
        for flag, value in (("--gamma", args.gamma), ("--p0", args.p0), ("--Q0", args.Q0),
                            ("--target-d", args.target_d)):
            if value is not None:
                raise CLIError(f"argument {flag}: applies only to --target powerlaw "
                               f"(got --target {args.target})")
        kappa0 = 0.5 if args.kappa0 is None else args.kappa0
        try:
            if args.target == "spiked":
                target = SpikedTarget(kappa0, tuple(args.spikes) if args.spikes else (6.0, 9.0, 12.0))
            else:
                target = WishartTarget(kappa0=kappa0)
        except ValueError as exc:
            raise flag_error(exc, {**WISHART_FLAGS, "spikes": "--spikes"}) from None
    else:
        if args.kappa0 is not None:
            raise CLIError("argument --kappa0: applies only to --target wishart or spiked "
                           "(got --target powerlaw)")
        try:
            target = PowerLawTarget(
                gamma=1.0 if args.gamma is None else args.gamma,
                d=400 if args.target_d is None else args.target_d,
                p0=args.p0,
                Q0=1.0 if args.Q0 is None else args.Q0,
            )
        except ValueError as exc:
            raise flag_error(exc, POWERLAW_FLAGS) from None
    try:
        learner = Learner(kappa=args.kappa, lam=getattr(args, "lam", 0.0),
                          parameterisation=args.learner)
    except ValueError as exc:
        raise flag_error(exc, LEARNER_FLAGS) from None
    try:
        # subcommands without --alpha (grids, lam -> 0+ limits) set alpha per point
        alpha = getattr(args, "alpha", 0.5) if alpha is None else alpha
        problem = Problem(task, target, learner, alpha=alpha)
    except ValueError as exc:
        raise flag_error(exc, PROBLEM_FLAGS) from None
    note = validation_note(problem.task.channel_object)
    if note and not getattr(args, "_noted", False):
        print(f"{PROG}: note: {note}", file=sys.stderr)
        args._noted = True
    return problem


#: --workers above this many per CPU need --allow-large (local processes never exceed the
#: number of tasks either: amp_attention.runner.run_tasks)
WORKERS_PER_CPU = 4


def draw_size_error(exc: Exception, channel, opts) -> CLIError:
    """The refusal of channel integrals whose Gaussian draws do not fit in memory, naming
    the flag that made them too large: --mc-replicas or --mc-log2n when it is above its
    default and it alone can make them fit (with its allowed range), else --L."""
    from ..resources import MEMORY_SHARE, available_memory, memory_shortfall
    from ..solvers.channel_integrals import draw_bytes, draw_dimension

    available = available_memory()
    if available is None or "memory" not in str(exc):
        return flag_error(exc, TASK_FLAGS)

    def fits(replicas: int, log2_n: int) -> bool:
        return not memory_shortfall(draw_bytes(channel, log2_n, replicas), available)

    why = (memory_shortfall(draw_bytes(channel, opts.log2_n, opts.replicas), available)
           or "does not fit in memory")
    what = (f"the Monte-Carlo channel integrals (L = {channel.L}) would hold {opts.replicas} "
            f"replicas x 2^{opts.log2_n - 1} points x {draw_dimension(channel)} coordinates, "
            f"which {why}")
    default = type(opts)()  # MonteCarloOptions' defaults, also the flags' defaults
    if opts.replicas > default.replicas and fits(2, opts.log2_n):
        top = int(MEMORY_SHARE * available // draw_bytes(channel, opts.log2_n, 1))
        return CLIError(f"argument --mc-replicas: {what} (allowed range: integers in [2, "
                        f"{top}] at --mc-log2n {opts.log2_n})")
    if opts.log2_n > default.log2_n and fits(opts.replicas, 4):
        top = max(m for m in range(4, opts.log2_n) if fits(opts.replicas, m))
        return CLIError(f"argument --mc-log2n: {what} (allowed range: integers in [4, {top}] "
                        f"at --mc-replicas {opts.replicas})")
    return flag_error(exc, TASK_FLAGS)


def add_allow_large(group) -> None:
    group.add_argument("--allow-large", action="store_true",
                       help="run even when the estimated size (memory of a finite-d run, "
                            "points of a grid, --workers beyond "
                            f"{WORKERS_PER_CPU} x the CPU count) exceeds the guard (default: "
                            "refuse with exit 2 and say what is needed)")


#: bytes held per point of a sweep's grid while it runs and is assembled (its fields in
#: the result arrays, its JSON record, its point file name)
BYTES_PER_GRID_POINT = 4096


def _count(points: int) -> str:
    return str(points) if points < 10**15 else f"{points:.3g}"


def grid_count(flag: str, n: float, minimum: int = 1) -> int:
    """The N of a ``LO HI N`` grid flag as an int, or exit 2 naming ``flag``."""
    if not (math.isfinite(n) and n == int(n) and n >= minimum):
        raise CLIError(f"argument {flag}: number of grid points N must be an integer >= "
                       f"{minimum}, got {n!r}")
    return int(n)


def check_grid_size(flag: str, points: int, max_points: int, seconds_per_point: float,
                    workers: int, allow_large: bool) -> None:
    """Refuse a grid before any of it is built: always when its own arrays would not fit
    in memory; beyond ``max_points`` (with the time it would take) unless --allow-large."""
    from ..resources import memory_shortfall

    short = memory_shortfall(BYTES_PER_GRID_POINT * points)
    if short:
        raise CLIError(f"argument {flag}: a grid of {_count(points)} points {short}; use a "
                       f"coarser grid")
    if points <= max_points or allow_large:
        return
    hours = points * seconds_per_point / max(1, workers) / 3600
    raise CLIError(f"argument {flag}: {_count(points)} grid points (about {hours:.3g} h on "
                   f"{max(1, workers)} worker(s)) exceed {max_points}; use a coarser grid or "
                   f"pass --allow-large")


def check_size(args: argparse.Namespace, problem: Problem, ds, alphas=None,
               flag: str = "--d") -> None:
    """Refuse (exit 2) a finite-d run whose memory estimate does not fit, unless
    --allow-large (amp_attention.resources); ``alphas`` default (problem.alpha,)."""
    from ..data import n_samples
    from ..resources import finite_d_memory, memory_shortfall

    if getattr(args, "allow_large", False):
        return
    alpha = max(alphas) if alphas else problem.alpha
    alpha_flag = "--alphas" if alphas else "--alpha"
    kappa = getattr(problem.learner, "kappa", 0.0) if problem.learner.parameterisation == \
        "factorised" else 0.0
    kappa0 = getattr(problem.target, "kappa0", 0.0)
    for d in sorted(ds, reverse=True):
        n = n_samples(alpha, d)
        p, p0 = math.ceil(min(kappa, 1e15) * d), math.ceil(min(kappa0, 1e15) * d)
        why = memory_shortfall(finite_d_memory(n, problem.task.L, d, p, p0))
        if why:
            flags = [flag, alpha_flag] + (["--L"] if problem.task.L > 1 else []) \
                + (["--kappa"] if kappa > 1 else []) + (["--kappa0"] if kappa0 > 1 else [])
            lower = ", ".join(flags[:-1]) + " or " + flags[-1]
            raise CLIError(f"argument {flag}: d = {d} (n = {n} samples of L = "
                           f"{problem.task.L} tokens, W of {p} x {d}"
                           + (f", W0 of {p0} x {d}" if p0 else "")
                           + f") {why}; lower {lower}, or pass --allow-large")


def check_positive_finite(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise CLIError(f"argument {flag}: must be > 0 and finite (allowed range "
                       f"{RANGES[flag]}), got {value!r}")


def check_min_int(flag: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise CLIError(f"argument {flag}: must be an integer >= {minimum}, got {value!r}")


def dumps(obj: Any, **kw: Any) -> str:
    return json.dumps(_plain(obj), allow_nan=False, **kw)


def fmt(v: Any) -> str:
    import numpy as np

    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.10g}"
    if v is None:
        return "-"
    return str(v)


def target_text(t: dict) -> str:
    rest = ", ".join(f"{k}={fmt(v)}" for k, v in t.items() if k != "kind" and v is not None)
    return f"{t['kind']} ({rest})"


def print_params(params: dict, out=None) -> None:
    out = out or sys.stdout
    print("parameters", file=out)
    for k, v in params.items():
        if v == "" or v is None:  # e.g. an empty validation_note: nothing to say
            continue
        text = target_text(v) if k == "target" and isinstance(v, dict) else fmt(v)
        print(f"  {k:<18} {text}", file=out)


def prepare_path(path: Path) -> Path:
    """Create the parent of an output file and check that the file can be written there,
    before any computation (a long run must not end in 'cannot write')."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create directory {str(path.parent)!r}: {exc.strerror}") from None
    if path.is_dir():
        raise CLIError(f"cannot write {str(path)!r}: it is a directory (give a file name)")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".amp-attention-probe-"):
            pass
    except OSError as exc:
        raise CLIError(f"cannot write to directory {str(path.parent)!r}: {exc.strerror}") from None
    return path


#: MonteCarloOptions field -> flag
MC_FLAGS = {"log2_n": "--mc-log2n", "coarse_log2_n": "--mc-coarse-log2n",
            "replicas": "--mc-replicas", "seed": "--mc-seed"}


def mc_options(args: argparse.Namespace):
    from amp_attention.solvers.state_evolution import MonteCarloOptions

    try:
        return MonteCarloOptions(args.mc_log2n, args.mc_replicas, args.mc_seed,
                                 args.mc_coarse_log2n)
    except ValueError as exc:
        raise flag_error(exc, MC_FLAGS) from None


def run_erm(problem: Problem, d: int, seeds: Sequence[int], *, tol: float, max_iter: int,
            target_spectrum: str = "sampled", progress_desc: str = "ERM seeds",
            **solver_kw: Any) -> "ERMStatistics":
    """:func:`amp_attention.erm.erm_statistics` with a progress bar over seeds.

    Non-convergence warnings are not printed: ``all_converged`` and
    ``not_converged`` report them (and the command's exit code).
    """
    from ..erm import erm_statistics

    bars = []

    def wrap(items):
        bars.append(_progress(items, desc=progress_desc, unit="seed"))
        return bars[-1]

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return erm_statistics(problem, d, seeds, wrap=wrap, tol=tol, max_iter=max_iter,
                                  **solver_kw,
                                  keep_matrix=False, target_spectrum=target_spectrum)
    finally:
        for bar in bars:
            bar.close()


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """--threads: the thread policy of the computation (amp_attention.threads)."""
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="BLAS and Numba threads of this process; default: one BLAS "
                             "thread (stable on a shared machine: multi-threaded BLAS can run "
                             "10-50x slower next to another job) and Numba on every core with "
                             "dynamic scheduling; N >= 1 gives both N threads (faster for "
                             "GEMM-bound runs on a dedicated machine). Sweep workers take one "
                             "BLAS thread and cores/workers Numba threads each "
                             "(docs/performance.md, Threads)")


def add_execution_flags(group, default_workers: int, what: str) -> None:
    """--workers, --scheduler, --dask-local: where the independent ``what`` of a sweep
    run (:func:`amp_attention.runner.run_tasks`)."""
    group.add_argument("--workers", type=int, default=default_workers,
                       help=f"local worker processes for the {what} (0: run in this process; "
                            f"at most {WORKERS_PER_CPU} x the CPUs unless --allow-large; never "
                            f"more processes than {what}) (default: {default_workers})")
    group.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help=f"run the {what} on the Dask scheduler at ADDRESS "
                            "(e.g. tcp://host:8786; needs the [dask] extra)")
    group.add_argument("--dask-local", action="store_true",
                       help=f"run the {what} on a local Dask cluster of --workers processes")


#: seconds to wait for a Dask scheduler before giving up (exit 2)
SCHEDULER_TIMEOUT = 10


def workers_limit() -> int:
    """The largest --workers accepted without --allow-large: WORKERS_PER_CPU x the CPUs."""
    import os

    return WORKERS_PER_CPU * (os.cpu_count() or 1)


def check_execution(args: argparse.Namespace) -> None:
    """The execution flags' own constraints (call before any computation, and before
    any process starts: a million --workers once forked hundreds of processes)."""
    check_min_int("--workers", args.workers, 0)
    limit = workers_limit()
    if args.workers > limit and not getattr(args, "allow_large", False):
        raise CLIError(f"argument --workers: {args.workers} worker processes exceed the limit "
                       f"of {limit} ({WORKERS_PER_CPU} x {limit // WORKERS_PER_CPU} CPUs); "
                       f"use fewer, or pass --allow-large")
    if args.scheduler and args.dask_local:
        raise CLIError("argument --scheduler: not allowed with --dask-local")
    if args.scheduler:
        refuse_given(args, ("workers",), "not allowed with --scheduler (the cluster's workers "
                                          "run the tasks)")


@contextlib.contextmanager
def execution(args: argparse.Namespace):
    """(executor, workers) of the execution flags; a Dask client is closed on exit."""
    check_execution(args)
    if not (args.scheduler or args.dask_local):
        yield None, args.workers
        return
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise CLIError("argument --scheduler/--dask-local: Dask is not installed; install the "
                       "extra: pip install 'amp-attention[dask]'") from None
    if args.scheduler:
        try:
            client = Client(args.scheduler, timeout=SCHEDULER_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:
            raise CLIError(f"argument --scheduler: no Dask scheduler answered at "
                           f"{args.scheduler!r} within {SCHEDULER_TIMEOUT} s "
                           f"({one_line(str(exc)) or type(exc).__name__})") from None
    else:
        client = Client(LocalCluster(n_workers=max(1, args.workers), threads_per_worker=1,
                                     processes=True, dashboard_address=None))
    try:
        yield client.get_executor(), args.workers
    finally:
        client.close()