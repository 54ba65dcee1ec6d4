"""Output files (issue 29, items 1, 5, 6 and 12): the atomic writers replace regular files
only (symlinks followed, anything else refused), leave no temporary file behind when a
write fails, every JSON the project writes is strict (no NaN / Infinity), and readers of
checkpoints resume from values that strict JSON stores as null."""

from __future__ import annotations

import json
import math
import os
import socket
import stat
from pathlib import Path

import numpy as np
import pytest

from amp_attention.cli import main
from amp_attention.files import (NotRegularFileError, atomic_save_figure, atomic_write_csv,
                                 atomic_write_json, atomic_write_npz, atomic_write_text,
                                 read_checkpoint)
from amp_attention.jsonsafe import as_float, nonfinite_notes


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (RFC 8259)."""
    def refuse(constant):
        raise ValueError(f"non-strict JSON constant {constant}")
    return json.loads(text, parse_constant=refuse)


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".amp-tmp" in p.name or ".tmp" in p.name]


WRITERS = {
    "text": lambda p: atomic_write_text(p, "new\n"),
    "json": lambda p: atomic_write_json(p, {"x": 1.0}),
    "csv": lambda p: atomic_write_csv(p, ["a"], [[1]]),
    "npz": lambda p: atomic_write_npz(p, a=np.arange(3)),
}


# ------------------------------------------------------------ item 1: what a write replaces

@pytest.mark.parametrize("kind", list(WRITERS))
def test_a_symlink_is_followed_and_stays_a_link(tmp_path, kind):
    target = tmp_path / "data" / "target"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link"
    link.symlink_to(target)
    WRITERS[kind](link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.is_file() and target.read_bytes() != b"old"
    assert temporaries(tmp_path) == []


def test_a_dangling_symlink_creates_its_target(tmp_path):
    """Decision (docs/cli.md "Output files"): the file the link names is created."""
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "new.json")
    atomic_write_json(link, {"a": 1})
    assert link.is_symlink() and strict_loads((tmp_path / "new.json").read_text()) == {"a": 1}
    assert temporaries(tmp_path) == []


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    path.chmod(0o640)
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _socket(path: Path) -> Path:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return path


@pytest.mark.parametrize("make, kind, check", [
    (_fifo, "FIFO", stat.S_ISFIFO), (_directory, "directory", stat.S_ISDIR),
    (_socket, "socket", stat.S_ISSOCK)])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_path_that_is_not_a_regular_file_is_refused_and_untouched(tmp_path, make, kind,
                                                                     check, writer):
    path = make(tmp_path / "out")
    with pytest.raises(NotRegularFileError, match=kind) as info:
        WRITERS[writer](path)
    assert info.value.filename == str(path)
    assert check(os.lstat(path).st_mode)
    assert temporaries(tmp_path) == []
    # through a symlink: refused too, naming the link and where it points
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(NotRegularFileError, match="where the link points"):
        WRITERS[writer](link)
    assert check(os.lstat(path).st_mode) and link.is_symlink()


def test_a_fifo_checkpoint_is_refused_not_read(tmp_path):
    """read_checkpoint on a FIFO would block for ever; it is refused like a write."""
    fifo = _fifo(tmp_path / "point.json")
    with pytest.raises(NotRegularFileError):
        read_checkpoint(fifo)


def test_figures_are_saved_atomically_through_links(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    target = tmp_path / "real.png"
    link = tmp_path / "fig.png"
    link.symlink_to(target)
    atomic_save_figure(fig, link, dpi=50)
    assert link.is_symlink() and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    atomic_save_figure(fig, tmp_path / "fig.pdf")
    assert (tmp_path / "fig.pdf").read_bytes()[:4] == b"%PDF"
    with pytest.raises(NotRegularFileError):
        atomic_save_figure(fig, _fifo(tmp_path / "pipe.png"))
    plt.close(fig)
    assert temporaries(tmp_path) == []


# ------------------------------------------------------------ item 5: failed writes

@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_removes_its_temporary_and_keeps_the_old_file(tmp_path, exc):
    path = tmp_path / "table.csv"
    path.write_text("finished\n")

    def rows():
        yield [1]
        raise exc

    with pytest.raises(type(exc)) as info:
        atomic_write_csv(path, ["a"], rows())
    if isinstance(exc, OSError):
        assert info.value.filename == str(path)  # named by the path asked for
    assert path.read_text() == "finished\n"
    assert temporaries(tmp_path) == []


def test_a_missing_directory_is_named(tmp_path):
    path = tmp_path / "absent" / "x.json"
    with pytest.raises(OSError) as info:
        atomic_write_json(path, {})
    assert info.value.filename == str(path) and info.value.strerror


def test_main_turns_a_write_error_into_one_line(capsys, monkeypatch, tmp_path):
    from amp_attention.cli import se

    def fails(args):
        atomic_write_text(tmp_path / "absent" / "x.csv", "x")

    monkeypatch.setattr(se, "run", fails)  # add_parser binds se.run when main builds it
    code = main(["se"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"amp-attention: error: cannot write {tmp_path / 'absent' / 'x.csv'}: ")
    assert "No such file or directory" in err
    assert temporaries(tmp_path) == []


# ------------------------------------------------------------ item 12: recovery notices

def test_an_unreadable_checkpoint_gives_one_plain_notice(tmp_path, capsys, recwarn):
    path = tmp_path / "p.json"
    path.write_text('{"a": ')
    assert read_checkpoint(path, ("a",)) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(recwarn) == 0
    assert err.startswith(f"amp-attention: notice: {path} is not a readable result (not JSON")
    assert err.rstrip().endswith("moved to p.json.unreadable, computing it again")
    assert (tmp_path / "p.json.unreadable").read_text() == '{"a": '


# ------------------------------------------------------------ item 6: strict JSON

def test_json_writer_is_strict_and_readers_get_nan_back(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_json(path, {"a": math.nan, "b": [math.inf, 1.0, -math.inf],
                             "c": np.float64("nan"), "d": np.array([1.0, np.nan])})
    data = strict_loads(path.read_text())
    assert data == {"a": None, "b": [None, 1.0, None], "c": None, "d": [1.0, None]}
    assert math.isnan(as_float(data["a"])) and as_float(data["b"][1]) == 1.0


def test_nonfinite_notes_say_what_the_null_was():
    row = {"alpha_interp": math.inf, "alpha_interp_detail": {"message": "noiseless"},
           "alpha_PR": 0.42, "alpha_PR_bayes": math.nan, "other": None}
    out = nonfinite_notes(row, ("alpha_interp", "alpha_PR", "alpha_PR_bayes", "other"))
    assert out["alpha_interp"] is None and out["alpha_interp_note"] == "infinite: noiseless"
    assert out["alpha_PR"] == 0.42 and "alpha_PR_note" not in out
    assert out["alpha_PR_bayes"] is None and out["alpha_PR_bayes_note"] == "NaN"
    assert "other_note" not in out and row["alpha_interp"] == math.inf  # a copy


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code in (0, 3), err
    return out


def test_every_json_the_cli_writes_is_strict(tmp_path, capsys, monkeypatch):
    """Cheap runs of every command that writes JSON (files and --json stdout); the
    noiseless default makes alpha_interp infinite, one seed makes NaN standard errors."""
    monkeypatch.chdir(tmp_path)
    printed = [
        _run(capsys, "se", "--json"),
        _run(capsys, "se", "--json", "--estimator", "bayes"),
        _run(capsys, "thresholds", "--json"),
        _run(capsys, "thresholds", "--json", "--kappa-grid", "1"),
    ]
    _run(capsys, "thresholds", "--kappa-grid", "1", "--out", "th")
    _run(capsys, "phase-diagram", "--alpha-range", "0.2", "0.6", "2", "--lam-range", "0.1",
         "1", "2", "--workers", "0", "--out", "pd")
    _run(capsys, "validate", "--alphas", "0.4", "--d", "8", "--seeds", "1", "--out", "v")
    _run(capsys, "quickstart", "--no-erm", "--out", "q")
    _run(capsys, "compare", "--alpha-range", "0.4", "0.4", "1", "--out", "c")
    for text in printed:
        strict_loads(text)
    written = sorted(tmp_path.rglob("*.json"))
    names = {p.name for p in written}
    assert {"thresholds.json", "phase_diagram.json", "validate.json", "quickstart.json",
            "compare.json"} <= names
    for path in written:
        try:
            strict_loads(path.read_text())
        except ValueError as exc:
            pytest.fail(f"{path}: {exc}")
    assert temporaries(tmp_path) == []
    th = strict_loads(printed[2])
    assert th["alpha_interp"] is None and th["alpha_interp_note"].startswith("infinite: ")
    pd = strict_loads((tmp_path / "pd" / "phase_diagram.json").read_text())
    assert pd["thresholds"]["alpha_interp"] is None
    assert pd["thresholds"]["alpha_interp_note"].startswith("infinite: noiseless labels")
    v = strict_loads((tmp_path / "v" / "validate.json").read_text())
    assert any(row["test_error_stderr"] is None for row in v["table"])  # one seed


# ------------------------------------------------------------ item 6: resuming from null

def test_phase_diagram_resumes_points_holding_null(tmp_path):
    """A point that diverged is stored with null (strict JSON); the resumed diagram
    reads it back as NaN: assembled, not recomputed, the other branch reported."""
    from amp_attention.experiments.phase_diagram import (FIELDS, PhaseDiagramPlan,
                                                         load_phase_diagram, point_file,
                                                         run_phase_diagram)
    from amp_attention.spec import Learner, Problem, Task, WishartTarget

    problem = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1),
                      alpha=0.5)
    plan = PhaseDiagramPlan(problem, (0.3, 0.6), (0.1, 1.0))
    out = tmp_path / "pd"
    run_phase_diagram(plan, out, workers=0)
    up = point_file(out, 0, "up", 1)
    rec = json.loads(up.read_text())
    rec.update({f: math.nan for f in FIELDS}, converged=False, residual=math.inf,
               status="diverged: test")
    atomic_write_json(up, rec)
    text = up.read_text()
    assert "NaN" not in text and "Infinity" not in text and json.loads(text)["m"] is None
    down = point_file(out, 1, "down", 0)
    rec = json.loads(down.read_text())
    rec.update({f: None for f in FIELDS}, converged=False, residual=None, status="diverged")
    up2 = point_file(out, 1, "up", 0)
    rec2 = json.loads(up2.read_text())
    rec2.update({f: None for f in FIELDS}, converged=False, residual=None, status="diverged")
    atomic_write_json(down, rec)
    atomic_write_json(up2, rec2)
    meta = run_phase_diagram(plan, out, workers=0)  # the same plan: resumed
    assert meta["computed"] == 0
    _, arrays = load_phase_diagram(out)
    assert arrays["converged"][1, 0] and np.isfinite(arrays["test_error"][1, 0])  # down only
    assert not arrays["converged"][0, 1] and np.isnan(arrays["test_error"][0, 1])
    strict_loads((out / "phase_diagram.json").read_text())


def test_validate_resumes_runs_holding_null(tmp_path):
    """validate.json with one seed holds null standard errors; a run file with null
    errors (a diverged run) resumes as NaN instead of failing the table."""
    from amp_attention.adam import AdamOptions
    from amp_attention.experiments.validate import ValidationPlan, run_file, run_validation
    from amp_attention.spec import Learner, Problem, Task, WishartTarget

    problem = Problem(Task("linear", L=1, noise=0.5), WishartTarget(0.5), Learner(1.0, 0.1),
                      alpha=0.4)
    plan = ValidationPlan(problem, (0.4,), (8, 10), seeds=1, adam=AdamOptions(max_iter=200),
                          theory_points=2)
    out = tmp_path / "v"
    first = run_validation(plan, out)
    assert first["trained"] == 2
    saved = strict_loads((out / "validate.json").read_text())
    assert all(r["test_error_stderr"] is None for r in saved["table"] if r["d"] in ("8", "10"))
    path = run_file(out, 0.4, 10, 0)
    rec = json.loads(path.read_text())
    rec.update(test_error=math.nan, train_error=math.inf, matrix_mse=None)
    atomic_write_json(path, rec)
    again = run_validation(plan, out)
    assert again["trained"] == 0
    row = next(r for r in again["table"] if r["d"] == "10")
    assert math.isnan(row["test_error"]) and math.isnan(row["matrix_mse"])
    row8 = next(r for r in again["table"] if r["d"] == "8")
    assert row8["test_error"] == next(r for r in first["table"] if r["d"] == "8")["test_error"]
    strict_loads((out / "validate.json").read_text())
