"""The argparse of ``amp-attention heads`` (:mod:`.heads` runs its modes): the help
texts, the symbols they share, the flags of each mode and of the simulation modes."""

from __future__ import annotations

import argparse
from typing import Any

from .common import HelpFormatter, OmittingArgumentGroup
from .examples import epilog
from .execution import add_allow_large, add_execution_flags
from .figures import add_figure_format_flag
from .heads import cmd_allocation, cmd_hdi, cmd_rotation, cmd_weighting


SYMBOLS = """\
symbols
  H        number of heads; head h has a key/query matrix W_h in R^{d_model x d_k}
  d_model  input dimension; inputs x are uniform on the sphere of radius sqrt(d_model)
  d_k      key width of one head (columns of W_h)
  D        key budget D = H d_k (allocation: H runs over the divisors of D)
  HDI      head diversity index 1 - mean_{h<h'} ||Q_h^T Q_h'||_F^2 / d_k with Q_h an
           orthonormal basis of Range(W_h): 1 = mutually orthogonal head subspaces,
           0 = all heads span the same subspace (--normalise none: the literal
           1 - mean ||W_h^T W_h' / d_k||_F^2, see docs/heads.md)
  tau      softmax temperature; head h predicts f_h(x) = sum_i a_i y_i with
           a_i = softmax_i(<W_h^T x, W_h^T x_i> / tau), tau = c sqrt(d_k), c = --tau-factor
  b        Gaussian-kernel bandwidth, a_i ~ exp(-||W_h^T (x - x_i)||^2 / (2 b^2)),
           b^2 = c sqrt(d_k) by default
  n        training points per draw (all heads share them unless --independent-heads)
  m        fixed test points; MSE = mean over test points and draws of (f_ens - g)^2
  n_val    held-out validation points per draw, used only to rank heads
  sigma    label-noise standard deviation, y = g(x) + sigma eps
  s        intrinsic dimension of the target g(x) = sqrt(2/s) sum_j sin(omega u_j^T x),
           u_1..u_s orthonormal, Haar-random per target seed (the d of the law)
  R        training draws (--draws) per target; K target realisations (--targets)
  w_h      ensemble weights, sum_h w_h = 1; f_ens = sum_h w_h f_h
decomposition (population moments over the R draws, averaged over test points)
  MSE = bias^2 + sum_h w_h^2 Var_h + sum_{h != h'} w_h w_h' Cov_hh'  (exact)"""

HEADS_DESCRIPTION = f"""\
Multi-head attention as an ensemble of Nadaraya-Watson (NW) kernel smoothers:
head diversity, the bias/variance/covariance decomposition of the ensemble MSE,
head-count allocation under a budget D = H d_k, and weighting schemes.

modes
  hdi         HDI, pairwise overlaps and principal angles of key matrices (.npy)
  rotation    ensemble MSE and its decomposition vs HDI, heads rotated from
              identical (t = 0) to orthogonal (t = 1)
  allocation  MSE vs H at fixed D for a few n; empirical argmin vs the law
              d_k* ~ (log n)^(2/(4+s)) (an empirical check, not a proof)
  weighting   uniform / geometric / Fibonacci weights over heads ranked by
              validation MSE

{SYMBOLS}

Run `amp-attention heads <mode> --help` for the flags; docs/heads.md has the details."""


#: the --layout choices (amp_attention.heads.diversity.LAYOUTS, not imported for --help speed)
LAYOUT_CHOICES = ("stack", "columns", "rows")


