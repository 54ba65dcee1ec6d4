"""``amp-attention scaling``: power-law targets, error decomposition and scaling fits."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from .examples import epilog
from .figures import add_figure_format_flag, figure_format
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, CLIError, HelpFormatter, flag_error,
                     one_line, prepare_path)
from .execution import (add_allow_large, add_execution_flags, check_execution, check_grid_size,
                        execution, grid_count)
from .problem import add_mc_group, closed_form, mc_options, problem_from_args


SCALING_DESCRIPTION = f"""\
Scaling law of a power-law target s_k ~ k^-gamma (--gamma; deterministic
equivalent with the exact list of --target-d eigenvalues, docs/theory.md "Power-law targets"):
the SE is
solved along a log-spaced alpha grid with warm starts, lam following
lam(alpha) = --lam * (alpha/alpha_0)^(-LAM_EXPONENT) (lam ~ n^-LAM_EXPONENT at
fixed d; alpha_0 the first grid point).  Per point: test/train error, matrix
MSE, the number k* of recovered target modes (outliers of Shat above the main
bulk) and the four-way decomposition E_over + E_under + E_approx + E_mismatch =
matrix MSE (docs/theory.md "Power-law targets").  The excess error e_test - e_0 is fitted as A
n^-f in
log-log coordinates (e_0 from --e0, or fitted with --e0 fit) with a confidence
interval from the residuals, and compared with f_pred = a (2 gamma - 1) from
the fitted k* ~ n^a (E_under ~ sum_(k > k*) s_k^2) and with the noise-limited
value 1 - 1/(2 gamma).  Every finished point is saved under OUT/points/ (a
rerun resumes).  Writes OUT/scaling.csv, OUT/scaling.json (parameters, rows,
fits) and OUT/scaling.png (log-log error with the fit, the stacked
decomposition, the k* staircase; .pdf or .svg with --format).

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    sc = sub.add_parser("scaling", epilog=epilog('scaling'), parents=[problem], formatter_class=HelpFormatter,
                        help="power-law target: e_test over decades of n, k* staircase, "
                             "decomposition, fitted vs predicted exponent",
                        description=SCALING_DESCRIPTION)
    g = sc.add_argument_group("scaling")
    g.add_argument("--target", choices=("powerlaw",), default="powerlaw",
                   help="the target is a power law s_k = c k^-gamma, k <= p0 (see --gamma, "
                        "--p0, --Q0, --target-d) (default: powerlaw)")
    g.add_argument("--alpha-range", type=float, nargs=3, default=[0.5, 50.0, 40],
                   metavar=("LO", "HI", "N"),
                   help="N log-spaced alpha = n/d^2 from LO to HI (default: 0.5 50 40)")
    g.add_argument("--lam-exponent", type=float, default=0.0, metavar="ELL",
                   help="lam(alpha) = lam (alpha/LO)^-ELL, in [0, 2] (default: 0, fixed lam)")
    g.add_argument("--tol", type=float, default=1e-10,
                   help="relative residual of each SE fixed point (default: 1e-10)")
    g.add_argument("--max-iter", type=int, default=200, help="SE iterations per point (default: 200)")
    g.add_argument("--e0", default="0", metavar="E0",
                   help="saturation value e_0 subtracted before the log-log fit: a number, "
                        "or 'fit' (default: 0)")
    g.add_argument("--out", default="amp-attention-scaling", metavar="DIR",
                   help="output directory; rerunning with the same DIR resumes "
                        "(default: ./amp-attention-scaling)")
    add_figure_format_flag(g)
    add_mc_group(sc)
    g = sc.add_argument_group("execution")
    add_execution_flags(g, 0, "alpha chains (contiguous warm-started runs of points)")
    add_allow_large(g)
    sc.set_defaults(func=run)


#: alpha points above which scaling asks for --allow-large
MAX_POINTS = 2000
#: seconds per point, for the estimate (measured: 0.9 s at target-d 400 for the linear
#: channel, docs/performance.md; ~10 s for a Monte-Carlo channel at its defaults)
SECONDS_PER_POINT = {True: 1.0, False: 10.0}


