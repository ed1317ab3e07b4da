"""numba's cache of the kernels is keyed on all kernel sources (`kernel_cache`): a change to a helper
in one kernel module recompiles the kernels of another that use it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dyncompress
from dyncompress import kernel_cache

PACKAGE = Path(dyncompress.__file__).resolve().parent

# segment_costs (network.update_kernels) inlines floor_log2 (network.int_kernels): its bits follow floor_log2's code
COSTS = """
import numpy as np
from dyncompress.network import update_kernels
from dyncompress.network.fixed import log2_table
F = np.full((1, 1, 256), 1 << 16, dtype=np.int64)
coded, bits = np.zeros((1, 1), dtype=np.int64), np.zeros(1, dtype=np.int64)
update_kernels.segment_costs(F, np.zeros((1, 1), dtype=np.int32), np.ones(1, dtype=np.int64), log2_table(), 24, 16,
                             coded, bits)
print(type(update_kernels.segment_costs._cache._impl._locator).__name__, int(bits[0]))
"""


def costs(root: Path, cache: Path, **env) -> tuple[str, int]:
    env = dict(os.environ, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(cache), **env)
    r = subprocess.run([sys.executable, "-c", COSTS], capture_output=True, text=True, env=env, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    locator, bits = r.stdout.split()
    return locator, int(bits)


def test_a_helper_changed_in_another_kernel_module_recompiles_the_kernels_that_use_it(tmp_path):
    copy = tmp_path / "src" / "dyncompress"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.npz"))
    cache = tmp_path / "cache"
    assert costs(copy.parent, cache) == ("SourcesLocator", 8 << 16)  # -log2(2^16 / 2^24) = 8 bits, units 2^-16
    helpers = copy / "network" / "int_kernels.py"
    source = helpers.read_text()
    assert source.count("    l = np.int64(0)\n") == 1  # floor_log2's start
    helpers.write_text(source.replace("    l = np.int64(0)\n", "    l = np.int64(1)\n"))  # one too high
    # numba alone would load segment_costs from its cache (its own file did not change): 8 << 16 again
    changed = costs(copy.parent, cache)
    assert changed[1] != 8 << 16 and changed == costs(copy.parent, tmp_path / "fresh cache")


def test_the_stamp_covers_every_kernel_module_and_nothing_else_is_located():
    """Every module of the package that makes a kernel (`@njit`) is stamped, and no other."""
    package = Path(kernel_cache.__file__).parent
    with_kernels = {p for p in package.rglob("*.py") if "@njit" in p.read_text()}
    assert {Path(p) for p in kernel_cache.kernel_files()} == with_kernels and len(with_kernels) > 10
    assert (
        kernel_cache.SourcesLocator.from_function(
            test_the_stamp_covers_every_kernel_module_and_nothing_else_is_located, __file__
        )
        is None
    )


def test_a_kernel_numba_cannot_cache_runs_uncached(tmp_path):
    """Unoptimised (NUMBA_OPT=0), segment_costs keeps its table as a dynamic global, which numba
    cannot cache: numba warns, naming the kernel's file, and the kernel runs all the same."""
    cache = tmp_path / "cache"
    assert costs(PACKAGE.parent, cache, NUMBA_OPT="0") == ("SourcesLocator", 8 << 16)
    assert not list(cache.rglob("*segment_costs*.nbc"))
