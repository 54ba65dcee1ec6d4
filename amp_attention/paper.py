"""The conventions of arXiv 2509.24914 and its authors' code (docs/theory.md section 16).

The authors' state evolution (public repository PenombraET/ExtensiveAttention) writes
the same model in other units.  This module holds the map once:

* their problem -> :class:`~amp_attention.spec.Problem`: softmax on ``T`` tokens,
  Wishart target of ratio ``kappa`` (Q0 = 1 + kappa), logit noise ``noise_in`` as
  ``noise_at="logit_goe"`` (variance noise_in on h_aa, noise_in/2 on h_ab), or output
  noise ``noise_out``; their loss sum_ab (y_ab - yhat_ab)^2 has no 1/2 and their
  penalty is ``lreg d Tr S``, so the engine's ``lam = lreg / 2``;
* their columns <- the engine's fields: ``sigma = V/2``, ``q_hat = 4 q_hat``,
  ``m_hat = 2 m_hat``, ``sigma_hat = 2 V_hat``, ``MSE = matrix_mse``, ``test`` the
  test error against a fresh noisy label (``test_error_noisy``), ``train`` the
  objective per d^2, (sum_mu l_mu + lreg d Tr S)/d^2 = 2 alpha R/n = 2 alpha ``loss``;
* their sample-ratio axis alpha_bar = alpha (K - 1), K = T(T+1)/2 (the equations per
  sample once the softmax's row shift is removed).

The factors follow from the two prox objectives: theirs, ||u - z||^2/(2 sigma) +
||y - g||^2, is twice ours, ||u - omega||^2/(2V) + (1/2)||y - g||^2, with V = 2 sigma;
their g = (prox - z)/sigma is then twice ours, hence q_hat x 4, m_hat and sigma_hat x 2.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .penalties.registry import penalty_class
from .spec import Learner, Problem, Task, WishartTarget

#: engine field -> (authors' column, factor): column = factor x field
COLUMN_MAP: dict[str, tuple[str, float]] = {
    "q": ("q", 1.0),
    "m": ("m", 1.0),
    "V": ("sigma", 0.5),
    "q_hat": ("q_hat", 4.0),
    "m_hat": ("m_hat", 2.0),
    "V_hat": ("sigma_hat", 2.0),
    "matrix_mse": ("MSE", 1.0),
    "test_error_noisy": ("test", 1.0),
}


@dataclass(frozen=True)
class PaperSetting:
    """One of the authors' SE settings: alpha, lreg (their lambda), kappa (target width,
    kappa0 here), noise_in (logit noise Delta), noise_out, T tokens, beta (student and
    teacher; the authors' code allows betastar != beta, the engine has one beta)."""

    alpha: float
    lreg: float
    kappa: float = 0.5
    noise_in: float = 0.5
    noise_out: float = 0.0
    T: int = 2
    beta: float = 1.0
    kappa_student: float = 1.0
    parameterisation: str = "factorised"

    def __post_init__(self) -> None:
        if self.noise_in > 0 and self.noise_out > 0:
            raise ValueError("noise_in and noise_out: the engine has one noise model per task; "
                             "the authors' tables use one of them")

    def problem(self) -> Problem:
        """The engine's problem: logit_goe noise (or output noise); lam = lreg / 2
        (factorised) or lreg (element-wise; class docstring)."""
        noise, at = ((self.noise_in, "logit_goe") if self.noise_in > 0 or self.noise_out == 0
                     else (self.noise_out, "output"))
        lam = penalty_class(self.parameterisation).paper_lam(self.lreg)
        return Problem(Task("softmax", L=self.T, beta=self.beta, noise=noise, noise_at=at),
                       WishartTarget(self.kappa),
                       Learner(kappa=self.kappa_student, lam=lam,
                               parameterisation=self.parameterisation),
                       alpha=self.alpha)


def alpha_bar(alpha: float, T: int) -> float:
    """The paper's axis alpha_bar = alpha (K - 1), K = T(T+1)/2."""
    return alpha * (T * (T + 1) // 2 - 1)


def interpolation_alpha_bar(kappa0: float, noise: float, T: int = 2) -> float:
    """alpha_bar of the factorised learner's interpolation threshold (softmax on T tokens,
    Wishart target kappa0, logit_goe noise Delta; NaN where the solver fails).  Delta = 0:
    the Delta -> 0+ limit (at Delta = 0 exactly, noiseless labels are interpolated at every
    alpha), which the threshold approaches like Delta^(1/3): Richardson from Delta = 1e-9
    and 8e-9, 2 a(1e-9) - a(8e-9)."""
    from .solvers.thresholds import interpolation_threshold

    def at(delta: float) -> float:
        p = Problem(Task("softmax", L=T, noise=delta, noise_at="logit_goe"),
                    WishartTarget(float(kappa0)), Learner(1.0, 0.01), alpha=0.1)
        res = interpolation_threshold(p)
        return alpha_bar(res.alpha, T) if res.success else math.nan

    return 2.0 * at(1e-9) - at(8e-9) if noise == 0 else at(noise)


def to_paper_columns(result: Any, alpha: float) -> dict[str, float]:
    """The authors' SE columns from an engine result (an SEResult or its to_dict()):
    q, m, sigma, q_hat, m_hat, sigma_hat, MSE, test and train (COLUMN_MAP, train =
    2 alpha loss)."""
    get = (result.get if isinstance(result, Mapping) else lambda k: getattr(result, k))
    out = {col: factor * float(get(field)) for field, (col, factor) in COLUMN_MAP.items()}
    out["train"] = 2.0 * alpha * float(get("loss"))
    return out


def from_paper_hats(row: Mapping[str, float]) -> tuple[float, float, float]:
    """The engine's (m_hat, q_hat, V_hat) from a row's (m_hat, q_hat, sigma_hat)."""
    return (float(row["m_hat"]) / COLUMN_MAP["m_hat"][1],
            float(row["q_hat"]) / COLUMN_MAP["q_hat"][1],
            float(row["sigma_hat"]) / COLUMN_MAP["V_hat"][1])


_NAME = re.compile(r"kappa_(?P<kappa>[0-9.e+-]+?)_lreg_(?P<lreg>[0-9.e+-]+?)_noise_(?P<noise>[0-9.e+-]+?)\.csv$")


def setting_from_filename(name: str) -> dict[str, float]:
    """kappa, lreg and noise (noise_in) from an SE file name such as
    ``SE_kappa_0.5_lreg_0.01_noise_0.5.csv``."""
    m = _NAME.search(Path(name).name)
    if m is None:
        raise ValueError(f"not an SE table name (..._kappa_K_lreg_L_noise_N.csv): {name!r}")
    return {k: float(v) for k, v in m.groupdict().items()}


# ------------------------------------------------------------ comparing with their rows

#: their column -> (the engine's ``mc_stderr`` field, factor to their units; None: x 2 alpha)
STDERR_FIELD: dict[str, tuple[str, float | None]] = {
    "m": ("m", 1.0), "q": ("q", 1.0), "sigma": ("V", 0.5),
    "test": ("test_error_noisy", 1.0), "train": ("loss", None)}


def row_scatter(rows: list[Mapping[str, float]], i: int, col: str, half: int = 5) -> float:
    """Their row-to-row noise in ``col`` at row i: the standard deviation of the column
    around a quadratic in alpha fitted to rows i - half .. i + half (fewer at the ends).
    Their SE draws 1000 fresh Monte-Carlo samples at every row and iteration, and their
    ``test`` and ``train`` columns are 1000-sample averages, so this is the noise of a row."""
    import numpy as np

    lo, hi = max(0, i - half), min(len(rows), i + half + 1)
    a = np.array([r["alpha"] for r in rows[lo:hi]], dtype=float)
    y = np.array([r[col] for r in rows[lo:hi]], dtype=float)
    if y.size < 5:
        return 0.0
    res = y - np.polyval(np.polyfit(a, y, 2), a)
    return float(np.sqrt(np.sum(res * res) / (y.size - 3)))


def prior_residual(row: Mapping[str, float], kappa: float, lreg: float) -> dict[str, float]:
    """|prior(their hats) - their overlaps| in their units (m, q, sigma): the engine's
    denoiser (deterministic) at their stored hats; how far their stored state is from a
    fixed point of the prior half of the map."""
    from .denoisers import denoiser_for
    from .targets import target_measure

    den = denoiser_for(Learner(kappa=1.0, lam=lreg / 2.0))
    f = den.functionals(target_measure(WishartTarget(kappa)), *from_paper_hats(row))
    return {"m": abs(f.m - row["m"]), "q": abs(f.q - row["q"]),
            "sigma": abs(f.V / 2.0 - row["sigma"])}


def row_deviation_z(rows: list[Mapping[str, float]], i: int, kappa: float, lreg: float,
                    engine: Mapping[str, float], stderr: Mapping[str, float]) -> dict[str, float]:
    """:func:`deviation_z` of the engine's values (their units) at their row i of ``rows``
    (one SE table of target kappa and lreg), with that row's prior residual and scatter."""
    row = rows[i]
    scatter = {c: row_scatter(rows, i, c) for c in STDERR_FIELD if c in row}
    return deviation_z(engine, stderr, row, prior_residual(row, kappa, lreg), scatter)


def deviation_z(engine: Mapping[str, float], stderr: Mapping[str, float], row: Mapping[str, float],
                residual: Mapping[str, float], scatter: Mapping[str, float]) -> dict[str, float]:
    """(engine - theirs) / err per column of STDERR_FIELD present in ``row``, with
    err^2 = engine's propagated MC error^2 + their prior residual^2 + their row scatter^2."""
    out = {}
    for col, (field, factor) in STDERR_FIELD.items():
        if col not in row:
            continue
        se = float(stderr.get(field, math.nan)) * (2.0 * row["alpha"] if factor is None else factor)
        err = math.sqrt(se * se + residual.get(col, 0.0) ** 2 + scatter.get(col, 0.0) ** 2)
        out[col] = (engine[col] - row[col]) / err
    return out
