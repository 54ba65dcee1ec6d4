"""High-dimensional theory engine for tied single-head attention (state evolution, AMP, ERM)."""

import os

from ._checkout import map_checkout_solvers
from ._environment import matplotlib_config_fallback, numba_cache_fallback, set_omp_wait_policy

__version__ = "0.1.0"

# before libgomp and Numba load (their first kernel): OMP_WAIT_POLICY=passive (idle
# OpenMP threads spinning against OpenBLAS's made an ERM 8x slower on 2 cores) and a
# writable Numba cache (and Matplotlib config) folder for a read-only install or HOME;
# see _environment.py
set_omp_wait_policy()
numba_cache_fallback(os.path.dirname(os.path.abspath(__file__)))
matplotlib_config_fallback()

# Imported from a source checkout (``python -m pytest`` from the repository root puts
# the root first on sys.path, ahead of the installed copy), the theory layer is the
# top-level folder solvers/; see amp_attention/_checkout.py.
map_checkout_solvers(os.path.dirname(os.path.abspath(__file__)))
