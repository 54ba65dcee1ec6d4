"""The problem flags shared by the subcommands (task, target, learner, alpha, and the
Monte-Carlo channel integrals) and the :class:`~amp_attention.spec.Problem` they build."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..channels.base import NOISE_LOCATIONS
from ..penalties.registry import penalty_class, penalty_names, penalty_summary
from .common import (PROG, CLIError, OmittingArgumentGroup, Parser, flag_error, literal_float,
                     one_line, refuse_given)

if TYPE_CHECKING:
    from ..spec import Problem


TASK_FLAGS = {"channel": "--channel", "L": "--L", "beta": "--beta", "noise": "--noise",
               "noise_at": "--noise-at"}


WISHART_FLAGS = {"kappa0": "--kappa0"}


POWERLAW_FLAGS = {"gamma": "--gamma", "d": "--target-d", "p0": "--p0", "Q0": "--Q0"}


LEARNER_FLAGS = {"kappa": "--kappa", "lam": "--lam", "parameterisation": "--learner"}


PROBLEM_FLAGS = {"alpha": "--alpha"}


def closed_form(channel: str) -> bool:
    """The registered channel has closed-form SE integrals (no Monte-Carlo flags)."""
    from ..channels import channel_class, optional_member

    return optional_member(channel_class(channel), "se") is not None


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
                        "lam d ||S||_F^2/2; symmetric learner: lam d ||S||_* (default: 0.1)")
    g.add_argument("--noise", type=float, default=0.0, metavar="DELTA",
                   help="label-noise variance Delta, added to every output entry "
                        "(default: 0)")
    g.add_argument("--noise-at", choices=NOISE_LOCATIONS, default="output",
                   help="where the noise enters: 'output' adds it to every output entry; "
                        "'logit' to the pre-activations h, variance Delta on every h_ab "
                        "(the same as 'output' for the linear channel); 'logit_goe' to h as "
                        "sqrt(Delta/2) x GOE, variance Delta on h_aa and Delta/2 on h_ab "
                        "(a != b): the paper's model (arXiv 2509.24914) (default: output)")
    g.add_argument("--target", choices=("wishart", "powerlaw", "spiked", "custom"),
                   default="wishart",
                   help="target S0: wishart S0 = W0^T W0/sqrt(p0 d), W0 in R^{p0 x d} "
                        "i.i.d. N(0,1); powerlaw S0 = O diag(s) O^T, s_k = c k^-gamma for "
                        "k <= p0, O Haar; spiked: a wishart bulk whose top eigenvalues are "
                        "replaced by --spikes; custom: your spectrum from --target-file "
                        "(default: wishart)")
    g.add_argument("--target-file", type=Path, default=None, metavar="FILE",
                   help="custom target: a text file with one column (the eigenvalues of S0, "
                        ">= 0: a finite-d spectrum) or two columns x, rho(x) (a density on "
                        "an increasing grid >= 0), separated by spaces or commas, '#' "
                        "comments; or a JSON list of eigenvalues, or an object with "
                        "'eigenvalues' or 'grid' and 'density'")
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
    g.add_argument("--learner", choices=penalty_names(), default="factorised",
                   help="; ".join(f"{n}: {penalty_summary(n)}" for n in penalty_names())
                        + " (default: factorised)")
    return p


MC_DESTS = ("mc_log2n", "mc_replicas", "mc_seed", "mc_coarse_log2n", "mc_test_log2n",
            "mc_step_log2n", "mc_step_at", "prox_branch")


def add_mc_group(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Monte-Carlo channel integrals (softmax, seq2lab)")
    g.add_argument("--mc-log2n", type=int, default=11, metavar="M",
                   help="2^M samples per replica for the K-dimensional channel expectations "
                        "(common random numbers across iterations): 2^(M-1) scrambled-Sobol "
                        "points, each an antithetic pair of samples of the student field "
                        "(V_hat by integration by parts) (default: 11)")
    g.add_argument("--mc-replicas", type=int, default=8, metavar="R",
                   help="independent scramblings; their spread, propagated through the "
                        "fixed point, is the reported mc_stderr (default: 8)")
    g.add_argument("--mc-seed", type=int, default=0, metavar="SEED",
                   help="seed of the scramblings (default: 0)")
    g.add_argument("--mc-coarse-log2n", type=int, default=8, metavar="C",
                   help="two-level solve: find the fixed point on the first 2^C points of "
                        "every replica, then refine on all 2^M by a few quasi-Newton steps; "
                        "C >= M iterates on all points throughout (default: 8)")
    g.add_argument("--mc-test-log2n", type=int, default=None, metavar="T",
                   help="the reported test errors need no prox: average them over 2^T "
                        "test-only samples per replica, drawn apart from the 2^M; 0 uses the "
                        "2^M (default: min(M + 3, 16), lowered until the draws fit 64 MiB)")
    g.add_argument("--mc-step-log2n", type=int, default=None, metavar="S",
                   help="control variate of the hats: a couple of Newton steps of the prox "
                        "from omega, averaged over 2^(S-1) samples per replica of its own "
                        "(2^S Newton runs: each sample and its pair's centre), plus "
                        "(prox - steps) on the 2^M; 0 switches it off (default: min(M + 3, "
                        "16), lowered until the draws fit 128 MiB; the softmax channel, where "
                        "the steps' I + V H stays positive definite at every sample)")
    g.add_argument("--mc-step-at", choices=("start", "each"), default="start",
                   help="where the fine level's iterations take that control variate's steps: "
                        "start = at the coarse fixed point the fine level starts from, its "
                        "2^S-sample means computed once per solve (36-42 %% faster at L = 3, "
                        "5, ~40 %% on a phase diagram; the test error's error unchanged, "
                        "V_hat's up to 1.5x larger at L = 5; two solves of one point that "
                        "are compared, a diagram's two sweeps, share it); each = at every "
                        "iterate (one pass over the 2^S per iteration) (default: start)")
    g.add_argument("--prox-branch", choices=("global", "teacher"), default="global",
                   help="which minimiser of the channel's prox the SE takes where it has "
                        "competing minima (softmax at small lam or large beta, V large; "
                        "docs/theory.md 16.8): global = the global minimiser (the replica-"
                        "symmetric description of the ERM's global minimum); teacher = the "
                        "local minimiser reached by descent from the teacher's logits u* "
                        "(the convention of arXiv 2509.24914's SE code: a training run that "
                        "stays in the teacher's basin). Where the prox has one minimiser "
                        "both give the same numbers; the result's prox_branch_split is the "
                        "share of samples where they differ (default: global)")


#: the largest --target-file read (bytes): ~4 million eigenvalues as text; a longer
#: spectrum is better given as a density (two columns x, rho(x))
MAX_TARGET_FILE_BYTES = 64 * 2**20

#: the most values a --target-file may hold (eigenvalues, or grid points of a density):
#: the targets' own limit (amp_attention.spec.TARGET_LIST_MAX)
MAX_TARGET_VALUES = 2_000_000


def _numbers(values, what: str) -> tuple[float, ...]:
    """A JSON list of numbers as floats: strings, booleans and nested lists refused (a
    string "12" would otherwise be read as the digits 1, 2)."""
    if not isinstance(values, list):
        raise ValueError(f"{what} must be a JSON list of numbers (got "
                         f"{type(values).__name__})")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{what} must hold numbers only (got {one_line(repr(v))[:40]})")
    return tuple(float(v) for v in values)


def read_target_file(path: Path):
    """The :class:`~amp_attention.spec.CustomTarget` of --target-file (CLIError naming the
    file and what is wrong, never echoing more than a few characters of it).  Bounded:
    at most MAX_TARGET_FILE_BYTES and MAX_TARGET_VALUES values; JSON nested too deep
    (RecursionError of the parser) is one more bad file."""
    from ..spec import CustomTarget

    def error(why: str) -> CLIError:
        return CLIError(f"argument --target-file: {path}: {one_line(why)[:300]}")

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TARGET_FILE_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"argument --target-file: cannot read {path}: "
                       f"{getattr(exc, 'strerror', None) or one_line(str(exc))[:200]}") from None
    if len(raw) > MAX_TARGET_FILE_BYTES:
        raise error(f"larger than {MAX_TARGET_FILE_BYTES // 2**20} MiB (the limit of a target "
                    "file); give the spectrum as a density: two columns x, rho(x)")
    try:
        if text.lstrip().startswith(("[", "{")):
            data = json.loads(text)
            if isinstance(data, list):
                data = {"eigenvalues": data}
            if not isinstance(data, dict):
                raise ValueError("JSON must be a list of eigenvalues or an object")
            keys = {k: _numbers(data[k], k) for k in ("eigenvalues", "grid", "density")
                    if data.get(k) is not None}
            if sum(len(v) for v in keys.values()) > 2 * MAX_TARGET_VALUES:
                raise ValueError(f"more than {MAX_TARGET_VALUES} values")
            return CustomTarget(**keys)
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split("#", 1)[0].replace(",", " ").split()
            if not fields:
                continue
            try:
                rows.append([literal_float(v) for v in fields])  # '0_5' is not 5.0
            except ValueError:
                bad = next(v for v in fields if not _is_float(v))
                raise ValueError(f"line {number}: not a number: {bad[:40]!r}"
                                 f"{' (cut)' if len(bad) > 40 else ''}") from None
            if len(rows) > MAX_TARGET_VALUES:
                raise ValueError(f"more than {MAX_TARGET_VALUES} values")
        widths = {len(r) for r in rows}
        if not rows or len(widths) != 1 or widths.pop() not in (1, 2):
            raise ValueError("expected one column (eigenvalues) or two (x, rho(x)) on every line")
        if len(rows[0]) == 1:
            return CustomTarget(eigenvalues=tuple(r[0] for r in rows))
        return CustomTarget(grid=tuple(r[0] for r in rows), density=tuple(r[1] for r in rows))
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise error(str(exc) if not isinstance(exc, RecursionError) else "nested too deep") \
            from None


def _is_float(text: str) -> bool:
    try:
        literal_float(text)
    except ValueError:
        return False
    return True


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
    if not penalty_class(args.learner).uses_kappa:
        refuse_given(args, ("kappa",), f"applies only to a learner with a width (the "
                                        f"{args.learner} learner has none)")
    try:
        task = Task(channel=args.channel, L=args.L, beta=args.beta, noise=args.noise,
                    noise_at=args.noise_at)
    except ValueError as exc:
        raise flag_error(exc, TASK_FLAGS) from None
    if not closed_form(args.channel) and hasattr(args, "mc_log2n"):
        from ..solvers.channel_integrals import (check_draw_size, check_sample_sets,
                                                 check_test_draw_size, extra_sample_sizes)

        opts = mc_options(args)
        try:  # before any work: the Gaussian draws of the channel integrals must fit
            check_draw_size(task.channel_object, opts.log2_n, opts.replicas)
        except ValueError as exc:
            raise draw_size_error(exc, task.channel_object, opts) from None
        if opts.test_log2_n:
            try:
                check_test_draw_size(task.channel_object, opts.test_log2_n, opts.replicas)
            except ValueError as exc:
                raise CLIError(f"argument --mc-test-log2n: {one_line(str(exc))}") from None
        if opts.step_log2_n:
            try:
                check_draw_size(task.channel_object, opts.step_log2_n, opts.replicas)
            except ValueError as exc:
                raise CLIError(f"argument --mc-step-log2n: {one_line(str(exc))}") from None
        test, step = extra_sample_sizes(task.channel_object, opts.replicas, opts.log2_n,
                                        opts.test_log2_n, opts.step_log2_n)
        try:  # each set fits alone; together?
            check_sample_sets(task.channel_object, opts.log2_n, opts.replicas, test, step)
        except ValueError as exc:
            flag = ("--mc-step-log2n" if opts.step_log2_n else
                    "--mc-test-log2n" if opts.test_log2_n else "--mc-log2n")
            raise CLIError(f"argument {flag}: {one_line(str(exc))}") from None
    if args.spikes is not None and args.target != "spiked":
        raise CLIError(f"argument --spikes: applies only to --target spiked (got --target {args.target})")
    target_file = getattr(args, "target_file", None)  # scaling has no --target-file
    if target_file is not None and args.target != "custom":
        raise CLIError(f"argument --target-file: applies only to --target custom "
                       f"(got --target {args.target})")
    if args.target == "custom":
        refuse_given(args, ("gamma", "p0", "Q0", "target_d", "kappa0"),
                     "applies only to a built-in target (got --target custom)")
        if target_file is None:
            raise CLIError("argument --target-file: required with --target custom")
        target = read_target_file(target_file)
    elif args.target in ("wishart", "spiked"):
        refuse_given(args, ("gamma", "p0", "Q0", "target_d"),
                     f"applies only to --target powerlaw (got --target {args.target})")
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


#: MonteCarloOptions field -> flag
MC_FLAGS = {"log2_n": "--mc-log2n", "coarse_log2_n": "--mc-coarse-log2n",
            "replicas": "--mc-replicas", "seed": "--mc-seed", "test_log2_n": "--mc-test-log2n",
            "step_log2_n": "--mc-step-log2n", "step_at": "--mc-step-at",
            "prox_branch": "--prox-branch"}


def mc_options(args: argparse.Namespace):
    from amp_attention.solvers.state_evolution import MonteCarloOptions

    try:
        return MonteCarloOptions(args.mc_log2n, args.mc_replicas, args.mc_seed,
                                 args.mc_coarse_log2n, test_log2_n=args.mc_test_log2n,
                                 step_log2_n=args.mc_step_log2n, step_at=args.mc_step_at,
                                 prox_branch=args.prox_branch)
    except ValueError as exc:
        raise flag_error(exc, MC_FLAGS) from None
