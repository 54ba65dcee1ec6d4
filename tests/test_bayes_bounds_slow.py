"""Every point of the validation plans (114 problems), ERM vs Bayes-optimal at the
default Monte-Carlo settings (tests/test_bayes_bounds.py runs a subset by default).
About 2 h on one core: ``python -m pytest -m slow tests/test_bayes_bounds_slow.py``."""

from __future__ import annotations

import pytest

from test_bayes_bounds import assert_bounds
from validation_bayes import check, points

ALL = points()

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(ALL))
def test_point(name):
    assert_bounds(check(name, ALL[name]))
