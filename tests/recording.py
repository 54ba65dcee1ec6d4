"""Rewriting a validation record from a slow test module (AMP_RECORD=1)."""

from __future__ import annotations

import json
import os
from pathlib import Path



def write_record(results: dict, expected: int, path: Path) -> bool:
    """Write ``results`` to ``path`` when AMP_RECORD=1 and all ``expected`` entries ran;
    return whether it was written.  Atomic: a temporary file is renamed."""
    if os.environ.get("AMP_RECORD") != "1" or len(results) != expected:
        return False
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    os.replace(tmp, path)
    return True


def cached_json(key: str, compute):
    """compute() once per key: its JSON result is kept as $AMP_VALIDATION_CACHE/<key>.json
    (written atomically) when that variable is set, so interrupted validations resume."""
    root = os.environ.get("AMP_VALIDATION_CACHE")
    if not root:
        return compute()
    path = Path(root) / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    out = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, path)
    return out
