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


def atomic_write_npz(path: Path | str, **arrays: Any) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` to ``path`` atomically."""
    import numpy as np

    path = Path(path)
    tmp = _temporary(path)
    with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a name
        np.savez(fh, **arrays)
    os.replace(tmp, path)


def ensure_directory(path: Path | str) -> Path:
    """``path`` as an existing directory (created with its parents if needed);
    ValueError naming it when a file stands in its place."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"{path} exists and is not a directory; move it away or choose "
                         "another output directory") from None
    return path


def _aside(path: Path) -> Path:
    aside = path.with_name(path.name + ".unreadable")
    k = 1
    while aside.exists():
        aside = path.with_name(f"{path.name}.unreadable.{k}")
        k += 1
    return aside


def read_checkpoint(path: Path | str, required: Sequence[str] = ()) -> dict | None:
    """The JSON object of a finished task's file, or None when there is none.

    A file that is not a JSON object with the ``required`` keys (truncated,
    garbage, another format) is moved aside to ``<name>.unreadable`` (numbered if
    that is taken: nothing is deleted), a RuntimeWarning names both paths, and
    None is returned, so that the caller computes the task again.
    """
    import warnings

    path = Path(path)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        missing = ([k for k in required if k not in record] if isinstance(record, dict)
                   else ["(not a JSON object)"])
        why = f"missing {', '.join(missing)}" if missing else ""
    except (OSError, ValueError) as exc:
        why = f"not JSON: {' '.join(str(exc).split())}"
    if not why:
        return record
    aside = _aside(path)
    os.replace(path, aside)
    warnings.warn(f"{path} is not a readable result ({why}); moved to {aside.name}, "
                  "computing it again", RuntimeWarning, stacklevel=2)
    return None
