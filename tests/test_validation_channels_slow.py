"""Slow: SE vs direct ERM for softmax (L = 2, 3) and seq2lab (L = 2) (issue 3).

Protocol in validation_channels.py.  Run:
    AMP_RECORD=1 python -m pytest -m slow tests/test_validation_channels_slow.py
(AMP_RECORD=1 rewrites tests/data/channels_finite_size.json; about 40 min on
2 cores; AMP_VALIDATION_CACHE=DIR keeps every finished run and resumes).
"""


import pytest
from recording import write_record

from validation_channels import POINTS, QUANTITIES, RECORD, run_point, tolerance

pytestmark = pytest.mark.slow

_results: dict = {}


@pytest.mark.parametrize("name", list(POINTS))
def test_se_matches_extrapolated_erm(name):
    try:
        res = run_point(name)
    except Exception as exc:  # recorded, so that one failing point keeps the others
        _results[name] = {"name": name, "error": repr(exc)}
        raise
    _results[name] = res
    for q in QUANTITIES:
        fit = res["fits"][q]
        theory = res["se"][q]
        tol = tolerance(theory, fit, res["se_mc_stderr"][q])
        assert abs(fit["intercept"] - theory) <= tol, (name, q, fit, theory)


@pytest.fixture(scope="module", autouse=True)
def _record_when_complete():
    """Rewrites the record after the module's tests have run, in whatever order (only with
    AMP_RECORD=1 and every entry present)."""
    yield
    write_record(_results, len(POINTS), RECORD)
