"""Slow: SE vs direct ERM for softmax (L = 2, 3) and seq2lab (L = 2) (issue 3).

Protocol in validation_channels.py.  Run:
    AMP_RECORD=1 python -m pytest -m slow tests/test_validation_channels_slow.py
(AMP_RECORD=1 rewrites tests/data/channels_finite_size.json; about 40 min on
2 cores; AMP_VALIDATION_CACHE=DIR keeps every finished run and resumes).
"""


import pytest

from validation_channels import POINTS, QUANTITIES, run_point, tolerance
from validation_channels import RECORD  # noqa: F401 - read by conftest.record

pytestmark = pytest.mark.slow

RECORD_EXPECTED = len(POINTS)  # entries of RECORD (see conftest.record)


@pytest.mark.parametrize("name", list(POINTS))
def test_se_matches_extrapolated_erm(name, record):
    try:
        res = run_point(name)
    except Exception as exc:  # recorded, so that one failing point keeps the others
        record[name] = {"name": name, "error": repr(exc)}
        raise
    record[name] = res
    for q in QUANTITIES:
        fit = res["fits"][q]
        theory = res["se"][q]
        tol = tolerance(theory, fit, res["se_mc_stderr"][q])
        assert abs(fit["intercept"] - theory) <= tol, (name, q, fit, theory)
