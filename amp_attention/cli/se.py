"""``amp-attention se``: the state-evolution fixed point of one problem (table or
JSON; optional spectrum CSV + PNG)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .examples import epilog
from .common import (EXIT_NOT_CONVERGED, EXIT_OK, MODEL, PROG, CLIError, HelpFormatter,
                     check_min_int, check_positive_finite, dumps, fmt, given, one_line,
                     prepare_path, print_params, refuse_given, se_failure)
from .problem import add_mc_group, closed_form, mc_options, problem_from_args
from .figures import add_figure_format_flag, figure_format, figure_path, write_spectrum

if TYPE_CHECKING:
    from ..spec import Problem


SE_DESCRIPTION = f"""\
Solve the state evolution of one problem and report every result field:
m = Tr(S0 Shat)/d, q = Tr(Shat^2)/d, V and the conjugates m_hat, q_hat, V_hat;
train_error (1/n) sum ||y - yhat||^2, test_error E||g(h(S0)) - g(h(Shat))||^2
(clean labels), matrix_mse ||Shat - S0||_F^2/d, loss R/n, rank_fraction and
Tr(Shat)/d, plus convergence diagnostics (converged, iterations, residual,
status, start, start_policy, metastable, alternative).

{MODEL}"""


SE_FIELD_HELP = {
    "m": "Tr(S0 Shat)/d",
    "q": "Tr(Shat^2)/d",
    "V": "normalised divergence of the denoiser",
    "m_hat": "conjugate of m",
    "q_hat": "conjugate of q",
    "V_hat": "conjugate of V",
    "train_error": "(1/n) sum ||y - yhat||^2",
    "test_error": "E||g(h(S0)) - g(h(Shat))||^2, clean",
    "test_error_noisy": "E||y - g(h(Shat))||^2 against a fresh noisy label",
    "matrix_mse": "||Shat - S0||_F^2 / d = Q0 - 2m + q",
    "loss": "R/n at the minimiser",
    "rank_fraction": "fraction of nonzero eigenvalues of Shat",
    "trace_per_d": "Tr(Shat)/d",
    "converged": "fixed point found: residual <= --tol (false at perfect recovery: see status)",
    "iterations": "fixed-point iterations",
    "residual": "final relative residual",
    "status": "solver status",
    "start": "initialisation of the reported point",
    "metastable": "the other start converged elsewhere",
    "alternative": "the other start's fixed point",
    "start_policy": "which starts ran and why",
    "quadrature_error": "estimated quadrature error",
    "seconds": "wall time of the solve",
    "finite_d": "finite-d mode: d, GOE draws, seed",
    "sampling_stderr": "finite-d mode: GOE-sampling error per field",
    "residual_kurtosis": "excess kurtosis of h(Shat - S0) at target-d (SE: 0)",
    "finite_size_warning": "non-empty: the SE is measurably off at target-d",
    "vhat_jump_share": "share of V_hat from the jumps of the prox minimiser",
    "vhat_jump_stderr": "its Monte-Carlo standard error",
    "replica_symmetry_warning": "non-empty: the prox jumps, RS formally unstable",
    "prox_branch": "prox minimiser taken: global, or teacher (descent from u*)",
    "prox_branch_split": "share of samples where the two branches' minimisers differ",
    "mc_convergence": "the Monte-Carlo convergence rule's numbers, where it decided",
    "mc_dof": "degrees of freedom of mc_stderr (replicas - 1)",
    "mc_halfwidth95": "95 % half-widths: t(0.975, mc_dof) x mc_stderr per field",
    "estimator": "erm, or bayes (the MMSE estimator)",
    "plugin_test_error": "bayes: test error of g(h(E[S0 | data]))",
    "perfect_recovery": "bayes: the MMSE vanished (below 1e-7 Q0)",
}


def add_parser(sub, problem: argparse.ArgumentParser) -> None:
    se = sub.add_parser("se", epilog=epilog('se'), parents=[problem], formatter_class=HelpFormatter,
                        help="state-evolution fixed point of one problem",
                        description=SE_DESCRIPTION)
    g = se.add_argument_group("estimator")
    g.add_argument("--estimator", choices=("erm", "bayes"), default="erm",
                   help="erm: the learner of the flags above (weight decay --lam, width --kappa); "
                        "bayes: the Bayes-optimal estimator E[S0 | data] (the MMSE, the best any "
                        "learner can reach; no learner flags; docs/theory.md section 15): "
                        "matrix_mse is the MMSE, test_error that of the Bayes predictor "
                        "E[g(h*) | data], plugin_test_error that of g(h(E[S0 | data])). "
                        "Closed form for the linear channel and for softmax without noise or "
                        "with --noise-at logit; otherwise nested Monte Carlo (outer 2^M points, "
                        "M = --mc-log2n, default 12 here; coarse level --mc-coarse-log2n, "
                        "default 9 here) (default: erm)")
    g = se.add_argument_group("solver")
    g.add_argument("--method", choices=("anderson", "damped"), default="anderson",
                   help="fixed-point iteration: Anderson acceleration or damped Picard "
                        "(default: anderson)")
    g.add_argument("--tol", type=float, default=1e-10,
                   help="relative residual at which the fixed point is accepted (default: 1e-10)")
    g.add_argument("--max-iter", type=int, default=500,
                   help="maximum fixed-point iterations (default: 500)")
    g.add_argument("--damping", type=float, default=1.0,
                   help="damping in (0, 1]: x <- (1-damping) x + damping T(x); lower it if the "
                        "iteration diverges (default: 1)")
    g.add_argument("--start", choices=("auto", "informative", "uninformative", "both"), default="auto",
                   help="initialisation: informative (Shat ~ S0), uninformative, both "
                        "(report the lower-loss fixed point, flag metastability), or auto: "
                        "both only where several fixed points are possible (non-convex "
                        "channel or a rank cap kappa < 1), the informative start alone for a "
                        "convex ERM (the result's start_policy says which) (default: auto)")
    add_mc_group(se)
    g = se.add_argument_group("finite-d prediction (docs/theory.md, finite-size corrections)")
    g.add_argument("--finite-d", type=int, default=None, metavar="D",
                   help="average the denoiser side over sampled GOE matrices at dimension D "
                        "with the target's own D eigenvalues, instead of the d -> infinity "
                        "deterministic equivalent; reports sampling_stderr (default: off)")
    g.add_argument("--finite-d-draws", type=int, default=8, metavar="R",
                   help="GOE draws of the finite-d mode, fixed over the solve (default: 8)")
    g.add_argument("--finite-d-seed", type=int, default=0, metavar="SEED",
                   help="seed of the GOE draws (default: 0)")
    g = se.add_argument_group("output")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object {params, <every result field>} instead of a table")
    g.add_argument("--spectrum", metavar="FILE", default=None,
                   help="write the predicted spectra of Shat and W to FILE (CSV: x, density_S, "
                        "sigma, density_W; header comment with params and atom masses) and a "
                        "plot to FILE with suffix .png (.pdf, .svg with --format); FILE must "
                        "end in .csv")
    add_figure_format_flag(g)
    se.set_defaults(func=run)


def _se_params(problem: Problem, args: argparse.Namespace) -> dict:
    from ..channels.base import validation_note

    params = {**problem.to_dict(), "method": args.method, "tol": args.tol,
              "max_iter": args.max_iter, "damping": args.damping, "start": args.start,
              "validation_note": validation_note(problem.task.channel_object)}
    if not closed_form(problem.task.channel):
        from ..solvers.channel_integrals import extra_sample_sizes

        test, step = extra_sample_sizes(problem.task.channel_object, args.mc_replicas,
                                        args.mc_log2n, args.mc_test_log2n, args.mc_step_log2n)
        params.update(mc_log2n=args.mc_log2n, mc_replicas=args.mc_replicas, mc_seed=args.mc_seed,
                      mc_coarse_log2n=args.mc_coarse_log2n, mc_test_log2n=test,
                      mc_step_log2n=step, mc_step_at=args.mc_step_at)
    params["prox_branch"] = args.prox_branch
    return params


def run(args: argparse.Namespace) -> int:
    """``amp-attention se``: one SE fixed point; table or JSON; optional spectrum files."""
    if args.estimator == "bayes":
        return run_bayes(args)
    problem = problem_from_args(args)
    check_positive_finite("--tol", args.tol)
    check_min_int("--max-iter", args.max_iter, 1)
    if not (math.isfinite(args.damping) and 0.0 < args.damping <= 1.0):
        raise CLIError(f"argument --damping: must lie in (0, 1], got {args.damping!r}")
    spectrum_path = Path(args.spectrum) if args.spectrum else None
    if spectrum_path is None:
        refuse_given(args, ("format",), "applies only with --spectrum (the only figure of se)")
    if spectrum_path is not None:
        prepare_path(spectrum_path)
        # the plot goes to FILE with suffix .png (.pdf, .svg): a FILE ending so would be
        # overwritten
        if spectrum_path.suffix.lower() != ".csv":
            raise CLIError(f"argument --spectrum: FILE must end in .csv (the plot is written "
                           f"beside it with suffix .png), got {args.spectrum!r}")

    # the CLI is the top floor: it may see solvers
    from amp_attention.solvers.state_evolution import solve_state_evolution

    finite_d = None
    if args.finite_d is not None:
        from ..finite_size import FiniteSizeOptions

        if spectrum_path is not None:
            raise CLIError("argument --spectrum: not allowed with --finite-d (the predicted "
                           "spectra come from the deterministic equivalent)")
        try:
            finite_d = FiniteSizeOptions(args.finite_d, args.finite_d_draws, args.finite_d_seed)
        except ValueError as exc:
            raise CLIError(f"argument --finite-d: {one_line(str(exc))}") from None
    else:
        refuse_given(args, ("finite_d_draws", "finite_d_seed"), "applies only with --finite-d")
    mc = mc_options(args)
    result = solve_state_evolution(problem, method=args.method, tol=args.tol,
                                   max_iter=args.max_iter, damping=args.damping,
                                   start=args.start, spectrum=spectrum_path is not None,
                                   mc=mc, finite_d=finite_d, progress=True)

    params = _se_params(problem, args)
    if spectrum_path is not None:
        params["spectrum"] = str(spectrum_path)
    fields = result.to_dict()
    info = sys.stderr if args.json else sys.stdout
    if args.json:
        print(dumps({"params": params, **fields}))
    else:
        _print_se_table(params, fields)
    if spectrum_path is not None and result.spectrum is not None:
        fig = write_spectrum(spectrum_path, result.spectrum, params,
                             figure=figure_path(spectrum_path, args))
        print(f"{PROG}: wrote {spectrum_path} (CSV) and {fig} ({figure_format(args).upper()})",
              file=info)
    if result.finite_size_warning:
        print(f"{PROG}: warning: {result.finite_size_warning}", file=sys.stderr)
    if result.replica_symmetry_warning:
        print(f"{PROG}: warning: {result.replica_symmetry_warning}", file=sys.stderr)
    from ..solvers.state_evolution import prox_branch_warning

    branch_note = prox_branch_warning(result)
    if branch_note:
        print(f"{PROG}: warning: {branch_note}", file=sys.stderr)
    if not result.success:
        print(f"{PROG}: state evolution did not converge ({se_failure(result)}); the "
              "values above are the last iterate, not a fixed point", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


#: flags of the ERM learner and solver that the Bayes-optimal estimator does not have
NOT_BAYES = ("lam", "kappa", "learner", "method", "damping", "finite_d", "finite_d_draws",
             "finite_d_seed", "spectrum", "format", "mc_test_log2n", "mc_step_log2n", "mc_step_at",
             "prox_branch")


def bayes_mc_options(args: argparse.Namespace):
    """The nested-RQMC options of the Bayes-optimal channel side from the --mc-* flags
    (their Bayes defaults where not given)."""
    from ..solvers.bayes_channel_integrals import BayesMonteCarloOptions

    defaults = BayesMonteCarloOptions()
    try:
        return BayesMonteCarloOptions(
            log2_n=args.mc_log2n if given(args, "mc_log2n") else defaults.log2_n,
            replicas=args.mc_replicas, seed=args.mc_seed,
            coarse_log2_n=(args.mc_coarse_log2n if given(args, "mc_coarse_log2n")
                           else defaults.coarse_log2_n))
    except ValueError as exc:
        raise CLIError(f"argument --mc-*: {one_line(str(exc))}") from None


def run_bayes(args: argparse.Namespace) -> int:
    """``amp-attention se --estimator bayes``: the Bayes-optimal fixed point."""
    refuse_given(args, NOT_BAYES, "does not apply with --estimator bayes (the Bayes-optimal "
                                  "estimator has no learner, and its SE is a scalar fixed point)")
    problem = problem_from_args(args)
    check_positive_finite("--tol", args.tol)
    check_min_int("--max-iter", args.max_iter, 1)
    from amp_attention.solvers.bayes_optimal import solve_bayes_optimal

    mc = bayes_mc_options(args)
    result = solve_bayes_optimal(problem, tol=args.tol, max_iter=args.max_iter, start=args.start,
                                 mc=mc)
    params = {**problem.to_dict(), "estimator": "bayes", "tol": args.tol,
              "max_iter": args.max_iter, "start": args.start}
    for k in ("kappa", "lam", "parameterisation"):
        params.pop(k, None)
    if "nested RQMC" in result.method:
        params.update(mc_log2n=mc.log2_n, mc_inner_log2n=mc.inner_log2_n,
                      mc_replicas=mc.replicas, mc_seed=mc.seed, mc_coarse_log2n=mc.coarse_log2_n)
    elif result.mc_stderr:  # the test error's RQMC only
        params.update(mc_replicas=mc.replicas, mc_seed=mc.seed)
    fields = result.to_dict()
    if args.json:
        print(dumps({"params": params, **fields}))
    else:
        _print_se_table(params, fields, "Bayes-optimal state evolution (d -> infinity)")
    if not result.success:
        print(f"{PROG}: state evolution did not converge ({se_failure(result)}); the "
              "values above are the last iterate, not a fixed point", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


#: table rows of one estimator only (the JSON keeps every field of SEResult)
ERM_ONLY = ("mc_failed_prox", "mc_warm_fallbacks", "finite_d", "sampling_stderr",
            "sampling_error_method", "residual_kurtosis", "residual_kurtosis_stderr",
            "finite_size_warning", "train_error", "loss", "vhat_jump_share",
            "vhat_jump_stderr", "replica_symmetry_warning", "prox_branch",
            "prox_branch_split", "mc_convergence")
BAYES_ONLY = ("plugin_test_error", "perfect_recovery")


def _print_se_table(params: dict, fields: dict,
                    title: str = "state evolution (d -> infinity)") -> None:
    print_params(params)
    print(title)
    skip = ERM_ONLY if fields.get("estimator") == "bayes" else BAYES_ONLY
    for k, v in fields.items():
        if k == "alternative" or k in skip:
            continue
        print(f"  {k:<18} {fmt(v):<22} {SE_FIELD_HELP.get(k, '')}")
    alt = fields.get("alternative")
    if alt:
        print(f"  alternative        other start ({alt.get('start')}): "
              + ", ".join(f"{k}={fmt(v)}" for k, v in alt.items() if k != "start"))
    else:
        print("  alternative        -")
