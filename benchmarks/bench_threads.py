"""ERM at d = 128 with default settings on an idle machine and beside a CPU-bound neighbour
(issue 18: within 1.5x), under the default thread policy and under ``--threads N``
(amp_attention.threads; docs/performance.md "Threads").

    python benchmarks/bench_threads.py [--runs 3] [--threads 2] [--d 128]

Each configuration runs ``amp-attention erm --d D --json`` (linear channel, 4 seeds,
alpha = 0.5, lam = 0.1: the CLI defaults) in a fresh process, alternating idle and
loaded runs (A B A B ...); "loaded" keeps one core busy with a spinning Python process
for the duration of the run.  The environment's OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and
NUMBA_NUM_THREADS are removed so that only the policy decides.  Prints the median wall
times, the ratio loaded / idle per policy, and the machine (CPUs, load, BLAS, threads).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from machine import cli_command, describe, load, neighbour

def run(args: list[str], loaded: bool) -> float:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS",
                        "MKL_NUM_THREADS")}
    with neighbour(loaded):
        t0 = time.perf_counter()
        subprocess.run(cli_command() + args, env=env, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="the explicit policy compared")
    ap.add_argument("--d", type=int, default=128)
    args = ap.parse_args(argv)
    print(describe())
    base = ["erm", "--d", str(args.d), "--json"]
    policies = {"default (1 BLAS thread)": base,
                f"--threads {args.threads}": base + ["--threads", str(args.threads)]}
    for name, cmd in policies.items():
        idle, loaded = [], []
        for _ in range(args.runs):
            idle.append(run(cmd, False))
            loaded.append(run(cmd, True))
        mi, ml = statistics.median(idle), statistics.median(loaded)
        print(f"{name:26s} idle {mi:6.1f} s ({', '.join(f'{t:.1f}' for t in idle)})  "
              f"loaded {ml:6.1f} s ({', '.join(f'{t:.1f}' for t in loaded)})  "
              f"loaded / idle {ml / mi:.2f}  [{load()}]", flush=True)
    print("target: the default policy's loaded / idle <= 1.5")


if __name__ == "__main__":
    main()
