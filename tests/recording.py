"""Rewriting a validation record from a slow test module (AMP_RECORD=1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def write_record(results: dict, expected: int, path: Path) -> None:
    """Write ``results`` to ``path`` when AMP_RECORD=1 and all ``expected`` entries ran;
    skip (with the reason) otherwise.  Atomic: a temporary file is renamed."""
    if os.environ.get("AMP_RECORD") != "1" or len(results) != expected:
        pytest.skip("set AMP_RECORD=1 and run the whole module to rewrite the record")
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    os.replace(tmp, path)
