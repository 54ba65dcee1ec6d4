"""Slow: power-law targets at small alpha, finite-d ERM against the SE (issue 19).

Protocol and cases: tests/validation_powerlaw.py (GAMP/FISTA runs at d = 100..800,
cached in $AMP_VALIDATION_CACHE, or in a temporary directory: hours of CPU from
scratch).  The criteria were written after the runs at d <= 400 had been seen (the
d = 800 runs came later): they guard the claims of docs/validation.md and of the
finite_size_warning text, they are not an independent test of them.

1. fixed_law: the a + b/d extrapolation of the seed means at d = 200 and 400 lies
   within 3 standard errors + 1 % of the SE's matrix MSE;
2. at alpha = 0.05 the relative gap (ERM - SE)/SE shrinks with every doubling of d
   in both families;
3. the GOE finite-d mode stays within 6 % of the deterministic equivalent (it models
   the prior side only and does not explain the gap: docs/validation.md);
4. the gap is 0.05-0.35 times the SE-predicted residual kurtosis at every point
   (measured 0.08-0.26).

    AMP_RECORD=1 AMP_VALIDATION_CACHE=/work/cache19 python -m pytest -m slow tests/test_validation_powerlaw_slow.py
"""

import math
import os
import tempfile
from pathlib import Path

import pytest
from recording import write_record

import validation_powerlaw as vp

pytestmark = pytest.mark.slow

RECORD = Path(__file__).parent / "data" / "powerlaw_finite_size.json"
NEEDED = ("per_d_k1_gamp_d200", "per_d_k1_gamp_d400", "per_d_k1_gamp_d800_s0",
          "fixed_law_k1_gamp_d100", "fixed_law_k1_gamp_d200", "fixed_law_k1_gamp_d400",
          "_a0.1_d200", "_a0.1_d400", "_a0.3_d200")


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    cache = Path(os.environ.get("AMP_VALIDATION_CACHE") or tempfile.mkdtemp(prefix="powerlaw"))
    for name, thunk in vp.cases():
        if any(k in name for k in NEEDED):
            vp.cached(cache, name, thunk)
    return vp.summarise(cache)


def _row(rows, family, alpha, d):
    return next(r for r in rows if (r["family"], r["alpha"], r["d"]) == (family, alpha, d))


def test_fixed_law_extrapolates_onto_the_se(rows) -> None:
    r2, r4 = _row(rows, "fixed_law", 0.05, 200), _row(rows, "fixed_law", 0.05, 400)
    a = 2 * r4["erm_mse"] - r2["erm_mse"]
    err = math.hypot(2 * r4["erm_mse_stderr"], r2["erm_mse_stderr"])
    assert abs(a - r4["se_matrix_mse"]) < 3 * err + 0.01 * r4["se_matrix_mse"]


@pytest.mark.parametrize("family, ds", [("fixed_law", (100, 200, 400)), ("per_d", (200, 400, 800))])
def test_the_gap_shrinks_with_d(rows, family, ds) -> None:
    gaps = [_row(rows, family, 0.05, d)["gap"] for d in ds]
    assert all(g > 0 for g in gaps) and gaps == sorted(gaps, reverse=True)
    assert gaps[-1] < 0.6 * gaps[0]  # at least a factor 1.7 over a factor 4 in d


def test_goe_finite_d_mode_stays_near_the_deterministic_equivalent(rows) -> None:
    for r in rows:
        if "se_finite_d_mse" in r:
            assert abs(r["se_finite_d_mse"] / r["se_matrix_mse"] - 1) < 0.06, r


def test_gap_is_proportional_to_the_predicted_residual_kurtosis(rows) -> None:
    for r in rows:
        assert 0.05 < r["gap"] / r["se_kurtosis_pred"] < 0.35, r


def test_write_record(rows) -> None:
    if not write_record({f"{r['family']}_a{r['alpha']:g}_d{r['d']}": r for r in rows},
                        len(rows), RECORD):
        pytest.skip("set AMP_RECORD=1 to rewrite the record")
