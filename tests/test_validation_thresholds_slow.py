"""Slow: finite-d ERM brackets the SE thresholds (issue 6).

Protocol in validation_thresholds.py.  Run:
    AMP_RECORD=1 AMP_VALIDATION_CACHE=/tmp/thrcache python -m pytest -m slow tests/test_validation_thresholds_slow.py
(AMP_RECORD=1 rewrites tests/data/thresholds_finite_size.json).
"""

import pytest
from recording import write_record

from validation_thresholds import CASES, RECORD, SEED_STUDY_CASES, below, run_case, seed_study

pytestmark = pytest.mark.slow

_results: dict = {}


@pytest.mark.parametrize("name", list(CASES))
def test_erm_crosses_within_the_allowance(name):
    res = run_case(name)
    _results[name] = res
    assert all(r["converged"] for r in res["rows"]), name
    for row in res["summary"]:
        if below(name, row["factor"]):
            assert row["ratio"] < 0.3, (name, row)
        else:
            assert row["ratio"] > 0.6, (name, row)


@pytest.mark.parametrize("name", SEED_STUDY_CASES)
def test_most_draws_lie_on_the_predicted_side(name):
    """Second, per-draw protocol (validation_thresholds.SEED_STUDY_*)."""
    res = seed_study(name)
    _results["seed_study_" + name] = res
    for cell in res["cells"]:
        assert cell["converged"], (name, cell)
        assert 2 * cell["on_predicted_side"] > cell["draws"], (name, cell)


def test_write_record():
    write_record(_results, len(CASES) + len(SEED_STUDY_CASES), RECORD)
