"""Command-line interface ``amp-attention`` (console script; also ``python -m amp_attention.cli``).

Subcommands

* ``se``          solve the state evolution (SE) of one problem; table or JSON,
                  optional spectrum CSV + PNG;
* ``erm``         direct empirical risk minimisation at finite d over several
                  seeds; mean and standard error of every statistic;
* ``amp``         GAMP on one synthetic data set at finite d, its per-iteration
                  record beside the SE iterates and fixed point;
* ``quickstart``  the SE curve of a built-in problem over alpha, overlaid with
                  finite-d ERM, written to CSV, JSON and PNG.

Exit codes: 0 success; 2 bad input (argparse errors, any ValueError raised by
the problem specification, a channel that is not implemented yet, a file that
cannot be written); 3 the computation ran but did not converge (the results are
still printed).  The CLI is the top floor of the package: it is the only module
of ``amp_attention`` that imports ``amp_attention.solvers`` (installed from the
solvers/ folder), and only inside functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .files import atomic_write_csv, atomic_write_json, atomic_write_text
from .jsonsafe import json_safe as _plain
from .progress import progress_bar as _progress

# numpy (and everything that imports it) is imported lazily: `--help` and argument
# errors answer without paying for the scientific stack.
if TYPE_CHECKING:
    from .erm import ERMStatistics
    from .spec import Problem

PROG = "amp-attention"

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_CONVERGED = 3

# --------------------------------------------------------------------------- help texts

MODEL = """\
model (conventions: docs/theory.md)
  A sample is L tokens x_1..x_L in R^d, i.i.d. N(0, I_d); there are n = alpha d^2
  samples. Pre-activations h_ab(S) = (x_a^T S x_b - delta_ab Tr S)/sqrt(d).
  Target S0: PSD with O(1) spectrum (Wishart W0^T W0/sqrt(p0 d), kappa0 = p0/d,
  or a power law s_k ~ k^-gamma). Labels y = g(h(S0)) + noise of variance Delta.
  Learner: tied single-head attention, W in R^{p x d}, kappa = p/d,
  S = W^T W/sqrt(p d), yhat = g(h(S)); it minimises
      R(W) = sum_mu 1/2 ||y_mu - yhat_mu||^2 + lam d Tr S   (= (lam/sqrt kappa)||W||_F^2).
  The SE is the replica-symmetric d -> infinity theory of the minimiser."""

TOP_DESCRIPTION = f"""\
High-dimensional theory engine for tied single-head attention: state evolution
(d -> infinity predictions) and finite-d direct ERM to compare it with.

{MODEL}

subcommands
  se          state-evolution fixed point of one problem (errors, overlaps, spectra)
  erm         direct ERM at finite d over several seeds (mean +- standard error)
  amp         GAMP on a synthetic data set, side by side with the SE
  validate    SE curve vs Adam-trained layers over alpha, d and seeds (resumable)
  spectrum    predicted spectra of Shat and W (outliers), optionally vs trained layers
  thresholds  interpolation and perfect-recovery thresholds (lam -> 0+)
  phase-diagram
              SE over an alpha x lam grid (resumable; local processes or Dask)
  scaling     power-law target: e_test over decades of n, k*, decomposition, exponents
  heads       multi-head ensembles of Nadaraya-Watson heads: HDI, MSE decomposition,
              allocation under a budget, weighting schemes
  quickstart  SE curve over alpha with ERM overlay, written to CSV/JSON/PNG

exit codes: 0 ok, 2 bad input or channel not available yet, 3 not converged.
Run `amp-attention <subcommand> --help` for the flags."""

SE_DESCRIPTION = f"""\
Solve the state evolution of one problem and report every result field:
m = Tr(S0 Shat)/d, q = Tr(Shat^2)/d, V and the conjugates m_hat, q_hat, V_hat;
train_error (1/n) sum ||y - yhat||^2, test_error E||g(h(S0)) - g(h(Shat))||^2
(clean labels), matrix_mse ||Shat - S0||_F^2/d, loss R/n, rank_fraction and
Tr(Shat)/d, plus convergence diagnostics (converged, iterations, residual,
status, start, metastable, alternative).

{MODEL}"""

ERM_DESCRIPTION = f"""\
Minimise R at finite dimension d on freshly drawn data (one data set per seed;
n = round(alpha d^2)) and report the mean and standard error over seeds of
matrix_mse, train_error, test_error, loss, m, q, rank_fraction, trace_per_d,
iterations and residual. Factorised learner: accelerated proximal gradient over
PSD S (rank <= round(kappa d) if kappa < 1); elementwise learner: conjugate
gradient on the ridge normal equations; non-linear channels: the same
objectives by accelerated proximal gradient or L-BFGS with restarts.

{MODEL}"""

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

QUICKSTART_DESCRIPTION = """\
The main job on built-in defaults: linear channel, L = 1, Wishart target with
kappa0 = 0.5, factorised learner with kappa = 1 and lam = 0.1, label noise
Delta = 0.5, and alpha on 12 points from 0.1 to 1.5. Solves the state evolution
along alpha, prints a table, runs direct ERM at d = 48 with 2 seeds at 4 of the
alphas (unless --no-erm) and writes DIR/quickstart.csv, DIR/quickstart.json and
DIR/quickstart.png (test error, train error and matrix MSE vs alpha; SE lines,
ERM points with one-standard-error bars). Takes well under a minute."""

# Descriptions of the SE result fields, used by the text table.
SE_FIELD_HELP = {
    "m": "Tr(S0 Shat)/d",
    "q": "Tr(Shat^2)/d",
    "V": "normalised divergence of the denoiser",
    "m_hat": "conjugate of m",
    "q_hat": "conjugate of q",
    "V_hat": "conjugate of V",
    "train_error": "(1/n) sum ||y - yhat||^2",
    "test_error": "E||g(h(S0)) - g(h(Shat))||^2, clean",
    "matrix_mse": "||Shat - S0||_F^2 / d = Q0 - 2m + q",
    "loss": "R/n at the minimiser",
    "rank_fraction": "fraction of nonzero eigenvalues of Shat",
    "trace_per_d": "Tr(Shat)/d",
    "converged": "fixed point reached to --tol",
    "iterations": "fixed-point iterations",
    "residual": "final relative residual",
    "status": "solver status",
    "start": "initialisation of the reported point",
    "metastable": "the other start converged elsewhere",
    "alternative": "the other start's fixed point",
    "quadrature_error": "estimated quadrature error",
    "seconds": "wall time of the solve",
    "finite_d": "finite-d mode: d, GOE draws, seed",
    "sampling_stderr": "finite-d mode: GOE-sampling error per field",
    "residual_kurtosis": "excess kurtosis of h(Shat - S0) at target-d (SE: 0)",
    "finite_size_warning": "non-empty: the SE is measurably off at target-d",
}

# --------------------------------------------------------------------------- errors


class CLIError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


# Spec parameter name -> CLI flag, per constructor (the spec's ValueError
# messages start with the parameter name).
_TASK_FLAGS = {"channel": "--channel", "L": "--L", "beta": "--beta", "noise": "--noise",
               "noise_at": "--noise-at"}
_WISHART_FLAGS = {"kappa0": "--kappa0"}
_POWERLAW_FLAGS = {"gamma": "--gamma", "d": "--target-d", "p0": "--p0", "Q0": "--Q0"}
_LEARNER_FLAGS = {"kappa": "--kappa", "lam": "--lam", "parameterisation": "--learner"}
_PROBLEM_FLAGS = {"alpha": "--alpha"}
_RANGES = {
    "--L": "integers >= 1", "--beta": "(0, inf)", "--noise": "[0, 1e+12]",
    "--kappa0": "(0, inf)", "--gamma": "(0, inf)", "--target-d": "integers >= 1",
    "--p0": "integers in [1, target-d]", "--Q0": "(0, inf)", "--kappa": "(0, inf)",
    "--lam": "[0, inf)", "--alpha": "[1e-09, 1e+09]", "--d": "integers >= 2",
    "--tol": "(0, inf)", "--max-iter": "integers >= 1", "--damping": "(0, 1]",
}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


_GAMP_DIVERGED_HINT = "try a smaller --damping, e.g. 0.5, or a larger --V0"

# What a user of the CLI can do about a fixed-point solve that stopped (results carry an
# enumerated status and a message free of command-line advice; the advice lives here).
_SE_HINTS = {
    "max_iter": "raise --max-iter, or lower --damping",
    "diverged": "try --damping 0.5 or --method damped",
    "invalid": "try --damping 0.5 or --method damped",
}


def _se_failure(result) -> str:
    """One line on a non-converged SE result, with the CLI's hint for its status."""
    hint = _SE_HINTS.get(result.status.value)
    return (f"status: {_one_line(result.summary)}{'; ' + hint if hint else ''}; residual "
            f"{result.residual:.3g} after {result.iterations} iterations")


