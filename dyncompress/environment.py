"""Every environment variable dyncompress reads, in one place: its name and what it changes.

The package reads the environment only through `get`, which refuses a name not listed here, so
this table is complete (`tests/test_environment.py` checks that no other module reads
`os.environ`). None of them changes a coded bit: the file records everything decoding needs.
numba, torch and OpenMP read variables of their own (`NUMBA_NUM_THREADS`, `OMP_NUM_THREADS`,
`ATEN_CPU_CAPABILITY`, ...); they change speed, never the bits (exact arithmetic).
"""

from __future__ import annotations

import os

VARIABLES: dict[str, str] = {
    "DYNCOMPRESS_MODELS": "more folders of model files (.dcm), separated by the path separator",
    "DYNCOMPRESS_CORPORA": "more folders of corpus manifests (.json) for `dyncompress corpus`",
    "DYNCOMPRESS_CACHE": "where `dyncompress corpus fetch` keeps corpora [~/.cache/dyncompress/corpora]",
    "DYNCOMPRESS_COMPILE_AHEAD": "0: compile the kernels in the command, not in a child first (`warm`)",
    "NUMBA_THREADING_LAYER": "numba's threading layer for the split of lanes [omp, set when coding starts]",
    "NUMBA_CACHE_DIR": "where numba keeps the compiled kernels, and `warm` its stamps",
    "NUMBA_CPU_NAME": "numba's target CPU (part of `warm`'s stamp)",
    "NUMBA_CPU_FEATURES": "numba's target CPU features (part of `warm`'s stamp)",
    "NUMBA_OPT": "numba's optimisation level (part of `warm`'s stamp)",
    "NUMBA_DISABLE_JIT": "1: numba compiles nothing (no child is started to compile ahead)",
    "XDG_CACHE_HOME": "the user's cache folder [~/.cache]",
}


def _listed(name: str) -> str:
    if name not in VARIABLES:
        raise KeyError(f"{name} is not listed in environment.VARIABLES")
    return name


def get(name: str, default: str = "") -> str:
    """The variable's value, `default` where it is not set."""
    return os.environ.get(_listed(name), default)


def given(name: str) -> bool:
    """Whether the variable is set at all (even to an empty string)."""
    return _listed(name) in os.environ
