"""The fast level (`encode --fast`: the byte statistics and their mixer, no network) beside xz -9e,
PPMd order 6 and, optionally, the default level.

    python bench/fast.py                                  # alice29, the enwik8 slice, enwik6, the 3.5 MB head
    python bench/fast.py --default                        # and the default level's size (minutes more)
    python bench/fast.py --inputs alice29 "enwik8 [3.0M,3.5M)"

Every dyncompress figure is the real command line, timed from outside (start-up included; `enc s`
and `dec s`), the file checked by its decode; "coding kB/s" is `compress` in a warm process (the
speed once started). xz and PPMd run in this process. Run it alone: speeds on a shared 2-core
machine swing by a third between runs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dyncompress.cli.peers import peer_bits

ROOT = Path(__file__).resolve().parent.parent
CORPORA = ROOT.parent / "shared" / "corpora"
HEAD = CORPORA / "enwik8" / "enwik8_head_3500000"
INPUTS = {
    "alice29": (CORPORA / "canterbury" / "alice29.txt", 0, None),
    "enwik8 [3.0M,3.5M)": (HEAD, 3_000_000, 3_500_000),
    "enwik6": (HEAD, 0, 1_000_000),
    "enwik8 head 3.5 MB": (HEAD, 0, None),
}


def run(*args: str) -> float:
    """Seconds of one command line (it must succeed)."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dyncompress", *args], check=True, capture_output=True)
    return time.perf_counter() - t


def coding_speed(data: bytes) -> float:
    """kB/s of `compress(..., hidden=0)` in this process, once warm."""
    from dyncompress import compress

    compress(data[:4000], model=None, hidden=0)
    t = time.perf_counter()
    compress(data, model=None, hidden=0)
    return len(data) / (time.perf_counter() - t) / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", nargs="*", default=list(INPUTS), choices=list(INPUTS))
    ap.add_argument("--default", action="store_true", help="also the default level's file size")
    a = ap.parse_args()
    print(f"# bench/fast.py, {datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.inputs:
            path, lo, hi = INPUTS[name]
            data = path.read_bytes()[lo:hi]
            src = Path(tmp, "input")
            src.write_bytes(data)
            packed, out = Path(tmp, "input.dc"), Path(tmp, "output")
            enc = run("encode", "--fast", "-f", "-k", str(src))
            dec = run("decode", "-f", "-o", str(out), str(packed))
            assert out.read_bytes() == data, f"{name}: the decode differs"
            fast = packed.stat().st_size * 8 / len(data)
            default = None
            if a.default:
                run("encode", "-f", "-k", str(src))
                default = packed.stat().st_size * 8 / len(data)
            t = time.perf_counter()
            xz = peer_bits("lzma -9e", data)
            xz_speed = len(data) / (time.perf_counter() - t) / 1000
            t = time.perf_counter()
            ppmd = peer_bits("PPMd o6", data)
            ppmd_speed = len(data) / (time.perf_counter() - t) / 1000
            row = (name, len(data), fast, enc, dec, coding_speed(data), xz, xz_speed, ppmd, ppmd_speed, default)
            print(row, flush=True)
            rows.append(row)
    print()
    print("| input | bytes | --fast | enc s | dec s | coding kB/s | xz -9e | kB/s | PPMd o6 | kB/s | default |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, fast, enc, dec, speed, xz, xs, ppmd, ps, default in rows:
        d = f"{default:.4f}" if default is not None else "-"
        print(
            f"| {name} | {n:,} | {fast:.4f} | {enc:.1f} | {dec:.1f} | {speed:.0f} | {xz:.4f} | {xs:.0f} | "
            f"{ppmd:.4f} | {ps:.0f} | {d} |"
        )


if __name__ == "__main__":
    main()
