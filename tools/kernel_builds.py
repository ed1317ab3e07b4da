"""The kernels numba built more than once for one CPU, read from its cache.

    python tools/kernel_builds.py [FOLDER ...]

FOLDER: a numba cache (default: the package's `__pycache__` folders, where numba keeps the kernels
of a source checkout; after a test run, what the suite built). numba builds a kernel once for every
type signature it is called with: an argument of another integer type or memory layout (int64
bytes where the codec hands int32, rows of an F-ordered array), or a constant where a variable is
passed elsewhere (numba types it as a literal), costs a whole build more, seconds for the larger
kernels, in every fresh cache: a clean clone's test run, the first run after an install. Prints
each kernel with its signatures per CPU; exit status 1 where there is any.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def short(signature) -> str:
    """numba's array types in a shorter spelling: float64[2C] for a 2-d C-ordered array."""
    return re.sub(r"Array\((\w+), (\d), '(\w)', False, aligned=True\)", r"\1[\2\3]", str(signature))


def builds(index: Path) -> dict[str, list[str]]:
    """CPU name -> the signatures built for it, from one kernel's index file (`*.nbi`: numba's
    version, then the pickled (stamp, {(signature, (target, cpu, features)): data file}))."""
    with open(index, "rb") as f:
        pickle.load(f)
        _, overloads = pickle.loads(f.read())
    found: dict[str, list[str]] = collections.defaultdict(list)
    for signature, target, *_ in overloads:
        cpu = target[1] if isinstance(target, tuple) and len(target) > 1 else str(target)
        found[cpu].append(short(signature))
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path, default=[ROOT / "dyncompress"])
    a = ap.parse_args()
    again = 0
    for folder in a.folders:
        for index in sorted(folder.rglob("*.nbi")):
            for cpu, signatures in builds(index).items():
                if len(signatures) > 1:
                    again += len(signatures) - 1
                    print(f"{index.name} ({cpu}): {len(signatures)} builds")
                    for signature in signatures:
                        print(f"    {signature}")
    print(f"{again} builds more than one per kernel and CPU")
    return 1 if again else 0


if __name__ == "__main__":
    sys.exit(main())
