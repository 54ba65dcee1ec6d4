"""One progress bar for every long computation: tqdm on stderr, shown only on a terminal."""

from __future__ import annotations

import sys
from typing import Iterable


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, show: bool = True,
                 **kw):
    """A tqdm bar on stderr, shown only when stderr is a terminal (so logs and pipes stay
    clean) and ``show`` is true; keyword arguments go to tqdm (``desc``, ``unit``, ...)."""
    from tqdm import tqdm  # lazily: the CLI answers --help without loading it

    kw.setdefault("disable", None if show else True)
    return tqdm(iterable, total=total, file=sys.stderr, leave=False, dynamic_ncols=True, **kw)
