"""amp_attention.runner: order, errors, and workers that die with their parent (issue 16, item 5)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amp_attention.runner import run_tasks

HERE = Path(__file__).resolve().parent


def _square(x):
    return x * x


def _fails(x):
    raise ValueError(f"task {x} failed")


def test_results_come_back_in_task_order_wherever_they_run():
    tasks = [(i,) for i in range(7)]
    assert run_tasks(_square, tasks) == run_tasks(_square, tasks, workers=2) == [i * i for i in range(7)]
    seen = []
    run_tasks(_square, tasks, progress=lambda it, n: (seen.append(n), it)[1])
    assert seen == [7] and run_tasks(_square, []) == []


def test_a_failing_task_stops_the_sweep_with_its_error():
    with pytest.raises(ValueError, match="task"):
        run_tasks(_fails, [(1,), (2,)], workers=2)
    with pytest.raises(ValueError, match="workers"):
        run_tasks(_square, [(1,)], workers=-1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")   # zombies are dead


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and SIGKILL")
def test_workers_stop_when_their_parent_is_killed(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen([sys.executable, str(HERE / "runner_orphan_task.py"), str(tmp_path)],
                              env=env)
    try:
        deadline = time.time() + 60
        while len(list(tmp_path.glob("pid*"))) < 2:
            assert time.time() < deadline, "the workers did not start"
            time.sleep(0.2)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid*")]
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while any(_alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), "workers outlived their parent"
        assert not list(tmp_path.glob("done*"))
    finally:
        if parent.poll() is None:
            parent.kill()


def test_workers_after_parallel_numba_in_the_parent(tmp_path) -> None:
    """A softmax phase diagram computes its thresholds here (Numba parallel loops, GNU
    OpenMP) before its workers start; forked workers aborted ("fork() called from a
    process already using GNU OpenMP") and the pool broke.  Workers now start from a
    forkserver."""
    import subprocess
    import sys

    out = tmp_path / "pd"
    r = subprocess.run([sys.executable, "-m", "amp_attention.cli", "phase-diagram", "--channel",
                        "softmax", "--L", "2", "--alpha-range", "0.2", "0.4", "2", "--lam-range",
                        "0.05", "0.1", "2", "--mc-log2n", "8", "--workers", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "4/4 converged" in r.stdout and (out / "phase_diagram.npz").exists()


def square_record(x: float) -> dict:
    """A task of the checkpoint tests (module level: picklable for worker processes)."""
    return {"x": x, "square": x * x, "pid": os.getpid()}


def test_checkpoint_protocol_runs_only_what_is_missing_and_reads_everything_back(tmp_path):
    """run_checkpointed: the first call computes every task and saves each file; a second
    reads them all (0 computed); a refused record (accept) and a garbage file are
    recomputed (the garbage moved aside); without a store nothing is written."""
    from amp_attention.runner import Checkpoints, run_checkpointed

    store = Checkpoints(str(tmp_path / "points"), ("x", "square"), ("square",))
    tasks = {f"p{i}": (float(i),) for i in range(4)}
    records, computed = run_checkpointed(square_record, tasks, store)
    assert computed == 4 and [r["square"] for r in records.values()] == [0.0, 1.0, 4.0, 9.0]
    assert all(store.path(k).exists() for k in tasks)
    again, computed = run_checkpointed(square_record, tasks, store)
    assert computed == 0 and again == records
    store.path("p2").write_text("{\"x\": 2")  # truncated
    redo, computed = run_checkpointed(square_record, tasks, store,
                                      accept=lambda key, rec: key != "p1")
    assert computed == 2 and redo["p2"]["square"] == 4.0
    assert (tmp_path / "points" / "p2.json.unreadable").exists()
    none, computed = run_checkpointed(square_record, {"q": (3.0,)}, None)
    assert computed == 1 and none["q"]["square"] == 9.0 and not store.path("q").exists()


def test_checkpoints_are_written_by_the_worker_that_computed_them(tmp_path):
    """With a worker process the file is saved there (its pid), before the task returns."""
    from amp_attention.runner import Checkpoints, run_checkpointed

    store = Checkpoints(str(tmp_path), ("square",))
    records, computed = run_checkpointed(square_record, {"a": (2.0,)}, store, workers=1)
    assert computed == 1 and records["a"]["pid"] != os.getpid()
    assert json.loads(store.path("a").read_text())["pid"] == records["a"]["pid"]


def test_a_checkpoint_file_keeps_a_chain_in_one_file(tmp_path):
    """CheckpointFile: the same read/write as Checkpoints over one JSON object; a new
    instance (a rerun) reads what the last one wrote; a refused record reads as None."""
    from amp_attention.runner import CheckpointFile

    path = tmp_path / "curve.json"
    a = CheckpointFile(path)
    assert a.read("p0") is None and a.records() == {}
    a.write("p0", {"x": 1.0})
    a.write("p1", {"x": 2.0})
    b = CheckpointFile(path)
    assert b.records() == {"p0": {"x": 1.0}, "p1": {"x": 2.0}}
    assert b.read("p1") == {"x": 2.0} and b.read("p1", accept=lambda r: r["x"] < 2) is None
    assert json.loads(path.read_text()) == {"p0": {"x": 1.0}, "p1": {"x": 2.0}}