def _flag_error(exc: Exception, flags: dict[str, str]) -> CLIError:
    """Rewrite a spec ValueError as 'argument --flag: <message> [(allowed range ...)]'."""
    msg = _one_line(str(exc))
    flag = flags.get(msg.split(" ", 1)[0])
    if flag is None:
        return CLIError(msg)
    if flag in _RANGES and not any(t in msg for t in ("range", ">=", "lie in", "one of")):
        msg += f" (allowed range {_RANGES[flag]})"
    return CLIError(f"argument {flag}: {msg}")


def _error(message: str) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return EXIT_USAGE


def _closed_form(channel: str) -> bool:
    """The registered channel has closed-form SE integrals (no Monte-Carlo flags)."""
    from .channels import channel_class, optional_member

    return optional_member(channel_class(channel), "se") is not None


# --------------------------------------------------------------------------- parser


class _GivenStore(argparse._StoreAction):
    """``store`` that also records the flag as given on the command line."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark_given(namespace, self.dest)


class _GivenStoreTrue(argparse._StoreTrueAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark_given(namespace, self.dest)


def _mark_given(namespace: argparse.Namespace, dest: str) -> None:
    given = set(getattr(namespace, "_given", ()))
    given.add(dest)
    namespace._given = given


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the flag with destination ``dest`` was typed by the user (not a default)."""
    return dest in getattr(args, "_given", ())


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose store actions remember which flags the user gave.

    A flag that does not apply to the problem at hand is refused when given
    (exit 2) instead of being accepted and ignored.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `--n 100` must not silently become `--n-values 100`
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", "store", _GivenStore)
        self.register("action", None, _GivenStore)
        self.register("action", "store_true", _GivenStoreTrue)


