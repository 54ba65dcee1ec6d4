"""One progress bar for every long computation: tqdm on stderr, shown only on a terminal."""

from __future__ import annotations

import sys
from typing import Iterable


def progress_bar(iterable: Iterable | None = None, *, total: int | None = None, **kw):
    """A tqdm bar on stderr (``disable=None``: silent when stderr is not a terminal, so
    logs and pipes stay clean); keyword arguments go to tqdm (``desc``, ``unit``, ...)."""
    from tqdm import tqdm  # lazily: the CLI answers --help without loading it

    return tqdm(iterable, total=total, file=sys.stderr, disable=None, leave=False,
                dynamic_ncols=True, **kw)
