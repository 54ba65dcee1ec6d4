"""Atomic output files: every result file is complete or absent.

A file is written to a temporary name in the same directory and renamed over its
final name (``os.replace`` is atomic on POSIX), so an interrupted run leaves either
the complete file or none, and a resumed sweep skips exactly the points that
finished.  One writer per format, used by every layer.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence


def _temporary(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename)."""
    path = Path(path)
    tmp = _temporary(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def atomic_write_json(path: Path | str, obj: Any, *, indent: int | None = None) -> None:
    """Write ``obj`` as JSON to ``path`` atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent))


def atomic_write_csv(path: Path | str, header: Sequence[str], rows: Iterable[Sequence[Any]], *,
                     preamble: str = "") -> None:
    """Write a header and rows as CSV to ``path`` atomically; ``preamble`` (e.g. a
    ``# ...`` comment line with the parameters) goes before the header."""
    path = Path(path)
    tmp = _temporary(path)
    with open(tmp, "w", newline="") as fh:
        fh.write(preamble)
        w = csv.writer(fh)
        w.writerow(list(header))
        w.writerows(rows)
    os.replace(tmp, path)