def _refuse_given(args: argparse.Namespace, dests: Sequence[str], why: str) -> None:
    """CLIError naming the first flag of ``dests`` the user gave, with ``why`` it does not apply."""
    for dest in dests:
        if given(args, dest):
            raise CLIError(f"argument --{dest.replace('_', '-')}: {why}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        import shutil

        width = min(100, shutil.get_terminal_size((92, 24)).columns - 2)
        super().__init__(prog, max_help_position=30, width=max(width, 60))


class OmittingArgumentGroup:
    """An argument group of ``parser`` whose ``add_argument`` skips the flags whose
    destinations are in ``omit``: parents shared by several subcommands leave out
    what one of them does not read."""

    def __init__(self, parser: argparse.ArgumentParser, title: str, omit: Sequence[str]) -> None:
        self._group = parser.add_argument_group(title)
        self._omit = frozenset(omit)

    def add_argument(self, flag: str, **kw: Any) -> None:
        if flag.lstrip("-").replace("-", "_") not in self._omit:
            self._group.add_argument(flag, **kw)


def _problem_parent(omit: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The problem flags shared by the subcommands, without those in ``omit`` (dests).

    A subcommand that sets a parameter itself (a grid over alpha, lam -> 0+)
    omits its flag, so that ``--help`` shows only the flags that apply.
    """
    p = _Parser(add_help=False)
    g = OmittingArgumentGroup(p, "problem (task, target, learner, sample ratio)", omit)
    from .channels.registry import channel_names, channel_summary

    g.add_argument("--channel", choices=channel_names(), default="linear",
                   help="output function g of h: "
                        + "; ".join(f"{c}: {channel_summary(c)}" for c in channel_names())
                        + ". Channels without closed-form integrals (all but linear) use "
                          "Monte-Carlo channel integrals, see --mc-* (default: linear)")
    g.add_argument("--L", type=int, default=1, metavar="L",
                   help="tokens per sample; L = 1 with the linear channel is the quadratic "
                        "network (default: 1)")
    g.add_argument("--beta", type=float, default=1.0, metavar="BETA",
                   help="softmax inverse temperature beta, softmax/seq2lab only (default: 1)")
    g.add_argument("--alpha", type=float, default=0.5, metavar="ALPHA",
                   help="sample ratio alpha = n/d^2 (default: 0.5)")
    g.add_argument("--kappa", type=float, default=1.0, metavar="KAPPA",
                   help="learner width kappa = p/d, W in R^{p x d}; kappa < 1 caps rank(S) "
                        "at p (default: 1)")
    g.add_argument("--lam", type=float, default=0.1, metavar="LAM",
                   help="regularisation lam in R = sum_mu 1/2||y_mu - yhat_mu||^2 + lam d Tr S "
                        "(weight decay (lam/sqrt kappa)||W||_F^2; lam = lt/2 in the "
                        "(1/d^2) sum (yhat-y)^2 + lt Tr S/d convention); elementwise learner: "
                        "lam d ||S||_F^2/2 (default: 0.1)")
    g.add_argument("--noise", type=float, default=0.0, metavar="DELTA",
                   help="label-noise variance Delta, added to every output entry "
                        "(default: 0)")
    g.add_argument("--noise-at", choices=("output", "logit"), default="output",
                   help="where the noise enters: on the outputs or on the pre-activations h "
                        "(identical for the linear channel) (default: output)")
    g.add_argument("--target", choices=("wishart", "powerlaw", "spiked"), default="wishart",
                   help="target S0: wishart S0 = W0^T W0/sqrt(p0 d), W0 in R^{p0 x d} "
                        "i.i.d. N(0,1); powerlaw S0 = O diag(s) O^T, s_k = c k^-gamma for "
                        "k <= p0, O Haar; spiked: a wishart bulk whose top eigenvalues are "
                        "replaced by --spikes (default: wishart)")
    g.add_argument("--spikes", type=float, nargs="+", default=None, metavar="S",
                   help="spiked target: the planted eigenvalues (default: 6 9 12)")
    g.add_argument("--kappa0", type=float, default=None, metavar="KAPPA0",
                   help="Wishart target width kappa0 = p0/d; Q0 = Tr(S0^2)/d = 1 + kappa0 "
                        "(default: 0.5)")
    g.add_argument("--gamma", type=float, default=None, metavar="GAMMA",
                   help="power-law exponent gamma, s_k ~ k^-gamma (default: 1)")
    g.add_argument("--p0", type=int, default=None, metavar="P0",
                   help="power-law target rank p0 <= target-d (default: target-d, full rank)")
    g.add_argument("--Q0", type=float, default=None, metavar="Q0",
                   help="power-law normalisation Q0 = Tr(S0^2)/d (default: 1)")
    g.add_argument("--target-d", type=int, default=None, metavar="D0",
                   help="dimension at which the power-law spectrum is tabulated for the "
                        "deterministic equivalent (default: 400)")
    g.add_argument("--learner", choices=("factorised", "elementwise"), default="factorised",
                   help="factorised: S = W^T W/sqrt(p d), PSD, nuclear-norm penalty lam d Tr S; "
                        "elementwise: S symmetric, unconstrained, penalty lam d ||S||_F^2/2, "
                        "kappa ignored (default: factorised)")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``amp-attention`` (exposed for documentation and tests)."""
    parser = _Parser(prog=PROG, description=TOP_DESCRIPTION, formatter_class=HelpFormatter)
    from . import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{se,erm,amp,validate,spectrum,thresholds,phase-diagram,scaling,quickstart}", required=True)
    problem = _problem_parent()
    # subcommands that set alpha (and lam) themselves do not offer those flags
    no_alpha = _problem_parent(omit=("alpha",))
    no_alpha_lam = _problem_parent(omit=("alpha", "lam"))

    se = sub.add_parser("se", parents=[problem], formatter_class=HelpFormatter,
                        help="state-evolution fixed point of one problem",
                        description=SE_DESCRIPTION)
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
    g.add_argument("--start", choices=("informative", "uninformative", "both"), default="both",
                   help="initialisation: informative (Shat ~ S0), uninformative, or both "
                        "(report the lower-loss fixed point, flag metastability) (default: both)")
    _add_mc_group(se)
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
                        "plot to FILE with suffix .png")
    se.set_defaults(func=cmd_se)
    _add_erm_parser(sub, problem)
    _add_amp_parser(sub, problem)
    _add_validate_parser(sub, no_alpha)
    _add_spectrum_parser(sub, problem)
    _add_thresholds_parser(sub, no_alpha_lam)
    _add_phase_diagram_parser(sub, no_alpha_lam)
    _add_scaling_parser(sub, _problem_parent(omit=("alpha", "target", "kappa0", "spikes")))
    _add_quickstart_parser(sub)
    from .heads.cli import add_heads_parser

    add_heads_parser(sub)
    return parser


MC_DESTS = ("mc_log2n", "mc_replicas", "mc_seed", "mc_coarse_log2n")


def _add_mc_group(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Monte-Carlo channel integrals (softmax, seq2lab)")
    g.add_argument("--mc-log2n", type=int, default=14, metavar="M",
                   help="2^M scrambled-Sobol points per replica for the K-dimensional channel "
                        "expectations (common random numbers across iterations) (default: 14)")
    g.add_argument("--mc-replicas", type=int, default=8, metavar="R",
                   help="independent scramblings; their spread, propagated through the "
                        "fixed point, is the reported mc_stderr (default: 8)")
    g.add_argument("--mc-seed", type=int, default=0, metavar="SEED",
                   help="seed of the scramblings (default: 0)")
    g.add_argument("--mc-coarse-log2n", type=int, default=10, metavar="C",
                   help="two-level solve: find the fixed point on the first 2^C points of "
                        "every replica, then refine on all 2^M by a few quasi-Newton steps; "
                        "C >= M iterates on all points throughout (default: 10)")


def _add_erm_parser(sub, problem: argparse.ArgumentParser) -> None:
    erm = sub.add_parser("erm", parents=[problem], formatter_class=HelpFormatter,
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
                        "for the linear channel; 1e-7 gradient-mapping residual otherwise)")
    g.add_argument("--restarts", type=int, default=3,
                   help="random restarts of the non-convex solver, non-linear channels only "
                        "(default: 3; the lowest objective is kept)")
    g.add_argument("--max-iter", type=int, default=20000,
                   help="maximum optimiser iterations per seed (default: 20000)")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object {params, mean, stderr, per_seed, all_converged}")
    erm.set_defaults(func=cmd_erm)


def _add_amp_parser(sub, problem: argparse.ArgumentParser) -> None:
    amp = sub.add_parser("amp", parents=[problem], formatter_class=HelpFormatter,
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
    _add_mc_group(amp)
    g = amp.add_argument_group("output")
    g.add_argument("--json", action="store_true",
                   help="print one JSON object {params, gamp, se_iterates, se} instead of tables")
    amp.set_defaults(func=cmd_amp)


VALIDATE_DESCRIPTION = f"""\
Theory vs simulation: for every alpha of --alphas, every d of --d and seeds
0..--seeds-1, train the layer with Adam (full batch, reduce-on-plateau; the
exact objective R) on a fresh data set and record train error, clean test
error, matrix MSE, overlaps and spectra; each finished run is saved in
OUT/runs/ and skipped on a rerun (interrupting loses nothing finished).  The SE
is solved along alpha.  Writes OUT/validate.csv (per alpha: one row per d, the
a + b/d extrapolation d = inf, and theory), OUT/validate.json and
OUT/validate.png (test error, train error and matrix MSE vs alpha; test
error vs 1/d).

{MODEL}"""


def _add_validate_parser(sub, problem: argparse.ArgumentParser) -> None:
    v = sub.add_parser("validate", parents=[problem], formatter_class=HelpFormatter,
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
    g.add_argument("--batch-size", type=int, default=None,
                   help="mini-batch size (default: full batch)")
    g.add_argument("--out", default="amp-attention-validate", metavar="DIR",
                   help="output directory, created if needed; reruns resume from it "
                        "(default: ./amp-attention-validate)")
    _add_mc_group(v)
    v.set_defaults(func=cmd_validate)


SPECTRUM_DESCRIPTION = f"""\
Predicted spectra of the learned weights (THEORY 5): the eigenvalue density of
Shat (continuous part plus the atom at 0) and the density of the normalised
singular values sigma/(p d)^(1/4) of W, from the SE fixed point.  Writes
OUT/spectrum.csv (x, density_S, sigma, density_W; header comment with the
params and atoms) and OUT/spectrum_theory.png.  With --simulate it also trains
the layer with Adam at every d of --d over --seeds seeds (each run saved in
OUT/runs/, skipped on a rerun), overlays the histograms of the trained spectra
on the prediction, and reports the Kolmogorov distance sup |F_Adam - F_SE|
between each trained spectrum and the predicted law (eigenvalues within
--zero-tol x the largest count as exact zeros): OUT/spectrum.json and
OUT/spectrum.png (histograms at the largest d; distance vs d).

{MODEL}"""


def _add_spectrum_parser(sub, problem: argparse.ArgumentParser) -> None:
    sp = sub.add_parser("spectrum", parents=[problem], formatter_class=HelpFormatter,
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
    g.add_argument("--lr-min", type=float, default=1e-7,
                   help="Adam stops when reduce-on-plateau takes the learning rate below this "
                        "(default: 1e-7)")
    g.add_argument("--zero-tol", type=float, default=1e-6,
                   help="trained eigenvalues below zero-tol x the largest count as 0 (default: 1e-6)")
    g.add_argument("--bins", type=int, default=50, help="histogram bins (default: 50)")
    g.add_argument("--out", default="amp-attention-spectrum", metavar="DIR",
                   help="output directory, created if needed; reruns resume from it "
                        "(default: ./amp-attention-spectrum)")
    _add_mc_group(sp)
    sp.set_defaults(func=cmd_spectrum)


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


def _add_thresholds_parser(sub, problem: argparse.ArgumentParser) -> None:
    t = sub.add_parser("thresholds", parents=[problem], formatter_class=HelpFormatter,
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
    g.add_argument("--json", action="store_true", help="print one JSON object")
    t.set_defaults(func=cmd_thresholds)


PHASE_DESCRIPTION = f"""\
SE phase diagram over an alpha x lam grid: test and train error, matrix MSE,
rank fraction, trace, loss and convergence status per point.  Each row of fixed
lam is swept upwards and downwards in alpha with warm starts (continuation);
where the two sweeps end on different fixed points the point is flagged
(hysteresis) and the lower-loss one is reported.  Sweeps run in --workers local
processes, or on a Dask cluster (--scheduler ADDRESS, or --dask-local; needs the
[dask] extra).  Every finished point is written atomically under OUT/points/,
so rerunning the same command resumes and Ctrl-C loses nothing finished.
Writes OUT/phase_diagram.npz (arrays [i_alpha, j_lam]), OUT/phase_diagram.json
(parameters, field descriptions, per-point status, thresholds) and
OUT/phase_diagram.png (heatmaps with alpha_interp and alpha_PR drawn where
available).

{MODEL}"""


def _add_phase_diagram_parser(sub, problem: argparse.ArgumentParser) -> None:
    pd = sub.add_parser("phase-diagram", parents=[problem], formatter_class=HelpFormatter,
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
    g.add_argument("--workers", type=int, default=2,
                   help="local worker processes (0: run in this process) (default: 2)")
    g.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on the Dask scheduler at ADDRESS (e.g. tcp://host:8786)")
    g.add_argument("--dask-local", action="store_true",
                   help="run on a local Dask cluster of --workers processes")
    g.add_argument("--out", default="amp-attention-phase-diagram", metavar="DIR",
                   help="output directory; rerunning with the same DIR resumes "
                        "(default: ./amp-attention-phase-diagram)")
    _add_mc_group(pd)
    pd.set_defaults(func=cmd_phase_diagram)


SCALING_DESCRIPTION = f"""\
Scaling law of a power-law target s_k ~ k^-gamma (--gamma; deterministic
equivalent with the exact list of --target-d eigenvalues, THEORY 8): the SE is
solved along a log-spaced alpha grid with warm starts, lam following
lam(alpha) = --lam * (alpha/alpha_0)^(-LAM_EXPONENT) (lam ~ n^-LAM_EXPONENT at
fixed d; alpha_0 the first grid point).  Per point: test/train error, matrix
MSE, the number k* of recovered target modes (outliers of Shat above the main
bulk) and the four-way decomposition E_over + E_under + E_approx + E_mismatch =
matrix MSE (THEORY 7).  The excess error e_test - e_0 is fitted as A n^-f in
log-log coordinates (e_0 from --e0, or fitted with --e0 fit) with a confidence
interval from the residuals, and compared with f_pred = a (2 gamma - 1) from
the fitted k* ~ n^a (E_under ~ sum_(k > k*) s_k^2) and with the noise-limited
value 1 - 1/(2 gamma).  Every finished point is saved under OUT/points/ (a
rerun resumes).  Writes OUT/scaling.csv, OUT/scaling.json (parameters, rows,
fits) and OUT/scaling.png (log-log error with the fit, the stacked
decomposition, the k* staircase).

{MODEL}"""


def _add_scaling_parser(sub, problem: argparse.ArgumentParser) -> None:
    sc = sub.add_parser("scaling", parents=[problem], formatter_class=HelpFormatter,
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
    _add_mc_group(sc)
    sc.set_defaults(func=cmd_scaling)


def _add_quickstart_parser(sub) -> None:
    qs = sub.add_parser("quickstart", formatter_class=HelpFormatter,
                        help="SE curve over alpha with ERM overlay -> CSV/JSON/PNG",
                        description=QUICKSTART_DESCRIPTION)
    qs.add_argument("--out", default="amp-attention-quickstart", metavar="DIR",
                    help="output directory, created if needed "
                         "(default: ./amp-attention-quickstart)")
    qs.add_argument("--no-erm", action="store_true", help="skip the finite-d ERM overlay")
    qs.set_defaults(func=cmd_quickstart)


# --------------------------------------------------------------------------- problem


def problem_from_args(args: argparse.Namespace, alpha: float | None = None) -> Problem:
    """Build and validate the :class:`Problem` of the common flags (CLIError on bad input)."""
    from .channels import channel_class, optional_member
    from .spec import Learner, PowerLawTarget, Problem, SpikedTarget, Task, WishartTarget

    if "beta" not in optional_member(channel_class(args.channel), "parameters"):
        _refuse_given(args, ("beta",), f"applies only to a channel with a temperature (the "
                                       f"{args.channel} channel has none)")
    if _closed_form(args.channel):
        _refuse_given(args, MC_DESTS, f"applies only to channels integrated by Monte Carlo (the "
                                      f"{args.channel} channel's integrals are in closed form)")
    if args.learner == "elementwise":
        _refuse_given(args, ("kappa",), "applies only to --learner factorised (the elementwise "
                                        "learner has no width)")
    try:
        task = Task(channel=args.channel, L=args.L, beta=args.beta, noise=args.noise,
                    noise_at=args.noise_at)
    except ValueError as exc:
        raise _flag_error(exc, _TASK_FLAGS) from None
    if args.spikes is not None and args.target != "spiked":
        raise CLIError(f"argument --spikes: applies only to --target spiked (got --target {args.target})")
    if args.target in ("wishart", "spiked"):
        for flag, value in (("--gamma", args.gamma), ("--p0", args.p0), ("--Q0", args.Q0),
                            ("--target-d", args.target_d)):
            if value is not None:
                raise CLIError(f"argument {flag}: applies only to --target powerlaw "
                               f"(got --target {args.target})")
        kappa0 = 0.5 if args.kappa0 is None else args.kappa0
        try:
            if args.target == "spiked":
                target = SpikedTarget(kappa0, tuple(args.spikes) if args.spikes else (6.0, 9.0, 12.0))
            else:
                target = WishartTarget(kappa0=kappa0)
        except ValueError as exc:
            raise _flag_error(exc, {**_WISHART_FLAGS, "spikes": "--spikes"}) from None
    else:
        if args.kappa0 is not None:
            raise CLIError("argument --kappa0: applies only to --target wishart or spiked "
                           "(got --target powerlaw)")
        try:
            target = PowerLawTarget(
                gamma=1.0 if args.gamma is None else args.gamma,
                d=400 if args.target_d is None else args.target_d,
                p0=args.p0,
                Q0=1.0 if args.Q0 is None else args.Q0,
            )
        except ValueError as exc:
            raise _flag_error(exc, _POWERLAW_FLAGS) from None
    try:
        learner = Learner(kappa=args.kappa, lam=getattr(args, "lam", 0.0),
                          parameterisation=args.learner)
    except ValueError as exc:
        raise _flag_error(exc, _LEARNER_FLAGS) from None
    try:
        # subcommands without --alpha (grids, lam -> 0+ limits) set alpha per point
        alpha = getattr(args, "alpha", 0.5) if alpha is None else alpha
        return Problem(task, target, learner, alpha=alpha)
    except ValueError as exc:
        raise _flag_error(exc, _PROBLEM_FLAGS) from None


def _check_positive_finite(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise CLIError(f"argument {flag}: must be > 0 and finite (allowed range "
                       f"{_RANGES[flag]}), got {value!r}")


def _check_min_int(flag: str, value: int, minimum: int) -> None:
    if value < minimum:
        raise CLIError(f"argument {flag}: must be an integer >= {minimum}, got {value!r}")


# --------------------------------------------------------------------------- output helpers


def _dumps(obj: Any, **kw: Any) -> str:
    return json.dumps(_plain(obj), allow_nan=False, **kw)


def _fmt(v: Any) -> str:
    import numpy as np

    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.10g}"
    if v is None:
        return "-"
    return str(v)


def _target_text(t: dict) -> str:
    rest = ", ".join(f"{k}={_fmt(v)}" for k, v in t.items() if k != "kind" and v is not None)
    return f"{t['kind']} ({rest})"


def _print_params(params: dict, out=None) -> None:
    out = out or sys.stdout
    print("parameters", file=out)
    for k, v in params.items():
        text = _target_text(v) if k == "target" and isinstance(v, dict) else _fmt(v)
        print(f"  {k:<18} {text}", file=out)




def _prepare_path(path: Path) -> Path:
    """Create the parent of an output file and check that the file can be written there,
    before any computation (a long run must not end in 'cannot write')."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot create directory {str(path.parent)!r}: {exc.strerror}") from None
    if path.is_dir():
        raise CLIError(f"cannot write {str(path)!r}: it is a directory (give a file name)")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".amp-attention-probe-"):
            pass
    except OSError as exc:
        raise CLIError(f"cannot write to directory {str(path.parent)!r}: {exc.strerror}") from None
    return path


# --------------------------------------------------------------------------- se


def _se_params(problem: Problem, args: argparse.Namespace) -> dict:
    params = {**problem.to_dict(), "method": args.method, "tol": args.tol,
              "max_iter": args.max_iter, "damping": args.damping, "start": args.start}
    if not _closed_form(problem.task.channel):
        params.update(mc_log2n=args.mc_log2n, mc_replicas=args.mc_replicas, mc_seed=args.mc_seed,
                      mc_coarse_log2n=args.mc_coarse_log2n)
    return params


def _mc_options(args: argparse.Namespace):
    from amp_attention.solvers.state_evolution import MonteCarloOptions

    try:
        return MonteCarloOptions(args.mc_log2n, args.mc_replicas, args.mc_seed,
                                 args.mc_coarse_log2n)
    except ValueError as exc:
        raise CLIError(f"argument --mc-*: {_one_line(str(exc))}") from None


def cmd_se(args: argparse.Namespace) -> int:
    """``amp-attention se``: one SE fixed point; table or JSON; optional spectrum files."""
    problem = problem_from_args(args)
    _check_positive_finite("--tol", args.tol)
    _check_min_int("--max-iter", args.max_iter, 1)
    if not (math.isfinite(args.damping) and 0.0 < args.damping <= 1.0):
        raise CLIError(f"argument --damping: must lie in (0, 1], got {args.damping!r}")
    spectrum_path = Path(args.spectrum) if args.spectrum else None
    if spectrum_path is not None:
        _prepare_path(spectrum_path)

    # the CLI is the top floor: it may see solvers
    from amp_attention.solvers.state_evolution import solve_state_evolution

    finite_d = None
    if args.finite_d is not None:
        from .finite_size import FiniteSizeOptions

        if spectrum_path is not None:
            raise CLIError("argument --spectrum: not allowed with --finite-d (the predicted "
                           "spectra come from the deterministic equivalent)")
        try:
            finite_d = FiniteSizeOptions(args.finite_d, args.finite_d_draws, args.finite_d_seed)
        except ValueError as exc:
            raise CLIError(f"argument --finite-d: {_one_line(str(exc))}") from None
    else:
        _refuse_given(args, ("finite_d_draws", "finite_d_seed"), "applies only with --finite-d")
    mc = _mc_options(args)
    result = solve_state_evolution(problem, method=args.method, tol=args.tol,
                                   max_iter=args.max_iter, damping=args.damping,
                                   start=args.start, spectrum=spectrum_path is not None,
                                   mc=mc, finite_d=finite_d)

    params = _se_params(problem, args)
    if spectrum_path is not None:
        params["spectrum"] = str(spectrum_path)
    fields = result.to_dict()
    info = sys.stderr if args.json else sys.stdout
    if args.json:
        print(_dumps({"params": params, **fields}))
    else:
        _print_se_table(params, fields)
    if spectrum_path is not None and result.spectrum is not None:
        png = write_spectrum(spectrum_path, result.spectrum, params)
        print(f"{PROG}: wrote {spectrum_path} and {png}", file=info)
    if result.finite_size_warning:
        print(f"{PROG}: warning: {result.finite_size_warning}", file=sys.stderr)
    if not result.converged:
        print(f"{PROG}: state evolution did not converge ({_se_failure(result)}); the "
              "values above are the last iterate, not a fixed point", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


def _print_se_table(params: dict, fields: dict) -> None:
    _print_params(params)
    print("state evolution (d -> infinity)")
    for k, v in fields.items():
        if k == "alternative":
            continue
        print(f"  {k:<18} {_fmt(v):<22} {SE_FIELD_HELP.get(k, '')}")
    alt = fields.get("alternative")
    if alt:
        print(f"  alternative        other start ({alt.get('start')}): "
              + ", ".join(f"{k}={_fmt(v)}" for k, v in alt.items() if k != "start"))
    else:
        print("  alternative        -")


def write_spectrum(path: Path, spec, params: dict, outliers: list[dict] | None = None) -> Path:
    """CSV ``x,density_S,sigma,density_W`` plus a PNG with the same stem; returns the PNG path.

    The first line is a comment (``#``) recording the parameters (JSON) and the
    atom masses at 0; the densities are the continuous parts, so each integrates
    to 1 minus its atom. sigma/density_W are empty for the elementwise learner.
    """
    import numpy as np

    from . import plotting

    x = np.asarray(spec.eigenvalues, dtype=float)
    rho = np.asarray(spec.density_S, dtype=float)
    has_w = spec.singular_values is not None and spec.density_W is not None
    sig = np.asarray(spec.singular_values, dtype=float) if has_w else None
    rho_w = np.asarray(spec.density_W, dtype=float) if has_w else None
    atom_w = "none" if spec.atom_at_zero_W is None else f"{spec.atom_at_zero_W:.12g}"
    try:
        atomic_write_csv(
            path, ["x", "density_S", "sigma", "density_W"],
            ([f"{x[i]:.12g}", f"{rho[i]:.12g}", f"{sig[i]:.12g}" if has_w else "",
              f"{rho_w[i]:.12g}" if has_w else ""] for i in range(x.size)),
            preamble=(f"# amp-attention se spectrum; atom_at_zero_S={spec.atom_at_zero:.12g}; "
                      f"atom_at_zero_W={atom_w}; densities are the continuous parts "
                      f"(integral = 1 - atom); params={_dumps(params)}\n"))
    except OSError as exc:
        raise CLIError(f"cannot write {str(path)!r}: {exc.strerror}") from None
    png = path.with_suffix(".png")
    title = (f"{params['channel']} L={params['L']}, alpha={params['alpha']:g}, "
             f"kappa={params['kappa']:g}, lam={params['lam']:g}, Delta={params['noise']:g}")
    plotting.plot_spectrum(x, rho, spec.atom_at_zero, png, sigma=sig, density_W=rho_w,
                           atom_W=spec.atom_at_zero_W, title=title, outliers=outliers)
    return png


# --------------------------------------------------------------------------- erm


def run_erm(problem: Problem, d: int, seeds: Sequence[int], *, tol: float, max_iter: int,
            target_spectrum: str = "sampled", progress_desc: str = "ERM seeds",
            **solver_kw: Any) -> "ERMStatistics":
    """:func:`amp_attention.erm.erm_statistics` with a progress bar over seeds.

    Non-convergence warnings are not printed: ``all_converged`` and
    ``not_converged`` report them (and the command's exit code).
    """
    from .erm import erm_statistics

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


def cmd_erm(args: argparse.Namespace) -> int:
    """``amp-attention erm``: direct ERM over seeds; mean and standard error of each field."""
    from .channels import channel_class, optional_member
    from .checks import check_dimension, check_seed

    problem = problem_from_args(args)
    try:
        d = check_dimension(args.d)
    except ValueError as exc:
        raise _flag_error(exc, {"d": "--d"}) from None
    if optional_member(channel_class(problem.task.channel), "convex"):
        _refuse_given(args, ("restarts",), f"applies only to non-convex channels (the "
                                           f"{problem.task.channel} channel's ERM is convex and "
                                           "starts once)")
    if args.seeds is not None:
        _refuse_given(args, ("seed0",), "applies only with --n-seeds (--seeds lists the seeds)")
        seeds = list(args.seeds)
        flag = "--seeds"
    else:
        n_seeds = 4 if args.n_seeds is None else args.n_seeds
        _check_min_int("--n-seeds", n_seeds, 1)
        seeds = list(range(args.seed0, args.seed0 + n_seeds))
        flag = "--seed0"
    for s in seeds:
        try:
            check_seed(s)
        except ValueError as exc:
            raise CLIError(f"argument {flag}: {_one_line(str(exc))}") from None
    # a convex channel starts once and is solved to a tighter tolerance
    convex = bool(optional_member(channel_class(problem.task.channel), "convex"))
    if args.tol is None:
        args.tol = 1e-9 if convex else 1e-7
    _check_positive_finite("--tol", args.tol)
    _check_min_int("--max-iter", args.max_iter, 1)
    _check_min_int("--restarts", args.restarts, 0)
    solver_kw = {} if convex else {"restarts": args.restarts}

    stats = run_erm(problem, d, seeds, tol=args.tol, max_iter=args.max_iter,
                    target_spectrum=args.target_spectrum, **solver_kw)

    params = {**problem.to_dict(), "d": d, "n": stats.n, "seeds": seeds, "tol": args.tol,
              "max_iter": args.max_iter, "target_spectrum": args.target_spectrum, **solver_kw}
    per_seed = [r.to_dict() for r in stats.results]
    if args.json:
        print(_dumps({"params": params, "mean": stats.mean, "stderr": stats.stderr,
                      "per_seed": per_seed, "all_converged": stats.all_converged}))
    else:
        _print_params(params)
        print(f"direct ERM at d = {d}, n = {stats.n}, {len(seeds)} seed(s)")
        print(f"  {'field':<16} {'mean':>16} {'stderr':>14}")
        for k in stats.mean:
            print(f"  {k:<16} {stats.mean[k]:>16.8g} {stats.stderr[k]:>14.4g}")
        print(f"  all_converged    {_fmt(stats.all_converged)}")
    if not stats.all_converged:
        print(f"{PROG}: direct ERM did not converge for seed(s) {stats.not_converged} "
              f"(residual above --tol {args.tol:g} after --max-iter {args.max_iter}); "
              "their values are included above", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


# --------------------------------------------------------------------------- amp


def cmd_amp(args: argparse.Namespace) -> int:
    """``amp-attention amp``: GAMP on one data set, beside the SE iterates and fixed point."""
    import numpy as np

    from amp_attention.solvers.state_evolution import se_iterates, solve_state_evolution

    from .checks import check_dimension, check_seed
    from .erm import kkt_residual
    from .gamp import GAMPOptions, gamp_on_problem
    from .erm import rank_cap

    problem = problem_from_args(args)
    try:
        d = check_dimension(args.d)
        seed = check_seed(args.seed)
    except ValueError as exc:
        raise _flag_error(exc, {"d": "--d", "seed": "--seed"}) from None
    _check_min_int("--n-test", args.n_test, 1)
    _check_min_int("--se-iterates", args.se_iterates, 0)
    if args.damping != 1.0:
        _refuse_given(args, ("se_iterates",), "applies only with --damping 1 (the SE iterates "
                                              "are those of the undamped iteration)")
    try:
        opts = GAMPOptions(max_iter=args.iterations, tol=args.tol, damping=args.damping, V0=args.V0)
    except ValueError as exc:
        raise _flag_error(exc, {"max_iter": "--iterations", "tol": "--tol",
                                "damping": "--damping", "V0": "--V0"}) from None
    mc = _mc_options(args)
    run = gamp_on_problem(problem, d, seed, options=opts, target_spectrum=args.target_spectrum,
                          n_test=args.n_test, progress=not args.json)
    res, data, ch = run.result, run.data, problem.task.channel_object
    if not res.history:  # diverged before its first iterate: nothing to compare
        print(f"{PROG}: GAMP {res.summary} ({_GAMP_DIVERGED_HINT}); no iterate was "
              "completed, nothing to compare with the SE", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    n_se = min(args.se_iterates, len(res.history) - 1) if args.damping == 1.0 else 0
    traj = se_iterates(problem, (0.0, 0.0, args.V0), n_se, mc=mc) if n_se else np.empty((0, 3))
    se = solve_state_evolution(problem, mc=mc)
    params = {**problem.to_dict(), "d": d, "n": data.n, "seed": seed,
              "target_spectrum": args.target_spectrum, "iterations": args.iterations,
              "tol": args.tol, "damping": args.damping, "V0": args.V0, "n_test": args.n_test}
    if not _closed_form(problem.task.channel):
        params.update(mc_log2n=args.mc_log2n, mc_replicas=args.mc_replicas, mc_seed=args.mc_seed)
    final = {}
    if res.S is not None:
        last = res.history[-1]
        final = {"train_error": last.train_error, "test_error": last.test_error,
                 "matrix_mse": float(np.sum((res.S - data.S0) ** 2)) / d, "m": last.m,
                 "q": last.q, "V": res.V,
                 "kkt_residual": kkt_residual(data.X, data.y, res.S, ch, problem.learner.lam,
                                              problem.learner.parameterisation,
                                              rank_cap(problem, d))}
    se_fields = {k: getattr(se, k) for k in ("train_error", "test_error", "matrix_mse", "m", "q",
                                             "V")}
    if args.json:
        print(_dumps({"params": params, "gamp": {**res.to_dict(), "final": final},
                      "se_iterates": [{"t": t, "m": x[0], "q": x[1], "V": x[2]}
                                      for t, x in enumerate(traj)],
                      "se": se.to_dict()}))
    else:
        _print_params(params)
        print(f"GAMP at d = {d}, n = {data.n}: {res.summary} after {res.iterations} iterations "
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
        print(f"{PROG}: GAMP {res.summary} ({_GAMP_DIVERGED_HINT})", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    if not res.converged:
        print(f"{PROG}: GAMP did not converge ({res.summary}; last relative change "
              f"{res.residual:.2e} > --tol {args.tol:g}); raise --iterations or lower --damping",
              file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


# --------------------------------------------------------------------------- validate


def cmd_validate(args: argparse.Namespace) -> int:
    """``amp-attention validate``: SE curve vs Adam-trained layers; CSV/JSON/PNG in --out."""
    from amp_attention.solvers.validate import ValidationPlan, run_validation

    from .adam import AdamOptions

    problem = problem_from_args(args)
    try:
        adam = AdamOptions(lr=args.lr, batch_size=args.batch_size)
        seeds = args.seeds[0] if len(args.seeds) == 1 else tuple(args.seeds)
        plan = ValidationPlan(problem, tuple(args.alphas), tuple(args.d), seeds,
                              args.target_spectrum, adam, _mc_options(args),
                              seed_scaling=args.seed_scaling)
    except ValueError as exc:
        raise _flag_error(exc, {"lr": "--lr", "batch_size": "--batch-size", "alphas": "--alphas",
                                "ds": "--d", "seeds": "--seeds"}) from None
    out = _prepare_path(Path(args.out) / "validate.json").parent
    summary = run_validation(plan, out, wrap=lambda items: _progress(items, desc="Adam runs"))
    print(f"{summary['trained']} run(s) trained, the others resumed from {out / 'runs'}")
    print(f"  {'alpha':>6} {'d':>6} {'test_error':>22} {'train_error':>22} {'matrix_mse':>22}")
    for r in summary["table"]:
        cells = " ".join(f"{r[q]:>11.5g} +-{r[q + '_stderr']:<8.2g}" for q in
                         ("test_error", "train_error", "matrix_mse"))
        print(f"  {r['alpha']:>6g} {r['d']:>6} {cells}")
    print(f"wrote {out / 'validate.csv'}, {out / 'validate.json'} and {out / 'validate.png'}",
          file=sys.stderr)
    return EXIT_OK if summary["all_converged"] else EXIT_NOT_CONVERGED


def cmd_spectrum(args: argparse.Namespace) -> int:
    """``amp-attention spectrum``: predicted spectra; with --simulate, overlay and Kolmogorov distances."""
    from amp_attention.solvers.spectra import SpectrumPlan, run_spectrum_check
    from amp_attention.solvers.state_evolution import solve_state_evolution

    from .adam import AdamOptions

    if not args.simulate:
        _refuse_given(args, ("d", "seeds", "target_spectrum", "lr", "lr_min", "zero_tol", "bins"),
                      "applies only with --simulate (without it only the prediction is written)")
    problem = problem_from_args(args)
    try:
        adam = AdamOptions(lr=args.lr, lr_min=args.lr_min)
        plan = SpectrumPlan(problem, tuple(args.d), args.seeds, args.target_spectrum, adam,
                            _mc_options(args), args.zero_tol, args.bins)
    except ValueError as exc:
        raise _flag_error(exc, {"lr_min": "--lr-min", "lr": "--lr", "ds": "--d",
                                "seeds": "--seeds", "zero_tol": "--zero-tol",
                                "bins": "--bins"}) from None
    out = _prepare_path(Path(args.out) / "spectrum.csv").parent
    params = {**problem.to_dict()}
    se = solve_state_evolution(problem, spectrum=True, mc=plan.mc)
    if not se.converged:
        print(f"{PROG}: state evolution did not converge ({_se_failure(se)}); no spectrum "
              "written", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    outliers = None
    if problem.target.kind in ("spiked", "powerlaw"):
        from amp_attention.solvers.outliers import predict_outliers

        outliers = [o.to_dict() for o in predict_outliers(problem, se)]
        atomic_write_text(out / "outliers.json", _dumps({"params": params, "outliers": outliers}))
    png = write_spectrum(out / "spectrum.csv", se.spectrum, params, outliers=outliers)
    theory_png = png.with_name("spectrum_theory.png")
    os.replace(png, theory_png)
    spec = se.spectrum
    print(f"predicted: atom at 0 of Shat {spec.atom_at_zero:.6g}, rank fraction "
          f"{se.rank_fraction:.6g}")
    for o in [o for o in (outliers or []) if o["visible"]]:
        ev = "not learned (0)" if not o["eigenvalue"] else f"{o['eigenvalue']:.6g}, cos^2 {o['cos2']:.4f}"
        print(f"  outlier: target eigenvalue {o['target_eigenvalue']:.6g} -> Shat eigenvalue {ev}")
    print(f"wrote {out / 'spectrum.csv'} and {theory_png}", file=sys.stderr)
    if not args.simulate:
        return EXIT_OK
    summary = run_spectrum_check(plan, out, se=se, wrap=lambda items: _progress(items, desc="Adam runs"))
    print(f"{summary['trained']} run(s) trained, the others resumed from {out / 'runs'}")
    print(f"  {'d':>6} {'seeds':>5} {'KS(Shat)':>20} {'KS(W)':>20} {'zero fraction':>14}")
    for r in summary["per_d"]:
        ks_w = (f"{r['ks_W']:>9.4g} +-{r['ks_W_stderr']:<8.2g}" if "ks_W" in r else f"{'-':>20}")
        print(f"  {r['d']:>6} {r['n_seeds']:>5} {r['ks_S']:>9.4g} +-{r['ks_S_stderr']:<8.2g} "
              f"{ks_w} {r['zero_fraction_S']:>14.4g}")
    print(f"wrote {out / 'spectrum.json'} and {out / 'spectrum.png'}", file=sys.stderr)
    return EXIT_OK if summary["all_converged"] else EXIT_NOT_CONVERGED


def _threshold_row(problem: Problem) -> dict:
    from amp_attention.solvers.thresholds import interpolation_threshold, perfect_recovery_threshold

    row: dict[str, Any] = {}
    for key, fun in (("alpha_interp", interpolation_threshold),
                     ("alpha_PR", perfect_recovery_threshold)):
        try:
            res = fun(problem)
            row[key] = res.alpha if res.converged else None
            row[key + "_detail"] = res.to_dict()
        except ValueError as exc:
            row[key] = None
            row[key + "_detail"] = {"success": False, "status": "unavailable",
                                    "message": _one_line(str(exc))}
    return row


def cmd_thresholds(args: argparse.Namespace) -> int:
    """``amp-attention thresholds``: alpha_interp and alpha_PR, optionally along a grid."""
    import dataclasses

    grids = [(name, vals) for name, vals in (("kappa", args.kappa_grid), ("kappa0", args.kappa0_grid),
                                             ("noise", args.noise_grid)) if vals]
    if len(grids) > 1:
        raise CLIError("argument --kappa-grid/--kappa0-grid/--noise-grid: give at most one grid")
    if grids:
        name = grids[0][0]
        # the grid sets this parameter: a value given for it as well would be ignored
        _refuse_given(args, (name,), f"not allowed with --{name}-grid, which sets {name}")
        if name == "kappa0" and args.target not in ("wishart", "spiked"):
            raise CLIError(f"argument --kappa0-grid: kappa0 is the width of a wishart or spiked "
                           f"target; --target {args.target} has none (tabulate over --kappa-grid "
                           "or --noise-grid, or run one point per target)")
    else:
        _refuse_given(args, ("out",), "applies only with a grid (--kappa-grid, --kappa0-grid or "
                                      "--noise-grid); a single point is printed")
    problem = problem_from_args(args)
    out_dir = _prepare_path(Path(args.out) / "thresholds.csv").parent if args.out else None
    # alpha and lam are not inputs here: alpha is the output, lam -> 0+
    params = {k: v for k, v in problem.to_dict().items() if k not in ("alpha", "lam")}
    if not grids:
        row = _threshold_row(problem)
        if args.json:
            print(_dumps({"params": params, **row}))
            return EXIT_OK
        _print_params(params)
        for key in ("alpha_interp", "alpha_PR"):
            det = row[key + "_detail"]
            val = "-" if row[key] is None else _fmt(row[key])
            print(f"  {key:<13} {val:<20} {det.get('method', det.get('message', ''))}")
            if row[key] is not None and det.get("status") not in (None, "converged"):
                print(f"  {'':<13} {'':<20} ({det['status']}: {det.get('message', '')})")
        return EXIT_OK
    name, vals = grids[0]
    rows = []
    for v in _progress(vals, desc=f"thresholds over {name}"):
        try:
            if name == "kappa":
                p = dataclasses.replace(problem, learner=dataclasses.replace(problem.learner, kappa=v))
            elif name == "kappa0":  # the target keeps its kind (and its spikes)
                p = dataclasses.replace(problem, target=dataclasses.replace(problem.target, kappa0=v))
            else:
                p = dataclasses.replace(problem, task=dataclasses.replace(problem.task, noise=v))
        except ValueError as exc:
            raise CLIError(f"argument --{name}-grid: {_one_line(str(exc))}") from None
        rows.append({name: v, **_threshold_row(p)})
    if args.json:
        print(_dumps({"params": params, "grid": name, "rows": rows}))
    else:
        _print_params(params)
        print(f"  {name:>8} {'alpha_interp':>14} {'alpha_PR':>14}")
        for r in rows:
            cells = " ".join(f"{'-' if r[k] is None else f'{r[k]:.6g}':>14}" for k in ("alpha_interp", "alpha_PR"))
            print(f"  {r[name]:>8g} {cells}")
    if out_dir is not None:
        atomic_write_csv(out_dir / "thresholds.csv", [name, "alpha_interp", "alpha_PR"],
                         ([r[name], "" if r["alpha_interp"] is None else r["alpha_interp"],
                           "" if r["alpha_PR"] is None else r["alpha_PR"]] for r in rows))
        atomic_write_text(out_dir / "thresholds.json",
                          _dumps({"params": params, "grid": name, "rows": rows}))
        from . import plotting

        plotting.plot_threshold_curves(name, rows, out_dir / "thresholds.png",
                                       title=f"{params['channel']} L={params['L']}")
        print(f"wrote {out_dir / 'thresholds.csv'}, .json and .png", file=sys.stderr)
    return EXIT_OK


def _dask_executor(args: argparse.Namespace):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise CLIError("argument --scheduler/--dask-local: Dask is not installed; install the "
                       "extra: pip install 'amp-attention[dask]'") from None
    if args.scheduler:
        client = Client(args.scheduler)
    else:
        client = Client(LocalCluster(n_workers=max(1, args.workers), threads_per_worker=1,
                                     processes=True, dashboard_address=None))
    return client


def cmd_phase_diagram(args: argparse.Namespace) -> int:
    """``amp-attention phase-diagram``: resumable SE grid, npz + JSON + heatmaps."""
    from amp_attention.solvers.phase_diagram import PhaseDiagramPlan, grid, run_phase_diagram

    from . import plotting

    problem = problem_from_args(args)
    try:
        alphas = grid(args.alpha_range[0], args.alpha_range[1], args.alpha_range[2], args.alpha_spacing)
    except ValueError as exc:
        raise CLIError(f"argument --alpha-range: {_one_line(str(exc))}") from None
    try:
        lams = grid(args.lam_range[0], args.lam_range[1], args.lam_range[2], args.lam_spacing)
    except ValueError as exc:
        raise CLIError(f"argument --lam-range: {_one_line(str(exc))}") from None
    _check_min_int("--workers", args.workers, 0)
    if args.scheduler and args.dask_local:
        raise CLIError("argument --scheduler: not allowed with --dask-local")
    if args.scheduler:
        _refuse_given(args, ("workers",), "not allowed with --scheduler (the cluster's workers "
                                          "run the sweeps)")
    try:
        plan = PhaseDiagramPlan(problem, alphas, lams, args.tol, args.max_iter,
                                None if _closed_form(problem.task.channel) else _mc_options(args))
    except ValueError as exc:
        raise _flag_error(exc, {"alphas": "--alpha-range", "lams": "--lam-range", "tol": "--tol",
                                "max_iter": "--max-iter"}) from None
    out = _prepare_path(Path(args.out) / "phase_diagram.json").parent
    thresholds = _threshold_row(problem)
    client = _dask_executor(args) if (args.scheduler or args.dask_local) else None
    try:
        executor = client.get_executor() if client is not None else None
        meta = run_phase_diagram(plan, out, executor=executor, workers=args.workers,
                                 progress=lambda it, n: _progress(it, total=n, desc="sweeps"),
                                 thresholds=thresholds)
    except ValueError as exc:
        raise CLIError(f"argument --out: {_one_line(str(exc))}") from None
    finally:
        if client is not None:
            client.close()
    from amp_attention.solvers.phase_diagram import load_phase_diagram

    _, arrays = load_phase_diagram(out)
    vlines = {"alpha_interp (lam -> 0+)": thresholds["alpha_interp"],
              "alpha_PR (Delta = 0, lam -> 0+)": thresholds["alpha_PR"]}
    p = problem.to_dict()
    plotting.plot_phase_diagram(alphas, lams, arrays, out / "phase_diagram.png", vlines=vlines,
                                title=f"{p['channel']} L={p['L']}, kappa={p['kappa']:g}, "
                                      f"{_target_text(p['target'])}, Delta={p['noise']:g}")
    print(f"{meta['computed']} point(s) solved, the others resumed from {out / 'points'}")
    print(f"{meta['n_converged']}/{meta['n_points']} converged, {meta['n_hysteresis']} with two "
          f"fixed points; alpha_interp = {thresholds['alpha_interp']}, "
          f"alpha_PR = {thresholds['alpha_PR']}")
    print(f"wrote {out / 'phase_diagram.npz'}, .json and .png", file=sys.stderr)
    return EXIT_OK if meta["n_converged"] == meta["n_points"] else EXIT_NOT_CONVERGED


def cmd_scaling(args: argparse.Namespace) -> int:
    """``amp-attention scaling``: SE along log alpha for a power-law target, fits, figure."""
    import numpy as np

    from amp_attention.solvers.scaling import (ScalingPlan, fit_power_law, noise_limited_exponent,
                                 recovered_mode_exponent, recovery_alphas, run_scaling)

    from . import plotting

    args.kappa0 = args.spikes = None  # not flags of scaling: its target is a power law
    problem = problem_from_args(args)
    lo, hi, n_pts = args.alpha_range
    if not (0 < lo < hi and n_pts == int(n_pts) and n_pts >= 3):
        raise CLIError(f"argument --alpha-range: needs 0 < LO < HI and an integer N >= 3, "
                       f"got {lo:g} {hi:g} {n_pts:g}")
    alphas = tuple(float(a) for a in np.geomspace(lo, hi, int(n_pts)))
    if args.e0 == "fit":
        e0 = None
    else:
        try:
            e0 = float(args.e0)
        except ValueError:
            raise CLIError(f"argument --e0: a number >= 0 or 'fit', got {args.e0!r}") from None
        if not (math.isfinite(e0) and e0 >= 0):
            raise CLIError(f"argument --e0: a number >= 0 or 'fit', got {args.e0!r}")
    try:
        plan = ScalingPlan(problem, alphas, args.lam_exponent,
                           None if _closed_form(problem.task.channel) else _mc_options(args),
                           args.tol, args.max_iter)
    except ValueError as exc:
        raise _flag_error(exc, {"lam_exponent": "--lam-exponent", "alphas": "--alpha-range",
                                "tol": "--tol", "max_iter": "--max-iter"}) from None
    out = _prepare_path(Path(args.out) / "scaling.json").parent
    rows = run_scaling(plan, out, wrap=lambda todo: _progress(todo, desc="alpha"))
    ok = [r for r in rows if r["converged"]]
    gamma = problem.target.gamma
    fits: dict = {"e_test": None, "E_under": None, "k_star": None, "noise_limited_exponent": None,
                  "errors": []}
    if len(ok) >= 3:
        try:
            fits["e_test"] = dataclasses.asdict(fit_power_law([r["n"] for r in ok],
                                                              [r["test_error"] for r in ok], e0))
        except ValueError as exc:
            fits["errors"].append(f"e_test fit: {exc}")
        try:
            # the k*-prediction is a statement about E_under (THEORY 8), fitted on its own
            fits["E_under"] = dataclasses.asdict(fit_power_law(
                [r["n"] for r in ok], [r["decomposition"]["under"] for r in ok], 0.0))
        except ValueError as exc:
            fits["errors"].append(f"E_under fit: {exc}")
        try:
            fits["k_star"] = recovered_mode_exponent([r["n"] for r in ok], [r["k_star"] for r in ok], gamma)
        except ValueError as exc:
            fits["errors"].append(f"k* fit: {exc}")
    if gamma > 0.5:
        fits["noise_limited_exponent"] = noise_limited_exponent(gamma)
    fits["recovery_alpha"] = {str(k): a for k, a in recovery_alphas(rows).items()}
    params = {**problem.to_dict(), "alphas": list(alphas), "lam_exponent": args.lam_exponent,
              "e0": args.e0}
    atomic_write_json(out / "scaling.json", {"params": params, "rows": rows, "fits": fits})
    cols = ["alpha", "n", "lam", "converged", "test_error", "train_error", "matrix_mse", "k_star",
            "E_over", "E_under", "E_approx", "E_mismatch", "residual_kurtosis"]
    table = []
    for r in rows:
        dec = r.get("decomposition") or {}
        table.append([r["alpha"], r["n"], r["lam"], r["converged"], r["test_error"],
                      r["train_error"], r["matrix_mse"], r.get("k_star"),
                      *(dec.get(t) for t in ("over", "under", "approx", "mismatch")),
                      r.get("residual_kurtosis")])
    atomic_write_csv(out / "scaling.csv", cols, table)
    plotting.plot_scaling(rows, fits, out / "scaling.png",
                          title=f"{problem.task.channel_name} L={problem.task.L}, gamma={gamma:g}, "
                                f"d={problem.target.d}, lam={problem.learner.lam:g}"
                                f" (alpha/{lo:g})^-{args.lam_exponent:g}, Delta={problem.task.noise:g}")
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
    print(f"wrote {out / 'scaling.csv'}, .json and .png", file=sys.stderr)
    return EXIT_OK if len(ok) == len(rows) else EXIT_NOT_CONVERGED


# --------------------------------------------------------------------------- quickstart

QUICKSTART = {
    "channel": "linear", "L": 1, "kappa0": 0.5, "kappa": 1.0, "lam": 0.1, "noise": 0.5,
    "alpha_grid": (0.1, 1.5, 12),  # np.linspace(0.1, 1.5, 12)
    "erm_d": 48, "erm_seeds": [0, 1], "erm_alpha_index": [2, 5, 8, 11],
    "tol": 1e-10, "max_iter": 500, "erm_tol": 1e-9, "erm_max_iter": 20000,
}
_QS_COLUMNS = ("train_error", "test_error", "matrix_mse")


def cmd_quickstart(args: argparse.Namespace) -> int:
    """``amp-attention quickstart``: SE curve + ERM overlay on the built-in defaults."""
    import numpy as np

    from amp_attention.solvers.state_evolution import solve_state_evolution  # the CLI is the top floor

    from . import plotting
    from .spec import Learner, Problem, Task, WishartTarget

    c = QUICKSTART
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"argument --out: cannot create directory {str(out)!r}: "
                       f"{exc.strerror}") from None

    def problem(alpha: float) -> Problem:
        return Problem(Task(c["channel"], L=c["L"], noise=c["noise"]),
                       WishartTarget(c["kappa0"]), Learner(c["kappa"], c["lam"]), alpha=alpha)

    alphas = [float(a) for a in np.linspace(*c["alpha_grid"])]
    se_rows = []
    for a in _progress(alphas, desc="state evolution", unit="alpha"):
        r = solve_state_evolution(problem(a), tol=c["tol"], max_iter=c["max_iter"])
        se_rows.append({"alpha": a, **r.to_dict()})

    print("state evolution: linear channel, L = 1, Wishart target kappa0 = 0.5, "
          "kappa = 1, lam = 0.1, Delta = 0.5")
    print(f"  {'alpha':>7} {'train_error':>12} {'test_error':>12} {'matrix_mse':>12} "
          f"{'rank_fraction':>14} {'converged':>10}")
    for row in se_rows:
        print(f"  {row['alpha']:>7.4f} {row['train_error']:>12.6f} {row['test_error']:>12.6f} "
              f"{row['matrix_mse']:>12.6f} {row['rank_fraction']:>14.6f} "
              f"{_fmt(row['converged']):>10}")

    erm_rows: list[dict] = []
    if not args.no_erm:
        erm_alphas = [alphas[i] for i in c["erm_alpha_index"]]
        for a in erm_alphas:
            st = run_erm(problem(a), c["erm_d"], c["erm_seeds"], tol=c["erm_tol"],
                         max_iter=c["erm_max_iter"],
                         progress_desc=f"direct ERM d={c['erm_d']} alpha={a:.3g}")
            erm_rows.append({"alpha": a, "d": c["erm_d"], "n": st.n,
                             "seeds": list(c["erm_seeds"]), "mean": st.mean,
                             "stderr": st.stderr,
                             "per_seed": [r.to_dict() for r in st.results],
                             "all_converged": st.all_converged})
        print(f"direct ERM at d = {c['erm_d']}, seeds {c['erm_seeds']} (mean +- stderr)")
        print(f"  {'alpha':>7} {'train_error':>20} {'test_error':>20} {'matrix_mse':>20} "
              f"{'converged':>10}")
        for row in erm_rows:
            cells = " ".join(f"{row['mean'][f]:>10.5f}+-{row['stderr'][f]:<8.5f}"
                             for f in _QS_COLUMNS)
            print(f"  {row['alpha']:>7.4f} {cells} {_fmt(row['all_converged']):>10}")

    base = problem(alphas[0]).to_dict()
    base["alpha"] = alphas
    params = {
        "problem": base,
        "solver": {"method": "anderson", "tol": c["tol"], "max_iter": c["max_iter"],
                   "damping": 1.0, "start": "both"},
        "erm": None if args.no_erm else {
            "d": c["erm_d"], "seeds": c["erm_seeds"],
            "alphas": [alphas[i] for i in c["erm_alpha_index"]],
            "tol": c["erm_tol"], "max_iter": c["erm_max_iter"]},
    }
    csv_path, json_path, png_path = (out / "quickstart.csv", out / "quickstart.json",
                                     out / "quickstart.png")
    try:
        _write_quickstart_csv(csv_path, se_rows, erm_rows)
        atomic_write_text(json_path, _dumps({"params": params, "se": se_rows, "erm": erm_rows},
                                            indent=1) + "\n")
    except OSError as exc:
        raise CLIError(f"cannot write to {str(out)!r}: {exc.strerror}") from None
    erm_plot = None
    if erm_rows:
        erm_plot = {"alpha": [r["alpha"] for r in erm_rows],
                    "mean": {f: [r["mean"][f] for r in erm_rows] for f in _QS_COLUMNS},
                    "stderr": {f: [r["stderr"][f] for r in erm_rows] for f in _QS_COLUMNS},
                    "label": f"direct ERM, d = {c['erm_d']} ({len(c['erm_seeds'])} seeds)"}
    plotting.plot_se_curve(
        alphas, {f: [r[f] for r in se_rows] for f in _QS_COLUMNS}, png_path,
        fields=("test_error", "train_error", "matrix_mse"), erm=erm_plot,
        converged=[r["converged"] for r in se_rows],
        title="linear channel, L = 1, Wishart kappa0 = 0.5, kappa = 1, lam = 0.1, Delta = 0.5")
    print(f"wrote {csv_path}, {json_path} and {png_path}")

    bad_se = [r["alpha"] for r in se_rows if not r["converged"]]
    bad_erm = [r["alpha"] for r in erm_rows if not r["all_converged"]]
    if bad_se or bad_erm:
        what = []
        if bad_se:
            what.append("state evolution at alpha " + ", ".join(f"{a:.4g}" for a in bad_se))
        if bad_erm:
            what.append("direct ERM at alpha " + ", ".join(f"{a:.4g}" for a in bad_erm))
        print(f"{PROG}: not converged: {'; '.join(what)}", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    return EXIT_OK


def _write_quickstart_csv(path: Path, se_rows: list[dict], erm_rows: list[dict]) -> None:
    from amp_attention.solvers.state_evolution import RESULT_FIELDS

    erm_by_alpha = {r["alpha"]: r for r in erm_rows}
    erm_cols = [f"erm_{f}_{s}" for f in _QS_COLUMNS for s in ("mean", "stderr")]
    header = ["alpha", *RESULT_FIELDS, "status", *erm_cols, "erm_all_converged"]
    table = []
    for row in se_rows:
        e = erm_by_alpha.get(row["alpha"])
        cells = [_fmt(row["alpha"])] + [_fmt(row[f]) for f in RESULT_FIELDS]
        cells.append(row["status"])
        for f in _QS_COLUMNS:
            for s in ("mean", "stderr"):
                cells.append(_fmt(e[s][f]) if e else "")
        cells.append(_fmt(e["all_converged"]) if e else "")
        table.append(cells)
    atomic_write_csv(path, header, table)


# --------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argparse usage errors
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        # resumable commands (validate, spectrum, phase-diagram) have saved every finished run
        print(f"{PROG}: interrupted; finished runs/points are saved, rerun the same command "
              "to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `amp-attention se --json | head -c 100`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except CLIError as exc:
        return _error(str(exc))
    except ValueError as exc:  # any other validation error of the core
        return _error(str(exc))


if __name__ == "__main__":
    raise SystemExit(main())
