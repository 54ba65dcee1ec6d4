"""The worked examples that end every ``--help`` (an epilog per subcommand).

Each example is a command line and what it shows.  tests/test_docs.py runs every
one of them verbatim, so an example can no longer drift from the code.
"""

from __future__ import annotations

#: subcommand (``heads <mode>`` for the heads modes) -> [(command line, what it does)]
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "se": [
        ("amp-attention se --alpha 0.7 --lam 0.05 --kappa 0.5",
         "one SE point of the linear channel (L = 1: the quadratic network), a table"),
        ("amp-attention se --channel softmax --L 2 --alpha 0.5 --lam 0.1 --mc-log2n 10 --json",
         "softmax attention: Monte-Carlo channel integrals, JSON with their errors"),
        ("amp-attention se --estimator bayes --channel softmax --L 2 --alpha 0.15",
         "the Bayes-optimal estimator (the MMSE) of noiseless softmax attention"),
    ],
    "compare": [
        ("amp-attention compare --alpha-range 0.1 0.5 5 --out cmp",
         "linear L = 1, noiseless, kappa0 = 0.5: ERM at lam = 0.1, at the best lam and the "
         "Bayes-optimal MMSE; the perfect-recovery thresholds 0.4222 (ERM) and 0.375 (BO)"),
        ("amp-attention compare --noise 0.5 --alpha-range 0.1 1 4 --workers 2 --out cmp-noisy",
         "the same with label noise, on two worker processes"),
    ],
    "erm": [
        ("amp-attention erm --d 48 --alpha 0.5 --n-seeds 3",
         "direct ERM at d = 48 over three seeds: mean +- standard error of every statistic"),
        ("amp-attention erm --channel softmax --L 2 --d 24 --alpha 0.5 --lam 0.1 --json",
         "softmax ERM (multi-start L-BFGS), JSON with every run"),
    ],
    "amp": [
        ("amp-attention amp --d 64 --alpha 0.6 --lam 0.1",
         "GAMP on one data set at d = 64 beside the SE iterates"),
        ("amp-attention amp --d 48 --L 2 --noise 0.5 --alpha 0.5 --json",
         "L = 2 tokens with label noise, JSON"),
    ],
    "validate": [
        ("amp-attention validate --alphas 0.25 0.5 1 --d 16 24 --seeds 2 --out val",
         "SE curve vs Adam-trained layers: val/validate.csv, .json, .png (resumable)"),
        ("amp-attention validate --alphas 0.5 --d 16 --seeds 2 --noise 0.5 --out val-noisy",
         "the same with label noise"),
    ],
    "spectrum": [
        ("amp-attention spectrum --kappa 0.5 --lam 0.05 --out spec",
         "predicted eigenvalue density of Shat and singular values of W (theory only)"),
        ("amp-attention spectrum --kappa 0.5 --lam 0.05 --simulate --d 40 60 --seeds 1 "
         "--out spec-sim",
         "the same against Adam-trained layers, with Kolmogorov distances vs d"),
    ],
    "thresholds": [
        ("amp-attention thresholds --kappa0 0.5",
         "interpolation and perfect-recovery thresholds of one target (lam -> 0+)"),
        ("amp-attention thresholds --kappa0-grid 0.25 0.5 1 --out thr.csv",
         "the same over kappa0, written to thr.csv"),
    ],
    "phase-diagram": [
        ("amp-attention phase-diagram --alpha-range 0.1 1.2 6 --lam-range 0.01 1 6 --out pd",
         "a 6 x 6 alpha-lam grid: pd/phase_diagram.npz, .json, .png (resumable)"),
        ("amp-attention phase-diagram --alpha-range 0.1 1.2 6 --lam-range 0.01 1 6 "
         "--kappa 0.5 --workers 2 --out pd-k05",
         "a rank-capped learner, on two worker processes"),
    ],
    "scaling": [
        ("amp-attention scaling --gamma 1.5 --target-d 60 --alpha-range 0.5 8 6 --out sc",
         "power-law target: e_test over n, the four-way decomposition, fitted exponents"),
        ("amp-attention scaling --gamma 1.5 --target-d 60 --alpha-range 0.5 8 6 --noise 0.5 "
         "--lam-exponent 0.5 --out sc-lam",
         "noisy labels (Delta = 0.5), weight decay lam n^-0.5 decreasing with n"),
    ],
    "quickstart": [
        ("amp-attention quickstart --no-erm --out qs",
         "the SE curve over alpha only (seconds): qs/quickstart.csv, .json, .png"),
        ("amp-attention quickstart",
         "the full job: SE curve with finite-d ERM points (about a minute)"),
    ],
    "heads hdi": [
        ("amp-attention heads hdi wk.npy --layout rows --heads 4",
         "HDI of the 4 heads of an nn.Linear key weight (H d_k, d_model) saved with "
         "numpy.save"),
        ("amp-attention heads hdi stack.npy --json --out hdi",
         "a (H, d_model, d_k) stack; JSON, CSV of pairs and the overlap heat map"),
    ],
    "heads rotation": [
        ("amp-attention heads rotation --draws 4 --targets 2 --t-points 5 --out rot",
         "ensemble MSE and its decomposition as heads rotate from identical to orthogonal"),
        ("amp-attention heads rotation --tau-factor 0.25 --draws 4 --targets 2 --t-points 5 "
         "--out rot-sharp",
         "the same with a sharper kernel (tau = 0.25 sqrt(d_k))"),
    ],
    "heads allocation": [
        ("amp-attention heads allocation --D 12 --n-values 100 400 --draws 4 --targets 2 "
         "--out alloc",
         "MSE vs H at a fixed budget D = H d_k, argmin d_k* vs the law"),
        ("amp-attention heads allocation --D 12 --n-values 100 400 --tau-factor 0.1 --draws 4 "
         "--targets 2 --out alloc-sharp",
         "the same with a sharper kernel, where the optimum is inside the grid"),
    ],
    "heads weighting": [
        ("amp-attention heads weighting --H 4 --dk 2 --draws 4 --targets 2 --out wt",
         "uniform, geometric and Fibonacci weights over heads ranked on validation data"),
        ("amp-attention heads weighting --H 4 --dk 2 --ratio 0.7 --draws 4 --targets 2 "
         "--out wt-07",
         "geometric weights with ratio 0.7"),
    ],
}


def epilog(command: str) -> str:
    """The ``examples:`` block ending ``amp-attention <command> --help``."""
    lines = ["examples:"]
    for line, what in EXAMPLES[command]:
        lines.append(f"  {line}")
        lines.append(f"      {what}")
    return "\n".join(lines)
