"""Device check: round trip and throughput on CUDA (or --device cpu to try it here).

One short, prepared script for a lent GPU machine (see the device tool's README: carry the
constriction wheel). Prints one line per configuration: exact round trip, bits per byte,
encode and decode kB/s.

    python bench/gpu_check.py --bytes 1000000 --lanes 16 64 256 --hidden 256 1024
"""

import argparse
import time
from pathlib import Path

import torch

import dyncompress

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--file", type=Path, default=ROOT / "corpora" / "alice29.txt")
    ap.add_argument("--bytes", type=int, default=152089)
    ap.add_argument("--lanes", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 1024])
    args = ap.parse_args()
    data = args.file.read_bytes()[: args.bytes]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{gpu}, torch {torch.__version__}, {len(data):,} bytes of {args.file.name}", flush=True)
    for hidden in args.hidden:
        for lanes in args.lanes:
            settings = dict(hidden=hidden, lanes=lanes, device=args.device)
            t0 = time.perf_counter()
            packed = dyncompress.compress(data, **settings)
            t1 = time.perf_counter()
            exact = dyncompress.decompress(packed) == data
            t2 = time.perf_counter()
            print(
                f"hidden {hidden:5d} lanes {lanes:4d}: exact={exact} {8 * len(packed) / len(data):.3f} bits/byte, "
                f"encode {len(data) / (t1 - t0) / 1e3:.1f} kB/s, decode {len(data) / (t2 - t1) / 1e3:.1f} kB/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
