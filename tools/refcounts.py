"""The reference counts numba left in the loops of the experts' compiled kernels.

    python tools/refcounts.py [--level default|fast]

Builds the level's experts and runs a few steps each way (whole and split over two runs of lanes),
compiling every kernel afresh in an empty cache (numba shows no code for a cached kernel: about a
minute), then reads each kernel's LLVM code: for every function, the calls of `NRT_incref` and
`NRT_decref` in blocks that lie on a cycle (a loop; a loop over lanes pays them for every lane at
every step) and the arrays they count. `experts/common.py` says why there should be none.
Exit status 1 where some are left.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile


def loop_blocks(body: str) -> dict[str, list[str]]:
    """A function's blocks on a cycle of its control flow: label -> the pointers counted there."""
    succ: dict[str, set[str]] = {}
    counted: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=[A-Za-z_.0-9]+:)", body)[1:]:
        label = block.split(":")[0]
        succ[label] = set(re.findall(r"label %([A-Za-z_.0-9]+)", block))
        counted[label] = re.findall(r"@NRT_(?:incref|decref)\(ptr (%[A-Za-z_.0-9]+)", block)

    def on_cycle(start: str) -> bool:
        seen, stack = set(), list(succ.get(start, ()))
        while stack:
            label = stack.pop()
            if label == start:
                return True
            if label not in seen:
                seen.add(label)
                stack.extend(succ.get(label, ()))
        return False

    return {label: ptrs for label, ptrs in counted.items() if ptrs and on_cycle(label)}


def readable(symbol: str) -> str:
    """`dyncompress.experts.step.mix_lanes` from numba's mangled name of it."""
    parts, at = [], symbol.find("_ZN") + 3
    while at < len(symbol) and symbol[at].isdigit():
        digits = re.match(r"\d+", symbol[at:]).group(0)
        at += len(digits)
        parts.append(symbol[at : at + int(digits)])
        at += int(digits)
    return ".".join(parts) or symbol


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", choices=("default", "fast"), default="default")
    a = ap.parse_args()
    os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="refcounts-")  # (before numba is imported)
    os.environ["DYNCOMPRESS_COMPILE_AHEAD"] = "0"
    import importlib
    import pkgutil

    import numba
    import numpy as np
    from numba.core.registry import CPUDispatcher

    import dyncompress.experts as package
    from dyncompress.config.levels import DEFAULT_MODEL, make_settings
    from dyncompress.config.model import find
    from dyncompress.experts.mix import Experts

    if a.level == "fast":
        s = make_settings(model=None, hidden=0, engine="bytes", threads=1, size_hint=1_000_000)
    else:
        s = make_settings(model=find(DEFAULT_MODEL), threads=1, size_hint=1_000_000)
    experts = Experts(s.mix, s.lanes, network=bool(s.hidden))
    logits = np.zeros((s.lanes, 256))
    y = np.arange(s.lanes, dtype=np.int64) % 256
    for parts in (1, 2):
        if parts > 1:
            numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        experts.parts = parts
        for _ in range(3):
            experts.prepare()
            freqs, used = experts.mix(logits)
            experts.learn(used, freqs, y, s.lanes)
    modules = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]
    found: dict[str, collections.Counter] = {}
    for module in modules:
        for name in dir(module):
            kernel = getattr(module, name)
            if not isinstance(kernel, CPUDispatcher) or not kernel.signatures:
                continue
            for ir in kernel.inspect_llvm().values():
                for m in re.finditer(r"^define [^@]*@(\S+?)\(.*?^}", ir, re.S | re.M):
                    symbol = m.group(1)
                    if symbol.startswith(("_ZN7cpython", "cfunc")) or symbol in found:
                        continue
                    ptrs = [p for block in loop_blocks(m.group(0)).values() for p in block]
                    found[symbol] = collections.Counter(re.sub(r"\.sink.*", "", p) for p in ptrs)
    left = 0
    for symbol, ptrs in sorted(found.items()):
        if ptrs:
            left += sum(ptrs.values())
            print(f"{sum(ptrs.values()):5}  {readable(symbol)}  {dict(ptrs)}")
    print(f"{len(found)} compiled functions; {left} reference-count calls in their loops")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
