"""``amp-attention quickstart``: the SE curve of a built-in problem over alpha,
with finite-d ERM, written to CSV, JSON and PNG."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .examples import epilog
from .figures import add_figure_format_flag, figure_format, figure_path
from .common import EXIT_NOT_CONVERGED, EXIT_OK, PROG, CLIError, HelpFormatter, fmt, plus_minus


QUICKSTART_DESCRIPTION = """\
The main job on built-in defaults: linear channel, L = 1, Wishart target with
kappa0 = 0.5, factorised learner with kappa = 1 and lam = 0.1, label noise
Delta = 0.5, and alpha on 57 points from 0.1 to 1.5 (step 0.025). Solves the state
evolution along alpha, prints a table, runs direct ERM at d = 48 with 2 seeds at 4 of the
alphas (unless --no-erm) and writes DIR/quickstart.csv, DIR/quickstart.json and
DIR/quickstart.png (test error, train error and matrix MSE vs alpha; SE lines,
ERM points with one-standard-error bars; the Bayes-optimal estimator, the best
any learner can reach, dashed; the interpolation threshold alpha_interp
(lam -> 0+) dotted; .pdf or .svg with --format). Takes well under a minute."""


def add_parser(sub) -> None:
    qs = sub.add_parser("quickstart", epilog=epilog('quickstart'), formatter_class=HelpFormatter,
                        help="SE curve over alpha with ERM overlay -> CSV/JSON/PNG",
                        description=QUICKSTART_DESCRIPTION)
    qs.add_argument("--out", default="amp-attention-quickstart", metavar="DIR",
                    help="output directory, created if needed "
                         "(default: ./amp-attention-quickstart)")
    qs.add_argument("--no-erm", action="store_true", help="skip the finite-d ERM overlay")
    add_figure_format_flag(qs)
    qs.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention quickstart``: SE curve + ERM overlay on the built-in defaults."""
    from ..experiments.quickstart import QUANTITIES, QuickstartConfig, run_quickstart

    c = QuickstartConfig()
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"argument --out: cannot create directory {str(out)!r}: "
                       f"{exc.strerror}") from None
    # a write that fails is cli.main's one line "cannot write <file>: <reason>"
    res = run_quickstart(c, erm=not args.no_erm, out=out, figure_format=figure_format(args),
                         cell=fmt)
    se_rows = res.se_rows

    print("state evolution: linear channel, L = 1, Wishart target kappa0 = 0.5, "
          "kappa = 1, lam = 0.1, Delta = 0.5")
    print(f"  {'alpha':>7} {'train_error':>12} {'test_error':>12} {'matrix_mse':>12} "
          f"{'rank_fraction':>14} {'converged':>10}")
    erm_set = set(c.erm_alphas)
    shown = [r for i, r in enumerate(se_rows)
             if i % 4 == 0 or r["alpha"] in erm_set or i == len(se_rows) - 1]
    for row in shown:
        print(f"  {row['alpha']:>7.4f} {row['train_error']:>12.6f} {row['test_error']:>12.6f} "
              f"{row['matrix_mse']:>12.6f} {row['rank_fraction']:>14.6f} "
              f"{fmt(row['converged']):>10}")
    print(f"  ({len(shown)} of the {len(se_rows)} alphas; all of them in quickstart.csv)")

    erm_rows = res.erm_rows
    if erm_rows:
        print(f"direct ERM at d = {c.erm_d}, seeds {list(c.erm_seeds)} (mean +- stderr)")
        print(f"  {'alpha':>7} {'train_error':>20} {'test_error':>20} {'matrix_mse':>20} "
              f"{'converged':>10}")
        for row in erm_rows:
            cells = " ".join(f"{row['mean'][f]:>10.5f}{plus_minus(row['stderr'][f], '<8.5f')}"
                             for f in QUANTITIES)
            print(f"  {row['alpha']:>7.4f} {cells} {fmt(row['all_converged']):>10}")
    print(f"wrote {out / 'quickstart.csv'}, {out / 'quickstart.json'} and "
          f"{figure_path(out / 'quickstart.png', args)}")

    bad_se, bad_erm = res.not_converged
    if bad_se or bad_erm:
        what = []
        if bad_se:
            what.append("state evolution at alpha " + ", ".join(f"{a:.4g}" for a in bad_se))
        if bad_erm:
            what.append("direct ERM at alpha " + ", ".join(f"{a:.4g}" for a in bad_erm))
        print(f"{PROG}: not converged: {'; '.join(what)}", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK
