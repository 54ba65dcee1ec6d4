"""``amp-attention thresholds``: interpolation and perfect-recovery thresholds over a
kappa0 grid."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..jsonsafe import nonfinite_notes
from .examples import epilog
from .figures import add_figure_format_flag, figure_format, figure_path
from .common import (EXIT_OK, MODEL, CLIError, HelpFormatter, dumps, fmt, one_line, prepare_path,
                     print_params, refuse_given)
from .execution import add_allow_large, add_execution_flags, check_execution, execution
from .problem import problem_from_args


THRESHOLDS_DESCRIPTION = f"""\
Interpolation threshold alpha_interp (largest sample ratio alpha = n/d^2 at
which ERM with lam -> 0+ fits noisy labels exactly, e_train -> 0) and
perfect-recovery threshold alpha_PR (smallest alpha at which ERM with lam -> 0+
recovers S0 from noiseless labels, e_test -> 0) from the lam -> 0+ limit
equations of the SE (docs/theory.md section 12).  alpha is the output and
lam -> 0+, so neither is a flag here; alpha_PR uses the problem with Delta = 0.
Any target works (wishart, spiked, powerlaw); --kappa0-grid needs a wishart or
spiked target.  Channels: linear, and softmax with its labels in the range of
the softmax (--noise-at logit, or --noise 0).  With --kappa-grid, --kappa0-grid
or --noise-grid the thresholds are tabulated along that grid (CSV and PNG in
--out).

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    t = sub.add_parser("thresholds", epilog=epilog('thresholds'), parents=[problem], formatter_class=HelpFormatter,
                       help="interpolation and perfect-recovery thresholds (lam -> 0+)",
                       description=THRESHOLDS_DESCRIPTION)
    g = t.add_argument_group("curves")
    g.add_argument("--kappa-grid", type=float, nargs="+", default=None, metavar="KAPPA",
                   help="tabulate both thresholds over these learner widths kappa")
    g.add_argument("--kappa0-grid", type=float, nargs="+", default=None, metavar="KAPPA0",
                   help="tabulate both thresholds over these target ranks kappa0 (Wishart)")
    g.add_argument("--noise-grid", type=float, nargs="+", default=None, metavar="DELTA",
                   help="tabulate alpha_interp over these noise variances Delta")
    g.add_argument("--out", default=None, metavar="DIR",
                   help="with a grid: write DIR/thresholds.csv, .json and .png")
    add_figure_format_flag(g)
    g.add_argument("--json", action="store_true", help="print one JSON object")
    ex = t.add_argument_group("execution (with a grid)")
    add_execution_flags(ex, 0, "grid points")
    add_allow_large(ex)
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention thresholds``: alpha_interp and alpha_PR, optionally along a grid."""
    from ..experiments.thresholds import KEYS, run_threshold_table, threshold_params, threshold_row

    grids = [(name, vals) for name, vals in (("kappa", args.kappa_grid), ("kappa0", args.kappa0_grid),
                                             ("noise", args.noise_grid)) if vals]
    if len(grids) > 1:
        raise CLIError("argument --kappa-grid/--kappa0-grid/--noise-grid: give at most one grid")
    if grids:
        name, values = grids[0]
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:  # a row computed twice, as phase-diagram refuses the same
            raise CLIError(f"argument --{name}-grid: each value once, got "
                           f"{', '.join(f'{v:g}' for v in repeated)} more than once")
        # the grid sets this parameter: a value given for it as well would be ignored
        refuse_given(args, (name,), f"not allowed with --{name}-grid, which sets {name}")
        if name == "kappa0" and args.target not in ("wishart", "spiked"):
            raise CLIError(f"argument --kappa0-grid: kappa0 is the width of a wishart or spiked "
                           f"target; --target {args.target} has none (tabulate over --kappa-grid "
                           "or --noise-grid, or run one point per target)")
    else:
        refuse_given(args, ("out", "format", "workers", "scheduler", "dask_local", "allow_large"),
                     "applies only with a grid (--kappa-grid, --kappa0-grid or --noise-grid); a "
                     "single point is printed")
    if not args.out:
        refuse_given(args, ("format",), "applies only with --out (the figure is written there)")
    problem = problem_from_args(args)
    check_execution(args)
    out_dir = prepare_path(Path(args.out) / "thresholds.csv").parent if args.out else None
    if not grids:
        params = threshold_params(problem)
        row = threshold_row(problem)
        if args.json:
            print(dumps({"params": params, **nonfinite_notes(row, KEYS)}))
            return EXIT_OK
        print_params(params)
        for key in KEYS:
            det = row[key + "_detail"]
            val = "-" if row[key] is None else fmt(row[key])
            print(f"  {key:<15} {val:<20} {det.get('method', det.get('message', ''))}")
            if row[key] is not None and det.get("status") not in (None, "converged"):
                print(f"  {'':<15} {'':<20} ({det['status']}: {det.get('message', '')})")
        return EXIT_OK
    name, vals = grids[0]
    try:
        with execution(args) as (executor, workers):
            table = run_threshold_table(problem, name, vals, out_dir,
                                        figure_format=figure_format(args), executor=executor,
                                        workers=workers)
    except ValueError as exc:
        raise CLIError(f"argument --{name}-grid: {one_line(str(exc))}") from None
    if args.json:
        print(dumps(table.to_dict()))
    else:
        print_params(table.params)
        print(f"  {name:>8} {'alpha_interp':>14} {'alpha_PR':>14} {'alpha_PR_bayes':>14}")
        for r in table.rows:
            cells = " ".join(f"{'-' if r[k] is None else f'{r[k]:.6g}':>14}" for k in KEYS)
            print(f"  {r[name]:>8g} {cells}")
    if out_dir is not None:
        print(f"wrote {out_dir / 'thresholds.csv'}, .json and "
              f"{figure_path(out_dir / 'thresholds.png', args).suffix}", file=sys.stderr)
    return EXIT_OK
