"""``amp-attention phase-diagram``: the alpha-lam plane (resumable, any executor)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .examples import epilog
from .figures import add_figure_format_flag, figure_format
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, CLIError, HelpFormatter, flag_error,
                     learner_text, one_line, prepare_path, target_text)
from .execution import (add_allow_large, add_execution_flags, check_execution, check_grid_size,
                        execution, grid_count)
from .problem import add_mc_group, closed_form, mc_options, problem_from_args


PHASE_DESCRIPTION = f"""\
SE phase diagram over an alpha x lam grid: test and train error, matrix MSE,
rank fraction, trace, loss and convergence status per point.  Each row of fixed
lam is swept upwards and downwards in alpha with warm starts (continuation);
where the two sweeps end on different fixed points (farther apart than their
tolerances allow, on a problem that may have several) the point is flagged
(hysteresis) and the lower-loss one is reported; sweeps that disagree less, or
at all on a convex problem, leave it not converged.  Sweeps run in --workers local
processes, or on a Dask cluster (--scheduler ADDRESS, or --dask-local; needs the
[dask] extra).  Every finished point is written atomically under OUT/points/,
so rerunning the same command resumes and Ctrl-C loses nothing finished.
Writes OUT/phase_diagram.npz (arrays [i_alpha, j_lam]), OUT/phase_diagram.json
(parameters, field descriptions, per-point status, thresholds) and
OUT/phase_diagram.png (heatmaps with alpha_interp and alpha_PR drawn where
available; .pdf or .svg with --format).  With --bayes, also the Bayes-optimal baseline at every alpha and
the ratios ERM / Bayes-optimal of the test error and the matrix MSE (arrays
bayes_*, *_over_bayes; two more panels).

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    pd = sub.add_parser("phase-diagram", epilog=epilog('phase-diagram'), parents=[problem], formatter_class=HelpFormatter,
                        help="SE over an alpha x lam grid (continuation, hysteresis, resumable)",
                        description=PHASE_DESCRIPTION)
    g = pd.add_argument_group("grid")
    g.add_argument("--alpha-range", type=float, nargs=3, default=[0.05, 1.5, 32],
                   metavar=("LO", "HI", "N"), help="grid of the sample ratio alpha = n/d^2: N "
                   "points from LO to HI (default: 0.05 1.5 32)")
    g.add_argument("--alpha-spacing", choices=("linear", "log"), default="linear",
                   help="alpha grid spacing (default: linear)")
    g.add_argument("--lam-range", type=float, nargs=3, default=[1e-3, 1.0, 32],
                   metavar=("LO", "HI", "N"), help="lam grid: N points from LO to HI "
                   "(default: 1e-3 1 32)")
    g.add_argument("--lam-spacing", choices=("linear", "log"), default="log",
                   help="lam grid spacing (default: log)")
    g = pd.add_argument_group("solver and execution")
    g.add_argument("--tol", type=float, default=1e-9,
                   help="relative residual of each fixed point (default: 1e-9)")
    g.add_argument("--max-iter", type=int, default=300, help="iterations per point (default: 300)")
    g.add_argument("--bayes", action="store_true",
                   help="also solve the Bayes-optimal SE at every alpha (one solve per alpha: "
                        "it does not depend on lam) and draw the ratios ERM test error / BO "
                        "test error and ERM matrix MSE / BO MMSE (>= 1; blank where BO "
                        "recovers S0 perfectly); the --mc-* flags set its Monte Carlo where "
                        "the channel has no closed form")
    add_execution_flags(g, 2, "sweeps")
    add_allow_large(g)
    g.add_argument("--out", default="amp-attention-phase-diagram", metavar="DIR",
                   help="output directory; rerunning with the same DIR resumes "
                        "(default: ./amp-attention-phase-diagram)")
    add_figure_format_flag(g)
    add_mc_group(pd)
    pd.set_defaults(func=run)


#: grid points above which phase-diagram asks for --allow-large (a 512 x 512 grid)
MAX_GRID_POINTS = 512 * 512
#: seconds per point and sweep direction, for the estimate (measured: ~0.06 s for the
#: linear channel through the CLI, ~10 s for a Monte-Carlo channel at its defaults)
SECONDS_PER_POINT = {True: 0.06, False: 10.0}


