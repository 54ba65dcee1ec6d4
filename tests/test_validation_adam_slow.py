"""Slow: SE vs Adam-trained layers after 1/d extrapolation, within 5 % (issue 5).

Plans in validation_adam.py.  Run:
    AMP_RECORD=1 AMP_VALIDATION_CACHE=/tmp/val5 python -m pytest -m slow tests/test_validation_adam_slow.py
(about 40 min per softmax plan and 15 min per linear plan on one core;
AMP_RECORD=1 rewrites tests/data/adam_validation.json, from which
benchmarks/adam_validation_figure.py draws docs/figures/adam_validation.png;
AMP_VALIDATION_CACHE=DIR keeps every finished run and resumes).
"""

import os
from pathlib import Path

import pytest
from recording import write_record

from amp_attention.solvers.validate import run_validation
from validation_adam import PLANS, RECORD, RELATIVE_TOLERANCE, compact, deviations

pytestmark = pytest.mark.slow

_results: dict = {}


@pytest.mark.parametrize("name", list(PLANS))
def test_se_matches_extrapolated_adam(name, tmp_path):
    cache = os.environ.get("AMP_VALIDATION_CACHE")
    out = Path(cache) / name if cache else tmp_path
    summary = run_validation(PLANS[name], out)
    assert summary["all_converged"], name
    _results[name] = compact(summary)
    for row in deviations(summary):
        assert abs(row["relative"]) <= RELATIVE_TOLERANCE, (name, row)


@pytest.fixture(scope="module", autouse=True)
def _record_when_complete():
    """Rewrites the record after the module's tests have run, in whatever order (only with
    AMP_RECORD=1 and every entry present)."""
    yield
    write_record(_results, len(PLANS), RECORD)
