"""The default encode and decode on a shared machine: alone, and beside busy processes.

A compressor must take its share of a machine where other work runs. For each input this times
`dyncompress encode` (and `decode`) at the default threads and at `-T 1`, alone and beside
`--busy` processes that each spin one core, and checks the round trip. The target
(issue "The code in the shape of its design"): the default beside one busy process within 1.5 times
the one-thread time alone.

    python bench/shared_machine.py FILE [FILE ...] [--bytes 100000] [--busy 1] [--decode]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def spin() -> None:  # the busy process: one core's worth of work that never waits
    x = 0
    while True:
        x += 1


def timed(args: list[str]) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "dyncompress", *args], check=True)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--bytes", type=int, default=100_000, help="the first this many bytes of each file")
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside the loaded runs")
    parser.add_argument("--decode", action="store_true", help="time the decode as well")
    parser.add_argument("--extra", default="", help="more encode options, space-separated")
    args = parser.parse_args()
    print(f"cores {os.cpu_count()}, {args.busy} busy process(es) beside the loaded runs")
    print(f"{'input':24} {'threads':>8} {'load':>6} {'encode s':>9} {'decode s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            src = Path(tmp) / path.name
            src.write_bytes(path.read_bytes()[: args.bytes])
            packed = Path(tmp) / (path.name + ".dc")
            for load in (0, args.busy):
                busy = [mp.Process(target=spin, daemon=True) for _ in range(load)]
                for p in busy:
                    p.start()
                try:
                    for threads in (None, 1):
                        t = ["-T", "1"] if threads else []
                        enc = timed(["encode", "-q", "-f", *t, *args.extra.split(), "-o", str(packed), str(src)])
                        dec = float("nan")
                        if args.decode:
                            out = Path(tmp) / "out"
                            dec = timed(["decode", "-q", "-f", *t, "-o", str(out), str(packed)])
                            assert out.read_bytes() == src.read_bytes(), "round trip failed"
                        label = "default" if threads is None else str(threads)
                        print(f"{path.name[:24]:24} {label:>8} {load:>6} {enc:9.1f} {dec:9.1f}", flush=True)
                finally:
                    for p in busy:
                        p.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
