"""Head-diversity toolkit (issue 8): ensemble MSE vs HDI, MSE vs H at fixed D, weightings.

Writes docs/figures/heads_mse_vs_hdi.png (rotation sweep from identical to
orthogonal heads, with the bias^2 / variance / covariance decomposition),
docs/figures/heads_allocation.png (MSE vs H at D = 12 for three n; the argmin d_k*
vs n for three seeds with the law overlaid), docs/figures/heads_weighting.png (the
weighting schemes) and docs/figures/heads.json (every number and parameter),
and prints the markdown tables used in docs/heads.md.  About a minute on one
core:

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/heads_figure.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from amp_attention.heads import (NWKernel, NWTask, allocation_check, compare_weightings,
                                 random_heads, rotation_sweep)
from amp_attention.cli.heads import allocation_table, weighting_table
from amp_attention.jsonsafe import json_safe as _plain
from amp_attention.heads.plots import plot_allocation, plot_rotation, plot_weighting_schemes

ROOT = Path(__file__).resolve().parent.parent
FIG = ROOT / "docs" / "figures"

SEED = 0
# rotation sweep: H heads of width d_k in d_model = (H + 1) d_k
ROT = {"H": 4, "d_k": 2, "n": 200, "m": 200, "sigma": 1.0, "intrinsic_dim": 2, "draws": 30,
       "targets": 40, "t": [float(t) for t in np.linspace(0, 1, 11)]}
ROT_KERNELS = {"softmax, c = 1": NWKernel("softmax"),
               "softmax, c = 0.25": NWKernel("softmax", tau_factor=0.25)}
# allocation: D = d_model = 12, H over the divisors of 12
ALLOC = {"D": 12, "d_model": 12, "ns": [250, 1000, 4000], "m": 200, "sigma": 1.0,
         "intrinsic_dim": 2, "draws": 16, "targets": 8}
#: independent replicates of the allocation check: seed j draws its own training sets
#: (simulation seed j) and its own targets (task seeds 1000 j .. 1000 j + targets - 1)
ALLOC_SEEDS = (0, 1, 2)
# rotation per seed: one target, MSE at identical (t = 0) vs orthogonal (t = 1) heads
ROT_SEEDS = tuple(range(10))
ROT_SEED_SETUP = {"targets": 1, "draws": 30}
ALLOC_KERNELS = {"softmax, c = 1": NWKernel("softmax"),
                 "softmax, c = 0.1": NWKernel("softmax", tau_factor=0.1)}
# weighting: H Haar-random heads ranked on n_val validation points per draw
WEIGHT = {"H": 6, "d_k": 2, "d_model": 12, "n": 400, "n_val": 200, "m": 200, "sigma": 1.0,
          "intrinsic_dim": 2, "draws": 30, "targets": 16, "ratio": 0.5, "head_seed": 0}
WEIGHT_KERNELS = {"softmax, c = 1": NWKernel("softmax"),
                  "softmax, c = 0.25": NWKernel("softmax", tau_factor=0.25)}


def rotation_table(label: str, rows: list[dict]) -> str:
    lines = [f"Rotation sweep, {label} (mean over {ROT['targets']} targets x {ROT['draws']} draws)",
             "", "| t | HDI | ensemble MSE | +- | bias^2 | sum w^2 Var | sum w w' Cov | "
             "mean head MSE | mean head bias^2 |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['t']:.1f} | {r['hdi']:.3f} | {r['mse']:.4f} | {r['mse_stderr']:.4f} | "
                     f"{r['bias2']:.4f} | {r['variance']:.4f} | {r['covariance']:.4f} | "
                     f"{np.mean(r['head_mse']):.4f} | {np.mean(r['head_bias2']):.4f} |")
    return "\n".join(lines)


def allocation_mse_table(label: str, sweeps: list[dict]) -> str:
    Hs = [r["H"] for r in sweeps[0]["rows"]]
    D = sweeps[0]["D"]
    lines = [f"Ensemble MSE vs H at D = {D}, {label} (+- paired standard error vs the argmin)", "",
             "| n | " + " | ".join(f"H={h} (d_k={D // h})" for h in Hs) + " |",
             "| ---: |" + " ---: |" * len(Hs)]
    for s in sweeps:
        cells = [f"{r['mse']:.4f}" + (f" +- {r['paired_stderr']:.4f}" if r["H"] != s["argmin_H"]
                                      else " (min)") for r in s["rows"]]
        lines.append(f"| {s['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    t0 = time.perf_counter()
    FIG.mkdir(parents=True, exist_ok=True)
    record: dict = {"params": {"seed": SEED, "rotation": ROT, "allocation": ALLOC,
                               "weighting": WEIGHT}}

    rot_task = NWTask(d_model=(ROT["H"] + 1) * ROT["d_k"], n=ROT["n"], m=ROT["m"],
                      sigma=ROT["sigma"], intrinsic_dim=ROT["intrinsic_dim"], n_val=0, seed=SEED)
    curves = {}
    for label, kernel in ROT_KERNELS.items():
        pts = rotation_sweep(rot_task, ROT["H"], ROT["d_k"], ROT["t"], draws=ROT["draws"],
                             kernel=kernel, seed=SEED,
                             target_seeds=range(SEED, SEED + ROT["targets"]))
        curves[label] = [p.to_dict() for p in pts]
        print(rotation_table(label, curves[label]), "\n", flush=True)
    per_seed = []
    for j in ROT_SEEDS:
        pts = rotation_sweep(rot_task, ROT["H"], ROT["d_k"], [0.0, 1.0],
                             draws=ROT_SEED_SETUP["draws"], kernel=ROT_KERNELS["softmax, c = 1"],
                             seed=j, target_seeds=range(1000 * j,
                                                        1000 * j + ROT_SEED_SETUP["targets"]))
        a, b = pts[0].to_dict(), pts[-1].to_dict()
        per_seed.append({"seed": j, "mse_identical": a["mse"], "mse_orthogonal": b["mse"],
                         "stderr": float(np.hypot(a["mse_stderr"], b["mse_stderr"])),
                         "direction": "falls" if b["mse"] < a["mse"] else "rises"})
        print(f"rotation seed {j}: MSE {a['mse']:.4f} (HDI 0) -> {b['mse']:.4f} (HDI 1), "
              f"{per_seed[-1]['direction']}", flush=True)
    record["rotation"] = {"task": rot_task.to_dict(),
                          "kernels": {k: v.to_dict() for k, v in ROT_KERNELS.items()},
                          "curves": curves,
                          "per_seed": {"setup": ROT_SEED_SETUP, "kernel": "softmax, c = 1",
                                       "rows": per_seed}}
    plot_rotation(curves, FIG / "heads_mse_vs_hdi.png",
                  title=f"uniform ensemble of H = {ROT['H']} NW heads, d_k = {ROT['d_k']}, "
                        f"d_model = {rot_task.d_model}, n = {ROT['n']}, sigma = {ROT['sigma']:g}, "
                        f"s = {ROT['intrinsic_dim']}; tau = c sqrt(d_k); "
                        f"{ROT['targets']} targets x {ROT['draws']} draws")

    alloc_task = NWTask(d_model=ALLOC["d_model"], n=ALLOC["ns"][0], m=ALLOC["m"],
                        sigma=ALLOC["sigma"], intrinsic_dim=ALLOC["intrinsic_dim"], n_val=0,
                        seed=SEED)
    panels, tables, replicates, replicate_tables = {}, {}, {}, {}
    for label, kernel in ALLOC_KERNELS.items():
        res = allocation_check(alloc_task, ALLOC["D"], ALLOC["ns"], draws=ALLOC["draws"],
                               kernel=kernel, seed=SEED,
                               target_seeds=range(SEED, SEED + ALLOC["targets"]))
        panels[label] = [s.to_dict() for s in res.sweeps]
        tables[label] = res.table
        print(allocation_mse_table(label, panels[label]), "\n", flush=True)
        print(f"{label}: " + allocation_table(res.table, res.law), "\n", flush=True)
        replicates[label], replicate_tables[label] = [], []
        for j in ALLOC_SEEDS:
            rep = allocation_check(alloc_task, ALLOC["D"], ALLOC["ns"], draws=ALLOC["draws"],
                                   kernel=kernel, seed=j,
                                   target_seeds=range(1000 * j, 1000 * j + ALLOC["targets"]))
            replicates[label].append([s.to_dict() for s in rep.sweeps])
            replicate_tables[label].append(rep.table)
            print(f"{label}, replicate seed {j}: argmin d_k = "
                  f"{[r['argmin_dk'] for r in rep.table]}, change x"
                  f"{rep.table[-1]['empirical_ratio']:.3f} (law x{rep.table[-1]['law_ratio']:.3f})",
                  flush=True)
    record["allocation"] = {"task": alloc_task.to_dict(),
                            "kernels": {k: v.to_dict() for k, v in ALLOC_KERNELS.items()},
                            "sweeps": panels, "tables": tables, "law": res.law,
                            "replicates": {"seeds": list(ALLOC_SEEDS),
                                           "target_seeds": "1000 j .. 1000 j + targets - 1",
                                           "sweeps": replicates, "tables": replicate_tables},
                            "label": "empirical check, not a proof"}

    w_task = NWTask(d_model=WEIGHT["d_model"], n=WEIGHT["n"], m=WEIGHT["m"],
                    sigma=WEIGHT["sigma"], intrinsic_dim=WEIGHT["intrinsic_dim"],
                    n_val=WEIGHT["n_val"], seed=SEED)
    heads = random_heads(WEIGHT["d_model"], WEIGHT["H"], WEIGHT["d_k"], seed=WEIGHT["head_seed"])
    weighting = {}
    for label, kernel in WEIGHT_KERNELS.items():
        res_w = compare_weightings(w_task, heads, draws=WEIGHT["draws"], kernel=kernel,
                                   ratio=WEIGHT["ratio"], seed=SEED,
                                   target_seeds=range(SEED, SEED + WEIGHT["targets"]))
        weighting[label] = res_w.to_dict()
        print(f"Weighting schemes, {label} (H = {WEIGHT['H']} Haar-random heads, ranked on "
              f"{WEIGHT['n_val']} validation points per draw)\n")
        print(weighting_table(res_w), "\n", flush=True)
        slots = res_w.schemes["uniform"].head_mse
        print(f"  MSE of the head in rank slot k (best first): "
              f"{', '.join(f'{v:.4f}' for v in slots)}\n", flush=True)
    record["weighting"] = {"task": w_task.to_dict(),
                           "kernels": {k: v.to_dict() for k, v in WEIGHT_KERNELS.items()},
                           "results": weighting}
    plot_allocation(panels, FIG / "heads_allocation.png", intrinsic_dim=ALLOC["intrinsic_dim"],
                    replicates=replicates,
                    title=f"uniform ensembles of H orthogonal heads, D = H d_k = {ALLOC['D']} = "
                          f"d_model, s = {ALLOC['intrinsic_dim']}, sigma = {ALLOC['sigma']:g}, "
                          f"{ALLOC['targets']} targets x {ALLOC['draws']} draws per seed; "
                          f"tau = c sqrt(d_k)")
    plot_weighting_schemes({k: v["schemes"] for k, v in weighting.items()},
                           FIG / "heads_weighting.png",
                           title=f"weighting schemes: H = {WEIGHT['H']} Haar-random heads, "
                                 f"d_k = {WEIGHT['d_k']}, d_model = {WEIGHT['d_model']}, "
                                 f"n = {WEIGHT['n']},\nranked on {WEIGHT['n_val']} validation "
                                 f"points; {WEIGHT['targets']} targets x {WEIGHT['draws']} draws")
    record["seconds"] = time.perf_counter() - t0
    (FIG / "heads.json").write_text(json.dumps(_plain(record), indent=1, allow_nan=False) + "\n")
    print(f"wrote docs/figures/heads_mse_vs_hdi.png, heads_allocation.png, heads_weighting.png "
          f"and heads.json "
          f"in {record['seconds']:.0f} s")


if __name__ == "__main__":
    main()