def _check_grid_size(args: argparse.Namespace, problem) -> None:
    n_alpha = grid_count("--alpha-range", args.alpha_range[2])
    n_lam = grid_count("--lam-range", args.lam_range[2])
    # two sweep directions: two point files and two solves per grid point
    check_grid_size("--alpha-range/--lam-range", n_alpha * n_lam, MAX_GRID_POINTS,
                    2 * SECONDS_PER_POINT[closed_form(problem.task.channel)], args.workers,
                    args.allow_large)


def run(args: argparse.Namespace) -> int:
    """``amp-attention phase-diagram``: resumable SE grid, npz + JSON + heatmaps."""
    from ..experiments.phase_diagram import (OutputDirectoryError, PhaseDiagramPlan, grid,
                                             run_phase_diagram_experiment)

    problem = problem_from_args(args)
    check_execution(args)
    _check_grid_size(args, problem)
    try:
        alphas = grid(args.alpha_range[0], args.alpha_range[1], args.alpha_range[2], args.alpha_spacing)
    except ValueError as exc:
        raise CLIError(f"argument --alpha-range: {one_line(str(exc))}") from None
    try:
        lams = grid(args.lam_range[0], args.lam_range[1], args.lam_range[2], args.lam_spacing)
    except ValueError as exc:
        raise CLIError(f"argument --lam-range: {one_line(str(exc))}") from None
    from dataclasses import replace

    for flag, values, make in (
            ("--alpha-range", alphas, lambda v: replace(problem, alpha=float(v))),
            ("--lam-range", lams, lambda v: replace(problem.learner, lam=float(v)))):
        for v in (min(values), max(values)):
            try:  # every grid point must be a valid problem before any is solved
                make(v)
            except ValueError as exc:
                raise CLIError(f"argument {flag}: {one_line(str(exc))}") from None
    try:
        plan = PhaseDiagramPlan(problem, alphas, lams, args.tol, args.max_iter,
                                None if closed_form(problem.task.channel) else mc_options(args))
    except ValueError as exc:
        raise flag_error(exc, {"alphas": "--alpha-range", "lams": "--lam-range", "tol": "--tol",
                                "max_iter": "--max-iter", "step_at": "--mc-step-at"}) from None
    bayes_mc = None
    if args.bayes:
        from amp_attention.solvers.bayes_optimal import BayesStateEvolution

        from .se import bayes_mc_options

        bayes_mc = bayes_mc_options(args)
        try:  # before the grid: a channel without a Bayes-optimal output function fails now
            BayesStateEvolution(problem, mc=bayes_mc)
        except ValueError as exc:
            raise CLIError(f"argument --bayes: {one_line(str(exc))}") from None
    out = prepare_path(Path(args.out) / "phase_diagram.json").parent
    p = problem.to_dict()
    try:
        with execution(args) as (executor, workers):
            result = run_phase_diagram_experiment(
                plan, out, bayes=args.bayes, bayes_mc=bayes_mc, figure_format=figure_format(args),
                title=f"{p['channel']} L={p['L']}, {learner_text(p)}, "
                      f"{target_text(p['target'])}, Delta={p['noise']:g}",
                executor=executor, workers=workers)
    except OutputDirectoryError as exc:
        raise CLIError(f"argument --out: {one_line(str(exc))}") from None
    meta, thresholds, bayes = result.meta, result.thresholds, result.bayes
    resumed = 2 * meta["n_points"] - meta["computed"]  # two sweeps (up, down) per grid point
    print(f"{meta['computed']} point(s) solved"
          + (f", {resumed} resumed from {out / 'points'}" if resumed > 0 else ""))
    print(f"{meta['n_converged']}/{meta['n_points']} converged, {meta['n_hysteresis']} with two "
          f"fixed points; alpha_interp = {thresholds['alpha_interp']}, "
          f"alpha_PR = {thresholds['alpha_PR']}")
    if args.bayes:
        n_pr = sum(bayes["perfect_recovery"])
        print(f"Bayes-optimal: {sum(bayes['converged'])}/{len(bayes['converged'])} alphas "
              f"converged, {n_pr} at perfect recovery (ratios blank at both and where not "
              f"converged); alpha_PR = {thresholds.get('alpha_PR_bayes')}")
    print(f"wrote {out / 'phase_diagram.npz'}, .json and .{args.format}", file=sys.stderr)
    return EXIT_OK if result.converged else EXIT_NOT_CONVERGED
