"""Encode speed of the installed dyncompress, warm: one small compress first (tables, thread
pools, first-call costs), then the first N bytes of the enwik8 head with the defaults, timed
in-process. Steadier than fresh processes for comparing two versions one after the other; run
it with each version's python, from a directory where `dyncompress` is not the checkout:

    cd /tmp && python /work/main/bench/warm_speed.py 150000
    cd /tmp && /tmp/v020/bin/python /work/main/bench/warm_speed.py 150000
    python bench/warm_speed.py 524288 --threads 1 --profile   # plus cProfile's top 25
"""

import argparse
import cProfile
import pstats
import time
from pathlib import Path

import dyncompress

ENWIK8 = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora" / "enwik8" / "enwik8_head_3500000"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bytes", type=int)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--file", type=Path, default=ENWIK8)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    data = args.file.read_bytes()[: args.bytes]
    kw = {} if args.threads is None else {"threads": args.threads}
    dyncompress.compress(data[:2000], **kw)
    profile = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profile:
        profile.enable()
    packed = dyncompress.compress(data, **kw)
    seconds = time.perf_counter() - start
    speed = len(data) / seconds / 1e3
    bpb = 8 * len(packed) / len(data)
    print(f"dyncompress {dyncompress.__version__}: {len(data):,} B in {seconds:.1f} s, {speed:.2f} kB/s, {bpb:.4f} bpb")
    if profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
