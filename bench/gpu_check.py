"""Device check: round trip, cross-device exactness, throughput and where the time goes, on CUDA
(or --device cpu).

One short, prepared script for a lent GPU machine (see the device tool's README: carry the
constriction wheel). Per model and configuration (lanes) it encodes on the device and decodes there
and on the CPU, and encodes the same input on the CPU and decodes that on the device: format 2's
exact arithmetic must give byte-identical files both ways. Each configuration codes `--steps` bytes
per lane, so the many-lane rows use the device as it is meant to be used; lanes x segment length is
bounded (`MAX_BATCH`), so the many-lane rows code shorter segments where the level's do not fit
(the line says which). Prints one line per configuration: exact round trips, identical files, bits
per byte, encode and decode kB/s on the device, and the encode's time in the network's step, the
experts and the rest (the coder, the segment's gradient step, the loop). `--cpu-baseline BYTES`
first codes that many bytes at the default level on the CPU (`--threads`, as `encode` would): the
same machine's CPU speed that issue 61's targets compare with. `--save DIR` keeps the device's
files, to decode on another machine. The input is the `--file`s one after another, repeated to
the size the largest row needs (a GPU machine has only the checkout's corpora).

    python bench/gpu_check.py --file enwik8_slice --lanes 8 64 256 1024 --steps 1500 --save out/
    python bench/gpu_check.py --models enwiki-h256 enwiki-h512 --cpu-baseline 400000
    python bench/gpu_check.py --online --hidden 256 --lanes 16 64
"""

import argparse
import collections
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from paired import wrap_timed  # (this folder's paired.py: the script's folder is on the path)

import dyncompress
from dyncompress.config.settings import MAX_BATCH

ROOT = Path(__file__).resolve().parent.parent
SEGMENT = 32  # the levels' segment length from -4 on (`levels.MODEL_LEVELS`)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--file", type=Path, nargs="+", default=[ROOT / "corpora" / "alice29.txt"])
    ap.add_argument("--steps", type=int, default=1500, help="bytes per lane coded on the device")
    ap.add_argument("--cross-bytes", type=int, default=12000, help="bytes for the cross-device checks (CPU speed)")
    ap.add_argument("--lanes", type=int, nargs="+", default=[8, 64, 256, 1024])
    ap.add_argument("--models", nargs="+", default=["enwiki-h256"], help="pretrained models [enwiki-h256]")
    ap.add_argument("--online", action="store_true", help="online mode (no model) at each --hidden")
    ap.add_argument("--hidden", type=int, nargs="+", default=[256])
    ap.add_argument("--cpu-baseline", type=int, default=0, help="bytes to code at the default level on the CPU first")
    ap.add_argument("--threads", type=int, default=2, help="the CPU baseline's threads [2]")
    ap.add_argument("--save", type=Path, help="keep the device's cross-check files here")
    args = ap.parse_args()
    need = max(max(args.lanes) * args.steps, args.cpu_baseline, args.cross_bytes)
    text = input_of(args.file, need)
    small = text[: args.cross_bytes]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{gpu}, torch {torch.__version__}, {' + '.join(f.name for f in args.file)}", flush=True)
    dyncompress.compress(text[:2000], device=args.device, model=None, hidden=64)  # compile the experts' kernels
    if args.cpu_baseline:
        dyncompress.compress(text[:2000], device="cpu", threads=args.threads)  # (its kernels compiled untimed)
        data = text[: args.cpu_baseline]
        t0 = time.perf_counter()
        dyncompress.compress(data, device="cpu", threads=args.threads)
        print(f"cpu default, {args.threads} threads: {len(data):,} bytes, encode "
              f"{len(data) / (time.perf_counter() - t0) / 1e3:.1f} kB/s", flush=True)  # fmt: skip
    starts = [(f"online-h{h}", dict(model=None, hidden=h)) for h in args.hidden] if args.online else []
    starts = starts or [(name, dict(model=name)) for name in args.models]
    for name, start in starts:
        for lanes in args.lanes:
            segment = min(SEGMENT, MAX_BATCH // lanes)
            settings = dict(start, lanes=lanes, segment_len=segment)
            data = text[: lanes * args.steps]
            with timed_parts() as parts:
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
            shares = ", ".join(f"{part} {100 * s / (t1 - t0):.0f} %" for part, s in parts.items())
            print(
                f"{name} lanes {lanes:4d} segments {segment}: {len(data):,} bytes exact={exact} "
                f"{args.device}->cpu={dev_to_cpu} cpu->{args.device}={cpu_to_dev} identical-files={same} "
                f"{8 * len(packed) / len(data):.3f} bits/byte, "
                f"encode {len(data) / (t1 - t0) / 1e3:.1f} kB/s, decode {len(data) / (t2 - t1) / 1e3:.1f} kB/s; "
                f"encode time: {shares}, rest {100 - 100 * sum(parts.values()) / (t1 - t0):.0f} %",
                flush=True,
            )


def input_of(files: list[Path], size: int) -> bytes:
    """The files one after another, repeated to `size` bytes at least."""
    text = b"".join(f.read_bytes() for f in files)
    return text * -(-size // len(text))


@contextlib.contextmanager
def timed_parts() -> Iterator[dict[str, float]]:
    """Seconds spent in the network's step (its forward and the coded frequencies' record) and in
    the experts (their contexts, mixing and learning) while the block is open, by timers around the
    predictor's calls (each call waits for the device's work it started: the step returns the logits
    to the CPU)."""
    from dyncompress.coding.predictor import MLSTMPredictor
    from dyncompress.experts.mix import Experts

    spent: dict[str, float] = collections.defaultdict(float)
    calls = {"network": (MLSTMPredictor, ("forward", "learn_from")), "experts": (Experts, ("prepare", "mix", "learn"))}
    saved = [(cls, m, wrap_timed(cls, m, part, spent)) for part, (cls, names) in calls.items() for m in names]
    try:
        yield spent
    finally:
        for cls, method, original in saved:
            setattr(cls, method, original)


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
