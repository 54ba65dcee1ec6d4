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

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from .channels.base import NOISE_LOCATIONS, Channel, check_channel
from .channels.registry import channel_for, channel_names
from .penalties.registry import penalty_for, penalty_names
from .checks import (InstanceOf, Integer, check_bounded, check_choice, check_integer,
                     check_positive)

if TYPE_CHECKING:
    from .targets import SpectralMeasure

#: the registered channel names (:mod:`amp_attention.channels.registry`)
CHANNELS = channel_names()
#: the registered penalties (:mod:`amp_attention.penalties.registry`)
PARAMETERISATIONS = penalty_names()


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
#: longest eigenvalue list a target holds (a power law's d, a custom list, a density's
#: grid): the deterministic equivalent sums over it at every SE step (a list of 30,000
#: already takes minutes); beyond, a spectrum is better given as a density
TARGET_LIST_MAX = 2_000_000


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


class Target(ABC):
    """The target contract (docs/theory.md "Data model"): what every algorithm asks of S0.

    A target owns its spectral law (:meth:`measure`, the SE's), its deterministic
    eigenvalues at dimension d (:meth:`eigenvalues_at`), the draw of S0 at d
    (:meth:`sample`), its separated modes (:meth:`modes`, for the outliers and the error
    decomposition; :attr:`mode_weight` is one mode's mass in the SE's law), its
    JSON form (:meth:`to_dict`, with ``kind`` the registry key of
    :data:`TARGET_KINDS`), ``Q0`` = Tr(S0^2)/d and ``list_dimension`` (the d of an
    eigenvalue list, None for a limiting law).  The built-in targets are registered in
    :data:`TARGET_KINDS`; a user target subclasses :class:`Target` (and may register
    itself with :func:`register_target` for :func:`target_from_dict`).
    """

    kind: ClassVar[str] = ""

    @abstractmethod
    def measure(self) -> "SpectralMeasure":
        """The limiting (or deterministic-equivalent) eigenvalue law of S0."""

    @abstractmethod
    def eigenvalues_at(self, d: int) -> np.ndarray:
        """The d eigenvalues of the deterministic finite-d target, in the order
        :meth:`sample` rotates them."""

    @abstractmethod
    def to_dict(self) -> dict:
        """Plain-JSON description with ``kind``."""

    @property
    def list_dimension(self) -> int | None:
        return None

    @property
    def Q0(self) -> float:
        return float(self.measure().moment(2))

    @property
    def mode_weight(self) -> float:
        """Mass of one target mode in the SE's law of S0: 1/d for a finite-d list whose
        modes are resolved, 0 in the limit."""
        return 0.0

    @property
    def power_law_exponent(self) -> float | None:
        """gamma of a power-law spectrum s_k ~ k^(-gamma) (scaling laws), else None."""
        return None

    def sample(self, d: int, rng: np.random.Generator, spectrum: str = "sampled") -> np.ndarray:
        """S0 = O diag(eigenvalues_at(d)) O^T with O Haar (``spectrum`` as in
        :func:`~amp_attention.data.sample_target_matrix`)."""
        from .targets import rotate

        return rotate(self.eigenvalues_at(d), rng)

    def modes(self, max_modes: int) -> list:
        """(s_k, law of the rest of the spectrum) for every separated mode, largest first."""
        raise ValueError(f"outliers need a target with separated modes (spiked or power law), "
                         f"got {type(self).__name__}")


def _kappa0_samples(kappa0: float, d: int, rng: np.random.Generator) -> np.ndarray:
    """W0^T W0 / sqrt(p0 d), W0 in R^{p0 x d} i.i.d. N(0,1), p0 = max(1, round(kappa0 d))."""
    p0 = max(1, int(round(kappa0 * d)))
    W0 = rng.standard_normal((p0, d))
    return (W0.T @ W0) / math.sqrt(p0 * d)


class _WishartBulk(Target):
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

    def measure(self) -> "SpectralMeasure":
        """sqrt(kappa0) x Marchenko-Pastur of ratio 1/kappa0 (a spiked target's spikes
        carry no mass in the limit: its law is the bulk's)."""
        from .targets import MarchenkoPasturMeasure

        return MarchenkoPasturMeasure(1.0 / self.kappa0, math.sqrt(self.kappa0))


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

    def eigenvalues_at(self, d: int) -> np.ndarray:
        """The d quantiles of the limiting law (with its atom)."""
        return self.measure().quantiles(d)

    def sample(self, d: int, rng: np.random.Generator, spectrum: str = "sampled") -> np.ndarray:
        """S0 = W0^T W0 / sqrt(p0 d) (``sampled``), or the quantiles rotated by a Haar O."""
        if spectrum == "sampled":
            S0 = _kappa0_samples(self.kappa0, d, rng)
            return 0.5 * (S0 + S0.T)
        return super().sample(d, rng, spectrum)

    def to_dict(self) -> dict:
        return {"kind": "wishart", "kappa0": self.kappa0}


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

    def eigenvalues_at(self, d: int) -> np.ndarray:
        """The bulk's d quantiles with the top len(spikes) replaced by the spikes."""
        from .targets import with_spikes

        return with_spikes(self.measure().quantiles(d), self.spikes)

    def sample(self, d: int, rng: np.random.Generator, spectrum: str = "sampled") -> np.ndarray:
        """A sampled Wishart bulk (``sampled``) or its quantiles, with the spikes, rotated."""
        if spectrum == "sampled":
            from .targets import rotate, with_spikes

            bulk = np.linalg.eigvalsh(_kappa0_samples(self.kappa0, d, rng))
            return rotate(with_spikes(bulk, self.spikes), rng)
        return super().sample(d, rng, spectrum)

    def modes(self, max_modes: int) -> list:
        """Every spike against the bulk's law."""
        bulk = self.measure()
        return [(s, bulk) for s in self.spikes][:max_modes]

    def to_dict(self) -> dict:
        return {"kind": "spiked", "kappa0": self.kappa0, "spikes": list(self.spikes)}


