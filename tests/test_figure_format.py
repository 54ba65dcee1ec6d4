"""``--format png|pdf|svg`` on every subcommand that draws (issue 29): the figure's suffix
follows the format, PNG is written at 300 dpi; and the quickstart figure draws
alpha_interp."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from amp_attention.cli import main
from amp_attention.cli.figures import FIGURE_FORMATS, figure_path

PDF_MAGIC = b"%PDF"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _key_file(tmp_path: Path) -> str:
    path = tmp_path / "wk.npy"
    np.save(path, np.random.default_rng(0).standard_normal((3, 8, 2)))
    return str(path)


HEADS_SIM = ("--n", "30", "--m", "10", "--draws", "2", "--targets", "1")

#: (argv with OUT for the output directory, the figure written there without its suffix);
#: cheap arguments, as in tests/test_cli.py
DRAWING = {
    "se": (["se", "--spectrum", "OUT/spec.csv"], "spec"),
    "validate": (["validate", "--alphas", "0.4", "--d", "12", "--seeds", "2", "--noise", "0.5",
                  "--out", "OUT"], "validate"),
    "spectrum": (["spectrum", "--kappa", "0.5", "--lam", "0.05", "--noise", "0.1",
                  "--out", "OUT"], "spectrum_theory"),
    "spectrum --simulate": (["spectrum", "--simulate", "--d", "16", "--noise", "0.1", "--lam",
                             "0.05", "--out", "OUT"], "spectrum"),
    "thresholds": (["thresholds", "--noise", "0.5", "--kappa-grid", "1", "2", "--out", "OUT"],
                   "thresholds"),
    "phase-diagram": (["phase-diagram", "--noise", "0.5", "--alpha-range", "0.1", "1", "2",
                       "--lam-range", "0.01", "1", "2", "--workers", "0", "--out", "OUT"],
                      "phase_diagram"),
    "scaling": (["scaling", "--gamma", "1.5", "--target-d", "50", "--noise", "0.5", "--lam",
                 "0.05", "--alpha-range", "0.5", "8", "3", "--out", "OUT"], "scaling"),
    "compare": (["compare", "--alpha-range", "0.4", "0.4", "1", "--out", "OUT"], "compare"),
    "quickstart": (["quickstart", "--no-erm", "--out", "OUT"], "quickstart"),
    "heads hdi": (["heads", "hdi", "KEYS", "--out", "OUT"], "heads_hdi"),
    "heads rotation": (["heads", "rotation", "--H", "2", "--dk", "1", "--t-points", "2",
                        *HEADS_SIM, "--out", "OUT"], "heads_rotation"),
    "heads allocation": (["heads", "allocation", "--D", "4", "--n-values", "20", "40",
                          "--m", "10", "--draws", "2", "--targets", "1", "--out", "OUT"],
                         "heads_allocation"),
    "heads weighting": (["heads", "weighting", "--H", "2", "--dk", "1", *HEADS_SIM,
                         "--n-val", "10", "--out", "OUT"], "heads_weighting"),
}


def test_every_drawing_subcommand_is_covered() -> None:
    """Every subcommand whose help offers --format is in DRAWING (and the others draw
    nothing: erm and amp only print)."""
    import argparse

    from amp_attention.cli import build_parser

    def with_format(parser) -> set[str]:
        found = set()
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        for name, p in (sub.choices.items() if sub else ()):
            if any("--format" in a.option_strings for a in p._actions):
                found.add(name)
            found |= {f"{name} {m}" for m in with_format(p)}
        return found

    assert with_format(build_parser()) == {k.split(" --")[0] for k in DRAWING}


@pytest.mark.parametrize("name", sorted(DRAWING))
def test_format_pdf_writes_a_pdf(capsys, tmp_path: Path, name: str) -> None:
    argv, stem = DRAWING[name]
    out = tmp_path / "out"
    argv = [a.replace("OUT", str(out)).replace("KEYS", _key_file(tmp_path)) for a in argv]
    if name == "se":
        out.mkdir()
    code, _, err = run(capsys, *argv, "--format", "pdf")
    assert code == 0, err
    assert (out / f"{stem}.pdf").read_bytes()[:4] == PDF_MAGIC
    assert not (out / f"{stem}.png").exists()
    assert not list(out.glob("*.png")), list(out.glob("*.png"))


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_is_the_default_at_300_dpi_and_svg_is_offered(capsys, tmp_path: Path) -> None:
    keys = _key_file(tmp_path)
    code, _, err = run(capsys, "heads", "hdi", keys, "--out", str(tmp_path / "png"))
    assert code == 0, err
    # plot_overlaps draws a 4.6 x 3.9 inch figure: 1380 x 1170 pixels at 300 dpi
    assert _png_size(tmp_path / "png" / "heads_hdi.png") == (1380, 1170)
    code, _, err = run(capsys, "heads", "hdi", keys, "--out", str(tmp_path / "svg"),
                       "--format", "svg")
    assert code == 0, err
    assert b"<svg" in (tmp_path / "svg" / "heads_hdi.svg").read_bytes()[:2000]
    assert FIGURE_FORMATS == ("png", "pdf", "svg")
    assert figure_path(tmp_path / "a.png", "pdf") == tmp_path / "a.pdf"


@pytest.mark.parametrize("argv", [
    ["se", "--format", "pdf"],
    ["se", "--estimator", "bayes", "--format", "pdf"],
    ["thresholds", "--format", "pdf"],
    ["thresholds", "--kappa-grid", "1", "2", "--format", "pdf"],
    ["heads", "hdi", "KEYS", "--format", "pdf"],
    ["quickstart", "--format", "eps"],
])
def test_format_where_nothing_is_drawn_is_refused(capsys, tmp_path: Path, argv) -> None:
    argv = [a.replace("KEYS", _key_file(tmp_path)) for a in argv]
    code, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "--format" in lines[0], err


def test_quickstart_figure_draws_alpha_interp(capsys, tmp_path: Path, monkeypatch) -> None:
    """Issue 29: the README talks about alpha_interp, the figure did not draw it; now a
    labelled vertical line at alpha_interp = 0.307 (lam -> 0+) on every panel, and its
    value in quickstart.json."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    code, _, err = run(capsys, "quickstart", "--no-erm", "--out", str(tmp_path))
    assert code == 0, err
    alpha_interp = json.loads((tmp_path / "quickstart.json").read_text())[
        "params"]["thresholds"]["alpha_interp"]
    assert alpha_interp == pytest.approx(0.30696, rel=1e-4)
    fig = figures[-1]
    for ax in fig.axes:
        vertical = [ln for ln in ax.get_lines()
                    if len(set(ln.get_xdata())) == 1 and "interp" in ln.get_label()]
        assert len(vertical) == 1 and vertical[0].get_xdata()[0] == pytest.approx(alpha_interp)
    assert any("interp" in t.get_text() and "0.307" in t.get_text()
               for t in fig.legends[0].get_texts())
