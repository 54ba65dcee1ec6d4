"""Benchmark: one full-batch Adam step of the tied-attention layer, ours vs PyTorch.

    python benchmarks/bench_train.py [--d 128 256] [--alpha 1] [--L 2] [--repeats 7]
                                     [--dtype float64 float32] [--threads 1]

Same data, same objective (THEORY 2: R = sum_mu 1/2 ||y_mu - softmax_rows(beta
h_mu)||^2 + lam d Tr S_W, S_W = W^T W / sqrt(p d), p = d), in each ``--dtype``, both
sides with ``--threads`` threads (ours: amp_attention.threads.thread_policy, i.e. that
many BLAS and Numba threads; PyTorch: torch.set_num_threads):

* ours: ``erm.objective_W`` (analytic gradient through S: one
  (nL x d) @ (d x d) GEMM forward, one adjoint GEMM) plus the Adam update of
  ``amp_attention.adam``; float32 means float32 tokens (the GEMMs over the data in
  float32, W, the gradient and the Adam moments float64: amp_attention.operators);
* PyTorch: the layer written as users write it, XW = X W^T, h = XW XW^T /
  sqrt(p d) - Tr(S_W) I / sqrt(d) per sample, row softmax, squared loss plus the
  penalty, ``loss.backward()`` and ``torch.optim.Adam.step()``, everything in the dtype.

Prints the median time of one step for each and the ratio (target from issues 5 and
18: ours not slower, in float64 and in float32).  PyTorch is used only here; without
it the comparison is skipped with a message.  The two gradients are compared once
(relative difference printed) so that both sides compute the same thing.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from machine import describe, load

from amp_attention.adam import AdamOptions, adam_update
from amp_attention.channels import channel_for
from amp_attention.data import generate_dataset
from amp_attention.erm import objective_W
from amp_attention.operators import tokens_in
from amp_attention.threads import thread_policy
from amp_attention.spec import Learner, Problem, Task, WishartTarget


def median_time(f, repeats: int) -> float:
    f()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--L", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dtype", nargs="+", default=["float64", "float32"],
                    choices=["float64", "float32"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    with thread_policy(args.threads):
        print(describe())
        run(args)


def run(args) -> None:
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch is not installed: timing ours only (pip install torch==2.13.0 for the comparison)")
    else:
        torch.set_num_threads(args.threads)
    lam, beta = 0.1, 1.0
    opts = AdamOptions()
    print(f"{'dtype':>8s} {'d':>4s} {'n':>7s} {'ours s/step':>12s} {'torch s/step':>13s} "
          f"{'torch/ours':>10s} {'grad rel.diff':>13s}")
    for dtype, d in [(t, d) for d in args.d for t in args.dtype]:
        p = Problem(Task("softmax", L=args.L, beta=beta, noise=0.1), WishartTarget(0.5),
                    Learner(1.0, lam), alpha=args.alpha)
        ch = channel_for(p.task)
        data = generate_dataset(p, d, 0, channel=ch)
        Xd = tokens_in(data.X, dtype)
        W = 0.3 * np.random.default_rng(1).standard_normal((d, d))
        state = {"W": W.copy(), "m": np.zeros_like(W), "v": np.zeros_like(W), "t": 0}

        def ours_step() -> None:
            _, G = objective_W(Xd, data.y, state["W"], ch, lam)
            state["t"] += 1
            state["W"], state["m"], state["v"] = adam_update(
                state["W"], G, state["m"], state["v"], state["t"], opts.lr, opts)

        t_ours = median_time(ours_step, args.repeats)
        t_torch = math.nan
        rel = math.nan
        if torch is not None:
            X = torch.from_numpy(Xd)
            y = torch.from_numpy(data.y.astype(dtype)).reshape(data.n, args.L, args.L)
            Wt = torch.tensor(W.astype(dtype), requires_grad=True)
            opt = torch.optim.Adam([Wt], lr=opts.lr, betas=(opts.beta1, opts.beta2), eps=opts.eps)
            c = math.sqrt(d * d)
            eye = torch.eye(args.L, dtype=X.dtype)

            def loss_fn():
                XW = X @ Wt.T                                   # (n, L, p)
                trS = (Wt * Wt).sum() / c
                h = (XW @ XW.transpose(1, 2) / c - trS * eye) / math.sqrt(d)
                A = torch.softmax(beta * h, dim=2)
                return 0.5 * ((y - A) ** 2).sum() + lam * d * trS

            def torch_step() -> None:
                opt.zero_grad()
                loss_fn().backward()
                opt.step()

            loss = loss_fn()
            loss.backward()
            _, G = objective_W(Xd, data.y, W, ch, lam)
            rel = float(np.linalg.norm(Wt.grad.numpy() - G) / np.linalg.norm(G))
            t_torch = median_time(torch_step, args.repeats)
        print(f"{dtype:>8s} {d:4d} {data.n:7d} {t_ours:12.4f} {t_torch:13.4f} "
              f"{t_torch / t_ours:10.2f} {rel:13.1e}  [{load()}]", flush=True)


if __name__ == "__main__":
    main()
