"""Size guards: what a finite-d run will need, against what the machine has.

The estimate is deliberately simple and on the safe side: a finite-d run holds
the tokens X (n L d doubles), about two work arrays of that size (forward
products, gradients), the test tokens (max(n, 20000) L d doubles, drawn at
once), and a few dozen d x d matrices.
"""

from __future__ import annotations

import os

#: a run may take at most this share of the memory available when it starts
MEMORY_SHARE = 0.8
#: d x d matrices a finite-d run keeps at once (S, gradients, momenta, eigenvectors)
DD_MATRICES = 24
#: test samples drawn at once by the population error
N_TEST_MIN = 20000


def available_memory() -> int | None:
    """Bytes available for new allocations (MemAvailable of /proc/meminfo; None if
    unknown, e.g. not Linux)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def finite_d_memory(n: int, L: int, d: int, p: int = 0, p0: int = 0,
                    n_test: int | None = None) -> int:
    """Bytes a finite-d run (ERM, GAMP or Adam) of n samples of L tokens in dimension d
    needs at most (module docstring), with a learner W of p x d (four copies: W, its
    gradient and two Adam moments), a target factor W0 of p0 x d and ``n_test`` test
    samples (default max(n, N_TEST_MIN))."""
    test = max(n, N_TEST_MIN) if n_test is None else n_test
    return 8 * (3 * n * L * d + test * L * d + DD_MATRICES * d * d + 4 * p * d + p0 * d)


def heads_memory(n: int, m: int, n_val: int, d_model: int, heads_width: int, s: int,
                 draws: int, H: int) -> int:
    """Bytes a multi-head NW simulation (amp_attention.heads) holds at once: the points
    of one draw ((n + m + n_val) d_model) and their projections on all heads
    ((n + m + n_val) H d_k, with ``heads_width`` = H d_k), the key matrices of the
    heads (H d_model d_k, three copies: the stack, a rotation or QR, its result), the
    target directions (d_model s, twice for their QR), one (m + n_val) x n kernel block
    per head at a time (twice: logits and weights) and the predictions of all draws
    (draws H (m + n_val))."""
    pts = n + m + n_val
    return 8 * (2 * pts * d_model + pts * heads_width + 3 * d_model * heads_width
                + 2 * d_model * s + 2 * (m + n_val) * n + draws * H * (m + n_val))


def gib(nbytes: float) -> str:
    x = nbytes / 2**30
    return f"{x:.1f} GiB" if x < 1e5 else f"{x:.3g} GiB"


def memory_shortfall(need: int, available: int | None = None) -> str:
    """'' when ``need`` bytes fit in MEMORY_SHARE of the available memory, else the
    sentence that says what is needed and what is available."""
    available = available_memory() if available is None else available
    if available is None or need <= MEMORY_SHARE * available:
        return ""
    return (f"needs about {gib(need)} of memory, but {gib(available)} are available "
            f"(a run may take {MEMORY_SHARE:.0%} of it)")
