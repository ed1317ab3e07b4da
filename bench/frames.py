"""Independent frames: ratio and wall-time throughput by frame size and worker count, random
access, and a local Dask cluster against -j 2. Every run is the real command line, timed from the
outside (start-up included), every file checked by a full decode.

    python bench/frames.py enwik8:0:3.5M        # enwik8's first 3.5 MB: about an hour on 2 cores
    python bench/frames.py FILE --bytes 300000 --frames 0,100KiB --cluster-bytes 200000   # a quick look
    python bench/frames.py FILE --frames 0,1750000 --workers 1,1t,2 --decode 2 --no-range --cluster-bytes 0
        # two equal frames: -j 2 against one worker of one thread (1t: -j 1 -T 1) and -j 1
    python bench/frames.py FILE --bytes 1000000 --frames 500000 --workers 1t,2,1t,2 --decode none --no-range \
        --cluster-bytes 0   # the same, alternated: each ratio is against the mean of the repeated runs

The input is named as `dyncompress eval` names it (a path, PATH:START:END, or corpus:START:END).

Rows: frame size x workers (-j), encode and decode kB/s, bits per byte; PPMd order 6 on the same
input beside them. Then `decode --range` of 1 kB from the middle, per frame size, and the cluster.
"""

from __future__ import annotations

import argparse
import datetime
import filecmp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dyncompress.cli.base import SizeParam
from dyncompress.cli.peers import peer_bits
from dyncompress.training.corpus import read_source

ROOT = Path(__file__).resolve().parent.parent


def size_of(text: str) -> int:
    return SizeParam().convert(text, None, None)


def cli(*args, **kw) -> float:
    """Run `dyncompress ARGS`; its wall time in seconds."""
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dyncompress", *map(str, args)], capture_output=True, **kw)
    if r.returncode != 0:
        sys.exit(f"dyncompress {' '.join(map(str, args))} failed: {r.stderr.decode()[-2000:]}")
    return time.perf_counter() - started


def ppmd_bpb(data: bytes) -> float | None:
    return peer_bits("PPMd o6", data)


def say(line: str) -> None:
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", help="a file, PATH:START:END, or corpus:START:END")
    ap.add_argument("--bytes", type=int, default=3_500_000, help="the input's first N bytes")
    ap.add_argument("--frames", default="0,1MiB,256KiB", help="frame sizes (0: one frame)")
    ap.add_argument("--workers", default="1,2", help="worker counts for encoding (1t: one worker of one thread)")
    ap.add_argument("--decode", default="", help="worker specs to decode ('none') [above 1, one frame]")
    ap.add_argument("--no-range", action="store_true", help="skip the decode --range rows")
    ap.add_argument("--cluster-bytes", type=int, default=1_000_000, help="input of the cluster row (0: none)")
    ap.add_argument("--cluster-frame", default="256KiB")
    args = ap.parse_args()

    data = read_source(args.input)[1][: args.bytes]
    n = len(data)
    tmp = Path(tempfile.mkdtemp(prefix="frames-"))
    src = tmp / "src"
    src.write_bytes(data)
    say(
        f"# bench/frames.py, {datetime.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; {Path(args.input).name}[:{n:,}]"
    )
    ppmd = ppmd_bpb(data)
    say(f"PPMd order 6: {ppmd:.4f} bits/byte" if ppmd else "PPMd: pyppmd not installed")
    rows = []
    for frame_text in args.frames.split(","):
        frame = size_of(frame_text)
        first = None
        for spec in args.workers.split(","):
            workers, one_thread = int(spec.rstrip("t")), spec.endswith("t")
            if frame == 0 and workers > 1:
                continue  # one frame: nothing to spread
            out = tmp / f"f{frame}-j{spec}.dc"
            threads = ["-T", 1] if one_thread else []
            enc = cli("encode", "-q", "-f", "--frame-size", frame, "-j", workers, *threads, "-o", out, src)
            if not one_thread:  # -T 1 is recorded in the header: the same blocks, another header
                first = first or out
                if not filecmp.cmp(first, out, shallow=False):
                    sys.exit(f"frame size {frame_text}: -j {workers} wrote another file than -j 1")
            dec = None
            decode = spec in args.decode.split(",") if args.decode else (workers > 1 or frame == 0)
            if decode:
                back = tmp / "back"
                dec = cli("decode", "-q", "-f", "-j", workers, "-o", back, out)
                if back.read_bytes() != data:
                    sys.exit(f"frame size {frame_text}, -j {workers}: the decode differs")
            size = out.stat().st_size
            rows.append((frame_text, spec, 8 * size / n, n / enc / 1e3, n / dec / 1e3 if dec else None))
            dec_text = f"{n / dec / 1e3:.2f}" if dec else "-"
            say(
                f"frame {frame_text:>7} -j {spec}: {size:,} bytes, {8 * size / n:.4f} bits/byte, "
                f"encode {enc:.0f} s ({n / enc / 1e3:.2f} kB/s), decode {dec_text} kB/s"
            )
        if frame and not args.no_range:
            mid = n // 2
            t = cli("decode", "--range", f"{mid}:{mid + 1000}", "-o", tmp / "piece", "-f", first or out)
            if (tmp / "piece").read_bytes() != data[mid : mid + 1000]:
                sys.exit("the range decode differs")
            say(f"frame {frame_text:>7}: decode --range {mid}:{mid + 1000} in {t:.1f} s")

    if args.cluster_bytes:
        import distributed

        part = tmp / "part"
        part.write_bytes(data[: args.cluster_bytes])
        frame = args.cluster_frame
        j2 = cli("encode", "-q", "-f", "--frame-size", size_of(frame), "-j", 2, "-o", tmp / "p2.dc", part)
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
            address = cluster.scheduler_address
            on = cli(
                "encode", "-q", "-f", "--frame-size", size_of(frame), "--cluster", address, "-o", tmp / "pc.dc", part
            )
        if not filecmp.cmp(tmp / "p2.dc", tmp / "pc.dc", shallow=False):
            sys.exit("the cluster wrote another file than -j 2")
        m = args.cluster_bytes
        say(
            f"cluster of 2 local workers vs -j 2, {m:,} bytes in {frame} frames: "
            f"{m / on / 1e3:.2f} vs {m / j2 / 1e3:.2f} kB/s (same file)"
        )

    def mean_of(spec: str) -> dict:
        """Per frame size, the mean kB/s of the runs of one worker spec (a spec may be repeated,
        alternated with the others: the same run can differ by 10-20 % on these machines)."""
        runs: dict = {}
        for frame_text, workers, _, enc, _ in rows:
            if workers == spec:
                runs.setdefault(frame_text, []).append(enc)
        return {frame_text: statistics.fmean(v) for frame_text, v in runs.items()}

    base, solo = mean_of("1"), mean_of("1t")  # -j 1, and one worker of one thread

    def ratio(enc: float, of: dict, frame_text: str) -> str:
        return f"{enc / of[frame_text]:.2f}x" if frame_text in of else "-"

    say("\n| frame size | workers | bits/byte | encode kB/s | decode kB/s | vs -j 1 (mean) | vs -j 1 -T 1 (mean) |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    for frame_text, workers, bpb, enc, dec in rows:
        say(
            f"| {frame_text} | {workers} | {bpb:.4f} | {enc:.2f} | {f'{dec:.2f}' if dec else '-'} | "
            f"{ratio(enc, base, frame_text)} | {ratio(enc, solo, frame_text)} |"
        )
    if ppmd:
        say(f"| PPMd o6 | | {ppmd:.4f} | | | |")


if __name__ == "__main__":
    main()
