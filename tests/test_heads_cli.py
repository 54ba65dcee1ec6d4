"""`amp-attention heads`: the modes run in-process through main(argv) and write
their files with every parameter recorded; bad input is one line, exit code 2."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amp_attention.cli import main

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def read_outputs(out: Path, mode: str) -> tuple[dict, list[dict]]:
    payload = json.loads((out / f"heads_{mode}.json").read_text())
    with open(out / f"heads_{mode}.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert (out / f"heads_{mode}.png").read_bytes()[:8] == PNG_MAGIC
    return payload, rows


def test_heads_help_explains_the_symbols(capsys) -> None:
    code, out, _ = run(capsys, "heads", "--help")
    assert code == 0
    for symbol in ("H ", "d_k", "D ", "HDI", "tau", "sigma", "n_val", "d_model",
                   "bias^2", "Cov_hh'", "hdi", "rotation", "allocation", "weighting"):
        assert symbol in out, symbol
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "heads" in out


def test_rotation_writes_files_with_parameters(capsys, tmp_path: Path) -> None:
    code, out, err = run(capsys, "heads", "rotation", "--H", "3", "--dk", "2", "--n", "40",
                         "--m", "15", "--sigma", "0.8", "--draws", "3", "--targets", "2",
                         "--t-points", "4", "--seed", "5", "--kernel", "gaussian",
                         "--tau-factor", "0.5", "--out", str(tmp_path))
    assert code == 0, err
    payload, rows = read_outputs(tmp_path, "rotation")
    p = payload["params"]
    assert p["H"] == 3 and p["d_k"] == 2 and p["draws"] == 3 and p["targets"] == 2
    assert p["seed"] == 5 and p["target_seeds"] == [5, 6]
    assert p["task"] == {"d_model": 8, "n": 40, "m": 15, "sigma": 0.8, "intrinsic_dim": 2,
                         "omega": 1.0, "n_val": 0, "seed": 5}
    assert p["kernel"] == {"kind": "gaussian", "tau": None, "bandwidth": None, "tau_factor": 0.5}
    assert p["t"] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    assert len(rows) == 4 and len(payload["rows"]) == 4
    for r in rows:
        total = float(r["bias2"]) + float(r["variance"]) + float(r["covariance"])
        assert total == pytest.approx(float(r["mse"]), rel=1e-9)
    assert float(rows[0]["hdi"]) == pytest.approx(0.0, abs=1e-12)
    assert float(rows[-1]["hdi"]) == pytest.approx(1.0, abs=1e-12)
    assert "HDI" in out  # the table went to stdout


def test_allocation_and_weighting_write_files(capsys, tmp_path: Path) -> None:
    code, out, err = run(capsys, "heads", "allocation", "--D", "4", "--n-values", "30", "60",
                         "--m", "10", "--draws", "3", "--targets", "1", "--out",
                         str(tmp_path / "a"))
    assert code == 0, err
    payload, rows = read_outputs(tmp_path / "a", "allocation")
    assert payload["label"] == "empirical check, not a proof"
    assert payload["params"]["D"] == 4 and payload["params"]["n_values"] == [30, 60]
    assert [(int(r["n"]), int(r["H"])) for r in rows] == [(n, h) for n in (30, 60)
                                                           for h in (1, 2, 4)]
    assert [t["n"] for t in payload["table"]] == [30, 60]
    assert "empirical check, not a proof" in out

    code, out, err = run(capsys, "heads", "weighting", "--H", "3", "--dk", "2", "--n", "40",
                         "--n-val", "20", "--m", "10", "--draws", "3", "--targets", "1",
                         "--ratio", "0.3", "--json", "--out", str(tmp_path / "w"))
    assert code == 0, err
    printed = json.loads(out)  # --json: exactly the JSON that was written
    payload, rows = read_outputs(tmp_path / "w", "weighting")
    assert printed == payload
    assert payload["params"]["ratio"] == 0.3 and payload["params"]["task"]["n_val"] == 20
    assert [r["scheme"] for r in rows] == ["uniform", "geometric", "fibonacci"]
    geo = payload["schemes"]["geometric"]["weights"]
    assert geo[1] / geo[0] == pytest.approx(0.3)


def test_hdi_from_stacked_file(capsys, tmp_path: Path) -> None:
    # three heads on disjoint coordinate blocks, stacked as (d_model, H*d_k): HDI = 1
    W = np.zeros((7, 6))
    W[:6, :6] = np.diag(np.arange(1.0, 7.0))
    np.save(tmp_path / "w.npy", W)
    code, out, err = run(capsys, "heads", "hdi", str(tmp_path / "w.npy"), "--heads", "3",
                         "--layout", "columns", "--json", "--out", str(tmp_path / "o"))
    assert code == 0, err
    payload = json.loads(out)
    assert payload["hdi"] == pytest.approx(1.0)
    assert payload["params"]["H"] == 3 and payload["params"]["d_k"] == 2
    assert np.allclose(payload["principal_angles_deg"][0][1], [90, 90])
    saved, rows = read_outputs(tmp_path / "o", "hdi")
    assert saved["hdi"] == payload["hdi"] and len(rows) == 3


@pytest.mark.parametrize("argv, needles", [
    (["heads", "rotation", "--sigma", "-1"], ["argument --sigma", "[0, inf)"]),
    # issue 29: 1e200 ran with every MSE inf and NumPy overflow warnings
    (["heads", "rotation", "--sigma", "1e200"], ["argument --sigma", "<= 1e+06", "float64"]),
    (["heads", "allocation", "--sigma", "2e6"], ["argument --sigma", "<= 1e+06"]),
    (["heads", "weighting", "--sigma", "1e78"], ["argument --sigma", "<= 1e+06"]),
    (["heads", "rotation", "--H", "3", "--dk", "2", "--d-model", "7"], ["argument --d-model", ">= (--H + 1) x --dk = (3 + 1) x 2 = 8"]),
    (["heads", "rotation", "--draws", "1"], ["argument --draws", ">= 2"]),
    (["heads", "weighting", "--ratio", "1"], ["argument --ratio", "(0, 1)"]),
    (["heads", "allocation", "--D", "12", "--d-model", "8"], ["argument --D", "must be <= --d-model = 8"]),
    (["heads", "rotation", "--tau", "-2"], ["argument --tau", "[1e-100, 1e+100]"]),
    (["heads", "rotation", "--tau", "5e-324"], ["argument --tau", "[1e-100, 1e+100]"]),
    (["heads", "allocation", "--D", "56210"], ["argument --d-model", "GiB", "--D", "--allow-large"]),
    (["heads", "allocation", "--d-model=-5"], ["argument --d-model", ">= 1"]),
    (["heads", "weighting", "--head-seed=-1"], ["argument --head-seed", ">= 0"]),
    (["heads", "rotation", "--intrinsic-dim", "20"], ["argument --intrinsic-dim", "[1, d_model]"]),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needles) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-attention: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, err)


def test_hdi_bad_files(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "heads", "hdi", str(tmp_path / "missing.npy"))
    assert code == 2 and "argument FILE" in err
    np.save(tmp_path / "flat.npy", np.ones((4, 6)))
    code, _, err = run(capsys, "heads", "hdi", str(tmp_path / "flat.npy"), "--heads", "3")
    assert code == 2 and "argument --layout: layout is required for a 2-d array" in err
    code, _, err = run(capsys, "heads", "hdi", str(tmp_path / "flat.npy"), "--layout", "columns")
    assert code == 2 and "argument --heads" in err
    code, _, err = run(capsys, "heads", "hdi", str(tmp_path / "flat.npy"), "--heads", "3",
                       "--layout", "columns")
    assert code == 2 and "rank" in err  # all-ones heads are rank deficient
    # not an array: one line, no invitation to unpickle
    (tmp_path / "model.pt").write_bytes(b"\x80\x04\x95 pickled torch checkpoint")
    code, out, err = run(capsys, "heads", "hdi", str(tmp_path / "model.pt"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "argument FILE" in err and "never loaded" in err and "allow_pickle" not in err


def test_hdi_damaged_npz_archives_are_one_line_exit_2(capsys, tmp_path: Path) -> None:
    """Issue 29: a truncated .npz gave a BadZipFile traceback, an archive whose member is
    not a .npy an AttributeError traceback."""
    import zipfile

    good = tmp_path / "good.npz"
    np.savez(good, w=np.random.default_rng(0).standard_normal((3, 8, 2)))
    data = good.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(data[:len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF  # inside the member's data: bad CRC
    (tmp_path / "crc.npz").write_bytes(bytes(flipped))
    with zipfile.ZipFile(tmp_path / "text.npz", "w") as z:
        z.writestr("w.txt", "not an array")
    with zipfile.ZipFile(tmp_path / "fake.npz", "w") as z:
        z.writestr("w.npy", "no NumPy header here")
    cases = {"truncated.npz": "damaged .npz archive", "crc.npz": "damaged .npz archive",
             "text.npz": "member 'w.txt' is not a .npy array",
             "fake.npz": "member 'w' is not a .npy array"}
    for name, needle in cases.items():
        code, out, err = run(capsys, "heads", "hdi", str(tmp_path / name))
        lines = err.strip().splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (name, err)
        assert lines[0].startswith("amp-attention: error: argument FILE: ")
        assert str(tmp_path / name) in lines[0] and needle in lines[0], (name, err)
    code, out, err = run(capsys, "heads", "hdi", str(good))
    assert code == 0 and "HDI" in out


def test_hdi_of_torch_linear_weights(capsys, tmp_path: Path) -> None:
    """The recipe of docs/heads.md: an nn.Linear key weight (H d_k, d_model) with
    --layout rows gives the HDI of the heads; the in_proj_weight shape is refused."""
    d_model, H, d_k = 12, 3, 4
    rng = np.random.default_rng(3)
    stack = rng.standard_normal((H, d_model, d_k))
    linear_weight = np.concatenate([w.T for w in stack], axis=0)  # (H d_k, d_model)
    np.save(tmp_path / "wk.npy", linear_weight)
    np.save(tmp_path / "stack.npy", stack)
    code, out, err = run(capsys, "heads", "hdi", str(tmp_path / "wk.npy"), "--layout", "rows",
                         "--dk", str(d_k), "--json")
    assert code == 0, err
    code, ref, err = run(capsys, "heads", "hdi", str(tmp_path / "stack.npy"), "--json")
    assert code == 0, err
    assert json.loads(out)["hdi"] == json.loads(ref)["hdi"]
    assert json.loads(out)["params"]["layout"] == "rows"
    np.save(tmp_path / "in_proj.npy", rng.standard_normal((3 * d_model, d_model)))
    code, out, err = run(capsys, "heads", "hdi", str(tmp_path / "in_proj.npy"), "--layout",
                         "rows", "--heads", str(H))
    assert code == 2 and "in_proj_weight[12:24]" in err


def test_module_entry_point(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.save(tmp_path / "w.npy", rng.standard_normal((2, 5, 2)))
    proc = subprocess.run([sys.executable, "-m", "amp_attention.cli", "heads", "hdi",
                           str(tmp_path / "w.npy")], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "HDI = " in proc.stdout
