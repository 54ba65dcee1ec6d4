"""``amp-attention amp``: GAMP on one data set beside the SE iterates and fixed point."""

from __future__ import annotations

import argparse
import dataclasses
import sys

from .examples import epilog
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, GAMP_DIVERGED_HINT, MODEL, PROG, HelpFormatter,
                     check_min_int, dumps, flag_error, given, print_params, refuse_given)
from .execution import add_allow_large, check_size
from .problem import add_mc_group, closed_form, mc_options, problem_from_args


AMP_DESCRIPTION = f"""\
Run GAMP (docs/theory.md section 11) on one freshly drawn data set at dimension
d: omega = u(Shat) - V r g (per-row variances V r), uhat = prox(y, omega, V r),
g = (uhat - omega)/(V r), Vh = (2/d^2) sum tr(I - (I + V r H)^-1)/V,
B = Vh Shat + (2/d) A*(g), (Shat, V) = denoiser(B, Vh); the same channel prox and
denoiser as the state evolution.  Prints, per iteration t, GAMP's m_t =
Tr(S0 Shat^t)/d, q_t = Tr(Shat^t^2)/d, V_t, train error and held-out clean test
error, beside the SE iterates from the same start (Shat^0 = 0, V^0 = --V0, i.e.
(m, q, V) = (0, 0, V0); shown for --damping 1), then GAMP's fixed point (with
the KKT residual of the ERM objective there: GAMP fixed points are ERM
stationary points) beside the SE fixed point.

{MODEL}"""


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    amp = sub.add_parser("amp", epilog=epilog('amp'), parents=[problem], formatter_class=HelpFormatter,
                         help="GAMP on a synthetic data set beside the SE",
                         description=AMP_DESCRIPTION)
    g = amp.add_argument_group("GAMP run")
    g.add_argument("--d", type=int, default=128, help="token dimension d (default: 128)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of the data set (target, tokens, noise) (default: 0)")
    g.add_argument("--iterations", type=int, default=300,
                   help="maximum GAMP iterations (default: 300)")
    g.add_argument("--tol", type=float, default=1e-8,
                   help="stop when the relative change of Shat and of V is below this "
                        "(default: 1e-8)")
    g.add_argument("--damping", type=float, default=1.0,
                   help="damping in (0, 1] of Shat, V and g; lower it if GAMP diverges "
                        "(default: 1)")
    g.add_argument("--V0", type=float, default=1.0, help="initial V (default: 1)")
    g.add_argument("--target-spectrum", choices=("sampled", "quantile"), default="sampled",
                   help="target eigenvalues: sampled Wishart or Marchenko-Pastur quantiles "
                        "(default: sampled)")
    g.add_argument("--n-test", type=int, default=10000,
                   help="held-out samples for the per-iteration test error (default: 10000)")
    g.add_argument("--se-iterates", type=int, default=30,
                   help="SE iterates shown beside GAMP's first iterations (default: 30)")
    g.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="precision of the products over the data (the n L x d tokens); "
                        "everything d x d stays float64 (default: float64)")
    add_mc_group(amp)
    g = amp.add_argument_group("output")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object {params, gamp, se_iterates, se} instead of tables")
    add_allow_large(amp.add_argument_group("size"))
    amp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``amp-attention amp``: GAMP on one data set, beside the SE iterates and fixed point."""
    from ..checks import check_dimension, check_seed
    from ..experiments.gamp_vs_se import compare_gamp_with_se
    from ..gamp import GAMPOptions

    problem = problem_from_args(args)
    try:
        d = check_dimension(args.d)
        seed = check_seed(args.seed)
    except ValueError as exc:
        raise flag_error(exc, {"d": "--d", "seed": "--seed"}) from None
    check_min_int("--n-test", args.n_test, 1)
    check_size(args, problem, [d], n_test=args.n_test if given(args, "n_test") else None)
    check_min_int("--se-iterates", args.se_iterates, 0)
    if args.damping != 1.0:
        refuse_given(args, ("se_iterates",), "applies only with --damping 1 (the SE iterates "
                                              "are those of the undamped iteration)")
    try:
        opts = GAMPOptions(max_iter=args.iterations, tol=args.tol, damping=args.damping, V0=args.V0)
    except ValueError as exc:
        raise flag_error(exc, {"max_iter": "--iterations", "tol": "--tol",
                                "damping": "--damping", "V0": "--V0"}) from None
    cmp = compare_gamp_with_se(problem, d, seed, options=opts, mc=mc_options(args),
                               se_iterates_max=args.se_iterates,
                               target_spectrum=args.target_spectrum, n_test=args.n_test,
                               progress=not args.json, dtype=args.dtype)
    res, traj, se = cmp.gamp, cmp.se_trajectory, cmp.se
    if se is None:  # diverged before its first iterate: nothing to compare
        print(f"{PROG}: GAMP {res.summary} ({GAMP_DIVERGED_HINT}); no iterate was "
              "completed, nothing to compare with the SE", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    params = {**problem.to_dict(), "d": d, "n": cmp.n, "seed": seed,
              "target_spectrum": args.target_spectrum, "iterations": args.iterations,
              "tol": args.tol, "damping": args.damping, "V0": args.V0, "n_test": args.n_test,
              "dtype": args.dtype}
    if not closed_form(problem.task.channel):
        params.update(mc_log2n=args.mc_log2n, mc_replicas=args.mc_replicas, mc_seed=args.mc_seed)
    final = {} if cmp.end is None else dataclasses.asdict(cmp.end)
    se_fields = {k: getattr(se, k) for k in ("train_error", "test_error", "matrix_mse", "m", "q",
                                             "V")}
    if args.json:
        print(dumps({"params": params, "gamp": {**res.to_dict(), "final": final},
                     "se_iterates": [{"t": t, "m": x[0], "q": x[1], "V": x[2]}
                                     for t, x in enumerate(traj)],
                     "se": se.to_dict()}))
    else:
        print_params(params)
        print(f"GAMP at d = {d}, n = {cmp.n}: {res.summary} after {res.iterations} iterations "
              f"({res.seconds:.1f} s)")
        print(f"  {'t':>4} {'m':>10} {'q':>10} {'V':>10} {'train':>10} {'test':>10}   "
              f"{'SE m':>10} {'SE q':>10} {'SE V':>10}")
        for h in res.history:
            se_cols = (f"{traj[h.t][0]:10.5f} {traj[h.t][1]:10.5f} {traj[h.t][2]:10.5f}"
                       if h.t < len(traj) else "")
            print(f"  {h.t:4d} {h.m:10.5f} {h.q:10.5f} {h.V:10.5f} {h.train_error:10.5f} "
                  f"{h.test_error:10.5f}   {se_cols}")
        print(f"  {'':<14} {'GAMP (d = ' + str(d) + ')':>16} {'SE (d -> inf)':>16}")
        for k in ("train_error", "test_error", "matrix_mse", "m", "q", "V"):
            g = f"{final[k]:16.6g}" if final else f"{'-':>16}"
            print(f"  {k:<14} {g} {se_fields[k]:16.6g}")
        if final:
            print(f"  kkt_residual   {final['kkt_residual']:16.3g}   (ERM first-order condition)")
    if res.S is None:
        print(f"{PROG}: GAMP {res.summary} ({GAMP_DIVERGED_HINT})", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    if not res.success:
        print(f"{PROG}: GAMP did not converge ({res.summary}; last relative change "
              f"{res.residual:.2e} > --tol {args.tol:g}); raise --iterations or lower --damping",
              file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK
