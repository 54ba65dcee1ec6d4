"""Output paths through the whole CLI (issue 29, items 1 and 5; the numeric flags are
fuzzed in tests/test_cli_fuzz.py): for every output flag, a symlink to a file, a dangling
symlink, a FIFO, a directory where a file is expected, an empty path, a read-only
directory and a write that fails (``ulimit -f``, in a subprocess) end with exit 0 or 2,
no traceback, one line on stderr for 2, no temporary file left, and a symlink still a
link with its target written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from amp_attention.cli import main

#: command -> (argv with {out} for the output path, output file the cases act on, relative
#: to {out}: "" when the flag names the file itself)
COMMANDS = {
    "se --spectrum": (["se", "--spectrum", "{out}"], ""),
    "thresholds --out": (["thresholds", "--kappa-grid", "1", "--out", "{out}"], "thresholds.csv"),
    "phase-diagram --out": (["phase-diagram", "--alpha-range", "0.2", "0.6", "2", "--lam-range",
                             "0.1", "1", "1", "--workers", "0", "--out", "{out}"],
                            "phase_diagram.png"),
    "quickstart --out": (["quickstart", "--no-erm", "--out", "{out}"], "quickstart.json"),
}
CASES = ("symlink", "dangling", "fifo", "directory", "empty", "read-only")


def _out(tmp_path: Path, file: str) -> tuple[Path, Path]:
    """(the value of the flag, the file the case acts on)."""
    if not file:
        path = tmp_path / "run" / "spectrum.csv"
        path.parent.mkdir()
        return path, path
    out = tmp_path / "run"
    out.mkdir()
    return out, out / file


def check(code: int, err: str, root: Path) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip("\n").splitlines()
        assert len(lines) == 1 and lines[0].startswith("amp-attention: error: "), err
    assert [p for p in root.rglob("*") if ".amp-tmp" in p.name or ".tmp" in p.name] == []


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_output_paths(command, case, tmp_path, capsys, monkeypatch):
    argv, file = COMMANDS[command]
    flag, path = _out(tmp_path, file)
    target = tmp_path / "elsewhere" / path.name
    target.parent.mkdir()
    expect = 0
    if case == "symlink":
        target.write_text("old")
        path.symlink_to(target)
    elif case == "dangling":
        path.symlink_to(target)
    elif case == "fifo":
        os.mkfifo(path)
        expect = 2
    elif case == "directory":
        path.mkdir()
        expect = 2
    elif case == "empty":
        flag, expect = "", 2
    elif case == "read-only":
        path.parent.chmod(0o500)
        expect = 2
        if os.geteuid() == 0:
            # root writes into read-only directories: the kernel's refusal is what a user
            # meets, so it is made here, at the one place the writers open their files
            import builtins
            import errno

            from amp_attention import files

            def refusing_open(file, mode="r", *args, **kw):
                if "r" not in mode and Path(file).resolve().parent == path.parent.resolve():
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
                return builtins.open(file, mode, *args, **kw)

            monkeypatch.setattr(files, "open", refusing_open, raising=False)
    try:
        code = main([a.replace("{out}", str(flag)) for a in argv])
    finally:
        path.parent.chmod(0o700)
    err = capsys.readouterr().err
    check(code, err, tmp_path)
    assert code == expect, err
    if case in ("symlink", "dangling"):
        assert path.is_symlink() and os.readlink(path) == str(target)
        assert target.is_file() and target.read_text(errors="replace") != "old"
    elif case == "fifo":
        assert stat.S_ISFIFO(os.lstat(path).st_mode)
        assert "FIFO" in err and path.name in err
    elif case == "directory":
        assert path.is_dir() and "directory" in err
    elif case == "empty":
        assert "empty path" in err


def _subprocess(argv: list[str], cwd: Path, shell_prefix: str, redirect: str = "",
                extra_env: dict | None = None) -> tuple[int, str]:
    cmd = " ".join([shell_prefix, "exec", sys.executable, "-m", "amp_attention.cli",
                    *(f"'{a}'" for a in argv), redirect])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **(extra_env or {})}
    proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("command", ["se --spectrum", "phase-diagram --out"])
def test_a_file_size_limit_is_one_line(command, tmp_path):
    """ulimit -f 1 (1 KiB): Python ignores SIGXFSZ, so a write raises OSError(EFBIG)."""
    argv, file = COMMANDS[command]
    flag, _ = _out(tmp_path, file)
    # Numba's cache (the default one, which the rest of the run has mostly filled) is
    # completed by an unlimited run of the same command first, so that the limited run
    # fails on the command's own file: on a fresh install it would fail on the cache file
    # first (also one line, test_output_files), before any point is finished
    warm = tmp_path.parent / f"{tmp_path.name}-warm"
    warm.mkdir()
    warm_flag = warm / "spectrum.csv" if not file else warm / "run"
    code, err = _subprocess([a.replace("{out}", str(warm_flag)) for a in argv], warm, "",
                            "> /dev/null")
    assert code == 0, err
    code, err = _subprocess([a.replace("{out}", str(flag)) for a in argv], tmp_path,
                            "ulimit -f 1;", "> /dev/null")
    check(code, err, tmp_path)
    assert code == 2 and "File too large" in err and "Numba" not in err, err
    if command == "phase-diagram --out":
        points = list((tmp_path / "run" / "points").glob("*.json"))
        assert points and all(p.stat().st_size > 0 for p in points)  # finished: kept


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["se"], ["se", "--json"]])
def test_a_full_stdout_is_one_line(argv, tmp_path):
    code, err = _subprocess(argv, tmp_path, "", "> /dev/full")
    check(code, err, tmp_path)
    assert code == 2 and "cannot write standard output: No space left on device" in err, err
