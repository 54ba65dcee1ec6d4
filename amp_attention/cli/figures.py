"""The ``--format`` flag of every subcommand that draws, and the figure paths it gives.

A drawing subcommand calls :func:`add_figure_format_flag` on its parser (or an
argument group) and names each figure file with :func:`figure_path`, whose
suffix follows the format: ``png`` (the default, raster at
:data:`amp_attention.plotting.FIGURE_DPI` dpi), ``pdf`` or ``svg`` (vector).
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: the figure formats offered by ``--format`` (matplotlib writes each from the suffix)
FIGURE_FORMATS = ("png", "pdf", "svg")


def add_figure_format_flag(parser) -> None:
    """Add ``--format {png,pdf,svg}`` (dest ``format``, default png) to ``parser`` (an
    ArgumentParser or an argument group)."""
    parser.add_argument("--format", choices=FIGURE_FORMATS, default="png",
                        help="file format of the figures: png (300 dpi), pdf or svg (vector); "
                             "the figure's file name ends in .FORMAT (default: png)")


def figure_format(args: argparse.Namespace) -> str:
    """The format asked for by ``--format`` (png where the command has no such flag)."""
    return getattr(args, "format", None) or "png"


def figure_path(path: str | Path, args: argparse.Namespace | str) -> Path:
    """``path`` with the suffix of the figure format of ``args`` (or of the format given)."""
    fmt = args if isinstance(args, str) else figure_format(args)
    return Path(path).with_suffix("." + fmt)


def write_spectrum(path: Path, spec, params: dict, outliers: list[dict] | None = None, *,
                   figure: Path | None = None) -> Path:
    """CSV ``x,density_S,sigma,density_W`` at ``path`` plus the figure at ``figure`` (default:
    the same stem with suffix .png; its suffix sets the format); returns the figure path.

    The first line is a comment (``#``) recording the parameters (JSON) and the
    atom masses at 0; the densities are the continuous parts, so each integrates
    to 1 minus its atom. sigma/density_W are empty for the elementwise learner.
    """
    import numpy as np

    from .. import plotting
    from ..files import atomic_write_csv
    from .common import dumps, learner_text

    x = np.asarray(spec.eigenvalues, dtype=float)
    rho = np.asarray(spec.density_S, dtype=float)
    has_w = spec.singular_values is not None and spec.density_W is not None
    sig = np.asarray(spec.singular_values, dtype=float) if has_w else None
    rho_w = np.asarray(spec.density_W, dtype=float) if has_w else None
    atom_w = "none" if spec.atom_at_zero_W is None else f"{spec.atom_at_zero_W:.12g}"
    atomic_write_csv(  # a failed write: cli.main's one line "cannot write <file>: <reason>"
        path, ["x", "density_S", "sigma", "density_W"],
        ([f"{x[i]:.12g}", f"{rho[i]:.12g}", f"{sig[i]:.12g}" if has_w else "",
          f"{rho_w[i]:.12g}" if has_w else ""] for i in range(x.size)),
        preamble=(f"# amp-attention se spectrum; atom_at_zero_S={spec.atom_at_zero:.12g}; "
                  f"atom_at_zero_W={atom_w}; densities are the continuous parts "
                  f"(integral = 1 - atom); params={dumps(params)}\n"))
    figure = Path(path).with_suffix(".png") if figure is None else Path(figure)
    title = (f"{params['channel']} L={params['L']}, alpha={params['alpha']:g}, "
             f"{learner_text(params)}, lam={params['lam']:g}, Delta={params['noise']:g}")
    plotting.plot_spectrum(x, rho, spec.atom_at_zero, figure, sigma=sig, density_W=rho_w,
                           atom_W=spec.atom_at_zero_W, title=title, outliers=outliers)
    return figure
