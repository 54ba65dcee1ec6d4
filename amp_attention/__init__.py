"""High-dimensional theory engine for tied single-head attention (state evolution, AMP, ERM)."""

import os

from ._checkout import map_checkout_solvers

__version__ = "0.1.0"

# Numba's parallel kernels run on GNU OpenMP, whose idle threads spin for a while
# after each parallel region; OpenBLAS's threads do the same after each GEMM.  On a
# 2-core machine the two pools then take the cores from each other: a softmax ERM
# that alternates kernels and GEMMs ran 8x slower (142 s instead of 18 s, see
# docs/performance.md).  Passive waiting costs nothing measurable on a state
# evolution point.  It must be set before libgomp loads (the first parallel
# kernel), hence here; a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Imported from a source checkout (``python -m pytest`` from the repository root puts
# the root first on sys.path, ahead of the installed copy), the theory layer is the
# top-level folder solvers/; see amp_attention/_checkout.py.
map_checkout_solvers(os.path.dirname(os.path.abspath(__file__)))
