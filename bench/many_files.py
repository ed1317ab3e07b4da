"""Many small files with one worker and with two (issue 13): `encode -j 1` against `encode -j 2`
on the same files (each fits in one frame, so `-j 2` codes two files at a time), then decode.

    python bench/many_files.py [--files 8] [--size 16000]

The files are consecutive pieces of real text from ../shared/corpora (the Canterbury corpus's
texts). Wall time of the real command line, start-up included; every output is compared (the two
runs' .dc files byte for byte, the decodes against the inputs). Run it alone.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dyncompress.cli.peers import peer_size

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "canterbury"
TEXTS = ("alice29.txt", "asyoulik.txt", "lcet10.txt", "plrabn12.txt")


def run(args: list[str], cwd: Path) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "dyncompress", *args], cwd=cwd, check=True)
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--size", type=int, default=16_000)
    args = ap.parse_args()
    text = b"".join((CORPORA / name).read_bytes() for name in TEXTS)
    pieces = {f"part{i:02d}.txt": text[i * args.size : (i + 1) * args.size] for i in range(args.files)}
    total = sum(map(len, pieces.values()))
    print(f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}")
    print(f"{args.files} files of {args.size:,} bytes ({total:,} in all), default level")
    sizes = [peer_size("PPMd o6", p) for p in pieces.values()]
    if None in sizes:
        print("pyppmd not installed")
    else:
        print(f"PPMd order 6, file by file: {8 * sum(sizes) / total:.4f} bits/byte")
    root = Path(tempfile.mkdtemp())
    try:
        results, packed = {}, {}
        for j in ("1", "2"):
            where = root / f"j{j}"
            where.mkdir()
            for name, data in pieces.items():
                (where / name).write_bytes(data)
            enc = run(["encode", "-j", j, *pieces], where)
            packed[j] = {name: (where / f"{name}.dc").read_bytes() for name in pieces}
            for name in pieces:
                (where / name).unlink()
            dec = run(["decode", "-j", j, *(f"{name}.dc" for name in pieces)], where)
            assert all((where / name).read_bytes() == data for name, data in pieces.items()), "decode differs"
            results[j] = (enc, dec)
        assert packed["1"] == packed["2"], "-j 2 wrote other bytes than -j 1"
        size = sum(map(len, packed["1"].values()))
        print(f"dyncompress: {8 * size / total:.4f} bits/byte (the same files with -j 1 and -j 2)")
        for j, (enc, dec) in results.items():
            speeds = f"encode {enc:6.1f} s ({total / enc / 1e3:5.2f} kB/s), decode {dec:6.1f} s"
            print(f"-j {j}: {speeds} ({total / dec / 1e3:5.2f} kB/s)")
        (e1, d1), (e2, d2) = results["1"], results["2"]
        print(f"-j 2 against -j 1: encode {e1 / e2:.2f}x, decode {d1 / d2:.2f}x")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
