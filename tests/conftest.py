"""Fixtures shared by the test modules.

pytest puts this directory on sys.path (default "prepend" import mode; tests/ has no
__init__.py), and Python does the same for a script run as ``python tests/NAME.py``, so
the modules here import their neighbours (recording, validation_*, docs_check,
se_regression) without touching sys.path themselves.
"""

from __future__ import annotations

import pytest

import recording


@pytest.fixture(scope="module")
def record(request):
    """The dict of a slow validation module's record: its tests store their entries in it,
    and after the module's last test it is written to the module's ``RECORD`` path by
    :func:`recording.write_record` (only with AMP_RECORD=1 and all ``RECORD_EXPECTED``
    entries present), whatever order the tests ran in.  The requesting module defines
    ``RECORD`` (a Path) and ``RECORD_EXPECTED`` (the number of entries)."""
    module = request.module
    path, expected = module.RECORD, module.RECORD_EXPECTED
    results: dict = {}
    yield results
    recording.write_record(results, expected, path)
