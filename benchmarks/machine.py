"""What a benchmark ran under: CPUs, load, BLAS build and thread counts (printed by every
benchmark beside its figures, because on a shared machine they decide the numbers)."""

from __future__ import annotations

import contextlib
import os


def blas_description() -> str:
    """The BLAS libraries loaded in this process with their thread counts (threadpoolctl
    when installed, else numpy's build record)."""
    try:
        from threadpoolctl import threadpool_info

        import numpy  # noqa: F401  (loads numpy's BLAS before the inventory)


        libs = [f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads, "
                f"{os.path.basename(i.get('filepath', ''))})"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        if libs:
            return "; ".join(libs)
    except ImportError:
        pass
    import numpy as np

    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    env = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    return f"{blas.get('name')} {blas.get('version')} (OPENBLAS_NUM_THREADS={env})"


def describe() -> str:
    """One line: CPUs, 1-minute load average, BLAS, Numba threads."""
    import numba

    return (f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; BLAS: "
            f"{blas_description()}; Numba: {numba.get_num_threads()} threads "
            f"({numba.config.THREADING_LAYER} layer)")


def cli_command() -> list[str]:
    """The ``amp-attention`` command of this interpreter's environment."""
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("amp-attention")
    return [str(script)] if script.exists() else [
        sys.executable, "-c", "import sys; from amp_attention.cli import main; sys.exit(main())"]


@contextlib.contextmanager
def neighbour(busy: bool = True):
    """With ``busy``: a CPU-bound Python process spinning beside the body (one core of
    the machine taken, as by another user's job); nothing otherwise."""
    import subprocess
    import sys
    import time

    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let it get scheduled
        yield
    finally:
        spinner.kill()
        spinner.wait()


def load() -> str:
    """The 1-, 5- and 15-minute load averages, for a line of a table."""
    return "load " + "/".join(f"{v:.2f}" for v in os.getloadavg())
