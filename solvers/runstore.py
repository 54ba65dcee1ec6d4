"""Atomic result files for resumable sweeps.

A finished run is written to a temporary file in the same directory and
renamed over its final name (``os.replace`` is atomic on POSIX), so an
interrupted sweep leaves either the complete file or none, and a rerun skips
exactly the runs that finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (temporary file + rename)."""
    path = Path(path)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)