@dataclass(frozen=True)
class PowerLawTarget(Target):
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
        object.__setattr__(self, "d", Integer(1, TARGET_LIST_MAX, integral_float=True,
                                              why="the length of its eigenvalue list").check(
                                                  "d", self.d))
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

    def measure(self) -> "SpectralMeasure":
        """The d eigenvalues as atoms of mass 1/d (the deterministic equivalent)."""
        from .targets import DiscreteMeasure

        return DiscreteMeasure(self.eigenvalues())

    def eigenvalues_at(self, d: int) -> np.ndarray:
        """The law re-evaluated at dimension d with p0 scaled proportionally (decreasing)."""
        p0 = max(1, int(round(self.p0 * d / self.d)))
        return dataclasses.replace(self, d=d, p0=min(p0, d)).eigenvalues()

    @property
    def mode_weight(self) -> float:
        return 1.0 / self.d

    @property
    def power_law_exponent(self) -> float:
        return self.gamma

    def modes(self, max_modes: int) -> list:
        """The top ``max_modes`` non-zero eigenvalues, each against the other d - 1."""
        from .targets import DiscreteMeasure

        s = np.sort(self.eigenvalues())[::-1]
        w = 1.0 / s.size
        out = []
        for k in range(min(max_modes, s.size)):
            if s[k] <= 0:
                break
            rest = np.delete(s, k)
            out.append((float(s[k]), DiscreteMeasure(rest, np.full(rest.size, w))))
        return out

    def to_dict(self) -> dict:
        return {"kind": "powerlaw", "gamma": self.gamma, "d": self.d, "p0": self.p0,
                "Q0": self.Q0}


@dataclass(frozen=True)
class CustomTarget(Target):
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
            if ev.size > TARGET_LIST_MAX:
                raise ValueError(f"eigenvalues: at most {TARGET_LIST_MAX} values, got {ev.size} "
                                 "(give a long spectrum as a density: grid + density)")
            if not np.all(np.isfinite(ev)):
                raise ValueError("eigenvalues must be finite (no NaN or inf)")
            if np.any(ev < 0):
                raise ValueError("eigenvalues must be >= 0 (the target is PSD)")
            object.__setattr__(self, "eigenvalues", tuple(float(v) for v in ev))
            self._check_scale()
            return
        if self.density is None:
            raise ValueError("density must be given together with grid")
        x = np.asarray(self.grid, dtype=float).ravel()
        rho = np.asarray(self.density, dtype=float).ravel()
        if x.size < 2 or x.size != rho.size:
            raise ValueError("grid and density must have the same length >= 2")
        if x.size > TARGET_LIST_MAX:
            raise ValueError(f"grid: at most {TARGET_LIST_MAX} points, got {x.size}")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(rho))):
            raise ValueError("grid and density must be finite (no NaN or inf)")
        if np.any(x < 0) or np.any(np.diff(x) <= 0):
            raise ValueError("grid must be increasing and >= 0 (the target is PSD)")
        if np.any(rho < 0) or not np.any(rho > 0):
            raise ValueError("density must be >= 0 with positive mass")
        object.__setattr__(self, "grid", tuple(float(v) for v in x))
        object.__setattr__(self, "density", tuple(float(v) for v in rho))
        self._check_scale()

    def _check_scale(self) -> None:
        """Q0 = Tr(S0^2)/d within Q0_RANGE, as for a power law: an all-zero target has
        nothing to learn, and one of ~1e154 or more overflows the fourth moments."""
        with np.errstate(over="ignore"):
            q0 = self.Q0
        if not (Q0_RANGE[0] <= q0 <= Q0_RANGE[1]):
            raise ValueError(f"{'eigenvalues' if self.eigenvalues is not None else 'grid'}: "
                             f"the target's Q0 = Tr(S0^2)/d must lie in [{Q0_RANGE[0]:g}, "
                             f"{Q0_RANGE[1]:g}] (an all-zero target has nothing to learn; "
                             f"beyond, moments overflow), got {q0:.3g}")

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

    def measure(self) -> "SpectralMeasure":
        from .targets import DiscreteMeasure

        pts, w = self.atoms()
        return DiscreteMeasure(pts, w)

    def eigenvalues_at(self, d: int) -> np.ndarray:
        """The (i + 1/2)/d quantiles of the discrete measure (a list of length d comes back
        exactly)."""
        from .targets import quantile_eigenvalues

        positions, weights = self.atoms()
        return quantile_eigenvalues(positions, weights, d)

    def to_dict(self) -> dict:
        return {"kind": "custom", "eigenvalues": self.eigenvalues, "grid": self.grid,
                "density": self.density}

    @classmethod
    def from_density(cls, density, lo: float, hi: float, points: int = 2001) -> "CustomTarget":
        """A target with the density ``density(x)`` (a callable, vectorised or not) on
        [lo, hi], tabulated on ``points`` equally spaced points (trapezoidal rule)."""
        lo, hi = float(lo), float(hi)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo < hi):
            raise ValueError(f"lo, hi must satisfy 0 <= lo < hi < inf, got {lo!r}, {hi!r}")
        if not callable(density):
            raise TypeError(f"density must be a callable x -> rho(x), got {type(density).__name__}")
        points = check_integer("points", points, 3)
        x = np.linspace(lo, hi, points)
        rho = np.array([float(density(v)) for v in x])
        return cls(grid=tuple(x), density=tuple(rho))


