"""Device check: round trip, cross-device exactness and throughput on CUDA (or --device cpu).

One short, prepared script for a lent GPU machine (see the device tool's README: carry the
constriction wheel). Per configuration (lanes) it encodes on the device and decodes there and on
the CPU, and encodes the same input on the CPU and decodes that on the device: format 2's exact
arithmetic must give byte-identical files both ways. Each configuration codes `--steps` bytes per
lane, so the many-lane rows use the device as it is meant to be used. Prints one line per
configuration: exact round trips, identical files, bits per byte, encode and decode kB/s on the
device. `--save DIR` keeps the device's files, to decode on another machine.

    python bench/gpu_check.py --file enwik8_slice --lanes 8 64 256 --steps 1500 --save out/
    python bench/gpu_check.py --online --hidden 256 --lanes 16 64
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
    ap.add_argument("--steps", type=int, default=1500, help="bytes per lane coded on the device")
    ap.add_argument("--cross-bytes", type=int, default=12000, help="bytes for the cross-device checks (CPU speed)")
    ap.add_argument("--lanes", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--model", default="enwiki-h256", help="the pretrained model [enwiki-h256]")
    ap.add_argument("--online", action="store_true", help="online mode (no model) at each --hidden")
    ap.add_argument("--hidden", type=int, nargs="+", default=[256])
    ap.add_argument("--save", type=Path, help="keep the device's cross-check files here")
    args = ap.parse_args()
    text = args.file.read_bytes()
    small = text[: args.cross_bytes]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{gpu}, torch {torch.__version__}, {args.file.name}", flush=True)
    dyncompress.compress(text[:2000], device=args.device, model=None, hidden=64)  # compile the experts' kernels
    for hidden in args.hidden if args.online else [None]:
        for lanes in args.lanes:
            name = f"online-h{hidden}" if args.online else args.model
            start = dict(model=None, hidden=hidden) if args.online else dict(model=args.model)
            settings = dict(start, lanes=lanes)
            data = text[: lanes * args.steps]
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
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{name}-l{lanes}.dc").write_bytes(on_dev)
            print(
                f"{name} lanes {lanes:4d}: {len(data):,} bytes exact={exact} {args.device}->cpu={dev_to_cpu} "
                f"cpu->{args.device}={cpu_to_dev} identical-files={same} "
                f"{8 * len(packed) / len(data):.3f} bits/byte, "
                f"encode {len(data) / (t1 - t0) / 1e3:.1f} kB/s, decode {len(data) / (t2 - t1) / 1e3:.1f} kB/s",
                flush=True,
            )


def _frames(packed: bytes) -> bytes:
    """What the coding decides: the header's settings (less the device and the thread count, which
    name the machine and cannot change the bits) and every block. The header's platform record and
    the frame index (its offsets count the header's length) are left out."""
    from dyncompress.format.container import Block, FrameReader, Header

    reader = FrameReader()
    reader.push(packed)
    parts = []
    for item in reader.frames():
        if isinstance(item, Header):
            parts.append(repr({**item.meta["settings"], "device": None, "threads": None}).encode())
        elif isinstance(item, Block):
            parts.append(repr(item).encode())
    return b"".join(parts)


if __name__ == "__main__":
    main()