def add_parser(sub: Any) -> None:
    """Register ``heads`` and its modes on the top-level subparsers action ``sub``."""

    # The top-level usage line lists the subcommands explicitly; add ours to it.
    if isinstance(getattr(sub, "metavar", None), str) and "heads" not in sub.metavar:
        sub.metavar = sub.metavar.rstrip("}") + ",heads}"
    heads = sub.add_parser("heads", formatter_class=HelpFormatter,
                           help="multi-head attention as an ensemble of NW estimators: HDI, "
                                "MSE decomposition, allocation, weighting",
                           description=HEADS_DESCRIPTION)
    modes = heads.add_subparsers(dest="heads_mode", metavar="{hdi,rotation,allocation,weighting}",
                                 required=True)

    hdi = modes.add_parser("hdi", epilog=epilog("heads hdi"), formatter_class=HelpFormatter,
                           help="HDI and principal angles of key matrices from a .npy file",
                           description=HDI_DESCRIPTION)
    hdi.add_argument("file", metavar="FILE",
                     help=".npy file, or .npz archive (see --key), of the key weights; never "
                          "unpickled (a .pt checkpoint is refused: save the tensor with "
                          "numpy.save, docs/heads.md)")
    hdi.add_argument("--layout", choices=LAYOUT_CHOICES, default=None,
                     help="how FILE holds the heads: stack (H, d_model, d_k); columns "
                          "(d_model, H*d_k), columns h*d_k..(h+1)*d_k-1 = head h (x^T W_K); "
                          "rows (H*d_k, d_model), rows h*d_k.. = head h: the weight of a "
                          "PyTorch nn.Linear(d_model, H*d_k).  Required for a 2-d array (its "
                          "shape alone is ambiguous); default stack for a 3-d one")
    hdi.add_argument("--heads", type=int, default=None, metavar="H",
                     help="number of heads H (for --layout columns/rows: give --heads or --dk)")
    hdi.add_argument("--dk", type=int, default=None, metavar="D_K",
                     help="width d_k of each head (checked against --heads when both are given)")
    hdi.add_argument("--key", default=None, metavar="NAME",
                     help="array NAME of a .npz archive (needed when it holds several)")
    hdi.add_argument("--normalise", choices=("orthonormal", "none"), default="orthonormal",
                     help="orthonormal: HDI of the subspaces, in [0, 1]; none: the literal "
                          "1 - mean ||W_h^T W_h'/d_k||_F^2 (default: orthonormal)")
    hdi.add_argument("--json", action="store_true",
                     help="print one JSON object {params, hdi, overlaps, principal_angles}")
    hdi.add_argument("--out", default=None, metavar="DIR",
                     help="also write DIR/heads_hdi.json, .csv (one row per pair of heads) "
                          "and .png (overlap heat map)")
    add_figure_format_flag(hdi)
    hdi.set_defaults(func=cmd_hdi)

    rot = modes.add_parser("rotation", epilog=epilog("heads rotation"), parents=[_simulation_parent("rotation")], formatter_class=HelpFormatter,
                           help="ensemble MSE and decomposition vs HDI (identical -> orthogonal)",
                           description=ROTATION_DESCRIPTION)
    g = rot.add_argument_group("rotation sweep")
    g.add_argument("--H", type=int, default=4, help="number of heads, >= 2 (default: 4)")
    g.add_argument("--dk", type=int, default=2, help="key width d_k of each head (default: 2)")
    g.add_argument("--t-points", type=int, default=11, metavar="N",
                   help="N values of t equally spaced in [0, 1], N >= 2 (default: 11)")
    g.add_argument("--independent-heads", action="store_true",
                   help="each head fitted on its own independent sample (Cov_hh' has "
                        "expectation 0); default: all heads share the training data")
    rot.set_defaults(func=cmd_rotation)

    alloc = modes.add_parser("allocation", epilog=epilog("heads allocation"), parents=[_simulation_parent("allocation")], formatter_class=HelpFormatter,
                             help="MSE vs H at fixed D = H d_k; empirical argmin vs the law",
                             description=ALLOCATION_DESCRIPTION)
    g = alloc.add_argument_group("allocation sweep")
    g.add_argument("--D", type=int, default=12, help="key budget D = H d_k, <= d_model (default: 12)")
    g.add_argument("--n-values", type=int, nargs="+", default=[250, 1000], metavar="N",
                   help="training-set sizes n to sweep, each >= 2 (default: 250 1000)")
    alloc.set_defaults(func=cmd_allocation)

    wt = modes.add_parser("weighting", epilog=epilog("heads weighting"), parents=[_simulation_parent("weighting")], formatter_class=HelpFormatter,
                          help="uniform / geometric / Fibonacci weights over ranked heads",
                          description=WEIGHTING_DESCRIPTION)
    g = wt.add_argument_group("weighting comparison")
    g.add_argument("--H", type=int, default=6, help="number of heads, >= 1 (default: 6)")
    g.add_argument("--dk", type=int, default=2, help="key width d_k of each head (default: 2)")
    g.add_argument("--ratio", type=float, default=0.5,
                   help="geometric ratio r in (0, 1): w_k ~ r^k by rank k (default: 0.5)")
    g.add_argument("--head-seed", type=int, default=0,
                   help="seed of the Haar-random head subspaces (default: 0)")
    wt.set_defaults(func=cmd_weighting)


