"""Coding speed and peak memory of two versions side by side, in one run, and whether they write the
same bytes.

    python bench/speed.py OLD_TREE [--files enwik8:0:1M enwik8:3M:3.5M corpora/alice29.txt]
                          [--levels default fast 1] [--rounds 1]

OLD_TREE is a source tree of the other version (`git worktree add /tmp/old main`); the new one is
this checkout. Each case is `dyncompress encode` and `decode` of one file at one level in a fresh
process, the versions alternating, the best of `--rounds` (the run the machine disturbed least: noise
only ever adds time); peak RSS is the process's own
(`os.wait4`). Both versions first code a small input each way, so that neither pays for compiling
its kernels in the timed runs. Files are named as `dyncompress eval` names them: a path,
PATH:START:END for a byte range, or a fetched corpus (`enwik8:0:1M` is enwik6, `enwik8:3M:3.5M` the
slice; `dyncompress corpus fetch enwik8`, or a file of enwik8's first bytes: PATH:0:1M).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dyncompress.training.corpus import read_source

ROOT = Path(__file__).resolve().parent.parent
ALICE = str(ROOT / "corpora" / "alice29.txt")
FILES = ["enwik8:0:1M", "enwik8:3M:3.5M", ALICE]
LEVELS = {"default": [], "fast": ["--fast"], "1": ["-1"], "9": ["-9"], "online": ["--online"]}


def run(tree: str, args: list[str]) -> tuple[float, int]:
    """`python -m dyncompress ARGS` with `tree` first on the path: (seconds, peak RSS in MB)."""
    env = dict(os.environ, PYTHONPATH=tree)
    # each version's modules from their cached bytecode, as an installed package starts (compiled
    # from source every time, the version with more modules would pay for it in every command)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "dyncompress", *args], env=env, cwd="/", stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    err = child.stderr.read().decode()
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: dyncompress {' '.join(args)} failed: {err[-500:]}")
    return seconds, usage.ru_maxrss // 1024


def payload_digest(path: Path) -> str:
    """The payloads' hash, read from the block frames (whose layout formats 2 ... 5 share: docs/FORMAT.md):
    the header, which records who coded and in which format, is skipped."""
    buf = path.read_bytes()
    pos = 8 + 2 + 4 + struct.unpack_from("<I", buf, 10)[0] + 4  # magic, version, meta_len, meta, crc
    h = hashlib.sha256()
    while buf[pos] in (1, 2):  # a coded or stored block (then the index or the end marker)
        tag, orig_len, payload_len = struct.unpack_from("<BII", buf, pos)
        start = pos + 1 + 4 + 4 + 4 + 8 + 4
        h.update(struct.pack("<BI", tag, orig_len) + buf[start : start + payload_len])
        pos = start + payload_len
    return h.hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="source tree of the other version")
    ap.add_argument("--files", nargs="+", default=FILES, help="files, PATH:START:END or corpus:START:END")
    ap.add_argument("--levels", nargs="+", default=["default", "fast", "1"], choices=list(LEVELS))
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    trees = {"old": str(Path(a.old).resolve()), "new": str(ROOT)}
    print(f"cores {os.cpu_count()}; the best of {a.rounds} round(s); kB/s = input bytes / wall seconds / 1000")
    with tempfile.TemporaryDirectory() as tmp:
        warm = Path(tmp) / "warm"
        warm.write_bytes(Path(ALICE).read_bytes()[:20_000])
        for tree in trees.values():  # each version compiles its kernels (and stamps them) before timing
            for level in a.levels:
                run(tree, ["encode", "-f", "-q", *LEVELS[level], "-o", str(warm) + ".dc", str(warm)])
                run(tree, ["decode", "-f", "-q", "-o", str(warm) + ".out", str(warm) + ".dc"])
        head = f"{'file':14} {'level':8} {'bytes':>10} | {'encode kB/s old':>15} {'new':>6} {'new/old':>7} |"
        print(head + f" {'decode kB/s old':>15} {'new':>6} {'new/old':>7} | {'RSS MB old':>10} {'new':>5} | payload")
        for file in a.files:
            data = read_source(file)[1]
            src = Path(tmp) / "input"
            src.write_bytes(data)
            for level in a.levels:
                enc: dict[str, list] = {"old": [], "new": []}
                dec: dict[str, list] = {"old": [], "new": []}
                rss: dict[str, int] = {"old": 0, "new": 0}
                digests = {}
                for _ in range(a.rounds):
                    for name, tree in trees.items():
                        packed, out = Path(tmp) / f"{name}.dc", Path(tmp) / f"{name}.out"
                        s, m = run(tree, ["encode", "-f", "-q", *LEVELS[level], "-o", str(packed), str(src)])
                        enc[name].append(s)
                        rss[name] = max(rss[name], m)
                        s, m = run(tree, ["decode", "-f", "-q", "-o", str(out), str(packed)])
                        dec[name].append(s)
                        rss[name] = max(rss[name], m)
                        assert out.read_bytes() == data, f"{name} did not round-trip {file} at {level}"
                        digests[name] = payload_digest(packed)
                speed = {k: {n: len(data) / 1000 / min(v[n]) for n in v} for k, v in (("e", enc), ("d", dec))}
                same = "same" if digests["old"] == digests["new"] else "DIFFERENT"
                e, d = speed["e"], speed["d"]
                print(
                    f"{Path(file).name[:14]:14} {level:8} {len(data):>10,} | {e['old']:>15.1f} {e['new']:>6.1f} "
                    f"{e['new'] / e['old']:>7.2f} | {d['old']:>15.1f} {d['new']:>6.1f} {d['new'] / d['old']:>7.2f} | "
                    f"{rss['old']:>10} {rss['new']:>5} | {same}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
