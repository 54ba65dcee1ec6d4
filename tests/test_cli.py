"""The `amp-attention` command line, run in-process through ``main(argv)`` (fast)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amp_attention.cli import main
from amp_attention.erm import STAT_FIELDS, erm_statistics
from amp_attention.solvers.state_evolution import RESULT_FIELDS

ROOT = Path(__file__).resolve().parents[1]
PROBLEM_KEYS = {"channel", "L", "beta", "noise", "noise_at", "target", "kappa", "lam",
                "parameterisation", "alpha"}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> None:
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("amp-attention: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, err)


# --------------------------------------------------------------------------- se


def test_se_json_has_params_and_every_result_field(capsys) -> None:
    code, out, err = run(capsys, "se", "--json", "--alpha", "0.7", "--noise", "0.5")
    assert code == 0, err
    payload = json.loads(out)  # exactly one JSON object on stdout
    params = payload["params"]
    assert PROBLEM_KEYS <= set(params)
    assert {"method", "tol", "max_iter", "damping", "start"} <= set(params)
    assert params["alpha"] == 0.7 and params["noise"] == 0.5
    assert params["target"] == {"kind": "wishart", "kappa0": 0.5}
    for name in RESULT_FIELDS:
        assert name in payload, name
    for name in ("status", "start", "metastable", "alternative"):
        assert name in payload
    assert payload["converged"] is True and payload["status"] == "converged"
    assert "density_S" not in out  # spectra never go into the JSON


def test_se_table_lists_every_field(capsys) -> None:
    code, out, _ = run(capsys, "se", "--alpha", "0.4")
    assert code == 0
    for name in RESULT_FIELDS:
        assert re.search(rf"^\s+{name}\s", out, re.M), name


def _read_spectrum(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    with open(path) as fh:
        comment = fh.readline()
        rows = list(csv.DictReader(fh))
    cols = {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}
    return comment, cols


@pytest.mark.parametrize("extra", [[], ["--kappa", "0.3", "--alpha", "1.0"]])
def test_se_spectrum_csv_and_png(capsys, tmp_path: Path, extra: list[str]) -> None:
    path = tmp_path / "spec" / "spectrum.csv"
    code, out, err = run(capsys, "se", "--json", "--spectrum", str(path), *extra)
    assert code == 0, err
    json.loads(out)
    comment, cols = _read_spectrum(path)
    assert comment.startswith("#") and "params=" in comment
    atom_s = float(re.search(r"atom_at_zero_S=([^;]+);", comment).group(1))
    atom_w = float(re.search(r"atom_at_zero_W=([^;]+);", comment).group(1))
    params = json.loads(comment.split("params=", 1)[1])
    assert params["lam"] == 0.1
    assert list(cols) == ["x", "density_S", "sigma", "density_W"]
    assert np.all(cols["density_S"] >= 0) and np.all(np.diff(cols["x"]) >= 0)
    np.testing.assert_allclose(cols["sigma"], np.sqrt(cols["x"]), rtol=1e-9)
    # Total mass = trapezoid over the tabulated continuous part + the atom at 0.
    # The curve has ~400-600 nodes on a support of width ~4 (h ~ 1e-2): the
    # trapezoid error at the square-root edge is O(h^1.5) ~ 1e-3 and the sliver
    # below the first node (density ~0.3 over x < 3e-3) is ~1e-3; we observe
    # 0.9989-0.9991. A tolerance of 1e-2 leaves a 5-10x margin while still
    # catching a wrong normalisation (e.g. a missing Vh or kappa factor, >= 10 %).
    mass_s = np.trapezoid(cols["density_S"], cols["x"]) + atom_s
    mass_w = np.trapezoid(cols["density_W"], cols["sigma"]) + atom_w
    assert abs(mass_s - 1.0) < 1e-2, mass_s
    assert abs(mass_w - 1.0) < 1e-2, mass_w
    png = path.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_se_not_converged_exits_3_with_result(capsys) -> None:
    code, out, err = run(capsys, "se", "--json", "--max-iter", "2")
    assert code == 3
    payload = json.loads(out)
    assert payload["converged"] is False and payload["status"] != "converged"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "did not converge" in lines[0]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["se", "--kappa", "-1"], "--kappa"),
        (["se", "--alpha", "0"], "--alpha"),
        (["se", "--L", "0"], "--L"),
        (["se", "--L", "5000"], "--L"),  # was a 23 GiB allocation traceback at L = 79492
        (["thresholds", "--L=79492"], "--L"),
        # more Sobol coordinates than scipy has (was a one-line error not naming --L)
        (["se", "--channel", "softmax", "--L", "103"], "--L"),
        (["se", "--channel", "softmax", "--L", "2", "--mc-log2n", "30"], "--mc-log2n"),
        (["se", "--channel", "softmax", "--L", "2", "--mc-replicas", "1"], "--mc-replicas"),
        (["amp", "--L=100000", "--d", "8"], "--L"),
        (["se", "--noise", "nan"], "--noise"),
        (["se", "--lam", "-0.5"], "--lam"),
        (["se", "--beta", "0"], "--beta"),
        (["se", "--kappa0", "0"], "--kappa0"),
        (["se", "--target", "powerlaw", "--gamma", "-1"], "--gamma"),
        (["se", "--target", "powerlaw", "--p0", "1000"], "--p0"),
        (["se", "--gamma", "2"], "--gamma"),  # power-law flag with a Wishart target
        (["se", "--tol", "0"], "--tol"),
        (["se", "--damping", "1.5"], "--damping"),
        (["se", "--max-iter", "0"], "--max-iter"),
        (["erm", "--d", "1"], "--d"),
        (["erm", "--alpha", "-2", "--d", "8"], "--alpha"),
        (["erm", "--seeds", "-3", "--d", "8"], "--seeds"),
        (["erm", "--n-seeds", "0", "--d", "8"], "--n-seeds"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv: list[str], flag: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, f"argument {flag}:")


def test_bad_input_message_states_range(capsys) -> None:
    _, _, err = run(capsys, "se", "--kappa", "-1")
    assert_one_line_error(err, "kappa", "[1e-06, 1e+06]")
    _, _, err = run(capsys, "se", "--noise", "nan")
    assert_one_line_error(err, "noise", "[0, 1e+12]")


def test_softmax_se_runs_with_monte_carlo_fields(capsys) -> None:
    """Non-linear channels go through RQMC channel integrals: tiny settings here
    (the result need not converge in 3 iterations; exit 3 says so)."""
    code, out, err = run(capsys, "se", "--channel", "softmax", "--L", "2", "--mc-log2n", "6",
                         "--mc-replicas", "2", "--max-iter", "3", "--start", "informative",
                         "--json")
    assert code in (0, 3), err
    payload = json.loads(out)
    assert payload["params"]["mc_log2n"] == 6 and payload["params"]["mc_replicas"] == 2
    assert set(payload["mc_stderr"]) >= {"m_hat", "q_hat", "V_hat", "train_error", "test_error"}


def test_bad_monte_carlo_options_give_one_line(capsys) -> None:
    code, out, err = run(capsys, "se", "--channel", "softmax", "--L", "2", "--mc-replicas", "1")
    assert code == 2 and out == ""
    assert_one_line_error(err, "replicas")


def test_softmax_erm_runs(capsys) -> None:
    code, out, err = run(capsys, "erm", "--channel", "softmax", "--L", "2", "--d", "8",
                         "--n-seeds", "1", "--restarts", "1", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["params"]["restarts"] == 1 and payload["params"]["tol"] == 1e-7
    assert payload["all_converged"]


def test_unknown_channel_rejected_by_argparse(capsys) -> None:
    code, out, err = run(capsys, "se", "--channel", "relu")
    assert code == 2 and out == ""
    assert "invalid choice" in err and "Traceback" not in err


# --------------------------------------------------------------------------- erm


def test_erm_json(capsys) -> None:
    code, out, err = run(capsys, "erm", "--d", "16", "--n-seeds", "2", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert set(payload) == {"params", "mean", "stderr", "per_seed", "all_converged"}
    params = payload["params"]
    assert PROBLEM_KEYS <= set(params)
    assert params["d"] == 16 and params["seeds"] == [0, 1] and params["n"] == 128
    assert set(payload["mean"]) == set(STAT_FIELDS) == set(payload["stderr"])
    assert [r["seed"] for r in payload["per_seed"]] == [0, 1]
    assert payload["all_converged"] is True
    # Same statistics as the library's erm_statistics on the same seeds.
    ref = erm_statistics(params_problem(), 16, [0, 1], keep_matrix=False)
    for k in STAT_FIELDS:
        assert payload["mean"][k] == pytest.approx(ref.mean[k], rel=1e-12, abs=1e-15)
        assert payload["stderr"][k] == pytest.approx(ref.stderr[k], rel=1e-9, abs=1e-15)


def params_problem():
    from amp_attention.spec import Learner, Problem, Task, WishartTarget

    return Problem(Task("linear", L=1), WishartTarget(0.5), Learner(1.0, 0.1), alpha=0.5)


def test_erm_table_explicit_seeds(capsys) -> None:
    code, out, _ = run(capsys, "erm", "--d", "12", "--seeds", "5", "--alpha", "1.0")
    assert code == 0
    for name in STAT_FIELDS:
        assert re.search(rf"^\s+{name}\s", out, re.M), name


# --------------------------------------------------------------------------- quickstart / help


def test_quickstart_no_erm_writes_three_files(capsys, tmp_path: Path) -> None:
    out_dir = tmp_path / "qs"
    code, out, err = run(capsys, "quickstart", "--no-erm", "--out", str(out_dir))
    assert code == 0, err
    for name in ("quickstart.csv", "quickstart.json", "quickstart.png"):
        assert (out_dir / name).stat().st_size > 0, name
    data = json.loads((out_dir / "quickstart.json").read_text())
    assert data["params"]["problem"]["noise"] == 0.5
    assert len(data["params"]["problem"]["alpha"]) == 57 and data["params"]["erm"] is None
    assert len(data["se"]) == 57 and all(r["converged"] for r in data["se"])
    with open(out_dir / "quickstart.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 57
    assert float(rows[0]["alpha"]) == pytest.approx(0.1)
    assert float(rows[-1]["alpha"]) == pytest.approx(1.5)
    assert "test_error" in out and "matrix_mse" in out
    # the Bayes-optimal baseline beside every SE point, below it (a theorem)
    assert len(data["bayes"]) == 57 and all(b["estimator"] == "bayes" for b in data["bayes"])
    for row, se in zip(rows, data["se"]):
        assert float(row["bayes_matrix_mse"]) <= se["matrix_mse"]
        assert float(row["bayes_test_error"]) <= se["test_error"]


# --------------------------------------------------------------------------- amp


def test_amp_json_runs_gamp_beside_the_se(capsys) -> None:
    code, out, _ = run(capsys, "amp", "--d", "24", "--L", "2", "--noise", "0.5",
                       "--target-spectrum", "quantile", "--se-iterates", "5", "--n-test", "2000",
                       "--json")
    assert code == 0
    payload = json.loads(out)
    assert PROBLEM_KEYS <= set(payload["params"]) and payload["params"]["d"] == 24
    g = payload["gamp"]
    assert g["converged"] and g["status"] == "converged"
    assert len(g["history"]) == g["iterations"] + 1
    assert g["final"]["kkt_residual"] < 1e-6
    assert [r["t"] for r in payload["se_iterates"]] == list(range(6))
    assert payload["se_iterates"][0] == {"t": 0, "m": 0.0, "q": 0.0, "V": 1.0}
    assert payload["se"]["converged"]
    # GAMP's first iterate already lands near the SE's (finite-size allowance at d = 24).
    assert g["history"][1]["q"] == pytest.approx(payload["se_iterates"][1]["q"], rel=0.25)


def test_amp_table_and_not_converged_exit_3(capsys) -> None:
    code, out, err = run(capsys, "amp", "--d", "16", "--iterations", "3", "--se-iterates", "3")
    assert code == 3
    assert "SE m" in out and "kkt_residual" in out
    assert "did not converge" in err and "--iterations" in err


def test_amp_bad_damping_one_line(capsys) -> None:
    code, _, err = run(capsys, "amp", "--damping", "0")
    assert code == 2
    assert_one_line_error(err, "--damping")


def test_validate_writes_outputs_and_resumes(capsys, tmp_path: Path) -> None:
    argv = ["validate", "--alphas", "0.4", "--d", "12", "16", "--seeds", "2", "--noise", "0.5",
            "--out", str(tmp_path / "v")]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "4 run(s) trained" in out
    assert all((tmp_path / "v" / f).exists() for f in ("validate.csv", "validate.json", "validate.png"))
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "0 run(s) trained" in out


def test_spectrum_theory_only_writes_csv_and_figure(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "spectrum", "--kappa", "0.5", "--lam", "0.05", "--noise", "0.1",
                       "--out", str(tmp_path / "s"))
    assert code == 0 and "atom at 0 of Shat 0.5" in out
    assert (tmp_path / "s" / "spectrum_theory.png").stat().st_size > 0
    header, cols = _read_spectrum(tmp_path / "s" / "spectrum.csv")
    assert "atom_at_zero_S=0.5" in header and cols["density_S"].size > 10
    assert not (tmp_path / "s" / "runs").exists()


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_spectrum_simulate_reports_kolmogorov_distances_and_resumes(capsys, tmp_path: Path) -> None:
    argv = ["spectrum", "--simulate", "--d", "16", "20", "--noise", "0.1", "--lam", "0.05",
            "--out", str(tmp_path / "s")]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "2 run(s) trained" in out and "KS(Shat)" in out
    summary = json.loads((tmp_path / "s" / "spectrum.json").read_text())
    assert [r["d"] for r in summary["per_d"]] == [16, 20]
    assert all(0 < r["ks_S"] < 1 for r in summary["per_d"])
    assert (tmp_path / "s" / "spectrum.png").stat().st_size > 0
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "0 run(s) trained" in out


def test_spectrum_bad_zero_tol_one_line(capsys) -> None:
    code, _, err = run(capsys, "spectrum", "--zero-tol", "2")
    assert code == 2
    assert_one_line_error(err, "--zero-tol")


def test_thresholds_json_and_grid_files(capsys, tmp_path: Path) -> None:
    code, out, _ = run(capsys, "thresholds", "--noise", "50", "--kappa0", "1", "--json")
    assert code == 0
    res = json.loads(out)
    assert 0.25 < res["alpha_interp"] < 0.26 and res["alpha_PR"] == pytest.approx(0.5, rel=1e-3)
    assert "limit equations" in res["alpha_interp_detail"]["method"]
    # learner widths kappa >= kappa0 (no binding rank cap: a capped alpha_PR costs ~25 s)
    code, out, _ = run(capsys, "thresholds", "--noise", "0.5", "--kappa-grid", "1", "2", "4",
                       "--out", str(tmp_path / "t"))
    assert code == 0
    with open(tmp_path / "t" / "thresholds.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["kappa"]) for r in rows] == [1.0, 2.0, 4.0]
    assert (tmp_path / "t" / "thresholds.png").stat().st_size > 0


def test_thresholds_softmax_output_noise_explains(capsys) -> None:
    code, out, _ = run(capsys, "thresholds", "--channel", "softmax", "--L", "2", "--noise", "0.5")
    assert code == 0 and "noise-at logit" in out


def test_phase_diagram_writes_npz_json_png_and_resumes(capsys, tmp_path: Path) -> None:
    argv = ["phase-diagram", "--noise", "0.5", "--alpha-range", "0.1", "1", "4", "--lam-range",
            "0.01", "1", "3", "--workers", "0", "--out", str(tmp_path / "pd")]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "24 point(s) solved" in out and "12/12 converged" in out
    meta = json.loads((tmp_path / "pd" / "phase_diagram.json").read_text())
    assert meta["thresholds"]["alpha_interp"] == pytest.approx(0.30696, rel=1e-4)
    with np.load(tmp_path / "pd" / "phase_diagram.npz") as z:
        assert z["test_error"].shape == (4, 3) and z["lam"][0] == pytest.approx(0.01)
    assert (tmp_path / "pd" / "phase_diagram.png").stat().st_size > 0
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "0 point(s) solved" in out


def test_phase_diagram_bad_grid_one_line(capsys) -> None:
    code, _, err = run(capsys, "phase-diagram", "--lam-range", "0", "1", "4")
    assert code == 2
    assert_one_line_error(err, "--lam-range")


@pytest.mark.parametrize("argv", [["--help"], ["se", "--help"], ["erm", "--help"],
                                  ["amp", "--help"], ["validate", "--help"], ["spectrum", "--help"],
                                  ["thresholds", "--help"], ["phase-diagram", "--help"],
                                  ["quickstart", "--help"]])
def test_help(capsys, argv: list[str]) -> None:
    code, out, _ = run(capsys, *argv)
    assert code == 0
    assert "usage: amp-attention" in out
    if argv[0] in ("se", "erm", "amp", "validate", "spectrum", "thresholds", "phase-diagram"):
        for symbol in ("alpha = n/d^2", "kappa = p/d", "Delta", "lam d Tr S", "beta"):
            assert symbol in out, symbol


def test_module_help_subprocess() -> None:
    proc = subprocess.run([sys.executable, "-m", "amp_attention.cli", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "state evolution" in proc.stdout


def test_package_does_not_import_solvers() -> None:
    code = ("import sys, amp_attention, amp_attention.cli, amp_attention.plotting; "
            "assert 'amp_attention.solvers' not in sys.modules, 'solvers imported'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- flags that do not apply


@pytest.mark.parametrize("argv, flag", [
    # the grid would replace the power-law target by a Wishart one (it printed Wishart numbers
    # under a power-law header)
    (["thresholds", "--kappa0-grid", "0.5", "1", "--target", "powerlaw", "--gamma", "2"],
     "--kappa0-grid"),
    (["thresholds", "--kappa0", "0.3", "--kappa0-grid", "0.5", "1"], "--kappa0"),
    (["thresholds", "--kappa", "0.3", "--kappa-grid", "0.5", "1"], "--kappa"),
    (["thresholds", "--noise", "0.3", "--noise-grid", "0.5", "1"], "--noise"),
    (["thresholds", "--out", "never-written"], "--out"),
    (["se", "--beta", "2"], "--beta"),
    (["se", "--mc-log2n", "10"], "--mc-log2n"),
    (["se", "--learner", "elementwise", "--kappa", "0.5"], "--kappa"),
    (["erm", "--seeds", "1", "2", "--seed0", "3"], "--seed0"),
    (["erm", "--restarts", "2"], "--restarts"),
    (["spectrum", "--d", "100"], "--d"),
    (["spectrum", "--bins", "20"], "--bins"),
    (["phase-diagram", "--scheduler", "tcp://127.0.0.1:1", "--workers", "3"], "--workers"),
    (["amp", "--damping", "0.5", "--se-iterates", "4"], "--se-iterates"),
    (["heads", "rotation", "--bandwidth", "1"], "--bandwidth"),
])
def test_a_flag_that_would_be_ignored_is_refused(capsys, tmp_path: Path, monkeypatch, argv, flag) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert_one_line_error(err, f"argument {flag}")
    assert list(tmp_path.iterdir()) == []  # refused before anything was computed or written


@pytest.mark.parametrize("argv, absent", [
    (["thresholds"], ("--alpha ", "--lam ")),
    (["phase-diagram"], ("--alpha ", "--lam ")),
    (["validate"], ("--alpha ",)),
    (["scaling"], ("--alpha ", "--kappa0", "--spikes")),
    (["heads", "allocation"], ("--n ", "--n-val ")),
    (["heads", "rotation"], ("--n-val ",)),
])
def test_help_lists_only_the_flags_that_apply(capsys, argv, absent) -> None:
    code, out, _ = run(capsys, *argv, "--help")
    assert code == 0
    for flag in absent:
        assert flag not in out, flag
    code, _, err = run(capsys, *argv, absent[0].strip(), "1")
    assert code == 2 and "unrecognized arguments" in err


def test_abbreviated_flags_are_not_expanded(capsys) -> None:
    # `--n 100` used to be read as `--n-values 100` in heads allocation
    code, _, err = run(capsys, "heads", "allocation", "--n", "100")
    assert code == 2 and "unrecognized arguments: --n 100" in err
    code, _, err = run(capsys, "se", "--alph", "0.3")
    assert code == 2


def test_scaling_takes_only_a_power_law_target(capsys) -> None:
    code, _, err = run(capsys, "scaling", "--target", "wishart")
    assert code == 2 and "argument --target: invalid choice: 'wishart'" in err


def test_flags_given_where_they_apply_are_used(capsys) -> None:
    from amp_attention.cli import build_parser, problem_from_args

    args = build_parser().parse_args(["se", "--channel", "softmax", "--L", "2", "--beta", "2",
                                      "--mc-log2n", "10"])
    assert problem_from_args(args).task.beta == 2.0 and args.mc_log2n == 10
    args = build_parser().parse_args(["se", "--learner", "elementwise", "--lam", "0.2"])
    assert problem_from_args(args).learner.lam == 0.2


def test_thresholds_power_law_target_is_the_one_solved(capsys) -> None:
    # Reference: the trace-norm descent cone depends only on the rank of S0, so a power-law
    # target of rank p0 = 20 of d = 40 has the alpha_PR of any rank-1/2 target: the
    # closed form min_tau Phi(tau)/2 of docs/theory.md section 12, evaluated here by
    # direct quadrature (independent of the SE denoiser machinery).
    from scipy.integrate import quad
    from scipy.optimize import minimize_scalar

    def phi(k0: float, tau: float) -> float:
        s2 = 1 - k0
        R = 2 * np.sqrt(s2)
        null = quad(lambda x: (x - tau) ** 2 * np.sqrt(max(R * R - x * x, 0)) / (2 * np.pi * s2),
                    min(tau, R), R)[0] if tau < R else 0.0
        return k0 * k0 + k0 * tau * tau + 2 * k0 * s2 + s2 * null

    ref = minimize_scalar(lambda t: phi(0.5, t), bounds=(0, 3), method="bounded").fun / 2
    code, out, err = run(capsys, "thresholds", "--target", "powerlaw", "--gamma", "2",
                         "--target-d", "40", "--p0", "20", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["params"]["target"]["kind"] == "powerlaw"
    assert "alpha" not in payload["params"] and "lam" not in payload["params"]
    assert payload["alpha_PR"] == pytest.approx(ref, rel=1e-6)
    # full rank: the parameter count d(d+1)/2, i.e. alpha_PR = 1/2 for K = 1; the quadrature
    # route at sigma = 1e-3 gave 0.4977 here (174 of the 200 atoms lie below 10 sigma)
    code, out, err = run(capsys, "thresholds", "--target", "powerlaw", "--gamma", "2",
                         "--target-d", "200", "--json")
    assert code == 0, err
    assert json.loads(out)["alpha_PR"] == pytest.approx(0.5, rel=1e-6)


def test_thresholds_kappa0_grid_keeps_a_spiked_target(capsys) -> None:
    code, out, err = run(capsys, "thresholds", "--target", "spiked", "--spikes", "5",
                         "--kappa0-grid", "0.5", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["params"]["target"]["kind"] == "spiked"
    assert payload["rows"][0]["alpha_PR_detail"]["converged"]


@pytest.mark.parametrize("argv", [["amp", "--d", "8", "--V0", "1e9"], ["amp", "--d", "2"]])
def test_gamp_divergence_is_exit_3_with_its_hint(capsys, argv) -> None:
    # it used to be reported as bad input: "n_iter must be an integer >= 0, got -1" (exit 2)
    code, _, err = run(capsys, *argv)
    assert code == 3
    assert "GAMP diverged" in err and "--damping" in err and "n_iter" not in err


@pytest.mark.parametrize("channel", ["softmax", "seq2lab"])
def test_softmax_channels_need_two_tokens(capsys, channel) -> None:
    # a softmax over one token is constant: a spec error (exit 2), not a solver failure (3)
    code, _, err = run(capsys, "se", "--channel", channel, "--L", "1")
    assert code == 2
    assert_one_line_error(err, "argument --L", ">= 2")


@pytest.mark.parametrize("name, message", [("sp.png", "must end in .csv"), ("sp", "must end in .csv"),
                                           ("", "empty path"), ("  ", "empty path")])
def test_se_spectrum_name_cannot_collide_with_its_plot(capsys, tmp_path: Path, monkeypatch,
                                                       name: str, message: str) -> None:
    """Issue 29 items 2 and 11: `se --spectrum sp.png` wrote the PNG over the CSV, and an
    empty path was silently ignored."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "se", "--spectrum", name)
    assert code == 2 and out == ""
    assert_one_line_error(err, "argument --spectrum", message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cmd", [["quickstart"], ["thresholds"], ["phase-diagram"], ["validate"],
                                 ["scaling"], ["spectrum"], ["compare"]])
