"""``njit`` of the package's compiled kernels: Numba's, with a fall-back when its cache
has nowhere to go.

Every kernel asks for ``cache=True`` (compiled once per machine, loaded in ~ms after).
Numba raises "cannot cache function ...: no locator available" at decoration when no
folder can hold the cache: the installed package read-only, no writable user cache and
no NUMBA_CACHE_DIR (amp_attention._environment first points NUMBA_CACHE_DIR at a private
temporary folder; this is for a machine where even that cannot be written).  The kernel
is then compiled without a cache, and one line says so once per process."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numba


@functools.cache
def _notice_no_cache() -> None:
    print("amp-attention: notice: no folder can hold Numba's cache of compiled kernels "
          "(read-only install, HOME and temporary folder; set NUMBA_CACHE_DIR to a "
          "writable one): kernels are compiled in memory on every run", file=sys.stderr,
          flush=True)


def njit(*args: Any, **kwargs: Any) -> Callable:
    """``numba.njit(*args, **kwargs)``; with ``cache=True`` and no cache locator, the same
    kernel without a cache (and one notice)."""
    if args and callable(args[0]) and len(args) == 1 and not kwargs:
        return numba.njit(args[0])

    def decorate(fn: Callable) -> Callable:
        try:
            return numba.njit(*args, **kwargs)(fn)
        except RuntimeError as exc:
            if not kwargs.get("cache") or "no locator available" not in str(exc):
                raise
            _notice_no_cache()
            return numba.njit(*args, **{**kwargs, "cache": False})(fn)
    return decorate
