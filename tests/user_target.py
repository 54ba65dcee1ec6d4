"""A user target in one module (issue 31): eigenvalues uniform on [a, b].

It subclasses :class:`amp_attention.spec.Target` (its law, its eigenvalues at d, its JSON
form) and registers itself; nothing in the package knows it.
"""

from dataclasses import dataclass

import numpy as np

from amp_attention.spec import Target, register_target
from amp_attention.targets import DiscreteMeasure

#: atoms of the deterministic equivalent of the uniform law (midpoints of equal cells)
ATOMS = 4000


@dataclass(frozen=True)
class UniformTarget(Target):
    """S0 = O diag(s) O^T, O Haar, s uniform on [a, b] (0 <= a < b)."""

    a: float = 0.0
    b: float = 2.0
    kind = "uniform"

    def __post_init__(self):
        if not (0.0 <= self.a < self.b < np.inf):
            raise ValueError(f"a, b must satisfy 0 <= a < b < inf, got {self.a!r}, {self.b!r}")

    def measure(self):
        return DiscreteMeasure(self.eigenvalues_at(ATOMS))

    def eigenvalues_at(self, d):
        return self.a + (self.b - self.a) * (np.arange(d) + 0.5) / d

    def to_dict(self):
        return {"kind": "uniform", "a": self.a, "b": self.b}


register_target("uniform", UniformTarget)