def _simulation_parent(mode: str) -> argparse.ArgumentParser:
    """The flags of the simulation modes; each mode gets only those it reads."""

    p = argparse.ArgumentParser(add_help=False)
    # allocation sweeps --n-values; only weighting ranks heads on validation points
    omit = {"allocation": ("n", "n_val"), "rotation": ("n_val",)}.get(mode, ())
    g = OmittingArgumentGroup(p, "synthetic task (docs/heads.md)", omit)
    g.add_argument("--d-model", type=int, default=None, metavar="D_MODEL",
                   help="input dimension (default: rotation (H+1) d_k, allocation D, "
                        "weighting H d_k)")
    g.add_argument("--n", type=int, default=200,
                   help="training points per draw (default: 200)")
    g.add_argument("--m", type=int, default=200, help="fixed test points (default: 200)")
    g.add_argument("--sigma", type=float, default=1.0,
                   help="label-noise standard deviation, in [0, 1e6]: beyond 1e6 the "
                        "unit-variance target is lost in float64 rounding next to the "
                        "sigma^2 noise terms (roundoff 1.1e-16 x sigma^2), and from about "
                        "1e77 the standard errors (~sigma^4) overflow (default: 1)")
    g.add_argument("--intrinsic-dim", type=int, default=2, metavar="S",
                   help="number s of target directions, in [1, d_model] (default: 2)")
    g.add_argument("--omega", type=float, default=1.0,
                   help="target frequency, g = sqrt(2/s) sum sin(omega u_j^T x) (default: 1)")
    g.add_argument("--n-val", type=int, default=200,
                   help="validation points per draw for ranking heads (default: 200)")
    g = p.add_argument_group("kernel of each head")
    g.add_argument("--kernel", choices=("softmax", "gaussian"), default="softmax",
                   help="softmax: attention, logits <W^T x, W^T x_i>/tau; gaussian: "
                        "-||W^T(x - x_i)||^2/(2 b^2) (default: softmax)")
    g.add_argument("--tau", type=float, default=None,
                   help="fixed softmax temperature, > 0 (default: c sqrt(d_k))")
    g.add_argument("--bandwidth", type=float, default=None, metavar="B",
                   help="fixed Gaussian bandwidth b, > 0 (default: b^2 = c sqrt(d_k))")
    g.add_argument("--tau-factor", type=float, default=1.0, metavar="C",
                   help="c in the defaults tau = c sqrt(d_k), b^2 = c sqrt(d_k); c < 1 sharpens "
                        "the kernel (default: 1)")
    g = p.add_argument_group("simulation and output")
    g.add_argument("--draws", type=int, default=30,
                   help="training draws R per target, >= 2 (default: 30)")
    g.add_argument("--targets", type=int, default=16, metavar="K",
                   help="target realisations K (task seeds seed..seed+K-1); results are "
                        "averaged over them (default: 16)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed of everything random: target directions and test points "
                        "(task seeds seed..seed+K-1) and the training draws (default: 0)")
    g.add_argument("--out", default=None, metavar="DIR",
                   help="output directory for heads_<mode>.json/.csv/.png, created if needed "
                        "(default: ./amp-attention-heads-<mode>)")
    add_figure_format_flag(g)
    add_allow_large(g)
    g.add_argument("--json", action="store_true",
                   help="print the JSON written to DIR instead of the table")
    add_execution_flags(p.add_argument_group("execution"), 0, "simulation cells")
    return p


HDI_DESCRIPTION = f"""\
Read key matrices from a .npy file and report the head diversity index, the
(H, H) matrix of pairwise overlaps ||G_hh'||_F^2 (with the default normalisation
the mean squared cosine of the principal angles of heads h and h') and the
principal angles of every pair of heads (degrees, ascending).

{SYMBOLS}"""

ROTATION_DESCRIPTION = f"""\
Heads W_h(t) = cos(t pi/2) E_0 + sin(t pi/2) E_(h+1) (E_j: the j-th block of d_k
coordinate vectors; needs d_model >= (H+1) d_k), so HDI(t) = 1 - cos^4(t pi/2)
rises from 0 (identical heads) to 1 (orthogonal heads).  For each t the uniform
ensemble is simulated on R draws and K target realisations (the same draws for
every t) and its measured MSE is split into bias^2, sum_h w_h^2 Var_h and the
cross-head covariance term; the mean single-head MSE is shown for reference.
Writes OUT/heads_rotation.json, .csv (one row per t) and .png.

{SYMBOLS}"""

ALLOCATION_DESCRIPTION = f"""\
For each n of --n-values and each divisor H of D, the uniform ensemble of H
mutually orthogonal heads of width d_k = D/H (coordinate blocks partitioning
the first D coordinates; the target directions are Haar-random) is simulated
on the same draws and targets.  Reports the MSE per H, the empirical argmin,
the head counts within two paired standard errors of it, and a table comparing
the argmin's trend in n with the law d_k* ~ (log n)^(2/(4+s)), s the intrinsic
dimension: ratios d_k*(n)/d_k*(n_0) only, since the law has no constant.  This
is an empirical check, not a proof.  Writes OUT/heads_allocation.json, .csv
(one row per (n, H)) and .png.

{SYMBOLS}"""

WEIGHTING_DESCRIPTION = f"""\
H Haar-random head subspaces (seeded by --head-seed) are fitted on each draw;
in each draw they are ranked by their MSE on the n_val held-out validation
points (never the test points) and weighted by rank k = 0 (best) .. H-1:
uniform w_k = 1/H, geometric w_k ~ r^k, Fibonacci w_k ~ F_(H-k) (F_1 = F_2 = 1).
The decomposition is taken over rank slots, so it stays exact although the
head in a slot changes between draws.  Writes OUT/heads_weighting.json, .csv
(one row per scheme) and .png.

{SYMBOLS}"""