def test_empty_out_is_refused(capsys, tmp_path: Path, monkeypatch, cmd: list[str]) -> None:
    """Issue 29 item 11: `quickstart --out ''` wrote into the current directory."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *cmd, "--out", "")
    assert code == 2 and out == ""
    assert_one_line_error(err, "argument --out", "empty path")
    assert list(tmp_path.iterdir()) == []


def test_output_paths_are_checked_before_computing(capsys, tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    code, out, err = run(capsys, "se", "--spectrum", str(tmp_path / "adir"))
    assert code == 2 and out == "" and "is a directory" in err
    (tmp_path / "afile").write_text("x")
    code, out, err = run(capsys, "thresholds", "--kappa-grid", "0.5", "1", "--out",
                         str(tmp_path / "afile" / "sub"))
    assert code == 2 and out == "" and "cannot create directory" in err


@pytest.mark.parametrize("argv, flag", [(["--alpha", "1e-300"], "--alpha"),
                                        (["--alpha", "1e300"], "--alpha"),
                                        (["--noise", "1e300"], "--noise")])
def test_extreme_values_are_refused_not_tracebacks(capsys, argv, flag) -> None:
    # they raised ZeroDivisionError / OverflowError, or ran into RuntimeWarnings and exit 3
    code, _, err = run(capsys, "se", *argv)
    assert code == 2
    assert_one_line_error(err, f"argument {flag}", "must lie in")


def test_unvalidated_token_count_is_said_on_stderr_and_in_the_json(capsys) -> None:
    """seq2lab is validated against simulation at L = 2 only (issue 16, item 6)."""
    mc = ("--mc-log2n", "8", "--mc-coarse-log2n", "6", "--mc-replicas", "2")
    code, out, err = run(capsys, "se", "--channel", "seq2lab", "--L", "3", *mc, "--json")
    assert code in (0, 3)
    note = json.loads(out)["params"]["validation_note"]
    assert "only at L = 2" in note and "L = 3 is not validated" in note
    assert f"note: {note}" in err
    code, out, err = run(capsys, "se", "--channel", "seq2lab", "--L", "2", *mc, "--json")
    assert json.loads(out)["params"]["validation_note"] == "" and "note:" not in err


def test_test_only_samples_flag(capsys) -> None:
    """--mc-test-log2n (issue 32): recorded in the params (its default resolved), checked,
    and refused where there is no RQMC channel side of the ERM SE."""
    mc = ("--mc-log2n", "8", "--mc-coarse-log2n", "6", "--mc-replicas", "2")
    code, out, _ = run(capsys, "se", "--channel", "softmax", "--L", "2", *mc, "--json")
    params = json.loads(out)["params"]
    assert code in (0, 3) and params["mc_test_log2n"] == 11 and params["mc_step_log2n"] == 11
    code, out, _ = run(capsys, "se", "--channel", "softmax", "--L", "2", *mc,
                       "--mc-test-log2n", "0", "--json")
    assert code in (0, 3) and json.loads(out)["params"]["mc_test_log2n"] == 0
    code, _, err = run(capsys, "se", "--channel", "softmax", "--L", "2", *mc,
                       "--mc-test-log2n", "3")
    assert code == 2
    assert_one_line_error(err, "--mc-test-log2n", "[4, 24]")
    code, _, err = run(capsys, "se", "--mc-test-log2n", "10")
    assert code == 2
    assert_one_line_error(err, "--mc-test-log2n", "closed form")
    code, _, err = run(capsys, "se", "--channel", "softmax", "--L", "2", "--estimator", "bayes",
                       "--mc-test-log2n", "10")
    assert code == 2
    assert_one_line_error(err, "--mc-test-log2n", "bayes")


def test_unreachable_scheduler_is_a_one_line_error(capsys, monkeypatch, tmp_path) -> None:
    """An address where no Dask scheduler listens: exit 2 after the timeout, no traceback."""
    pytest.importorskip("distributed")
    from amp_attention.cli import execution

    monkeypatch.setattr(execution, "SCHEDULER_TIMEOUT", 1)
    code, _, err = run(capsys, "validate", "--alphas", "0.5", "--d", "8", "--seeds", "1",
                       "--scheduler", "tcp://127.0.0.1:9", "--out", str(tmp_path))
    assert code == 2
    assert_one_line_error(err, "--scheduler", "no Dask scheduler answered")


def test_size_guards_refuse_before_allocating(capsys, monkeypatch, tmp_path) -> None:
    """issue 16, item 3: the memory of a finite-d run and the size of a grid are estimated
    first; beyond the guard exit 2 says what is needed, unless --allow-large."""
    from amp_attention import resources

    monkeypatch.setattr(resources, "available_memory", lambda: 2**20)      # 1 MiB free
    code, out, err = run(capsys, "erm", "--d", "8", "--n-seeds", "1")
    assert code == 2 and out == ""
    assert_one_line_error(err, "--d", "d = 8", "GiB of memory", "--allow-large")
    code, _, _ = run(capsys, "erm", "--d", "8", "--n-seeds", "1", "--allow-large")
    assert code == 0
    for argv in (("amp", "--d", "16"), ("validate", "--d", "16", "--out", str(tmp_path / "v")),
                 ("spectrum", "--simulate", "--d", "16", "--out", str(tmp_path / "s"))):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "--allow-large" in err, argv
    monkeypatch.undo()
    # the real machine: d = 3000 at alpha = 0.5 needs hundreds of GiB
    code, _, err = run(capsys, "erm", "--d", "3000")
    assert_one_line_error(err, "d = 3000", "n = 4500000")
    out_dir = tmp_path / "pd"
    code, _, err = run(capsys, "phase-diagram", "--alpha-range", "0.1", "2", "1000",
                       "--lam-range", "0.001", "1", "1000", "--out", str(out_dir))
    assert code == 2 and not out_dir.exists()
    assert_one_line_error(err, "1000000 grid points", "--allow-large")
    # a grid whose own arrays cannot fit is refused even with --allow-large, before any
    # of it is built (the slow fuzz: N = 1e12 allocated 7 TiB in np.linspace)
    code, _, err = run(capsys, "phase-diagram", "--alpha-range", "0.1", "2", "1e12",
                       "--lam-range", "0.001", "1", "2", "--allow-large", "--out", str(out_dir))
    assert code == 2 and not out_dir.exists()
    assert_one_line_error(err, "--alpha-range", "2000000000000 grid points", "GiB of memory")
    # scaling's alpha grid: the same guards (the slow fuzz: N = 1e12 and 1e300 allocated
    # in np.geomspace), and both ends checked against the problem's alpha range
    sc_dir = tmp_path / "sc"
    for n, needles in (("1e12", ("1000000000000 grid points", "GiB of memory")),
                       ("1e300", ("1e+300 grid points", "GiB of memory")),
                       ("5000", ("5000 grid points", "--allow-large"))):
        code, _, err = run(capsys, "scaling", "--gamma", "1.5", "--target-d", "40",
                           "--alpha-range", "0.5", "2", n, "--out", str(sc_dir))
        assert code == 2 and not sc_dir.exists(), n
        assert_one_line_error(err, "--alpha-range", *needles)
    code, _, err = run(capsys, "scaling", "--gamma", "1.5", "--target-d", "40",
                       "--alpha-range", "1e-12", "2", "3", "--out", str(sc_dir))
    assert code == 2 and not sc_dir.exists()
    assert_one_line_error(err, "--alpha-range", "alpha must lie in [1e-09, 1e+09]")


def test_ctrl_c_promises_a_resume_only_where_there_is_one(capsys, monkeypatch) -> None:
    """issue 16, item 8: `se` saves nothing, so its Ctrl-C message must not promise a resume."""
    from amp_attention.cli import se, validate

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(se, "run", interrupted)
    monkeypatch.setattr(validate, "run", interrupted)
    code, _, err = run(capsys, "se")
    assert code == 130 and "nothing was saved" in err and "resume" not in err
    code, _, err = run(capsys, "validate")
    assert code == 130 and "rerun the same command to resume" in err


def test_quickstart_figure_is_ready_for_a_paper(monkeypatch, tmp_path: Path) -> None:
    """Issue 16 item 9: a smooth SE curve (was 12 points with kinks), symbols on every
    axis, one legend for all panels (was in the first panel only), axes from 0, and the
    caption that explains the ERM-SE gap near the interpolation threshold."""
    import matplotlib.pyplot as plt

    from amp_attention import plotting
    from amp_attention.experiments.quickstart import QUICKSTART_NOTE
    from amp_attention.experiments.quickstart import QuickstartConfig

    c = QuickstartConfig()
    assert len(c.alphas) >= 50 and set(c.erm_alphas) <= set(c.alphas)
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig: figures.append(fig))
    a = np.linspace(0.1, 1.5, 57)
    fields = ("test_error", "train_error", "matrix_mse")
    erm = {"alpha": [0.35, 1.5], "mean": {f: [1.0, 0.2] for f in fields},
           "stderr": {f: [0.1, 0.01] for f in fields}, "label": "direct ERM, d = 48"}
    plotting.plot_se_curve(a, {f: 1 / a for f in fields}, tmp_path / "q.png", fields=fields,
                           erm=erm, title="t", note=QUICKSTART_NOTE)
    fig = figures[-1]
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_legend() is None
        assert ax.get_ylim()[0] == 0.0
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 2
    assert any("finite-size" in t.get_text() for t in fig.texts)
    # the legend lies below every panel (labels included) and the caption below the legend
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    assert all(legend.y1 <= ax.get_tightbbox(renderer).y0 + 1 for ax in fig.axes)
    note = next(t for t in fig.texts if "finite-size" in t.get_text())
    assert note.get_window_extent(renderer).y1 <= legend.y0 + 1


@pytest.mark.slow  # ~20-40 s on a slow 2-core machine: the default run stays under 15 min
def test_phase_diagram_bayes_ratios(capsys, tmp_path: Path) -> None:
    """--bayes: one BO solve per alpha; ERM / BO >= 1 wherever defined (ERM cannot beat
    the posterior mean), undefined past the BO perfect-recovery threshold 0.375
    (linear L = 1, kappa0 = 0.5: (kappa0 - kappa0^2/2)/K), and the BO points resume."""
    argv = ["phase-diagram", "--alpha-range", "0.1", "0.5", "5", "--lam-range", "0.001", "1", "3",
            "--bayes", "--workers", "0", "--out", str(tmp_path / "pd")]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "Bayes-optimal: 3/5 alphas converged, 2 at perfect recovery" in out
    meta = json.loads((tmp_path / "pd" / "phase_diagram.json").read_text())
    assert meta["thresholds"]["alpha_PR_bayes"] == pytest.approx(0.375, rel=1e-5)
    assert meta["bayes"]["perfect_recovery"] == [False, False, False, True, True]
    with np.load(tmp_path / "pd" / "phase_diagram.npz") as z:
        bo = z["bayes_test_error"]
        ratio, mse_ratio = z["test_error_over_bayes"], z["matrix_mse_over_bayes"]
        assert np.all(np.diff(bo) < 0)
        assert np.all(ratio[:3] >= 1.0) and np.all(mse_ratio[:3] >= 1.0)
        assert np.all(np.isnan(ratio[3:]))
        np.testing.assert_allclose(ratio[:3], z["test_error"][:3] / bo[:3, None], rtol=1e-12)
    files = sorted((tmp_path / "pd" / "points").glob("bayes_a*.json"))
    stamp = [f.stat().st_mtime_ns for f in files]
    assert len(files) == 5
    code, _, _ = run(capsys, *argv)
    assert code == 0 and [f.stat().st_mtime_ns for f in files] == stamp


def test_phase_diagram_bayes_without_a_bayes_channel_fails_before_the_grid(capsys,
                                                                          tmp_path: Path) -> None:
    code, _, err = run(capsys, "phase-diagram", "--channel", "seq2lab", "--L", "2", "--noise", "0",
                       "--bayes", "--out", str(tmp_path / "pd"))
    assert code == 2 and "argument --bayes" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "pd").exists()


def test_erm_refuses_repeated_seeds(capsys) -> None:
    """Issue 29 item 9: `erm --seeds 0 0` counted one run as two seeds (standard error 0)."""
    code, out, err = run(capsys, "erm", "--seeds", "0", "3", "0")
    assert code == 2 and out == ""
    assert_one_line_error(err, "argument --seeds", "each seed once", "0")
