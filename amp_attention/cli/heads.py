"""``amp-attention heads``: head diversity and NW-ensemble simulations from the command line.

Sub-commands: ``hdi`` (diversity of key matrices read from a .npy file),
``rotation`` (ensemble MSE vs HDI, heads rotated from identical to
orthogonal), ``allocation`` (MSE vs H at fixed D = H d_k over a few n, with
the check of d_k* ~ (log n)^(2/(4+d))) and ``weighting`` (uniform, geometric
and Fibonacci weights over heads ranked by validation MSE).  The simulation
sub-commands write OUT/heads_<mode>.json (every parameter and result),
OUT/heads_<mode>.csv and OUT/heads_<mode>.png (--format: .pdf, .svg).

Bad input raises ValueError("argument --flag: ...") which the top-level
``amp_attention.cli.main`` prints as one line with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..files import atomic_write_csv, atomic_write_text
from ..jsonsafe import json_safe as _plain
from ..progress import progress_bar as _progress
from .examples import epilog
from .figures import add_figure_format_flag, figure_path
from .common import (HelpFormatter, OmittingArgumentGroup, add_allow_large, add_execution_flags,
                     execution, given)

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

FLAG_OF = {
    "d_model": "--d-model", "n": "--n", "m": "--m", "sigma": "--sigma",
    "intrinsic_dim": "--intrinsic-dim", "omega": "--omega", "n_val": "--n-val",
    "seed": "--seed", "kind": "--kernel", "tau": "--tau", "bandwidth": "--bandwidth",
    "tau_factor": "--tau-factor", "draws": "--draws", "H": "--H", "d_k": "--dk",
    "D": "--D", "ns": "--n-values", "heads": "--heads", "ratio": "--ratio",
    "normalise": "--normalise", "W": "FILE", "t": "--t-points", "target_seeds": "--targets",
    "layout": "--layout", "heads x d_k": "--heads/--dk",
}


def _flag_error(exc: Exception) -> ValueError:
    """Prefix a library ValueError with the flag of the parameter it names: the
    longest name of FLAG_OF the message starts with ("W: <what>" names the file)."""
    msg = " ".join(str(exc).split())
    name = max((k for k in FLAG_OF if msg.startswith(k + " ") or msg.startswith(k + ": ")),
               key=len, default=None)
    if name is None:
        return ValueError(msg)
    if msg.startswith(name + ": "):
        msg = msg[len(name) + 2:]
    return ValueError(f"argument {FLAG_OF[name]}: {msg}")


# --------------------------------------------------------------------------- parser


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


# --------------------------------------------------------------------------- helpers




def _out_dir(args: argparse.Namespace, mode: str) -> Path:
    out = Path(args.out if args.out is not None else f"amp-attention-heads-{mode}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"argument --out: cannot create directory {str(out)!r}: "
                         f"{exc.strerror}") from None
    return out


def _write(out: Path, mode: str, payload: dict, header: list[str], rows: list[list]) -> None:
    # a write that fails is cli.main's one line "cannot write <file>: <reason>"
    atomic_write_text(out / f"heads_{mode}.json",
                      json.dumps(_plain(payload), indent=1, allow_nan=False) + "\n")
    atomic_write_csv(out / f"heads_{mode}.csv", header, _plain(rows))


def _task_kernel(args: argparse.Namespace, d_model: int, n: int | None = None, *,
                 heads_width: int, H: int, n_max: int | None = None,
                 width_flags: str = "--H or --dk", d_model_from: str = "--H x --dk"):
    """The task and kernel of the flags, after the size guard: ``heads_width`` = H d_k
    and ``H`` the largest number of heads, ``n_max`` the largest n of the sweep."""
    from ..heads.nadaraya_watson import NWKernel
    from ..heads.tasks import NWTask
    from ..resources import heads_memory, memory_shortfall

    if args.draws < 2:
        raise ValueError(f"argument --draws: draws must be an integer >= 2, got {args.draws}")
    if args.targets < 1:
        raise ValueError(f"argument --targets: must be an integer >= 1, got {args.targets}")
    try:
        task = NWTask(d_model=d_model, n=args.n if n is None else n, m=args.m, sigma=args.sigma,
                      intrinsic_dim=args.intrinsic_dim, omega=args.omega,
                      # only the weighting mode has --n-val: validation points serve to
                      # rank heads, elsewhere they would just cost predictions
                      n_val=getattr(args, "n_val", 0),
                      seed=args.seed)
        kernel = NWKernel(args.kernel, tau=args.tau, bandwidth=args.bandwidth,
                          tau_factor=args.tau_factor)
    except ValueError as exc:
        error = _flag_error(exc)
        if args.d_model is None and "d_model" in str(exc):
            error = ValueError(f"{error} (--d-model not given: d_model = {d_model} = "
                               f"{d_model_from})")
        raise error from None
    why = memory_shortfall(heads_memory(max(task.n, n_max or 0), task.m, task.n_val, d_model, heads_width,
                                        task.intrinsic_dim, args.draws, H))
    if why and not args.allow_large:
        raise ValueError(f"argument --d-model: d_model = {d_model} with H d_k = {heads_width}, "
                         f"n = {task.n}, m = {task.m}, --draws {args.draws} {why}; lower "
                         f"--d-model, {width_flags}, --n, --m"
                         f"{', --n-val' if task.n_val else ''} or --draws, or pass --allow-large")
    return task, kernel


def _sim_params(args: argparse.Namespace, task, kernel) -> dict:
    return {"mode": args.heads_mode, "task": task.to_dict(), "kernel": kernel.to_dict(),
            "draws": args.draws, "targets": args.targets,
            "target_seeds": list(range(args.seed, args.seed + args.targets)),
            "seed": args.seed}


def _emit(args: argparse.Namespace, payload: dict, out: Path, mode: str, table: str) -> None:
    if args.json:
        print(json.dumps(_plain(payload), indent=1, allow_nan=False))
    else:
        print(table)
        print(f"wrote {out / f'heads_{mode}.json'}, .csv and .{args.format}", file=sys.stderr)


# --------------------------------------------------------------------------- hdi


#: the --layout choices (amp_attention.heads.diversity.LAYOUTS, not imported for --help speed)
LAYOUT_CHOICES = ("stack", "columns", "rows")


def _shape_text(shape: tuple, layout: str | None) -> str:
    return f"an array of shape {tuple(shape)} read as {layout or 'stack'}"


def cmd_hdi(args: argparse.Namespace) -> int:
    """``amp-attention heads hdi FILE``: HDI, overlaps and principal angles of key matrices."""
    import numpy as np

    from ..heads.diversity import (as_head_stack, head_diversity_index, load_key_array,
                                   pairwise_overlaps, pairwise_principal_angles)

    if args.out is None and given(args, "format"):
        raise ValueError("argument --format: applies only with --out (the figure is written "
                         "there)")
    try:
        arr = load_key_array(args.file, key=args.key)
    except ValueError as exc:
        raise _flag_error(exc) from None
    try:
        W = as_head_stack(arr, args.heads, layout=args.layout, d_k=args.dk)
    except ValueError as exc:
        raise _flag_error(exc) from None
    if W.shape[0] < 2:
        raise ValueError(f"argument --heads: the HDI needs H >= 2 heads (it averages over "
                         f"pairs); {_shape_text(arr.shape, args.layout)} gives H = {W.shape[0]}")
    try:
        hdi = head_diversity_index(W, normalise=args.normalise)
        overlaps = pairwise_overlaps(W, normalise=args.normalise)
        angles = pairwise_principal_angles(W)
    except ValueError as exc:
        raise _flag_error(exc) from None
    H, d_model, d_k = W.shape
    params = {"file": str(args.file), "key": args.key, "input_shape": list(arr.shape),
              "layout": args.layout or "stack", "H": H, "d_model": d_model, "d_k": d_k,
              "normalise": args.normalise}
    payload = {"params": params, "hdi": hdi, "overlaps": overlaps,
               "principal_angles_deg": np.degrees(angles)}
    pairs = [[h, g, overlaps[h, g], *np.degrees(angles[h, g])]
             for h in range(H) for g in range(h + 1, H)]
    if args.out is not None:
        from ..heads.plots import plot_overlaps

        out = _out_dir(args, "hdi")
        _write(out, "hdi", payload, ["h", "h2", "overlap",
                                     *[f"angle{i + 1}_deg" for i in range(d_k)]], pairs)
        plot_overlaps(overlaps, figure_path(out / "heads_hdi.png", args),
                      title=f"HDI = {hdi:.4f} ({args.normalise}), H = {H}, d_k = {d_k}")
    if args.json:
        print(json.dumps(_plain(payload), indent=1, allow_nan=False))
        return 0
    print(f"H = {H} heads, d_model = {d_model}, d_k = {d_k}, normalise = {args.normalise}")
    print(f"HDI = {hdi:.6f}")
    print(f"  {'h':>3} {'h2':>3} {'overlap':>9}  principal angles (deg, ascending)")
    for h, g, o, *a in pairs:
        print(f"  {h:>3} {g:>3} {o:>9.5f}  " + " ".join(f"{v:7.3f}" for v in a))
    return 0


# --------------------------------------------------------------------------- rotation


def cmd_rotation(args: argparse.Namespace) -> int:
    """``amp-attention heads rotation``: MSE decomposition vs HDI."""
    import numpy as np

    from ..heads.ensemble import rotation_sweep
    from ..heads.plots import plot_rotation

    if args.H < 2 or args.dk < 1:
        raise ValueError(f"argument --H/--dk: need H >= 2 and d_k >= 1, got H = {args.H}, "
                         f"d_k = {args.dk}")
    if args.t_points < 2:
        raise ValueError(f"argument --t-points: must be an integer >= 2, got {args.t_points}")
    d_model = (args.H + 1) * args.dk if args.d_model is None else args.d_model
    if d_model < (args.H + 1) * args.dk:
        raise ValueError(f"argument --d-model: must be >= (--H + 1) x --dk = ({args.H} + 1) x "
                         f"{args.dk} = {(args.H + 1) * args.dk} (the rotation uses H + 1 "
                         f"disjoint blocks of d_k coordinates), got {d_model}")
    task, kernel = _task_kernel(args, d_model, heads_width=args.H * args.dk, H=args.H,
                                d_model_from="(--H + 1) x --dk")
    ts = np.linspace(0.0, 1.0, args.t_points)
    try:
        with execution(args) as (executor, workers):
            points = rotation_sweep(task, args.H, args.dk, ts, draws=args.draws, kernel=kernel,
                                    independent_heads=args.independent_heads, seed=args.seed,
                                    target_seeds=range(args.seed, args.seed + args.targets),
                                    progress=lambda it: _progress(it, desc="(t, target) cells",
                                                                  unit="cell"),
                                    executor=executor, workers=workers)
    except ValueError as exc:
        raise _flag_error(exc) from None
    rows = [p.to_dict() for p in points]
    params = {**_sim_params(args, task, kernel), "H": args.H, "d_k": args.dk,
              "t": [float(t) for t in ts], "independent_heads": args.independent_heads,
              "weights": "uniform"}
    out = _out_dir(args, "rotation")
    cols = ["t", "hdi", "mse", "mse_stderr", "bias2", "variance", "covariance", "ambiguity"]
    _write(out, "rotation", {"params": params, "rows": rows},
           cols + ["mean_head_mse", "mean_head_bias2", "mean_head_variance"],
           [[r[c] for c in cols] + [np.mean(r["head_mse"]), np.mean(r["head_bias2"]),
                                    np.mean(r["head_variance"])] for r in rows])
    plot_rotation({f"{kernel.kind}, c = {kernel.tau_factor:g}": rows},
                  figure_path(out / "heads_rotation.png", args),
                  title=f"H = {args.H}, d_k = {args.dk}, d_model = {d_model}, n = {task.n}, "
                        f"sigma = {task.sigma:g}, R = {args.draws}, K = {args.targets}")
    lines = [f"rotation sweep: H = {args.H}, d_k = {args.dk}, d_model = {d_model}, n = {task.n}, "
             f"sigma = {task.sigma:g}, kernel = {kernel.kind}, R = {args.draws} draws x "
             f"K = {args.targets} targets" + (", independent heads" if args.independent_heads else ""),
             f"  {'t':>5} {'HDI':>6} {'MSE':>9} {'+-':>7} {'bias^2':>9} {'sum w2 Var':>10} "
             f"{'sum wwCov':>10} {'head MSE':>9}"]
    for r in rows:
        lines.append(f"  {r['t']:>5.2f} {r['hdi']:>6.3f} {r['mse']:>9.5f} {r['mse_stderr']:>7.5f} "
                     f"{r['bias2']:>9.5f} {r['variance']:>10.5f} {r['covariance']:>10.5f} "
                     f"{np.mean(r['head_mse']):>9.5f}")
    _emit(args, {"params": params, "rows": rows}, out, "rotation", "\n".join(lines))
    return 0


# --------------------------------------------------------------------------- allocation


def cmd_allocation(args: argparse.Namespace) -> int:
    """``amp-attention heads allocation``: MSE vs H at fixed D, argmin vs the law."""
    from ..heads.allocation import allocation_check
    from ..heads.plots import plot_allocation

    if args.d_model is not None and args.d_model < 1:
        raise ValueError(f"argument --d-model: must be an integer >= 1, got {args.d_model}")
    if args.D < 1:
        raise ValueError(f"argument --D: must be an integer >= 1, got {args.D}")
    if any(n < 2 for n in args.n_values):
        raise ValueError(f"argument --n-values: every n must be an integer >= 2, got "
                         f"{min(args.n_values)}")
    d_model = args.D if args.d_model is None else args.d_model
    if args.D > d_model:
        raise ValueError(f"argument --D: the key budget D = H d_k must be <= --d-model = "
                         f"{d_model}, got {args.D}")
    task, kernel = _task_kernel(args, d_model, n=args.n_values[0] if args.n_values else None,
                                heads_width=args.D, H=args.D, width_flags="--D",
                                d_model_from="--D",
                                n_max=max(args.n_values) if args.n_values else None)
    try:
        with execution(args) as (executor, workers):
            res = allocation_check(task, args.D, args.n_values, draws=args.draws, kernel=kernel,
                                   seed=args.seed,
                                   target_seeds=range(args.seed, args.seed + args.targets),
                                   progress=lambda it: _progress(it, desc="allocation n", unit="n"),
                                   executor=executor, workers=workers)
    except ValueError as exc:
        raise _flag_error(exc) from None
    sweeps = [s.to_dict() for s in res.sweeps]
    params = {**_sim_params(args, task, kernel), "D": args.D, "n_values": list(args.n_values),
              "weights": "uniform", "law": res.law}
    payload = {"params": params, "sweeps": sweeps, "table": res.table,
               "label": "empirical check, not a proof"}
    out = _out_dir(args, "allocation")
    cols = ["mse", "mse_stderr", "paired_stderr", "bias2", "variance", "covariance"]
    _write(out, "allocation", payload, ["n", "H", "d_k", *cols],
           [[s["n"], r["H"], r["d_k"], *[r[c] for c in cols]] for s in sweeps for r in s["rows"]])
    plot_allocation({f"{kernel.kind}, c = {kernel.tau_factor:g}": sweeps},
                    figure_path(out / "heads_allocation.png", args),
                    intrinsic_dim=task.intrinsic_dim,
                    title=f"D = {args.D}, d_model = {d_model}, s = {task.intrinsic_dim}, "
                          f"sigma = {task.sigma:g}, R = {args.draws}, K = {args.targets}")
    _emit(args, payload, out, "allocation", allocation_table(res.table, res.law))
    return 0


def allocation_table(table: list[dict], law: str) -> str:
    """Markdown table of the allocation check (shared with benchmarks/heads_figure.py)."""
    lines = [f"Allocation at fixed D: empirical check, not a proof ({law}; ratios to the "
             f"first n, since the law has no constant)", "",
             "| n | log n | argmin H | argmin d_k | d_k within 2 SE | law ratio | empirical ratio |",
             "| ---: | ---: | ---: | ---: | :--- | ---: | ---: |"]
    for r in table:
        lines.append(f"| {r['n']} | {r['log_n']:.3f} | {r['argmin_H']} | {r['argmin_dk']} | "
                     f"{', '.join(str(v) for v in r['tied_dk'])} | {r['law_ratio']:.3f} | "
                     f"{r['empirical_ratio']:.3f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- weighting


def cmd_weighting(args: argparse.Namespace) -> int:
    """``amp-attention heads weighting``: uniform vs geometric vs Fibonacci weights."""
    from ..heads.ensemble import compare_weightings, random_heads
    from ..heads.plots import plot_weighting

    if args.H < 1 or args.dk < 1:
        raise ValueError(f"argument --H/--dk: need H >= 1 and d_k >= 1, got H = {args.H}, "
                         f"d_k = {args.dk}")
    d_model = args.H * args.dk if args.d_model is None else args.d_model
    task, kernel = _task_kernel(args, d_model, heads_width=args.H * args.dk, H=args.H)
    if args.head_seed < 0:
        raise ValueError(f"argument --head-seed: must be an integer >= 0, got {args.head_seed}")
    try:
        heads = random_heads(d_model, args.H, args.dk, seed=args.head_seed)
        with execution(args) as (executor, workers):
            res = compare_weightings(task, heads, draws=args.draws, kernel=kernel,
                                     ratio=args.ratio, seed=args.seed,
                                     target_seeds=range(args.seed, args.seed + args.targets),
                                     progress=lambda it: _progress(it, desc="targets",
                                                                   unit="target"),
                                     executor=executor, workers=workers)
    except ValueError as exc:
        raise _flag_error(exc) from None
    params = {**_sim_params(args, task, kernel), "H": args.H, "d_k": args.dk,
              "ratio": args.ratio, "head_seed": args.head_seed, "heads": "Haar-random subspaces",
              "ranking": "validation MSE on n_val held-out points per draw"}
    payload = {"params": params, **res.to_dict()}
    out = _out_dir(args, "weighting")
    cols = ["mse", "mse_stderr", "bias2", "variance", "covariance"]
    _write(out, "weighting", payload, ["scheme", *cols, "weights"],
           [[s, *[d.to_dict()[c] for c in cols], " ".join(f"{w:.6g}" for w in d.weights)]
            for s, d in res.schemes.items()])
    plot_weighting({s: d.to_dict() for s, d in res.schemes.items()},
                   figure_path(out / "heads_weighting.png", args),
                   title=f"H = {args.H}, d_k = {args.dk}, d_model = {d_model}, n = {task.n}, "
                         f"n_val = {task.n_val}, {kernel.kind}, R = {args.draws}, K = {args.targets}")
    _emit(args, payload, out, "weighting", weighting_table(res))
    return 0


def weighting_table(res) -> str:
    """Markdown table of a WeightingComparison (shared with benchmarks/heads_figure.py)."""
    first = next(iter(res.schemes))
    lines = [f"| scheme | MSE | +- | MSE - {first} (paired +-) | bias^2 | sum w^2 Var | "
             f"sum w w' Cov | weights (best first) |",
             "| :--- | ---: | ---: | ---: | ---: | ---: | ---: | :--- |"]
    for s, d in res.schemes.items():
        delta = d.mse - res.schemes[first].mse
        lines.append(f"| {s} | {d.mse:.5f} | {d.mse_stderr:.5f} | "
                     f"{delta:+.5f} +- {res.difference_stderr[s]:.5f} | {d.bias2:.5f} | "
                     f"{d.variance:.5f} | {d.covariance:.5f} | "
                     f"{', '.join(f'{w:.3f}' for w in d.weights)} |")
    return "\n".join(lines)
