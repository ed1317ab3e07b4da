"""Benchmark a pretrained model: static vs every dynamic rule vs online mode, on several files.

    python bench/models.py                      # the default model on the issue's four files
    python bench/models.py --model PATH --files enwik6 alice29 --rules static rms-decay

For each file and rule it encodes for real (header included) and prints bits per
byte and encode kB/s; the model's default rule is also decoded, checked byte for
byte and timed. `online` is the random-start mode at the default level. Run it
alone: speeds on a 2-core machine mean nothing beside another job. Reads the big
files from ../shared/corpora (see its README); enwik6 = the first 10^6 bytes of enwik8.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
from pathlib import Path

import torch

import dyncompress
from dyncompress.config.model import find as find_model
from dyncompress.config.settings import DEFAULT_MODEL, make_settings

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"
FILES = {
    "enwik6": ("enwik8/enwik8_head_3500000", 1_000_000),
    "alice29": ("canterbury/alice29.txt", None),
    "plrabn12": ("canterbury/plrabn12.txt", None),
    "quijote1M": ("multilingual/spa_gutenberg_pg2000_don_quijote.txt", 1_000_000),
}
RULES = ["static", "sgd", "rms", "rms-decay", "online"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--files", nargs="+", default=list(FILES), choices=list(FILES))
    ap.add_argument("--rules", nargs="+", default=RULES, choices=RULES)
    ap.add_argument("--lr", type=float, help="override the model's learning rate (sgd uses --sgd-lr)")
    ap.add_argument("--sgd-lr", type=float, default=0.1, help="learning rate for sgd [0.1, tuned]")
    ap.add_argument("--rms-lr", type=float, default=3e-4, help="learning rate for rms [3e-4, tuned]")
    ap.add_argument("--no-decode", action="store_true", help="skip decoding the default rule")
    ap.add_argument("--limit", type=int, help="only the first LIMIT bytes of each file (a quick check)")
    ap.add_argument("--levels", action="store_true", help="instead: every level -1 ... -9 (no size rule)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = find_model(args.model)
    default_rule = make_settings(model=model).adapt.rule
    print(
        f"# {datetime.date.today()}  {platform.machine()} {platform.processor() or ''}, torch {torch.__version__}, "
        f"1 thread; model {model.name} sha256 {model.sha256[:16]}"
    )
    if args.levels:
        return levels(model, args)
    print("| file | bytes | rule | lr | bits/byte | vs static | encode kB/s | decode kB/s |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name in args.files:
        rel, limit = FILES[name]
        data = (SHARED / rel).read_bytes()[:limit][: args.limit]
        static_bpb = None
        for rule in args.rules:
            knobs: dict = {"device": "cpu"}
            if rule == "online":
                use = None
            else:
                use, knobs["rule"] = model, rule
                if rule == "sgd":
                    knobs["lr"] = args.sgd_lr
                elif rule == "rms":
                    knobs["lr"] = args.rms_lr
                elif args.lr is not None:
                    knobs["lr"] = args.lr
            t0 = time.perf_counter()
            comp = dyncompress.Compressor(model=use, size_hint=len(data), **knobs)
            packed = comp.compress(data) + comp.flush()
            enc = len(data) / (time.perf_counter() - t0) / 1e3
            dec = ""
            if rule == default_rule and not args.no_decode:
                t1 = time.perf_counter()
                assert dyncompress.decompress(packed, model=model) == data, f"{name} {rule}: not exact"
                dec = f"{len(data) / (time.perf_counter() - t1) / 1e3:.1f}"
            bpb = 8 * len(packed) / len(data)
            if rule == "static":
                static_bpb = bpb
            gain = f"{100 * (bpb / static_bpb - 1):+.1f} %" if static_bpb and rule != "static" else ""
            lr = "" if rule == "static" else f"{comp.settings.adapt.lr:g}"
            print(f"| {name} | {len(data):,} | {rule} | {lr} | {bpb:.3f} | {gain} | {enc:.1f} | {dec} |", flush=True)


def levels(model, args) -> None:
    """Each level's settings as they are (lanes not reduced for size): the model's ideal bits, encode speed."""
    from dyncompress.coding.codec import Codec, encode_block

    print("| file | bytes | level | rule | lanes x segment | bits/byte | encode kB/s |")
    print("|---|---:|---:|---|---|---:|---:|")
    for name in args.files:
        rel, limit = FILES[name]
        data = (SHARED / rel).read_bytes()[:limit][: args.limit]
        for level in range(1, 10):
            s = make_settings(model=model, level=level, device="cpu")
            codec = Codec(s, model)
            t0 = time.perf_counter()
            payload = encode_block(codec, data)
            rate = len(data) / (time.perf_counter() - t0) / 1e3
            bpb = 8 * len(payload) / len(data)
            print(
                f"| {name} | {len(data):,} | -{level} | {s.adapt.rule} | {s.lanes} x {s.segment_len} | {bpb:.3f} "
                f"| {rate:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
