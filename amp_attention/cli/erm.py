"""``amp-attention erm``: direct ERM at finite d over seeds; mean and standard
error of every statistic."""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from typing import TYPE_CHECKING, Any, Sequence

from ..progress import progress_bar as _progress
from .examples import epilog
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, PROG, CLIError, HelpFormatter,
                     check_min_int, check_positive_finite, dumps, flag_error, fmt, one_line,
                     print_params, refuse_given)
from .execution import add_allow_large, check_run_count, check_size
from .problem import problem_from_args

if TYPE_CHECKING:
    from ..erm import ERMStatistics
    from ..spec import Problem


ERM_DESCRIPTION = f"""\
Minimise R at finite dimension d on freshly drawn data (one data set per seed;
n = round(alpha d^2)) and report the mean and standard error over seeds of
matrix_mse, train_error, test_error, loss, m, q, rank_fraction, trace_per_d,
iterations and residual. Factorised learner: accelerated proximal gradient over
PSD S (rank <= round(kappa d) if kappa < 1); elementwise learner: conjugate
gradient on the ridge normal equations; non-linear channels: the same
objectives by accelerated proximal gradient or L-BFGS with restarts.

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    erm = sub.add_parser("erm", epilog=epilog('erm'), parents=[problem], formatter_class=HelpFormatter,
                         help="direct ERM at finite d over seeds (mean +- stderr)",
                         description=ERM_DESCRIPTION)
    g = erm.add_argument_group("finite-d run")
    g.add_argument("--d", type=int, default=64, help="token dimension d (default: 64)")
    seeds = g.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                       help="explicit list of seeds (one data set each)")
    seeds.add_argument("--n-seeds", type=int, default=None,
                       help="number of seeds seed0, seed0+1, ... (default: 4)")
    g.add_argument("--seed0", type=int, default=0, help="first seed with --n-seeds (default: 0)")
    g.add_argument("--target-spectrum", choices=("sampled", "quantile"), default="sampled",
                   help="sampled: S0 = W0^T W0/sqrt(p0 d) with Gaussian W0 (as specified); "
                        "quantile: Haar-rotated Marchenko-Pastur quantiles (same d -> inf "
                        "limit, far smaller seed-to-seed spread; for theory checks)")
    g.add_argument("--tol", type=float, default=None,
                   help="optimiser tolerance: relative fixed-point residual (default: 1e-9 "
                        "for the linear channel; 1e-7 gradient-mapping residual otherwise; "
                        "at least 1e-4 with --dtype float32)")
    g.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="precision of the products over the data (the n L x d tokens): "
                        "float32 halves their memory traffic and is ~2-4x faster at d >= 64; "
                        "S, gradients and the optimiser stay float64; its rounding stalls the "
                        "residual near 3e-5, hence the tolerance floor (default: float64)")
    g.add_argument("--restarts", type=int, default=3,
                   help="random restarts of the non-convex solver, non-linear channels only "
                        "(default: 3; the lowest objective is kept)")
    g.add_argument("--max-iter", type=int, default=20000,
                   help="maximum optimiser iterations per seed (default: 20000)")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object {params, mean, stderr, per_seed, all_converged}")
    add_allow_large(erm.add_argument_group("size"))
    erm.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention erm``: direct ERM over seeds; mean and standard error of each field."""
    from ..channels import channel_class, optional_member
    from ..checks import check_dimension, check_seed
    from ..erm import default_tol

    problem = problem_from_args(args)
    try:
        d = check_dimension(args.d)
    except ValueError as exc:
        raise flag_error(exc, {"d": "--d"}) from None
    check_size(args, problem, [d])
    if optional_member(channel_class(problem.task.channel), "convex"):
        refuse_given(args, ("restarts",), f"applies only to non-convex channels (the "
                                           f"{problem.task.channel} channel's ERM is convex and "
                                           "starts once)")
    if args.seeds is not None:
        refuse_given(args, ("seed0",), "applies only with --n-seeds (--seeds lists the seeds)")
        seeds = list(args.seeds)
        flag = "--seeds"
        repeated = sorted({s for s in seeds if seeds.count(s) > 1})
        if repeated:  # one data set counted twice would shrink the standard error
            raise CLIError(f"argument --seeds: each seed once, got {', '.join(map(str, repeated))} "
                           "more than once")
    else:
        n_seeds = 4 if args.n_seeds is None else args.n_seeds
        check_min_int("--n-seeds", n_seeds, 1)
        check_run_count("--n-seeds", n_seeds, 10.0, args)
        seeds = list(range(args.seed0, args.seed0 + n_seeds))
        flag = "--seed0"
    for s in seeds:
        try:
            check_seed(s)
        except ValueError as exc:
            raise CLIError(f"argument {flag}: {one_line(str(exc))}") from None
    # a convex channel starts once and is solved to a tighter tolerance
    convex = bool(optional_member(channel_class(problem.task.channel), "convex"))
    if args.tol is None:
        args.tol = default_tol(convex, args.dtype)
    check_positive_finite("--tol", args.tol)
    check_min_int("--max-iter", args.max_iter, 1)
    check_min_int("--restarts", args.restarts, 0)
    solver_kw = {} if convex else {"restarts": args.restarts}

    stats = run_erm(problem, d, seeds, tol=args.tol, max_iter=args.max_iter,
                    target_spectrum=args.target_spectrum, dtype=args.dtype, **solver_kw)

    params = {**problem.to_dict(), "d": d, "n": stats.n, "seeds": seeds, "tol": args.tol,
              "max_iter": args.max_iter, "target_spectrum": args.target_spectrum,
              "dtype": args.dtype, **solver_kw}
    per_seed = [r.to_dict() for r in stats.results]
    if args.json:
        print(dumps({"params": params, "mean": stats.mean, "stderr": stats.stderr,
                      "per_seed": per_seed, "all_converged": stats.all_converged}))
    else:
        print_params(params)
        print(f"direct ERM at d = {d}, n = {stats.n}, {len(seeds)} seed(s)")
        print(f"  {'field':<16} {'mean':>16} {'stderr':>14}")
        for k in stats.mean:
            err = stats.stderr[k]  # NaN from one seed: not defined
            cell = f"{err:>14.4g}" if math.isfinite(err) else f"{'-':>14}"
            print(f"  {k:<16} {stats.mean[k]:>16.8g} {cell}")
        print(f"  all_converged    {fmt(stats.all_converged)}")
    if not stats.all_converged:
        print(f"{PROG}: direct ERM did not converge for seed(s) {stats.not_converged} "
              f"(residual above --tol {args.tol:g} after --max-iter {args.max_iter}); "
              "their values are included above", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


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
