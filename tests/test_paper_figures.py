"""amp_attention.experiments.paper_figures: the pieces of the redrawn figures that run
without the authors' repository (the figures themselves: benchmarks/paper/figures.py,
docs/paper.md)."""

from __future__ import annotations

import numpy as np
import pytest

from amp_attention.experiments import paper_figures as pf


def test_threshold_row_equals_the_papers_closed_forms() -> None:
    """Figure 3 (right): the engine's thresholds on the alpha_bar axis against the closed
    forms the authors draw: interpolation (1 + 2k - k^2)/4 (Delta -> 0+), Bayes-optimal
    perfect recovery k - k^2/2, unfactorised perfect recovery 1/2; factorised perfect
    recovery against their plotted value at kappa0 0.5 (0.4222, their notebook)."""
    row = pf.threshold_row(0.5)
    assert row["interp_factorised"] == pytest.approx((1 + 2 * 0.5 - 0.25) / 4, abs=1e-5)
    assert row["pr_bayes"] == pytest.approx(0.5 - 0.125, abs=1e-6)
    assert row["pr_unfactorised"] == pytest.approx(0.5, abs=1e-12)
    assert row["pr_factorised"] == pytest.approx(0.4222, abs=1e-4)


def test_repository_checks_name_the_missing_file(tmp_path) -> None:
    with pytest.raises(ValueError, match="repo: .* is not a clone of PenombraET/ExtensiveAttention"):
        pf.check_repo(tmp_path)
    (tmp_path / "data" / "GD").mkdir(parents=True)
    (tmp_path / pf.MARKER).write_text("alpha,test_error_mean\n0.1,0.3\n0.2,0.25\n")
    root = pf.check_repo(tmp_path)
    t = pf.read_table(root, pf.MARKER)
    assert list(t) == ["alpha", "test_error_mean"] and t["alpha"].tolist() == [0.1, 0.2]
    with pytest.raises(ValueError, match="data/SE/x.csv is missing"):
        pf.read_table(root, "data/SE/x.csv")
    with pytest.raises(ValueError, match="figure must be one of"):
        pf.draw_figure(1, tmp_path, tmp_path / "out")


def test_deviation_of_points_from_a_curve() -> None:
    a = np.array([0.1, 0.2, 0.3])
    theory = np.array([0.3, 0.2, 0.1])
    d = pf._deviation(a, theory, np.array([0.05, 0.15, 0.25]), np.array([9.0, 0.26, 0.14]),
                      np.array([1.0, 0.01, 0.02]))
    # 0.05 lies outside the curve: left out; the others differ by +0.01 and -0.01
    assert d["n"] == 2 and d["max_abs_diff"] == pytest.approx(0.01)
    assert d["max_abs_z"] == pytest.approx(1.0)
    assert pf._deviation(a[:1], theory[:1], a, theory, a) == {}
