"""``amp-attention spectrum``: predicted spectra of Shat and W, optionally
against trained weights (resumable)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..files import atomic_write_text
from ..progress import progress_bar as _progress
from .examples import epilog
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, PROG, HelpFormatter, dumps, flag_error,
                     plus_minus, prepare_path, refuse_given, se_failure)
from .execution import add_allow_large, add_execution_flags, check_execution, check_size, execution
from .problem import add_mc_group, mc_options, problem_from_args
from .figures import add_figure_format_flag, figure_format, figure_path, write_spectrum


SPECTRUM_DESCRIPTION = f"""\
Predicted spectra of the learned weights (docs/theory.md "Spectra of the learned weights"): the
eigenvalue density of
Shat (continuous part plus the atom at 0) and the density of the normalised
singular values sigma/(p d)^(1/4) of W, from the SE fixed point.  Writes
OUT/spectrum.csv (x, density_S, sigma, density_W; header comment with the
params and atoms) and OUT/spectrum_theory.png (.pdf or .svg with --format).  With
--simulate it also trains
the layer with Adam at every d of --d over --seeds seeds (each run saved in
OUT/runs/, skipped on a rerun), overlays the histograms of the trained spectra
on the prediction, and reports the Kolmogorov distance sup |F_Adam - F_SE|
between each trained spectrum and the predicted law (eigenvalues within
--zero-tol x the largest count as exact zeros): OUT/spectrum.json and
OUT/spectrum.png (histograms at the largest d; distance vs d).

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("spectrum", epilog=epilog('spectrum'), parents=[problem], formatter_class=HelpFormatter,
                        help="predicted spectra of Shat and W; --simulate overlays Adam-trained ones",
                        description=SPECTRUM_DESCRIPTION)
    g = sp.add_argument_group("simulation")
    g.add_argument("--simulate", action="store_true",
                   help="train the layer with Adam and compare its spectra with the prediction")
    g.add_argument("--d", type=int, nargs="+", default=[200], metavar="D",
                   help="dimensions of the trained layers (default: 200)")
    g.add_argument("--seeds", type=int, default=1, help="seeds per d (default: 1)")
    g.add_argument("--target-spectrum", choices=("sampled", "quantile"), default="quantile",
                   help="target eigenvalues (default: quantile)")
    g.add_argument("--lr", type=float, default=0.03, help="Adam learning rate (default: 0.03)")
    g.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="with --simulate: precision of the products over the data in training "
                        "(W and the Adam moments stay float64; a run of the other dtype in --out "
                        "is redone) (default: float64)")
    g.add_argument("--lr-min", type=float, default=1e-7,
                   help="Adam stops when reduce-on-plateau takes the learning rate below this "
                        "(default: 1e-7)")
    g.add_argument("--zero-tol", type=float, default=1e-6,
                   help="trained eigenvalues below zero-tol x the largest count as 0 (default: 1e-6)")
    g.add_argument("--bins", type=int, default=50, help="histogram bins (default: 50)")
    g.add_argument("--out", default="amp-attention-spectrum", metavar="DIR",
                   help="output directory, created if needed; reruns resume from it "
                        "(default: ./amp-attention-spectrum)")
    add_figure_format_flag(g)
    g = sp.add_argument_group("execution (with --simulate)")
    add_execution_flags(g, 0, "Adam runs")
    add_allow_large(g)
    add_mc_group(sp)
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention spectrum``: predicted spectra; with --simulate, overlay and Kolmogorov distances."""
    from amp_attention.solvers.state_evolution import solve_state_evolution

    from ..adam import AdamOptions
    from ..experiments.spectrum_check import SpectrumPlan, run_spectrum_check

    if not args.simulate:
        refuse_given(args, ("d", "seeds", "target_spectrum", "lr", "lr_min", "zero_tol", "bins",
                            "workers", "scheduler", "dask_local", "allow_large", "dtype"),
                     "applies only with --simulate (without it only the prediction is written)")
    problem = problem_from_args(args)
    check_execution(args)
    try:
        adam = AdamOptions(lr=args.lr, lr_min=args.lr_min)
        plan = SpectrumPlan(problem, tuple(args.d), args.seeds, args.target_spectrum, adam,
                            mc_options(args), args.zero_tol, args.bins, dtype=args.dtype)
    except ValueError as exc:
        raise flag_error(exc, {"lr_min": "--lr-min", "lr": "--lr", "ds": "--d",
                                "seeds": "--seeds", "zero_tol": "--zero-tol",
                                "bins": "--bins"}) from None
    if args.simulate:
        check_size(args, problem, plan.ds)
    out = prepare_path(Path(args.out) / "spectrum.csv").parent
    params = {**problem.to_dict()}
    se = solve_state_evolution(problem, spectrum=True, mc=plan.mc)
    if not se.success:
        print(f"{PROG}: state evolution did not converge ({se_failure(se)}); no spectrum "
              "written", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    outliers = None
    if problem.target.kind in ("spiked", "powerlaw"):
        from amp_attention.solvers.outliers import predict_outliers

        outliers = [o.to_dict() for o in predict_outliers(problem, se)]
        atomic_write_text(out / "outliers.json", dumps({"params": params, "outliers": outliers}))
    theory_png = write_spectrum(out / "spectrum.csv", se.spectrum, params, outliers=outliers,
                                figure=figure_path(out / "spectrum_theory.png", args))
    spec = se.spectrum
    print(f"predicted: atom at 0 of Shat {spec.atom_at_zero:.6g}, rank fraction "
          f"{se.rank_fraction:.6g}")
    for o in [o for o in (outliers or []) if o["visible"]]:
        ev = "not learned (0)" if not o["eigenvalue"] else f"{o['eigenvalue']:.6g}, cos^2 {o['cos2']:.4f}"
        print(f"  outlier: target eigenvalue {o['target_eigenvalue']:.6g} -> Shat eigenvalue {ev}")
    print(f"wrote {out / 'spectrum.csv'} and {theory_png}", file=sys.stderr)
    if not args.simulate:
        return EXIT_OK
    with execution(args) as (executor, workers):
        summary = run_spectrum_check(plan, out, se=se, executor=executor, workers=workers,
                                     progress=lambda it, n: _progress(it, total=n,
                                                                      desc="Adam runs"),
                                     figure_format=figure_format(args))
    resumed = len(summary["runs"]) - summary["trained"]
    print(f"{summary['trained']} run(s) trained"
          + (f", {resumed} resumed from {out / 'runs'}" if resumed > 0 else ""))
    print(f"  {'d':>6} {'seeds':>5} {'KS(Shat)':>20} {'KS(W)':>20} {'zero fraction':>14}")
    for r in summary["per_d"]:
        ks_w = (f"{r['ks_W']:>9.4g} {plus_minus(r['ks_W_stderr'])}" if "ks_W" in r
                else f"{'-':>20}")
        print(f"  {r['d']:>6} {r['n_seeds']:>5} {r['ks_S']:>9.4g} {plus_minus(r['ks_S_stderr'])} "
              f"{ks_w} {r['zero_fraction_S']:>14.4g}")
    print(f"wrote {out / 'spectrum.json'} and {figure_path(out / 'spectrum.png', args)}",
          file=sys.stderr)
    return EXIT_OK if summary["all_converged"] else EXIT_NOT_CONVERGED
