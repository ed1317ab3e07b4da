"""Device check: round trip, cross-device exactness and throughput on CUDA (or --device cpu).

One short, prepared script for a lent GPU machine (see the device tool's README: carry the
constriction wheel). Per configuration it encodes on the device and decodes there and on the
CPU, and encodes the same input on the CPU and decodes that on the device: format 2's exact
arithmetic must give byte-identical files both ways. Prints one line per configuration: exact
round trips, identical files, bits per byte, encode and decode kB/s on the device.

    python bench/gpu_check.py --bytes 200000 --lanes 16 64 256 --hidden 256 1024
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
    ap.add_argument("--cross-bytes", type=int, default=20000, help="bytes for the cross-device checks (CPU speed)")
    ap.add_argument("--lanes", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 1024])
    args = ap.parse_args()
    data = args.file.read_bytes()[: args.bytes]
    small = data[: args.cross_bytes]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{gpu}, torch {torch.__version__}, {len(data):,} bytes of {args.file.name}", flush=True)
    for hidden in args.hidden:
        for lanes in args.lanes:
            settings = dict(model=None, hidden=hidden, lanes=lanes)
            t0 = time.perf_counter()
            packed = dyncompress.compress(data, device=args.device, **settings)
            t1 = time.perf_counter()
            exact = dyncompress.decompress(packed, device=args.device) == data
            t2 = time.perf_counter()
            # across devices, on a smaller input (the CPU is the slow side)
            on_dev = dyncompress.compress(small, device=args.device, **settings)
            on_cpu = dyncompress.compress(small, device="cpu", **settings)
            same = _frames(on_dev) == _frames(on_cpu)
            dev_to_cpu = dyncompress.decompress(on_dev, device="cpu") == small
            cpu_to_dev = dyncompress.decompress(on_cpu, device=args.device) == small
            print(
                f"hidden {hidden:5d} lanes {lanes:4d}: exact={exact} {args.device}->cpu={dev_to_cpu} "
                f"cpu->{args.device}={cpu_to_dev} identical-files={same} "
                f"{8 * len(packed) / len(data):.3f} bits/byte, "
                f"encode {len(data) / (t1 - t0) / 1e3:.1f} kB/s, decode {len(data) / (t2 - t1) / 1e3:.1f} kB/s",
                flush=True,
            )


def _frames(packed: bytes) -> bytes:
    """The file less its header's platform record (which names the device)."""
    from dyncompress.container import parse_header

    meta, end = parse_header(packed)
    return repr({**meta, "platform": None, "settings": {**meta["settings"], "device": None}}).encode() + packed[end:]


if __name__ == "__main__":
    main()
