"""Copy the SE-type tables of the authors' repository into tests/data/paper_tables.json.

    python benchmarks/paper/extract_tables.py --repo PATH/TO/ExtensiveAttention

The tests of issue 30 (tests/test_paper_tables.py) compare the engine with these
rows and never read the authors' repository: the rows are kept as numbers, each
table with its source (repository, commit, path).  Tables: data/SE/*.csv,
data/spectra/{SE_*,rank_*,theory_spectra}.csv, data/cross_validation/{SE_L1,SE_L2,
interpolation}.csv (interpolation.csv has no header: rows are the noise levels
0, 0.01, 0.1, 0.5, 1 of the notebook's DDs, columns kappa on geomspace(0.01, 100, 200)).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
from pathlib import Path

from amp_attention.jsonsafe import json_safe

TABLES = [
    *(f"data/SE/SE_kappa_0.5_lreg_{x}_noise_0.5.csv"
      for x in ("0.01", "0.002", "0.001", "0.0005", "0.0001", "1e-05", "0.0")),
    "data/SE/SE_kappa_0.2_lreg_0.01_noise_0.5.csv",
    "data/SE/SE_kappa_0.8_lreg_0.01_noise_0.5.csv",
    "data/spectra/SE_kappa_0.5_lreg_0.01_noise_0.5.csv",
    *(f"data/spectra/rank_kappa_{k}_lreg_0.01_noise_0.5.csv" for k in ("0.2", "0.5", "0.8")),
    "data/spectra/theory_spectra.csv",
    "data/cross_validation/SE_L1_kappa_0.05_noise_0.05.csv",
    "data/cross_validation/SE_L2_kappa_0.05_noise_0.05.csv",
]
INTERPOLATION = "data/cross_validation/interpolation.csv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True, type=Path,
                    help="a clone of github.com/PenombraET/ExtensiveAttention")
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parents[2] / "tests/data/paper_tables.json")
    args = ap.parse_args()
    commit = subprocess.run(["git", "-C", str(args.repo), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    tables = {}
    for path in TABLES:
        with open(args.repo / path, newline="") as fh:
            rows = list(csv.reader(fh))
        tables[path] = {"columns": rows[0], "rows": [[float(v) for v in r] for r in rows[1:]]}
    with open(args.repo / INTERPOLATION, newline="") as fh:
        grid = [[float(v) for v in r] for r in csv.reader(fh)]
    tables[INTERPOLATION] = {"columns": None, "noise": [0.0, 0.01, 0.1, 0.5, 1.0],
                             "kappa": "geomspace(0.01, 100, 200)", "rows": grid}
    doc = {"source": "https://github.com/PenombraET/ExtensiveAttention", "commit": commit,
           "note": "rows copied verbatim (as floats); see tests/test_paper_tables.py",
           "tables": tables}
    args.out.write_text(json.dumps(json_safe(doc), separators=(",", ":"), allow_nan=False))
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB, {len(tables)} tables)")


if __name__ == "__main__":
    main()
