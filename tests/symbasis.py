"""The orthonormal basis of Sym(d) (E_ii, (E_ij + E_ji)/sqrt 2), shared by tests."""

from __future__ import annotations

import math

import numpy as np


def orthonormal_sym_basis(d: int) -> list[np.ndarray]:
    basis = []
    for i in range(d):
        for j in range(i, d):
            E = np.zeros((d, d))
            if i == j:
                E[i, i] = 1.0
            else:
                E[i, j] = E[j, i] = 1.0 / math.sqrt(2.0)
            basis.append(E)
    return basis
