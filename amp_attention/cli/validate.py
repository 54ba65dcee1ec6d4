"""``amp-attention validate``: SE against finite-d ERM over an alpha grid (resumable)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..progress import progress_bar as _progress
from .examples import epilog
from .figures import add_figure_format_flag, figure_format, figure_path
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, HelpFormatter, flag_error, plus_minus,
                     prepare_path)
from .execution import (add_allow_large, add_execution_flags, check_execution, check_run_count,
                        check_size, execution)
from .problem import add_mc_group, mc_options, problem_from_args


VALIDATE_DESCRIPTION = f"""\
Theory vs simulation: for every alpha of --alphas, every d of --d and seeds
0..--seeds-1, train the layer with Adam (full batch, reduce-on-plateau; the
exact objective R) on a fresh data set and record train error, clean test
error, matrix MSE, overlaps and spectra; each finished run is saved in
OUT/runs/ and skipped on a rerun (interrupting loses nothing finished).  The SE
is solved along alpha.  Writes OUT/validate.csv (per alpha: one row per d, the
a + b/d extrapolation d = inf, and theory), OUT/validate.json and
OUT/validate.png (test error, train error and matrix MSE vs alpha; test
error vs 1/d; --format pdf or svg: validate.pdf or .svg).

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    v = sub.add_parser("validate", epilog=epilog('validate'), parents=[problem], formatter_class=HelpFormatter,
                       help="SE vs Adam-trained layers over alpha, d, seeds (resumable)",
                       description=VALIDATE_DESCRIPTION)
    g = v.add_argument_group("sweep")
    g.add_argument("--alphas", type=float, nargs="+", default=[0.25, 0.5, 0.75, 1.0],
                   metavar="ALPHA", help="sample ratios alpha = n/d^2 (default: 0.25 0.5 0.75 1)")
    g.add_argument("--d", type=int, nargs="+", default=[32, 48, 64], metavar="D",
                   help="dimensions (default: 32 48 64)")
    g.add_argument("--seeds", type=int, nargs="+", default=[3], metavar="S",
                   help="seeds per (alpha, d): one count, or one per alpha of --alphas (noisy "
                        "points need more) (default: 3)")
    g.add_argument("--seed-scaling", choices=("constant", "equal-precision"), default="constant",
                   help="constant: --seeds at every d; equal-precision: --seeds at the largest "
                        "d and (d_max/d)^2 times as many at smaller d, so every d has about the "
                        "same standard error (cheap: small d cost little) (default: constant)")
    g.add_argument("--target-spectrum", choices=("sampled", "quantile"), default="quantile",
                   help="target eigenvalues (default: quantile, the small-spread choice for "
                        "theory checks)")
    g.add_argument("--lr", type=float, default=0.03, help="Adam learning rate (default: 0.03)")
    g.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="precision of the products over the data in training; W and the "
                        "Adam moments stay float64; a run of the other dtype in --out is redone, "
                        "not resumed (default: float64)")
    g.add_argument("--batch-size", type=int, default=None,
                   help="mini-batch size (default: full batch)")
    g.add_argument("--out", default="amp-attention-validate", metavar="DIR",
                   help="output directory, created if needed; reruns resume from it "
                        "(default: ./amp-attention-validate)")
    add_figure_format_flag(g)
    add_execution_flags(v.add_argument_group("execution"), 0, "Adam runs")
    add_mc_group(v)
    add_allow_large(v.add_argument_group("size"))
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention validate``: SE curve vs Adam-trained layers; CSV/JSON/PNG in --out."""
    from ..adam import AdamOptions
    from ..experiments.validate import ValidationPlan, run_validation

    problem = problem_from_args(args)
    check_execution(args)
    try:
        adam = AdamOptions(lr=args.lr, batch_size=args.batch_size)
        seeds = args.seeds[0] if len(args.seeds) == 1 else tuple(args.seeds)
        plan = ValidationPlan(problem, tuple(args.alphas), tuple(args.d), seeds,
                              args.target_spectrum, adam, mc_options(args),
                              seed_scaling=args.seed_scaling, dtype=args.dtype)
    except ValueError as exc:
        raise flag_error(exc, {"lr": "--lr", "batch_size": "--batch-size", "alphas": "--alphas",
                                "ds": "--d", "seeds": "--seeds"}) from None
    check_run_count("--seeds", sum(plan.seeds_at(a, d) for a in plan.alphas for d in plan.ds),
                    30.0, args)
    check_size(args, problem, plan.ds, plan.alphas)
    out = prepare_path(Path(args.out) / "validate.json").parent
    with execution(args) as (executor, workers):
        summary = run_validation(plan, out, executor=executor, workers=workers,
                                 progress=lambda it, n: _progress(it, total=n, desc="Adam runs"),
                                 figure_format=figure_format(args))
    resumed = len(plan.runs()) - summary["trained"]
    print(f"{summary['trained']} run(s) trained"
          + (f", {resumed} resumed from {out / 'runs'}" if resumed > 0 else ""))
    print(f"  {'alpha':>6} {'d':>6} {'test_error':>22} {'train_error':>22} {'matrix_mse':>22}")
    for r in summary["table"]:
        cells = " ".join(f"{r[q]:>11.5g} {plus_minus(r[q + '_stderr'])}" for q in
                         ("test_error", "train_error", "matrix_mse"))
        print(f"  {r['alpha']:>6g} {r['d']:>6} {cells}")
    print(f"wrote {out / 'validate.csv'}, {out / 'validate.json'} and "
          f"{figure_path(out / 'validate.png', args)}",
          file=sys.stderr)
    return EXIT_OK if summary["all_converged"] else EXIT_NOT_CONVERGED
