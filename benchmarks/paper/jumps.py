"""Where does the softmax prox minimiser jump?  The share of V_hat carried by the jumps
(docs/theory.md section 16.3) at the authors' stored SE states.

    python benchmarks/paper/jumps.py [--log2n 12]

At their stored (m, q, sigma) of data/SE/SE_kappa_0.5_lreg_*_noise_0.5.csv (rows 16, 64,
112: alpha 0.11, 0.28, 0.45; read from tests/data/paper_tables.json) and at the engine's
beta = 2 fixed point of docs/paper.md, the engine's channel integrals (2^log2n samples x 8
replicas) give V_hat by parts and by the Hessian trace; the script prints the jump share
(by parts - Hessian) / by parts with its replica standard error
(amp_attention.solvers.state_evolution.vhat_jump_share).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from amp_attention.paper import PaperSetting
from amp_attention.solvers.channel_integrals import MonteCarloChannel
from amp_attention.solvers.state_evolution import vhat_jump_share

ROOT = Path(__file__).resolve().parents[2]


def share(beta: float, lreg: float, alpha: float, m: float, q: float, V: float, log2n: int) -> None:
    ch = PaperSetting(alpha=alpha, lreg=lreg, beta=beta).problem().task.channel_object
    mc = MonteCarloChannel(ch, log2_n=log2n, replicas=8, seed=0)
    mc.se(m, q, V, 1.5, alpha)
    s, e = vhat_jump_share(mc.last_vhat_forms)
    f = mc.last_vhat_forms.mean(axis=0)
    print(f"beta {beta:g}  lreg {lreg:<7g} alpha {alpha:.4f}  V_hat by parts {f[0]:.6g}  "
          f"Hessian {f[1]:.6g}  jump share {s:+.4f} +- {e:.4f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log2n", type=int, default=12)
    args = ap.parse_args()
    # the engine's fixed point at beta = 2, lreg 0.01, alpha 0.605 (docs/paper.md)
    share(2.0, 0.01, 0.605, 1.7066, 2.4108, 4.096, args.log2n)
    tables = json.loads((ROOT / "tests/data/paper_tables.json").read_text())["tables"]
    for lreg in ("0.01", "0.002", "0.0001", "1e-05"):
        t = tables[f"data/SE/SE_kappa_0.5_lreg_{lreg}_noise_0.5.csv"]
        for i in (16, 64, 112):
            r = dict(zip(t["columns"], t["rows"][i]))
            share(1.0, float(lreg), r["alpha"], r["m"], r["q"], 2 * r["sigma"], args.log2n)


if __name__ == "__main__":
    main()