def run(args: argparse.Namespace) -> int:
    """``amp-attention scaling``: SE along log alpha for a power-law target, fits, figure."""
    import numpy as np

    from ..experiments.scaling import ScalingPlan, run_scaling_experiment

    args.kappa0 = args.spikes = None  # not flags of scaling: its target is a power law
    problem = problem_from_args(args)
    check_execution(args)
    lo, hi, n_pts = args.alpha_range
    if not (0 < lo < hi and n_pts == int(n_pts) and n_pts >= 3):
        raise CLIError(f"argument --alpha-range: needs 0 < LO < HI and an integer N >= 3, "
                       f"got {lo:g} {hi:g} {n_pts:g}")
    n_pts = grid_count("--alpha-range", n_pts, 3)
    check_grid_size("--alpha-range", n_pts, MAX_POINTS,
                    SECONDS_PER_POINT[closed_form(problem.task.channel)], args.workers,
                    args.allow_large)
    for end in (lo, hi):
        try:  # both ends (hence every point) must be valid problems before any is solved
            dataclasses.replace(problem, alpha=end)
        except ValueError as exc:
            raise CLIError(f"argument --alpha-range: {one_line(str(exc))}") from None
    alphas = tuple(float(a) for a in np.geomspace(lo, hi, n_pts))
    if args.e0 != "fit":  # passed on as given: scaling.json records it so
        try:
            e0 = float(args.e0)
        except ValueError:
            raise CLIError(f"argument --e0: a number >= 0 or 'fit', got {args.e0!r}") from None
        if not (math.isfinite(e0) and e0 >= 0):
            raise CLIError(f"argument --e0: a number >= 0 or 'fit', got {args.e0!r}")
    try:
        plan = ScalingPlan(problem, alphas, args.lam_exponent,
                           None if closed_form(problem.task.channel) else mc_options(args),
                           args.tol, args.max_iter)
    except ValueError as exc:
        raise flag_error(exc, {"lam_exponent": "--lam-exponent", "alphas": "--alpha-range",
                                "tol": "--tol", "max_iter": "--max-iter"}) from None
    out = prepare_path(Path(args.out) / "scaling.json").parent
    with execution(args) as (executor, workers):
        result = run_scaling_experiment(plan, out, e0=args.e0, figure_format=figure_format(args),
                                        executor=executor, workers=workers)
    rows, ok = result.rows, result.converged
    fits = result.fits.to_dict()
    fe, fk = fits["e_test"], fits["k_star"]
    print(f"{len(ok)}/{len(rows)} points converged; k* from {ok[0]['k_star'] if ok else '-'} "
          f"to {ok[-1]['k_star'] if ok else '-'}")
    if fe:
        print(f"fitted exponent of e_test - e0 (e0 = {fe['e0']:.4g}): f = {fe['exponent']:.4f} "
              f"[{fe['ci_low']:.4f}, {fe['ci_high']:.4f}] ({100 * fe['level']:g}% CI)")
    if fits["E_under"]:
        fu = fits["E_under"]
        print(f"fitted exponent of E_under: {fu['exponent']:.4f} [{fu['ci_low']:.4f}, {fu['ci_high']:.4f}]")
    if fk:
        print(f"k* ~ n^a, a = {fk['a']:.4f}: predicted f = a (2 gamma - 1) = {fk['exponent']:.4f} "
              f"[{fk['exponent_ci'][0]:.4f}, {fk['exponent_ci'][1]:.4f}]")
    # Which law to expect depends on n/d^2 (docs/theory.md 13, "Measured exponents").
    print(f"window: n = {lo:g} d^2 to {hi:g} d^2.  The recovered-mode prediction describes E_under "
          f"for n << d^2; for n >> d^2 every gamma crosses over to f ~ 1 (a fully determined S).")
    if fits["noise_limited_exponent"] is not None:
        print(f"noise-limited prediction 1 - 1/(2 gamma) = {fits['noise_limited_exponent']:.4f}")
    for e in fits["errors"]:
        print(e, file=sys.stderr)
    print(f"wrote {out / 'scaling.csv'}, .json and .{args.format}", file=sys.stderr)
    return EXIT_OK if len(ok) == len(rows) else EXIT_NOT_CONVERGED
