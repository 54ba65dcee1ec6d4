"""How far the SE's Monte-Carlo errors can be trusted (issue 58, item 12), measured as
benchmarks/mc_error_coverage.py does: 64 RQMC seeds at one softmax point (~3-10 min).

Over S = 64 seeds the share of |z| <= t_{0.975, mc_dof} has a binomial spread of
sqrt(0.95 x 0.05 / 64) = 0.027 around 0.95; the test asks for >= 0.87 (three spreads
below) on every field, and for the seeds' own spread to lie within [0.7, 1.4] of the
median reported error (a 64-seed standard deviation is itself uncertain by ~9 %)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "mc_error_coverage", ROOT / "benchmarks" / "mc_error_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_t_intervals_cover_95_percent_over_64_seeds() -> None:
    bench = _benchmark()
    name = "softmax_L2_beta2_a0.5_lam0.1"
    rows = [bench.solve(bench.POINTS[name], s, 8) for s in range(64)]
    good = [r for r in rows if r["converged"]]
    assert len(good) >= 60
    table = bench.coverage(good)
    for field, c in table.items():
        assert c["within_t95"] >= 0.87, (field, c)
        assert 0.7 <= c["sd_over_median_stderr"] <= 1.4, (field, c)
