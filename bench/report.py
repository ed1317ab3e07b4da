"""The README's table: ratio and speed of dyncompress beside the compressors users compare it with,
on named files, in one run on this machine.

    python bench/report.py corpora/alice29.txt ENWIK6 [--paq8px PATH] [--cmix PATH] [--levels default 7 fast]

Every row is a program run as a user runs it, start-up included: `dyncompress encode`/`decode` at each
level, gzip -9, xz -9e and zstd -19 from the PATH, PPMd order 6 (pyppmd, in this process: it has no
command of its own), paq8px -8 and cmix where their binaries are given (built from their public
sources). Bits per byte count the whole file. Prints a Markdown table for README.md and BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
from pathlib import Path

from dyncompress.cli.peers import PEERS, BenchRow, CommandPeer, bench_command, bench_peer, command_peers

LEVELS = {"default": (), "fast": ("--fast",), "fast-bytes": ("--fast", "--engine", "bytes")}
LEVELS.update({str(n): (f"-{n}",) for n in range(1, 10)})


def dyncompress_peer(level: str) -> CommandPeer:
    """dyncompress at a level, as a command (the same interpreter as this script)."""
    name = "dyncompress" + (
        "" if level == "default" else f" -{level}" if level.isdigit() else " " + " ".join(LEVELS[level])
    )
    cli = (sys.executable, "-m", "dyncompress")
    return CommandPeer(name, (*cli, "encode", "-f", "-q", *LEVELS[level], "-o", "{out}", "{in}"),
                       (*cli, "decode", "-f", "-q", "-o", "{out}", "{in}"))  # fmt: skip


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--paq8px", help="a paq8px binary (v216, built with its own CMake)")
    ap.add_argument("--cmix", help="a cmix binary")
    ap.add_argument("--levels", nargs="+", default=["default", "fast"], choices=list(LEVELS))
    a = ap.parse_args()
    peers = [dyncompress_peer(level) for level in a.levels] + command_peers(a.paq8px, a.cmix)
    print(f"{cpu()}, {os.cpu_count()} cores, {datetime.date.today()}; kB/s: input bytes per second of wall time")
    with tempfile.TemporaryDirectory() as tmp:
        for path in a.files:
            data = path.read_bytes()
            rows: list[BenchRow] = [bench_command(p, str(path.resolve()), tmp) for p in peers]
            rows.append(bench_peer(next(p for p in PEERS if p.name == "PPMd o6"), data))
            print(f"\n**{path.name}** ({len(data):,} bytes)\n")
            print("| compressor | bytes | bits/byte | encode kB/s | decode kB/s |")
            print("|---|---:|---:|---:|---:|")
            kb = len(data) / 1000
            for r in sorted((r for r in rows if r.size is not None), key=lambda r: r.size):
                bold = "**" if r.name.startswith("dyncompress") else ""
                print(f"| {bold}{r.name}{bold} | {r.size:,} | {8 * r.size / len(data):.3f} | "
                      f"{kb / r.encode_s:,.1f} | {kb / r.decode_s:,.1f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
