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

from amp_attention.experiments.validate import run_validation
from validation_adam import PLANS, RELATIVE_TOLERANCE, compact, deviations
from validation_adam import RECORD  # noqa: F401 - read by conftest.record

pytestmark = pytest.mark.slow

RECORD_EXPECTED = len(PLANS)  # entries of RECORD (see conftest.record)


@pytest.mark.parametrize("name", list(PLANS))
def test_se_matches_extrapolated_adam(name, tmp_path, record):
    cache = os.environ.get("AMP_VALIDATION_CACHE")
    out = Path(cache) / name if cache else tmp_path
    summary = run_validation(PLANS[name], out)
    assert summary["all_converged"], name
    record[name] = compact(summary)
    for row in deviations(summary):
        assert abs(row["relative"]) <= RELATIVE_TOLERANCE, (name, row)
