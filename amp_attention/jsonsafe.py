"""JSON-safe copies of results (shared by the command-line front ends)."""

from __future__ import annotations

import math
from typing import Any


def json_safe(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars and arrays -> Python, tuples -> lists, NaN/inf -> None
    (JSON has no NaN; a missing value says "not available" without breaking parsers)."""
    import numpy as np  # lazily: the CLI answers --help without the scientific stack

    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [json_safe(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj
