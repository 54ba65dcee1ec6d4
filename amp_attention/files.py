"""Atomic output files: every result file is complete or absent.

A file is written to a temporary name in the same directory and renamed over its
final name (``os.replace`` is atomic on POSIX), so an interrupted run leaves either
the complete file or none, and a resumed sweep skips exactly the points that
finished.  One writer per format, used by every layer.

Only regular files are replaced.  A symbolic link is followed: the file it points
to is written (atomically, in that file's directory) and the link stays a link; a
dangling link creates the file it names.  A path that exists and is not a regular
file (a directory, a FIFO, a socket, a device such as ``/dev/full``) is refused
with :class:`NotRegularFileError` naming it, and is left untouched.  A write that
fails (disk full, file size limit, permissions) removes its temporary file and
raises the OSError with ``filename`` set to the path asked for.

JSON is strict (RFC 8259): NaN and infinities are written as ``null``
(:func:`amp_attention.jsonsafe.json_safe`); readers that compute with such a value
turn ``None`` back into NaN (:func:`amp_attention.jsonsafe.as_float`).
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import errno
import json
import os
import re
import secrets
import stat
import sys
from pathlib import Path
from typing import IO, Any, Iterable, Iterator, Sequence


class NotRegularFileError(OSError):
    """An output path exists and is not a regular file (directory, FIFO, socket,
    device): it is never replaced.  ``filename`` names it."""


class InputFileError(OSError):
    """An output path is a file the run reads (inside :func:`protected_inputs`): it is
    never replaced nor moved.  ``filename`` names it."""


#: (what, path, (st_dev, st_ino)) of the files being read as inputs; a context
#: variable, so that a protection is scoped to the ``with`` block that set it
_INPUTS: contextvars.ContextVar[tuple] = contextvars.ContextVar("protected_inputs", default=())


@contextlib.contextmanager
def protected_inputs(inputs: dict[str, Path | str]) -> Iterator[None]:
    """Within the block, every writer refuses (:class:`InputFileError`) to replace or
    move aside any of ``inputs`` ({what: path}, e.g. ``{"--target-file": "s0.csv"}``),
    whatever name or link it is reached by (files compared by device and inode)."""
    entries = []
    for what, path in inputs.items():
        with contextlib.suppress(OSError):
            st = os.stat(path)
            entries.append((what, str(path), (st.st_dev, st.st_ino)))
    token = _INPUTS.set(_INPUTS.get() + tuple(entries))
    try:
        yield
    finally:
        _INPUTS.reset(token)


def input_named(path: Path | str) -> tuple[str, str] | None:
    """(what, path) of the protected input that ``path`` is, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    for what, name, key in _INPUTS.get():
        if key == (st.st_dev, st.st_ino):
            return what, name
    return None


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def output_target(path: Path | str) -> Path:
    """The file that writing ``path`` replaces: ``path`` itself, or the final target of
    a symbolic link (also of a dangling one: that file is created).  Raises
    :class:`NotRegularFileError` when it exists and is not a regular file."""
    path = Path(path)
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except NotADirectoryError:
        return target  # a parent is a file: opening the temporary file says so
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        where = f" (at {target}, where the link points)" if path.is_symlink() else ""
        raise NotRegularFileError(errno.EEXIST, f"it is {kind}{where}, not a regular file; "
                                  "refusing to replace it", str(path))
    read = input_named(target)
    if read is not None:
        raise InputFileError(errno.EEXIST, f"it is the input {read[0]} ({read[1]}); refusing "
                             "to overwrite it: choose another output name", str(path))
    return target


#: suffix of the temporary files; their names are ``.<name, cut to 100 characters>.<pid>.
#: <8 random hex>.amp-tmp`` (at most 127 characters whatever the name's length, so every
#: legal name can be written; distinct per thread and per write)
TEMPORARY_SUFFIX = ".amp-tmp"
_TEMPORARY = re.compile(r"^\..*\.(\d+)\.[0-9a-f]{8}" + re.escape(TEMPORARY_SUFFIX) + "$", re.S)


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name[:100]}.{os.getpid()}.{secrets.token_hex(4)}"
                          f"{TEMPORARY_SUFFIX}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # someone else's process (EPERM) or unknowable: keep its file
    return True


def remove_stale_temporaries(directory: Path | str) -> int:
    """Remove the temporary files a killed writer (SIGKILL, power loss) left in
    ``directory``: those named by :func:`_temporary` whose process is gone.  A live
    process's file is kept.  Returns how many were removed; a directory that cannot
    be listed removes none."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        m = _TEMPORARY.match(entry.name)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed += 1
    return removed


@contextlib.contextmanager
def _atomic(path: Path | str, mode: str, **open_kw: Any) -> Iterator[IO]:
    """An open temporary file beside the target of ``path``, renamed over that target
    when the block ends without an exception; on any exception (including
    KeyboardInterrupt) the temporary file is removed and an OSError is re-raised with
    ``filename`` = ``path``."""
    final = output_target(path)
    tmp = _temporary(final)
    try:
        with open(tmp, mode, **open_kw) as fh:
            yield fh
        with contextlib.suppress(OSError):  # keep the mode of the file it replaces
            os.chmod(tmp, stat.S_IMODE(os.stat(final).st_mode))
        os.replace(tmp, final)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, (NotRegularFileError,
                                                             InputFileError)):
            exc.filename, exc.filename2 = str(path), None
        raise


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename)."""
    with _atomic(path, "w") as fh:
        fh.write(text)


def atomic_write_json(path: Path | str, obj: Any, *, indent: int | None = None) -> None:
    """Write ``obj`` as strict JSON to ``path`` atomically: NaN and infinities become
    ``null`` (JSON has neither), numpy values plain numbers."""
    from .jsonsafe import strict_dumps

    atomic_write_text(path, strict_dumps(obj, indent=indent))


def atomic_write_csv(path: Path | str, header: Sequence[str], rows: Iterable[Sequence[Any]], *,
                     preamble: str = "") -> None:
    """Write a header and rows as CSV to ``path`` atomically; ``preamble`` (e.g. a
    ``# ...`` comment line with the parameters) goes before the header."""
    with _atomic(path, "w", newline="") as fh:
        fh.write(preamble)
        w = csv.writer(fh)
        w.writerow(list(header))
        w.writerows(rows)


def atomic_write_npz(path: Path | str, **arrays: Any) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` to ``path`` atomically."""
    import numpy as np

    with _atomic(path, "wb") as fh:  # a file object: np.savez would append ".npz" to a name
        np.savez(fh, **arrays)


def atomic_save_figure(fig: Any, path: Path | str, **kw: Any) -> Path:
    """``fig.savefig(path, **kw)`` atomically (temporary file + rename, as the other
    writers); the format is ``kw['format']`` or the suffix of ``path`` (default PNG)."""
    path = Path(path)
    kw.setdefault("format", path.suffix[1:].lower() or "png")
    with _atomic(path, "wb") as fh:
        fig.savefig(fh, **kw)
    return path


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


#: the largest checkpoint file read (a paper figure's chain file holds a few MB)
MAX_CHECKPOINT_BYTES = 256 * 2**20


def _number_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def notice(message: str) -> None:
    """One plain line ``amp-attention: notice: <message>`` on stderr (no warning
    machinery, no source line)."""
    print(f"amp-attention: notice: {' '.join(message.split())}", file=sys.stderr, flush=True)


def read_checkpoint(path: Path | str, required: Sequence[str] = (),
                    numbers: Sequence[str] = ()) -> dict | None:
    """The JSON object of a finished task's file, or None when there is none.

    A file that is not a JSON object with the ``required`` keys (truncated,
    garbage, another format, nested too deep to parse, larger than
    MAX_CHECKPOINT_BYTES), or where one of ``numbers``
    holds something else than a number or null, is moved aside to ``<name>.unreadable`` (numbered if
    that is taken: nothing is deleted), a one-line notice on stderr names both
    paths, and None is returned, so that the caller computes the task again.
    Values written as NaN or infinity are ``None`` here (strict JSON).  A path that is
    not a regular file (a FIFO would block the read) raises :class:`NotRegularFileError`,
    as writing it would.
    """
    path = Path(path)
    output_target(path)
    if not path.exists():
        return None
    size = path.stat().st_size
    try:
        if size > MAX_CHECKPOINT_BYTES:  # not one of ours: never read whole into memory
            why = (f"{size} bytes, more than any result file holds "
                   f"({MAX_CHECKPOINT_BYTES // 2**20} MiB)")
        else:
            record = json.loads(path.read_text())
            missing = ([k for k in required if k not in record] if isinstance(record, dict)
                       else ["(not a JSON object)"])
            why = f"missing {', '.join(missing)}" if missing else ""
        if not why:
            wrong = [k for k in numbers if k in record and not _number_or_null(record[k])]
            why = f"not a number: {', '.join(wrong)}" if wrong else ""
    except (OSError, ValueError) as exc:
        why = f"not JSON: {' '.join(str(exc).split())}"[:300]
    except RecursionError:
        why = "not JSON: nested too deep"
    if not why:
        return record
    aside = _aside(path)
    os.replace(path, aside)
    notice(f"{path} is not a readable result ({why}); moved to {aside.name}, "
           "computing it again")
    return None
