"""numba's on-disk cache of the package's kernels, keyed on the sources of all of them.

numba keeps a compiled kernel (`cache=True`) beside a stamp of the file the kernel is written in,
and loads it again while that stamp holds. A kernel also compiles in the helpers it calls from
other kernel modules (`network.update_kernels.segment_costs` and the experts' kernels inline
`network.int_kernels.floor_log2`): a change
to a helper's file alone would leave the kernels that use it loading their stale machine code.
So every kernel of the package is stamped with the SHA-256 of all the kernel modules' sources
(`KERNEL_FILES`): a change to any of them recompiles every kernel once.

`install()` puts `SourcesLocator` first in numba's list of cache locators. It answers only for
functions written in this package's kernel modules (for any other function numba's own locators
decide, as before), and places the cache where numba's own locator would (`NUMBA_CACHE_DIR`, the
package's `__pycache__`, or the user's cache folder): it changes the stamp, nothing else. The
kernel modules import this module first, so it is installed before their kernels are made.
"""

from __future__ import annotations

import functools
import hashlib
import os

from numba.core import caching

# the modules numba caches kernels of (cache=True), by path in the package: the network's four,
# every module of the experts package but its Python side (`mix`, `__init__`), the bitwise engine's
EXPERT_KERNELS = tuple(
    sorted(
        name[: -len(".py")]
        for name in os.listdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "experts"))
        if name.endswith(".py") and name not in ("mix.py", "__init__.py")
    )
)
BITWISE_KERNELS = ("coder", "engine", "tree")  # the bitwise engine's (`tables` has none)
KERNEL_FILES = (
    "network/dot16.py",
    "network/int_kernels.py",
    "network/step_kernels.py",
    "network/update_kernels.py",
    *(f"experts/{name}.py" for name in EXPERT_KERNELS),
    *(f"bitwise/{name}.py" for name in BITWISE_KERNELS),
)
_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # (its name before numba 0.61)
HERE = os.path.dirname(os.path.abspath(__file__))


def kernel_files() -> tuple[str, ...]:
    """The kernel modules' files in this package (absolute)."""
    return tuple(os.path.join(HERE, *name.split("/")) for name in KERNEL_FILES)


@functools.cache
def _hash(stats: tuple) -> bytes:
    digest = hashlib.sha256()
    for path, *_ in stats:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.digest()


def sources_stamp() -> bytes:
    """The SHA-256 of the kernel modules' sources, read again when one's size or
    modification time changes."""
    stats = tuple((path, os.stat(path).st_mtime_ns, os.stat(path).st_size) for path in kernel_files())
    return _hash(stats)


class SourcesLocator(caching._CacheLocator):
    """numba's own locator for a kernel of this package, with the stamp of all kernel sources."""

    sources_stamped = True  # (marks this class in numba's list, also a copy from a re-import)

    def __init__(self, inner: caching._CacheLocator, py_file: str) -> None:
        self._inner = inner
        self._py_file = py_file  # (numba's warning that a kernel cannot be cached names it)

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return self._inner.get_cache_path()

    def get_source_stamp(self) -> bytes:
        return sources_stamp()

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        """A locator for a kernel of this package's kernel modules; None for any other function."""
        if os.path.abspath(py_file) not in kernel_files():
            return None
        for other in _IMPL._locator_classes:
            if not getattr(other, "sources_stamped", False):
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner, py_file)
        return None


def install() -> None:
    """Put `SourcesLocator` first among numba's cache locators, in place of any earlier copy (the
    module imported again)."""
    locators = _IMPL._locator_classes
    locators[:] = [SourcesLocator] + [c for c in locators if not getattr(c, "sources_stamped", False)]


install()
