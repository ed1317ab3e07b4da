"""The experts' compiled step, call by call, in two versions side by side: microseconds a call of
`prepare`, `mix` and `learn` (`experts.mix.Experts`), in fresh processes, the versions alternating.

    python bench/kernels.py OLD_TREE FILE [--experts fast orders word match orders,ppm] [--rounds 2]

OLD_TREE is a source tree of the other version (`git worktree add /tmp/old f395982`); the new one
is this checkout. Each process builds the fast level's statistics (`--fast`: 64 lanes, its tables
for a 1 MB input; `--level default`: the default model's, 16 lanes; `--level 1`: -1's with the
default model for alice29's size, 3 lanes; one thread, or with `--parts 2`
the lanes split over two) with the experts named (`level` or `fast`: the level's own), codes the
first `--warm` steps of FILE (the lanes side by side) so that
the tables hold real counts, then times `--calls` calls of each kernel on that state (the best of 7
runs; `learn` on the bytes that come next, so the state moves on). Where `bench/speed.py` says that
one version codes slower, this says in which kernel and with which experts: `mix` with `orders`
alone reads the count tables and mixes, with `match` alone it mixes without them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import sys, time
from dataclasses import replace
import numpy as np
tree, path, name, level = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[7]
warm, calls, parts = map(int, sys.argv[4:7])
sys.path.insert(0, tree)
import os
# (by the tree's files, not by trying an import: an editable install of the other version answers
# for a module this tree lacks)
if os.path.isdir(os.path.join(tree, "dyncompress", "experts")):
    from dyncompress.experts.mix import Experts
    from dyncompress.config.levels import DEFAULT_MODEL, make_settings
    from dyncompress.config.model import find
else:  # (the layout before the experts became modules)
    from dyncompress.mix import Experts
    from dyncompress.settings import DEFAULT_MODEL, make_settings
    from dyncompress.model import find
assert sys.modules[Experts.__module__].__file__.startswith(os.path.abspath(tree)), "imported from another tree"
if level == "fast":
    s = make_settings(model=None, hidden=0, engine="bytes", threads=1, size_hint=1_000_000)
elif level == "1":  # -1 with the default model at alice29's size: 3 lanes
    s = make_settings(model=find(DEFAULT_MODEL), level=1, threads=1, size_hint=152_089)
else:  # the default level: the default model's statistics (the network's logits stay zeros here)
    s = make_settings(model=find(DEFAULT_MODEL), threads=1, size_hint=1_000_000)
mix = s.mix if name in ("fast", "level") else replace(s.mix, experts=name, prior="")
B = s.lanes
need = B * (warm + 8 * calls)
data = np.frombuffer(open(path, "rb").read()[:need], dtype=np.uint8)
data = data.reshape(B, -1).T.astype(np.int64)  # (steps, lanes): lane b codes the b-th run of bytes
experts, logits, t = Experts(mix, B), np.zeros((B, 256)), 0
if parts > 1:  # the lanes split in runs over threads, as `split` does
    import numba
    numba.set_num_threads(parts)
    experts.parts = parts
for t in range(warm):
    experts.prepare()
    freqs, used = experts.mix(logits)
    experts.learn(used, freqs, data[t], B)
best = {"prepare": 1e9, "mix": 1e9, "learn": 1e9}
for run in range(7):
    t0 = time.perf_counter()
    for _ in range(calls):
        experts.prepare()
    t1 = time.perf_counter()
    for _ in range(calls):
        freqs, used = experts.mix(logits)
    t2 = time.perf_counter()
    best["prepare"], best["mix"] = min(best["prepare"], t1 - t0), min(best["mix"], t2 - t1)
    t = warm + run * calls
    t3 = time.perf_counter()
    for i in range(calls):  # (the same used, freqs each time: what learn reads, not what it learns)
        experts.learn(used, freqs, data[t + i], B)
    best["learn"] = min(best["learn"], time.perf_counter() - t3)
print(" ".join(f"{k}={v / calls * 1e6:.1f}" for k, v in best.items()))
"""


def run(tree: str, path: str, experts: str, warm: int, calls: int, parts: int, level: str) -> dict[str, float]:
    """One fresh process: microseconds a call of each kernel."""
    env = dict(os.environ, DYNCOMPRESS_COMPILE_AHEAD="0")
    args = [sys.executable, "-c", CHILD, tree, path, experts, str(warm), str(calls), str(parts), level]
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd="/")
    if r.returncode != 0:
        raise SystemExit(f"{tree}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return {k: float(v) for k, v in (item.split("=") for item in r.stdout.split())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", help="source tree of the other version")
    ap.add_argument("file", help="text to warm the tables with (its first bytes)")
    ap.add_argument("--experts", nargs="+", default=["fast", "orders", "word", "match", "orders,ppm"])
    ap.add_argument("--rounds", type=int, default=2, help="processes per version and experts (the best counts)")
    ap.add_argument("--warm", type=int, default=2000, help="steps coded before timing")
    ap.add_argument("--calls", type=int, default=300, help="calls a timing")
    ap.add_argument("--parts", type=int, default=1, help="runs of lanes, one a thread (the split kernels: 2)")
    ap.add_argument(
        "--level",
        choices=("fast", "default", "1"),
        default="fast",
        help="whose statistics: --fast's, the default level's (the default model's), or -1's at alice29's size",
    )
    a = ap.parse_args()
    print(f"microseconds a call, the best of the rounds; {a.level} level's lanes in {a.parts} run(s), one a thread")
    print(f"{'experts':<14} {'kernel':<8} {'old':>8} {'new':>8} {'new/old':>8}")
    for experts in a.experts:
        best: dict[str, dict[str, float]] = {"old": {}, "new": {}}
        for _ in range(a.rounds):
            for version, tree in (("old", a.old), ("new", str(ROOT))):
                for k, v in run(tree, a.file, experts, a.warm, a.calls, a.parts, a.level).items():
                    best[version][k] = min(best[version].get(k, v), v)
        for k in ("prepare", "mix", "learn"):
            old, new = best["old"][k], best["new"][k]
            print(f"{experts:<14} {k:<8} {old:8.1f} {new:8.1f} {new / old:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
