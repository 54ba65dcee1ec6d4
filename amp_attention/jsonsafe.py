"""JSON-safe copies of results (shared by the command-line front ends)."""

from __future__ import annotations

import json
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


def strict_dumps(obj: Any, **kw: Any) -> str:
    """Strict JSON text of ``obj`` (:func:`json_safe`: NaN and infinities as null, numpy
    values plain); ``kw`` goes to :func:`json.dumps` (e.g. ``indent``)."""
    return json.dumps(json_safe(obj), allow_nan=False, **kw)


def as_float(value: Any) -> float:
    """A number read back from strict JSON: ``None`` (written for NaN or an infinity)
    -> NaN, anything else ``float(value)``."""
    return math.nan if value is None else float(value)


def with_floats(record: dict | None, keys: Any) -> dict | None:
    """A record read back from strict JSON with each of ``keys`` it holds as a float
    (:func:`as_float`: null -> NaN); None stays None (no record)."""
    if record is None:
        return None
    return {**record, **{k: as_float(record[k]) for k in keys if k in record}}


def nonfinite_notes(row: dict, keys: Any, reasons: dict | None = None) -> dict:
    """A copy of ``row`` where each of ``keys`` holding a non-finite float is ``None``
    and a sibling ``<key>_note`` says what it was: ``"infinite"``, ``"-infinite"`` or
    ``"NaN"``, followed by ``": <reason>"`` when ``reasons`` has one for the key, or
    when ``row`` has a ``<key>_detail`` dict with a ``message`` (the threshold rows)."""
    out = dict(row)
    for key in keys:
        v = row.get(key)
        if isinstance(v, bool) or not (isinstance(v, (int, float)) or hasattr(v, "dtype")):
            continue
        try:
            v = float(v)  # numpy scalars too
        except (TypeError, ValueError):
            continue
        if math.isfinite(v):
            continue
        what = "NaN" if math.isnan(v) else ("infinite" if v > 0 else "-infinite")
        detail = row.get(f"{key}_detail")
        why = (reasons or {}).get(key) or (detail.get("message") if isinstance(detail, dict)
                                           else None)
        out[key] = None
        out[f"{key}_note"] = f"{what}: {why}" if why else what
    return out
