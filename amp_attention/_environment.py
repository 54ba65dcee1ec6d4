"""Process settings the package makes before Numba or libgomp load (imported first by
``amp_attention/__init__.py``): OpenMP's waiting policy and a writable Numba cache.

Both read environment variables once, when their library loads, so they are set at
import time; a value the user set is kept (only its letter case may change).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def set_omp_wait_policy(environ: dict | None = None) -> str:
    """OMP_WAIT_POLICY = ``passive`` unless the user set it, in lower case either way.

    Numba's parallel kernels run on GNU OpenMP, whose idle threads spin for a while
    after each parallel region; OpenBLAS's threads do the same after each GEMM.  On a
    2-core machine the two pools take the cores from each other: a softmax ERM that
    alternates kernels and GEMMs ran 8x slower (142 s instead of 18 s,
    docs/performance.md).  Lower case because libgomp compares the value with
    strncasecmp, which under a Turkish locale (LC_ALL=tr_TR.UTF-8) does not match
    'I' with 'i': ``PASSIVE`` was rejected on every process ("Invalid value for
    environment variable OMP_WAIT_POLICY"), ``passive`` is read in every locale."""
    env = os.environ if environ is None else environ
    value = env.get("OMP_WAIT_POLICY", "passive")
    if value.isascii():
        value = value.lower()
    env["OMP_WAIT_POLICY"] = value
    return value


def _writable_directory(path: Path) -> bool:
    """Whether files can be created in ``path`` (created if missing), tested by doing it:
    permission bits do not say it for root on a read-only mount."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        return False
    return True


def _numba_user_cache() -> Path:
    """The user-wide folder Numba falls back on (its _UserWideCacheLocator):
    $XDG_CACHE_HOME/numba or ~/.cache/numba."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "numba"


def numba_cache_fallback(package_dir: str, environ: dict | None = None) -> str | None:
    """Point NUMBA_CACHE_DIR at a private temporary folder when Numba would find no
    place for the compiled kernels: no NUMBA_CACHE_DIR, the installed package read-only
    and the user's cache folder not writable (read-only install, HOME unset or
    read-only).  Numba then raised a 46-line RuntimeError ("cannot cache function:
    no locator available") at the first solve.  Returns the folder chosen, or None
    when Numba has a place of its own.  With no writable temporary folder either,
    NUMBA_CACHE_DIR is left unset: the CLI reports the failure in one line."""
    env = os.environ if environ is None else environ
    if env.get("NUMBA_CACHE_DIR"):
        return None
    # asked of the system, nothing created: this runs at every import of the package
    if _could_write(Path(package_dir) / "__pycache__") or _could_write(_numba_user_cache()):
        return None
    folder = _private_temporary_folder()
    if folder is None:
        return None
    env["NUMBA_CACHE_DIR"] = str(folder)
    return str(folder)


def _private_temporary_folder(prefix: str = "amp-attention-numba-cache-") -> Path | None:
    """<tmp>/<prefix><uid>, kept between runs when it is this user's and writable by no
    one else (Numba's cache files are pickles: a folder another user could write to
    would let them run code here); otherwise a fresh private folder for this process.
    None when no temporary folder can be written."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    try:
        # gettempdir() raises when no candidate folder (TMPDIR, /tmp, ..., cwd) is writable
        folder = Path(tempfile.gettempdir()) / f"{prefix}{uid}"
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.stat()
        if (uid is None or st.st_uid == uid) and not st.st_mode & 0o022 \
                and _writable_directory(folder):
            return folder
    except OSError:
        pass
    try:
        return Path(tempfile.mkdtemp(prefix=prefix))
    except OSError:
        return None


def matplotlib_config_fallback(environ: dict | None = None) -> str | None:
    """Point MPLCONFIGDIR at a private temporary folder when Matplotlib's own config and
    cache folders cannot be written (HOME unset or read-only): it would make a fresh
    temporary folder on every run and print a warning about it on stderr.  Returns the
    folder chosen, or None (Matplotlib has its places, or the user set MPLCONFIGDIR).
    Checked without creating anything (os.access: Matplotlib creates them itself)."""
    env = os.environ if environ is None else environ
    if env.get("MPLCONFIGDIR"):
        return None
    home = os.path.expanduser("~")
    places = (env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
              env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"))
    if all(_could_write(Path(p) / "matplotlib") for p in places):
        return None
    folder = _private_temporary_folder("amp-attention-matplotlib-")
    if folder is None:
        return None
    env["MPLCONFIGDIR"] = str(folder)
    return str(folder)


def _could_write(path: Path) -> bool:
    """Whether ``path`` is a writable folder or could be created as one (its nearest
    existing ancestor writable), asked of the system (read-only mounts included)."""
    while not path.exists():
        if path.parent == path:
            return False
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
