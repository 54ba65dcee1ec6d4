"""``amp-attention heads``: head diversity and NW-ensemble simulations from the command line.

Sub-commands: ``hdi`` (diversity of key matrices read from a .npy file),
``rotation`` (ensemble MSE vs HDI, heads rotated from identical to
orthogonal), ``allocation`` (MSE vs H at fixed D = H d_k over a few n, with
the check of d_k* ~ (log n)^(2/(4+d))) and ``weighting`` (uniform, geometric
and Fibonacci weights over heads ranked by validation MSE).  The simulation
sub-commands write OUT/heads_<mode>.json (every parameter and result),
OUT/heads_<mode>.csv and OUT/heads_<mode>.png (--format: .pdf, .svg).

Bad input raises ValueError("argument --flag: ...") which the top-level
``amp_attention.cli.main`` prints as one line with exit code 2.  The parser of
``heads`` and its modes is in :mod:`.heads_parser`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..files import atomic_write_csv, atomic_write_text
from ..jsonsafe import json_safe as _plain
from ..jsonsafe import strict_dumps
from ..progress import progress_bar as _progress
from .common import given
from .execution import execution
from .figures import figure_path


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
                      strict_dumps(payload, indent=1) + "\n")
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
        print(strict_dumps(payload, indent=1))
    else:
        print(table)
        print(f"wrote {out / f'heads_{mode}.json'}, .csv and .{args.format}", file=sys.stderr)


# --------------------------------------------------------------------------- hdi


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
        print(strict_dumps(payload, indent=1))
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