#: the built-in targets by ``kind`` (their JSON form's key); :func:`register_target` adds one
TARGET_KINDS: dict[str, type] = {"wishart": WishartTarget, "spiked": SpikedTarget,
                                 "powerlaw": PowerLawTarget, "custom": CustomTarget}


def register_target(kind: str, cls: type) -> None:
    """Register a :class:`Target` subclass under ``kind`` (for :func:`target_from_dict`)."""
    if not (isinstance(cls, type) and issubclass(cls, Target)):
        raise TypeError(f"cls must be a subclass of amp_attention.spec.Target, got {cls!r}")
    TARGET_KINDS[str(kind)] = cls


def target_from_dict(data: dict) -> Target:
    """The target of a :meth:`Target.to_dict` form (the registry read back)."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in TARGET_KINDS:
        raise ValueError(f"target kind must be one of {', '.join(TARGET_KINDS)}, got {kind!r}")
    cls = TARGET_KINDS[kind]
    names = {f.name for f in dataclasses.fields(cls) if f.init} if dataclasses.is_dataclass(cls) \
        else set(data) - {"kind"}
    args = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in names}
    return cls(**args)


@dataclass(frozen=True)
class Learner:
    """The trained model: width ratio kappa = p/d, weight decay lam (docs/theory.md "Learners
    and the objective").

    ``parameterisation="factorised"``: S = W^T W / sqrt(p d), penalty
    lam * d * Tr S = (lam / sqrt(kappa)) ||W||_F^2, so ERM over PSD S with
    rank <= kappa d (no cap when kappa >= 1).  ``"elementwise"``: S symmetric,
    unconstrained, penalty lam * d * ||S||_F^2 / 2 (kappa is ignored).  ``"symmetric"``:
    S symmetric of either sign, penalty lam * d * ||S||_* (kappa >= 1).  Each is a
    registered :mod:`amp_attention.penalties` module.
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
        self.penalty  # a penalty's own limits (e.g. kappa >= 1) are checked here

    @property
    def penalty(self):
        """The learner's :class:`~amp_attention.penalties.Penalty` (from the registry)."""
        return penalty_for(self)

    @property
    def rank_capped(self) -> bool:
        return bool(self.penalty.rank_capped)


@dataclass(frozen=True)
class Problem:
    """A full problem: task, target, learner and sample ratio alpha = n/d^2."""

    task: Task = field(default_factory=Task)
    target: Target = field(default_factory=WishartTarget)
    learner: Learner = field(default_factory=Learner)
    alpha: float = 0.5

    def __post_init__(self) -> None:
        InstanceOf((Task,), "a Task").check("task", self.task)
        InstanceOf((Target,), "a Target (WishartTarget, SpikedTarget, PowerLawTarget, "
                   "CustomTarget, or a subclass of amp_attention.spec.Target)").check(
                       "target", self.target)
        InstanceOf((Learner,), "a Learner").check("learner", self.learner)
        # beyond ALPHA_RANGE the conjugates (~ alpha) under- or overflow inside the free
        # convolution (ZeroDivisionError at 1e-300, OverflowError at 1e300); one message
        # with the whole range, also for NaN and infinity
        alpha = check_bounded("alpha", self.alpha, *ALPHA_RANGE, "n = alpha d^2 samples")
        object.__setattr__(self, "alpha", alpha)

    def to_dict(self) -> dict:
        """Plain-JSON description of every parameter (recorded in outputs)."""
        target = self.target.to_dict()
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
