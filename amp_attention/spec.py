"""Problem specification: frozen, validated dataclasses (docs/theory.md "Data model", "Learners
and the objective").

A :class:`Problem` bundles

* a :class:`Task` -- output channel, number of tokens ``L``, softmax inverse
  temperature ``beta`` and label-noise variance ``noise`` (Delta);
* a target -- :class:`WishartTarget` (``kappa0``), :class:`PowerLawTarget`
  (``gamma``, ``p0``, ``Q0``) or :class:`CustomTarget` (an eigenvalue list or a
  tabulated density);
* a :class:`Learner` -- width ratio ``kappa = p/d``, weight decay ``lam`` and the
  parameterisation (``"factorised"``: S = W^T W / sqrt(p d) with nuclear-norm
  penalty ``lam * d * Tr S``; ``"elementwise"``: S itself with Frobenius penalty
  ``lam * d * ||S||_F^2 / 2``);
* the sample ratio ``alpha = n / d^2``.

Every constructor validates its arguments and raises :class:`ValueError` whose
message names the parameter and its allowed range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Union

import numpy as np

from .channels.base import NOISE_LOCATIONS, Channel, check_channel
from .channels.registry import channel_for, channel_names
from .checks import (InstanceOf, check_bounded, check_choice, check_integer, check_positive)

#: the registered channel names (:mod:`amp_attention.channels.registry`)
CHANNELS = channel_names()
PARAMETERISATIONS = ("factorised", "elementwise")


#: supported sample ratios alpha = n/d^2 and label-noise variances (double precision)
ALPHA_RANGE = (1e-9, 1e9)
NOISE_MAX = 1e12
#: largest number of tokens L a Task accepts: the channels hold O(L^2) arrays (and the
#: theory is that of L fixed as d -> infinity)
L_MAX = 4096
#: largest softmax inverse temperature a Task accepts
BETA_MAX = 1e3
#: allowed width ratios kappa = p/d and kappa0 = p0/d (beyond, the Marchenko-Pastur
#: functionals under- or overflow)
WIDTH_RANGE = (1e-6, 1e6)
#: allowed nonzero weight decays
LAM_RANGE = (1e-12, 1e6)
#: allowed power-law normalisations Q0 = Tr(S0^2)/d (beyond, fourth moments of the
#: spectrum overflow in double precision)
Q0_RANGE = (1e-12, 1e12)


def check_width(name: str, value: object) -> float:
    """A width ratio (kappa, kappa0) in WIDTH_RANGE."""
    return check_bounded(name, value, *WIDTH_RANGE,
                         "beyond, the Marchenko-Pastur functionals under- or overflow")


@dataclass(frozen=True)
class Task:
    """What is learned: channel, tokens, temperature and label noise (docs/theory.md "Data model").

    ``channel``: a registered name (:data:`CHANNELS`) or a channel instance
    meeting :class:`~amp_attention.channels.Channel` (e.g. a
    :class:`~amp_attention.channels.CustomChannel`).  An instance carries its own
    L, noise and noise_at (and beta if it has one): they are copied into the
    task, and a value given here that is not the default and differs from the
    instance's raises ValueError.  ``noise`` is the label-noise variance Delta;
    ``noise_at`` says where it enters and with which covariance
    (:data:`~amp_attention.channels.base.NOISE_LOCATIONS`): added to the outputs
    (``"output"``, default); to the logits with variance Delta on every h_ab
    (``"logit"``); or to the logits as sqrt(Delta/2) times a GOE matrix, variance Delta on
    the diagonal and Delta/2 off it (``"logit_goe"``, the model of arXiv 2509.24914).
    """

    channel: "str | Channel" = "linear"
    L: int = 1
    beta: float = 1.0
    noise: float = 0.0
    noise_at: str = "output"

    def __post_init__(self) -> None:
        if not isinstance(self.channel, str):
            self._adopt(check_channel(self.channel))
        object.__setattr__(self, "channel", self.channel if not isinstance(self.channel, str)
                           else check_choice("channel", self.channel, CHANNELS))
        object.__setattr__(self, "L", check_integer("L", self.L, 1))
        if self.L > L_MAX:
            raise ValueError(f"L must lie in [1, {L_MAX}] (channels hold arrays over the "
                             f"K = L(L+1)/2 token pairs), got {self.L}")
        object.__setattr__(self, "beta", check_bounded(
            "beta", self.beta, 0.0, BETA_MAX, "beta h_ab with h = O(1): beyond, the softmax is "
            "a hard max and its integrals overflow", lo_open=True))
        object.__setattr__(self, "noise", check_bounded(
            "noise", self.noise, 0.0, NOISE_MAX,
            "a label-noise variance; the target's outputs have variance O(1)"))
        object.__setattr__(
            self, "noise_at", check_choice("noise_at", self.noise_at, NOISE_LOCATIONS)
        )
        if isinstance(self.channel, str):
            channel_for(self)  # the channel's own constraints (e.g. L >= 2 for a softmax)

    def _adopt(self, channel: "Channel") -> None:
        """Copy L, noise, noise_at, beta from a channel instance (see the class docstring)."""
        for name in ("L", "noise", "noise_at", "beta"):
            if not hasattr(channel, name):
                continue
            given, own = getattr(self, name), getattr(channel, name)
            default = self.__dataclass_fields__[name].default
            if given != default and given != own:
                raise ValueError(f"{name}={given!r} conflicts with the channel's {name}={own!r} "
                                 f"(a channel instance carries its own {name})")
            object.__setattr__(self, name, own)

    @property
    def channel_name(self) -> str:
        """The channel's name (the registered name, or the instance's ``name``)."""
        return self.channel if isinstance(self.channel, str) else str(self.channel.name)

    @property
    def channel_object(self) -> "Channel":
        """The channel object: the instance given, or the registered class built from
        this task (:func:`~amp_attention.channels.channel_for`)."""
        return channel_for(self)

    @property
    def K(self) -> int:
        """Number of u-components per sample, L(L+1)/2 (docs/theory.md "Why the problem is a
        GLM")."""
        return self.L * (self.L + 1) // 2


class _WishartBulk:
    """What the Wishart law of width kappa0 gives a target (spikes add O(1/d) only)."""

    kappa0: float

    @property
    def list_dimension(self) -> None:
        """None: a limiting law, not an eigenvalue list of one dimension."""
        return None

    @property
    def Q0(self) -> float:
        """Tr(S0^2)/d of the d -> infinity limit, 1 + kappa0."""
        return 1.0 + self.kappa0


@dataclass(frozen=True)
class WishartTarget(_WishartBulk):
    """S0 = W0^T W0 / sqrt(p0 d), W0 in R^{p0 x d} i.i.d. N(0,1), kappa0 = p0/d.

    Eigenvalues sqrt(kappa0) * mu with mu Marchenko-Pastur of ratio 1/kappa0
    (atom of mass 1 - kappa0 at 0 when kappa0 < 1); Q0 = 1 + kappa0.
    """

    kappa0: float = 0.5
    kind: Literal["wishart"] = field(default="wishart", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kappa0", check_width("kappa0", self.kappa0))


@dataclass(frozen=True)
class SpikedTarget(_WishartBulk):
    """A Wishart bulk (``kappa0``) with planted spikes: S0 = O diag(s) O^T, O Haar,
    where the top len(spikes) of the d bulk eigenvalues are replaced by ``spikes``.

    The spikes have zero mass as d -> infinity: the SE's overlaps are those of
    the bulk, and each spike shows up as an outlier eigenvalue of Shat when it
    is strong enough (docs/theory.md "Spectra of the learned weights";
    ``amp_attention.solvers.outliers``).  Its eigenvector is the
    corresponding column of O.
    """

    kappa0: float = 0.5
    spikes: tuple[float, ...] = (6.0, 9.0, 12.0)
    kind: Literal["spiked"] = field(default="spiked", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kappa0", check_width("kappa0", self.kappa0))
        sp = tuple(float(v) for v in np.atleast_1d(np.asarray(self.spikes, dtype=float)))
        if not sp or any(not (math.isfinite(v) and v > 0) for v in sp):
            raise ValueError(f"spikes must be a non-empty list of numbers > 0, got {self.spikes!r}")
        object.__setattr__(self, "spikes", tuple(sorted(sp, reverse=True)))


@dataclass(frozen=True)
class PowerLawTarget:
    """S0 = O diag(s) O^T with s_k = c k^(-gamma) for k <= p0, 0 beyond (docs/theory.md "Data
    model").

    The spectrum is defined at a finite dimension ``d`` (deterministic
    equivalent); ``c`` is fixed by Tr(S0^2)/d = Q0.  ``p0`` defaults to ``d``.
    """

    gamma: float = 1.0
    d: int = 400
    p0: int | None = None
    Q0: float = 1.0
    kind: Literal["powerlaw"] = field(default="powerlaw", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", check_positive("gamma", self.gamma))
        object.__setattr__(self, "d", check_integer("d", self.d, 1))
        p0 = self.d if self.p0 is None else check_integer("p0", self.p0, 1)
        if p0 > self.d:
            raise ValueError(f"p0 must lie in [1, d] = [1, {self.d}], got {p0}")
        object.__setattr__(self, "p0", p0)
        object.__setattr__(self, "Q0", check_bounded("Q0", self.Q0, *Q0_RANGE,
                                                     "the scale of the target spectrum"))

    @property
    def list_dimension(self) -> int:
        """The dimension whose eigenvalue list the deterministic equivalent uses (target-d)."""
        return self.d

    def eigenvalues(self) -> np.ndarray:
        """The d target eigenvalues, decreasing, normalised to Tr(S0^2)/d = Q0."""
        k = np.arange(1, self.d + 1, dtype=float)
        s = np.where(k <= self.p0, k ** (-self.gamma), 0.0)
        s *= math.sqrt(self.Q0 * self.d / float(np.sum(s * s)))
        return s


@dataclass(frozen=True)
class CustomTarget:
    """A user-given target spectrum: an eigenvalue list, or a tabulated density.

    Give either ``eigenvalues`` (each >= 0; a finite-d spectrum, every value of
    weight 1/len) or ``grid`` and ``density`` (a density on an increasing grid of
    nonnegative points; it is normalised and treated by the trapezoidal rule).
    """

    eigenvalues: tuple[float, ...] | None = None
    grid: tuple[float, ...] | None = None
    density: tuple[float, ...] | None = None
    kind: Literal["custom"] = field(default="custom", init=False)

    def __post_init__(self) -> None:
        if (self.eigenvalues is None) == (self.grid is None):
            raise ValueError("custom target: give exactly one of eigenvalues or grid+density")
        if self.eigenvalues is not None:
            ev = np.asarray(self.eigenvalues, dtype=float).ravel()
            if ev.size == 0:
                raise ValueError("eigenvalues must be a non-empty list of numbers >= 0")
            if not np.all(np.isfinite(ev)):
                raise ValueError("eigenvalues must be finite (no NaN or inf)")
            if np.any(ev < 0):
                raise ValueError("eigenvalues must be >= 0 (the target is PSD)")
            object.__setattr__(self, "eigenvalues", tuple(float(v) for v in ev))
            return
        if self.density is None:
            raise ValueError("density must be given together with grid")
        x = np.asarray(self.grid, dtype=float).ravel()
        rho = np.asarray(self.density, dtype=float).ravel()
        if x.size < 2 or x.size != rho.size:
            raise ValueError("grid and density must have the same length >= 2")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(rho))):
            raise ValueError("grid and density must be finite (no NaN or inf)")
        if np.any(x < 0) or np.any(np.diff(x) <= 0):
            raise ValueError("grid must be increasing and >= 0 (the target is PSD)")
        if np.any(rho < 0) or not np.any(rho > 0):
            raise ValueError("density must be >= 0 with positive mass")
        object.__setattr__(self, "grid", tuple(float(v) for v in x))
        object.__setattr__(self, "density", tuple(float(v) for v in rho))

    @property
    def list_dimension(self) -> int | None:
        """len(eigenvalues) for an eigenvalue list (a finite-d spectrum), None for a density."""
        return None if self.eigenvalues is None else len(self.eigenvalues)

    def atoms(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions, weights) of the discrete measure representing the target."""
        if self.eigenvalues is not None:
            ev = np.asarray(self.eigenvalues)
            return ev, np.full(ev.size, 1.0 / ev.size)
        x = np.asarray(self.grid)
        rho = np.asarray(self.density)
        w = np.zeros_like(x)
        dx = np.diff(x)
        w[:-1] += 0.5 * dx * rho[:-1]
        w[1:] += 0.5 * dx * rho[1:]
        keep = w > 0
        return x[keep], w[keep] / np.sum(w)

    @property
    def Q0(self) -> float:
        s, w = self.atoms()
        return float(np.sum(w * s * s))


Target = Union[WishartTarget, PowerLawTarget, CustomTarget, SpikedTarget]


@dataclass(frozen=True)
class Learner:
    """The trained model: width ratio kappa = p/d, weight decay lam (docs/theory.md "Learners
    and the objective").

    ``parameterisation="factorised"``: S = W^T W / sqrt(p d), penalty
    lam * d * Tr S = (lam / sqrt(kappa)) ||W||_F^2, so ERM over PSD S with
    rank <= kappa d (no cap when kappa >= 1).  ``"elementwise"``: S symmetric,
    unconstrained, penalty lam * d * ||S||_F^2 / 2 (kappa is ignored).
    """

    kappa: float = 1.0
    lam: float = 0.1
    parameterisation: str = "factorised"

    def __post_init__(self) -> None:
        object.__setattr__(self, "kappa", check_width("kappa", self.kappa))
        object.__setattr__(self, "lam", check_bounded(
            "lam", self.lam, *LAM_RANGE, "beyond, the conjugates under- or overflow",
            zero_ok=True))
        object.__setattr__(
            self,
            "parameterisation",
            check_choice("parameterisation", self.parameterisation, PARAMETERISATIONS),
        )

    @property
    def rank_capped(self) -> bool:
        return self.parameterisation == "factorised" and self.kappa < 1.0


@dataclass(frozen=True)
class Problem:
    """A full problem: task, target, learner and sample ratio alpha = n/d^2."""

    task: Task = field(default_factory=Task)
    target: Target = field(default_factory=WishartTarget)
    learner: Learner = field(default_factory=Learner)
    alpha: float = 0.5

    def __post_init__(self) -> None:
        InstanceOf((Task,), "a Task").check("task", self.task)
        InstanceOf((WishartTarget, PowerLawTarget, CustomTarget, SpikedTarget),
                   "a WishartTarget, PowerLawTarget, CustomTarget or SpikedTarget").check(
                       "target", self.target)
        InstanceOf((Learner,), "a Learner").check("learner", self.learner)
        alpha = check_positive("alpha", self.alpha)
        if not ALPHA_RANGE[0] <= alpha <= ALPHA_RANGE[1]:
            # beyond it the conjugates (~ alpha) under- or overflow inside the free
            # convolution (ZeroDivisionError at 1e-300, OverflowError at 1e300)
            raise ValueError(f"alpha must lie in [{ALPHA_RANGE[0]:g}, {ALPHA_RANGE[1]:g}] "
                             f"(n = alpha d^2 samples), got {self.alpha!r}")
        object.__setattr__(self, "alpha", alpha)

    def to_dict(self) -> dict:
        """Plain-JSON description of every parameter (recorded in outputs)."""
        t = self.target
        if isinstance(t, WishartTarget):
            target = {"kind": "wishart", "kappa0": t.kappa0}
        elif isinstance(t, SpikedTarget):
            target = {"kind": "spiked", "kappa0": t.kappa0, "spikes": list(t.spikes)}
        elif isinstance(t, PowerLawTarget):
            target = {"kind": "powerlaw", "gamma": t.gamma, "d": t.d, "p0": t.p0, "Q0": t.Q0}
        else:
            target = {"kind": "custom", "eigenvalues": t.eigenvalues, "grid": t.grid,
                      "density": t.density}
        return {
            "channel": self.task.channel_name,
            "L": self.task.L,
            "beta": self.task.beta,
            "noise": self.task.noise,
            "noise_at": self.task.noise_at,
            "target": target,
            "kappa": self.learner.kappa,
            "lam": self.learner.lam,
            "parameterisation": self.learner.parameterisation,
            "alpha": self.alpha,
        }


def check_problem(problem: object) -> Problem:
    """``problem`` itself when it is a :class:`Problem`, else a TypeError naming it."""
    return InstanceOf((Problem,), "a Problem").check("problem", problem)
