"""Integer helpers the compiled kernels of the network and of the experts share (numba, inlined)."""

from __future__ import annotations

import numpy as np
from numba import njit

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)


@njit(cache=True, inline="always")
def floor_log2(v):
    """floor(log2 v) for 1 <= v < 2^63, by halving the range: six comparisons whose outcomes are
    used as numbers, not branches (on data they are unpredictable: apm_refine took 3 times as long)."""
    l = np.int64(0)
    for step in (32, 16, 8, 4, 2, 1):
        s = np.int64(v >= (np.int64(1) << step)) * step
        v >>= s
        l += s
    return l
