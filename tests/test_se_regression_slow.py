"""The before/after SE table of the restructuring (issue 15): 20 points, every channel.

Slow (about 4 min on one core): ``python -m pytest -m slow tests/test_se_regression_slow.py``.
See tests/se_regression.py for the tolerances and why they are what they are.
"""

from pathlib import Path

import pytest
import se_regression


@pytest.mark.slow
def test_se_outputs_are_unchanged_at_twenty_points(capsys):
    record = Path(__file__).parent / "data" / "se_regression_points.json"
    bad = se_regression.compare(record)
    out = capsys.readouterr().out
    assert bad == 0, out
