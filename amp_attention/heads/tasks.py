"""The synthetic regression task on which NW heads and their ensembles are simulated.

Inputs x are uniform on the sphere of radius sqrt(d_model), so every
coordinate (and every projection u^T x on a unit vector) has variance exactly
1, and ||x|| is the same for all inputs.  The target depends on x through s
orthonormal directions u_1..u_s (s = ``intrinsic_dim``, drawn Haar-uniformly
from ``seed``):

    g(x) = sqrt(2/s) sum_{j=1}^s sin(omega u_j^T x),

whose variance is close to 1 for omega >= 1 (exactly (1 - exp(-2 omega^2)) in
the large-d_model limit where u_j^T x ~ N(0, 1)).  Labels are y = g(x) + sigma
eps with eps ~ N(0, 1).  The m test points are fixed by ``seed``; training
draws come from their own generator, one per draw (see ``training_rng``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..checks import check_integer, check_nonnegative, check_positive

# Stream tags that keep the task's fixed randomness (directions, test points)
# apart from the training draws.
_DIRECTIONS_TAG = 101
_TEST_TAG = 102
_TRAIN_TAG = 103


#: largest label-noise standard deviation.  The simulations add O(1) quantities (the
#: target g has variance ~1, so bias^2 is O(1)) to and subtract them from noise terms of
#: size ~sigma^2 (variances, covariances, the MSE itself); in float64 (unit roundoff
#: 2^-53 ~ 1.1e-16) an O(1) term survives next to sigma^2 only while sigma^2 * 1.1e-16 << 1.
#: sigma <= 1e6 keeps that error below 1.1e-4 of the target variance, and keeps every
#: sum of squared errors (~sigma^4 times the number of terms, for the standard errors)
#: far below the float64 maximum 1.8e308 (the standard errors overflow to inf from
#: sigma ~ 1e77, the MSEs from ~ 1e154).
SIGMA_MAX = 1e6
SIGMA_WHY = ("beyond it the unit-variance target is lost in float64 rounding next to the "
             "sigma^2 noise terms, and larger values overflow")


def check_seed(name: str, value: object) -> int:
    """A numpy-compatible seed: an integer >= 0 (ValueError naming ``name`` otherwise)."""
    return check_integer(name, value, 0)


@dataclass(frozen=True)
class NWTask:
    """Synthetic NW regression task (see the module docstring for g).

    d_model: input dimension (>= 1); n: training points per draw (>= 1);
    m: fixed test points (>= 1); sigma: label-noise standard deviation, in
    [0, SIGMA_MAX = 1e6];
    intrinsic_dim: number s of target directions, in [1, d_model];
    omega: frequency of the target (> 0); n_val: held-out validation points per
    draw used to rank heads (>= 0; never the test points); seed: fixes the target
    directions and the test points (integer >= 0).
    """

    d_model: int = 24
    n: int = 500
    m: int = 200
    sigma: float = 0.5
    intrinsic_dim: int = 2
    omega: float = 1.0
    n_val: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "d_model", check_integer("d_model", self.d_model, 1))
        object.__setattr__(self, "n", check_integer("n", self.n, 1))
        object.__setattr__(self, "m", check_integer("m", self.m, 1))
        sigma = check_nonnegative("sigma", self.sigma)
        if sigma > SIGMA_MAX:
            raise ValueError(f"sigma must be <= {SIGMA_MAX:g} ({SIGMA_WHY}), got {sigma!r}")
        object.__setattr__(self, "sigma", sigma)
        s = check_integer("intrinsic_dim", self.intrinsic_dim, 1)
        if s > self.d_model:
            raise ValueError(f"intrinsic_dim must lie in [1, d_model] = [1, {self.d_model}], got {s}")
        object.__setattr__(self, "intrinsic_dim", s)
        object.__setattr__(self, "omega", check_positive("omega", self.omega))
        object.__setattr__(self, "n_val", check_integer("n_val", self.n_val, 0))
        object.__setattr__(self, "seed", check_seed("seed", self.seed))

    def to_dict(self) -> dict:
        return asdict(self)

    def directions(self) -> np.ndarray:
        """The target directions u_1..u_s as rows, shape (s, d_model), orthonormal."""
        rng = np.random.default_rng([self.seed, _DIRECTIONS_TAG])
        G = rng.standard_normal((self.d_model, self.intrinsic_dim))
        Q, R = np.linalg.qr(G)
        # Sign fix of the QR factor makes Q Haar-distributed (Mezzadri 2007).
        return (Q * np.sign(np.diag(R))).T

    def target(self, X: np.ndarray) -> np.ndarray:
        """g(x) = sqrt(2/s) sum_j sin(omega u_j^T x) for every row of X."""
        Z = np.asarray(X, dtype=float) @ self.directions().T
        return math.sqrt(2.0 / self.intrinsic_dim) * np.sin(self.omega * Z).sum(axis=1)

    def sample_inputs(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` points uniform on the sphere of radius sqrt(d_model)."""
        Z = rng.standard_normal((count, self.d_model))
        Z *= math.sqrt(self.d_model) / np.linalg.norm(Z, axis=1, keepdims=True)
        return Z

    def sample(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` labelled points (X, y = g(X) + sigma eps)."""
        X = self.sample_inputs(rng, count)
        return X, self.target(X) + self.sigma * rng.standard_normal(count)

    def test_set(self) -> tuple[np.ndarray, np.ndarray]:
        """The m fixed test points and their clean targets g(x_t)."""
        X = self.sample_inputs(np.random.default_rng([self.seed, _TEST_TAG]), self.m)
        return X, self.target(X)

    def training_rng(self, seed: int, draw: int, head: int | None = None) -> np.random.Generator:
        """Generator of training draw ``draw`` (and of head ``head`` with independent heads).

        Seeded by (task seed, simulation seed, draw[, head]) so that different
        head configurations simulated with the same seed see the same training
        data (common random numbers), which makes their MSE differences far
        less noisy than independent simulations would.
        """
        key = [self.seed, _TRAIN_TAG, seed, draw] + ([] if head is None else [head + 1])
        return np.random.default_rng(key)
