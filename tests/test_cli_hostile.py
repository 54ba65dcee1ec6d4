"""The CLI under hostile conditions a new user met (issue 58): closed standard streams,
outputs equal to inputs, unbounded inputs, malformed files, values read into something
else.  Each test failed before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, *, close=(), cwd=None, env=None, timeout=300):
    """``python -m amp_attention ARGV`` with the descriptors in ``close`` closed (as the
    shell's ``2>&-`` does); returns (returncode, stdout, stderr) as text."""
    def preexec():
        for fd in close:
            os.close(fd)
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "amp_attention", *argv], cwd=cwd,
                          stdout=subprocess.PIPE if 1 not in close else None,
                          stderr=subprocess.PIPE if 2 not in close else None,
                          preexec_fn=preexec, env=full_env, timeout=timeout, text=True)
    return proc.returncode, proc.stdout or "", proc.stderr or ""


def _one_line(err: str) -> str:
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------ item 1: closed streams


def test_a_closed_stderr_still_delivers_the_results(tmp_path) -> None:
    code, out, _ = _run(["se", "--json", "--max-iter", "50"], close=(2,), cwd=tmp_path)
    assert code == 0
    assert json.loads(out)["converged"] is True


def test_a_closed_stderr_with_files_written(tmp_path) -> None:
    code, out, _ = _run(["se", "--spectrum", "s.csv"], close=(2,), cwd=tmp_path)
    assert code == 0
    assert "test_error" in out
    assert (tmp_path / "s.csv").stat().st_size > 0


@pytest.mark.parametrize("close", [(1,), (1, 2)])
def test_a_closed_stdout_is_refused_in_one_line(close, tmp_path) -> None:
    code, _, err = _run(["se", "--spectrum", "s.csv"], close=close, cwd=tmp_path)
    assert code == 2
    if 2 not in close:
        assert "standard output is closed" in _one_line(err)
    assert not (tmp_path / "s.csv").exists()  # refused before any work


def test_a_closed_stdin_changes_nothing(tmp_path) -> None:
    code, out, err = _run(["se", "--json", "--max-iter", "50"], close=(0,), cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["converged"] is True
