"""Slow: finite-d ERM brackets the SE thresholds (issue 6).

Protocol in validation_thresholds.py.  Run:
    AMP_RECORD=1 AMP_VALIDATION_CACHE=/tmp/thrcache python -m pytest -m slow tests/test_validation_thresholds_slow.py
(AMP_RECORD=1 rewrites tests/data/thresholds_finite_size.json).
"""

import pytest
from recording import write_record

from validation_thresholds import CASES, RECORD, below, run_case

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


def test_write_record():
    write_record(_results, len(CASES), RECORD)
