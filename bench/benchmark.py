"""Benchmark: bits per byte, speed and memory of dyncompress beside gzip, bzip2 and xz.

Run it alone on a quiet machine (a test run or a training job beside it skews
every speed figure):

    python bench/benchmark.py                       # defaults on enwik6 and alice29
    python bench/benchmark.py --sweep               # hidden 128/256/512 x lanes 1/8/32 on enwik6
    python bench/benchmark.py --levels              # every -1 ... -9 level on enwik6

enwik6 is the first 1,000,000 bytes of enwik8, read from the shared corpus
folder (`--enwik8 PATH` to point elsewhere). Each dyncompress run happens in a
child process so that its peak RSS is its own; speeds are the codec's own
wall time (excluding interpreter start-up and the import of torch).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from dyncompress.cli.peers import PEERS, bench_peer

ROOT = Path(__file__).resolve().parent.parent
ENWIK8 = ROOT.parent / "shared" / "corpora" / "enwik8" / "enwik8_head_3500000"


def worker(args: list[str]) -> None:
    """Child: compress then decompress one file with one set of settings; print JSON."""

    import dyncompress

    path, settings, threads, verify = args[0], json.loads(args[1]), int(args[2]), args[3] == "1"
    data = Path(path).read_bytes()[: settings.pop("limit", None)]
    settings["threads"] = threads
    t0 = time.perf_counter()
    comp = dyncompress.Compressor(size_hint=len(data), **settings)  # as compress() and the CLI do
    packed = comp.compress(data) + comp.flush()
    t1 = time.perf_counter()
    result = {"bytes": len(data), "packed": len(packed), "encode_s": t1 - t0, "ideal_bits": comp.ideal_bits}
    if verify:
        out = dyncompress.decompress(packed)
        result["decode_s"] = time.perf_counter() - t1
        result["exact"] = out == data
    print(json.dumps(result))


def run_child(path: Path, settings: dict, threads: int, verify: bool) -> dict:
    cmd = [sys.executable, __file__, "_worker", str(path), json.dumps(settings), str(threads), "1" if verify else "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"worker failed for {settings}")
    result = json.loads(out)
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def peers(data: bytes) -> list[tuple[str, int, float, float]]:
    rows = [bench_peer(p, data) for p in PEERS if p.name in ("zlib -9", "bz2 -9", "lzma -9e")]
    return [(r.name, r.size, r.encode_s, r.decode_s) for r in rows]


def matmul_rate(batch: int, hidden: int, threads: int) -> float:
    """GFLOP/s of fp32 matmuls at the codec's shapes: (lanes, H) @ (H, 4H)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(batch, hidden), torch.randn(hidden, 4 * hidden)
    for _ in range(20):
        a @ b
    n = max(20, int(2e9 / (2 * batch * hidden * 4 * hidden)))
    t0 = time.perf_counter()
    for _ in range(n):
        a @ b
    return 2 * batch * hidden * 4 * hidden * n / (time.perf_counter() - t0) / 1e9


def flops_per_byte(hidden: int) -> float:
    """Matmul FLOPs per coded byte: forward 2 x (H^2 + 4H^2 + 256H) (the input is a table
    lookup), and the per-segment backward about twice the forward."""
    return 3 * 2 * (5 * hidden * hidden + 256 * hidden)


def describe_machine(threads: int) -> str:
    import torch

    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.machine()} {cpu}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.backends.cpu.get_cpu_capability()}), {threads} thread(s), "
        f"{datetime.date.today().isoformat()}"
    )


def table_row(name: str, r: dict) -> str:
    bpb = 8 * r["packed"] / r["bytes"]
    enc = r["bytes"] / r["encode_s"] / 1e3
    dec = f"{r['bytes'] / r['decode_s'] / 1e3:.1f}" if "decode_s" in r else "-"
    exact = {True: "yes", False: "NO"}.get(r.get("exact"), "-")
    return f"| {name} | {r['packed']:,} | {bpb:.3f} | {enc:.1f} | {dec} | {r['peak_rss_mb']:.0f} | {exact} |"


HEADER = (
    "| run | bytes out | bits/byte | encode kB/s | decode kB/s | peak RSS MB | exact |\n|---|---|---|---|---|---|---|"
)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        return worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--enwik8", type=Path, default=ENWIK8, help="enwik8 or its head (enwik6 = first 1e6 bytes)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sweep", action="store_true", help="hidden x lanes grid on enwik6 (encode only)")
    ap.add_argument("--levels", action="store_true", help="each level on enwik6 (encode only)")
    ap.add_argument("--limit", type=int, default=1_000_000, help="bytes of enwik8 to use")
    args = ap.parse_args()
    if not args.enwik8.exists():
        raise SystemExit(f"enwik8 not found at {args.enwik8} (use --enwik8 PATH)")
    enwik = ROOT / "bench" / ".enwik_slice"
    enwik.write_bytes(args.enwik8.read_bytes()[: args.limit])
    files = {
        f"enwik{len(str(args.limit)) - 1}" if args.limit in (10**6, 10**7) else "enwik8 head": enwik,
        "alice29.txt": ROOT / "corpora" / "alice29.txt",
    }

    print(f"machine: {describe_machine(args.threads)}\n")
    if args.sweep:
        print(HEADER)
        for hidden in (128, 256, 512):
            for lanes in (1, 8, 32):
                r = run_child(enwik, {"hidden": hidden, "lanes": lanes, "device": "cpu"}, args.threads, False)
                print(table_row(f"hidden {hidden}, lanes {lanes}", r), flush=True)
        return
    if args.levels:
        from dyncompress.config.settings import LEVELS

        print(HEADER)
        for level in sorted(LEVELS):
            r = run_child(enwik, {"level": level, "device": "cpu"}, args.threads, False)
            print(table_row(f"-{level}", r), flush=True)
        return

    from dyncompress.config.settings import Settings, lanes_for_size

    default = Settings()
    print(
        f"default settings: hidden {default.hidden}, lanes {default.lanes} (one per 32 kB on smaller inputs), "
        f"segment {default.segment_len}, rule {default.adapt.rule}, lr {default.adapt.lr}\n"
    )
    for name, path in files.items():
        data = path.read_bytes()
        print(f"### {name} ({len(data):,} bytes)\n\n{HEADER}")
        r = run_child(path, {"device": "cpu"}, args.threads, True)
        print(table_row("dyncompress (default)", r))
        for peer, size, enc_s, dec_s in peers(data):
            print(
                f"| {peer} | {size:,} | {8 * size / len(data):.3f} | {len(data) / enc_s / 1e3:.0f} "
                f"| {len(data) / dec_s / 1e3:.0f} | - | yes |"
            )
        rate = len(data) / r["encode_s"]
        achieved = flops_per_byte(default.hidden) * rate / 1e9
        lanes = lanes_for_size(default.lanes, len(data))
        peak = matmul_rate(lanes, default.hidden, args.threads)
        print(
            f"\nmodel estimate {r['ideal_bits'] / 8:,.0f} bytes (coding overhead "
            f"{r['packed'] - r['ideal_bits'] / 8:,.0f} bytes incl. header); "
            f"matmul work {flops_per_byte(default.hidden) / 1e6:.2f} MFLOP/byte -> {achieved:.1f} GFLOP/s "
            f"achieved vs {peak:.1f} GFLOP/s measured for ({lanes}x{default.hidden})@"
            f"({default.hidden}x{4 * default.hidden}) = {100 * achieved / peak:.0f}%\n",
            flush=True,
        )
    enwik.unlink()


if __name__ == "__main__":
    main()
