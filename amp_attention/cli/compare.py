"""``amp-attention compare``: ERM at the user's lam, ERM at the best lam and the
Bayes-optimal estimator over alpha, with the two gaps (table, CSV, JSON, PNG)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, PROG, CLIError, HelpFormatter,
                     check_positive_finite, flag_error, fmt, learner_text, one_line,
                     prepare_path, target_text)
from .execution import add_allow_large, add_execution_flags, check_execution, execution, grid_count
from .problem import add_mc_group, closed_form, mc_options, problem_from_args
from .examples import epilog
from .figures import add_figure_format_flag, figure_format, figure_path

COMPARE_DESCRIPTION = f"""\
How far is ERM from optimal? Over an alpha range, three estimators on the same
problem (state evolution, d -> infinity):

  ERM(lam)        the learner of the flags (weight decay --lam, width --kappa);
  ERM(best lam)   the same learner at the lam that minimises the SE's test error at
                  each alpha (bounded search in log10 lam over --lam-search);
  Bayes-optimal   the posterior mean E[S0 | data] (the MMSE; test error of the
                  Bayes predictor E[g(h*) | data]), docs/theory.md section 15.

and the gaps: lam_gap = ERM(lam) - ERM(best lam), estimator_gap = ERM(best lam) -
BO (the price of the estimator), data_gap = BO (the price of the data). For
noiseless labels the perfect-recovery thresholds of ERM (lam -> 0+) and of the
Bayes-optimal estimator are printed and drawn. Writes OUT/compare.csv,
OUT/compare.json and OUT/compare.png (--format: .pdf, .svg); every finished alpha is saved in
OUT/points, so an interrupted run resumes.

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    cp = sub.add_parser("compare", epilog=epilog("compare"), parents=[problem],
                        formatter_class=HelpFormatter,
                        help="ERM at lam, ERM at the best lam and the Bayes-optimal estimator",
                        description=COMPARE_DESCRIPTION)
    g = cp.add_argument_group("sweep")
    g.add_argument("--alpha-range", type=float, nargs=3, default=[0.05, 0.6, 12],
                   metavar=("LO", "HI", "N"),
                   help="N values of alpha = n/d^2 from LO to HI (default: 0.05 0.6 12)")
    g.add_argument("--alpha-spacing", choices=("linear", "log"), default="linear",
                   help="alpha grid spacing (default: linear)")
    g.add_argument("--lam-search", type=float, nargs=2, default=[1e-4, 10.0], metavar=("LO", "HI"),
                   help="range of the best-lam search (default: 1e-4 10)")
    g.add_argument("--tol", type=float, default=1e-9,
                   help="relative residual of every ERM fixed point (default: 1e-9)")
    add_execution_flags(g, 0, "alphas")
    add_allow_large(g)
    g.add_argument("--out", default="amp-attention-compare", metavar="DIR",
                   help="output directory; rerunning with the same DIR resumes "
                        "(default: ./amp-attention-compare)")
    add_figure_format_flag(g)
    add_mc_group(cp)
    cp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention compare``: the three estimators over alpha, saved and plotted."""
    from ..experiments.compare import ComparePlan, run_compare_experiment
    from ..experiments.phase_diagram import grid
    from .se import bayes_mc_options

    problem = problem_from_args(args)
    check_execution(args)
    check_positive_finite("--tol", args.tol)
    n = grid_count("--alpha-range", args.alpha_range[2])
    try:
        alphas = grid(args.alpha_range[0], args.alpha_range[1], n, args.alpha_spacing)
    except ValueError as exc:
        raise CLIError(f"argument --alpha-range: {one_line(str(exc))}") from None
    for v in args.lam_search:
        check_positive_finite("--lam-search", v)
    mc = None if closed_form(problem.task.channel) else mc_options(args)
    try:
        plan = ComparePlan(problem, alphas, tuple(args.lam_search), args.tol, mc,
                           bayes_mc_options(args))
    except ValueError as exc:
        raise flag_error(exc, {"alpha": "--alpha-range", "lam_range": "--lam-search"}) from None
    out = prepare_path(Path(args.out) / "compare.json").parent
    p = problem.to_dict()
    with execution(args) as (executor, workers):
        # a write that fails is cli.main's one line "cannot write <file>: <reason>"
        result = run_compare_experiment(
            plan, out, figure_format=figure_format(args), cell=fmt,
            title=f"{p['channel']} L={p['L']}, {learner_text(p)}, "
                  f"{target_text(p['target'])}, Delta={p['noise']:g}",
            workers=workers, executor=executor, progress=True)
    rows = result.rows
    _print_table(rows, problem.learner.lam, result.thresholds)
    print(f"wrote {out / 'compare.csv'}, {out / 'compare.json'} and "
          f"{figure_path(out / 'compare.png', args)}", file=sys.stderr)
    for r in rows:
        for w in r["warnings"]:
            print(f"{PROG}: warning at alpha = {r['alpha']:.4g}: {w}", file=sys.stderr)
    bad = result.not_converged
    if bad:
        print(f"{PROG}: not converged at alpha " + ", ".join(f"{a:.4g}" for a in bad),
              file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


def _print_table(rows: list[dict], lam: float, thresholds: dict) -> None:
    print(f"test error (state evolution, d -> infinity): ERM at lam = {lam:g}, ERM at the best "
          "lam, Bayes-optimal; the gaps")
    print(f"  {'alpha':>7} {'ERM(lam)':>11} {'ERM(best)':>11} {'best lam':>9} {'BO':>11} "
          f"{'lam gap':>10} {'est. gap':>10} {'data gap':>10}")
    for r in rows:
        star = "*" if r["best_lam_at_bound"] else " "
        print(f"  {r['alpha']:>7.4f} {r['erm_test_error']:>11.5g} {r['erm_best_test_error']:>11.5g} "
              f"{r['best_lam']:>8.3g}{star} {r['bayes_test_error']:>11.5g} "
              f"{r['lam_gap_test_error']:>10.4g} {r['estimator_gap_test_error']:>10.4g} "
              f"{r['data_gap_test_error']:>10.4g}")
    if any(r["best_lam_at_bound"] for r in rows):
        print("  * best lam on a bound of --lam-search: the optimum lies at or beyond it")
    names = {"alpha_PR_erm": "perfect recovery, ERM (lam -> 0+)",
             "alpha_PR_bayes": "perfect recovery, Bayes-optimal"}
    for name, v in thresholds.items():
        print(f"  {names[name]}: alpha = {'-' if v is None else f'{v:.6g}'}")
    print("  matrix MSE, lam gaps and standard errors: compare.csv / compare.json")
