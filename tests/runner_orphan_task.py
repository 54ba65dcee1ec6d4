"""Helper of tests/test_runner.py: a sweep whose tasks record their pid, then sleep."""

import os
import sys
import time
from pathlib import Path

from amp_attention.runner import run_tasks


def slow_task(out: str, i: int) -> int:
    Path(out, f"pid{i}").write_text(str(os.getpid()))
    time.sleep(30)
    Path(out, f"done{i}").write_text("finished")
    return i


if __name__ == "__main__":
    run_tasks(slow_task, [(sys.argv[1], i) for i in range(2)], workers=2)
