"""The default predictor's byte tables mixed into the bitwise engine: issue 59's route, measured.

    python bench/engine_mix.py [SPEC ...] [--check] [--sizes 22,18,20]

SPEC as in `bench/bitwise.py` (PATH[:START:STOP]; with none, enwik6 and alice29). For each input, in
one process after a warm-up: the default level's predictor (the shipped model, the network and the
byte experts, the level's lanes for the input's size) codes the input's blocks twice, once through
the range coder as `encode` does (the engine "bytes"), once through `engine.LaneEncoder`: every byte
coded a bit at a time by the engine with the predictor's bit probability mixed in last
(`engine.code_step`). Payload bits per byte and seconds of each; `--check` decodes the second
through `engine.LaneDecoder` and compares. --sizes: the engine's hash table, ring (a lane) and match
table, as powers of two. Prints a Markdown table for BENCHMARKS.md / the notebook.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("DYNCOMPRESS_COMPILE_AHEAD", "0")  # (one process: compiled as it goes)

from dyncompress.bitwise import engine  # noqa: E402
from dyncompress.coding.codec import Codec, block_spans, from_lanes, lane_lengths, to_lanes  # noqa: E402
from dyncompress.coding.coder import Encoder  # noqa: E402
from dyncompress.config.levels import DEFAULT_MODEL, make_settings  # noqa: E402
from dyncompress.config.model import find  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bitwise import CORPORA, _read, inputs  # noqa: E402  (this folder's bitwise.py)

DEFAULT_TEXTS = [("enwik6", CORPORA / "enwik8/enwik8_head_3500000", 0, 1_000_000)]


def code(data: bytes, sizes: tuple[int, int, int], how: str, payloads: list[bytes] | None = None):
    """(each block's payload, seconds, lanes) of `data` coded by the default predictor through the
    range coder (how "bytes") or the engine ("bits"); with `payloads` given, those decoded through the
    engine instead: (each block's bytes, seconds, lanes)."""
    model = find(DEFAULT_MODEL)
    settings = make_settings(model=model, size_hint=len(data), device="cpu")
    codec = Codec(settings, model)
    lanes = engine.new_model(*sizes, lanes=settings.lanes)
    out, began = [], time.perf_counter()
    for k, (a, b) in enumerate(block_spans(0, len(data), settings.block_size)):
        if payloads is not None:
            steps, _ = lane_lengths(b - a, settings.lanes)
            tokens = np.zeros((steps, settings.lanes), dtype=np.int32)
            codec.code_block(engine.LaneDecoder(lanes, payloads[k]), tokens, b - a)
            out.append(from_lanes(tokens, b - a))
            continue
        coder = Encoder() if how == "bytes" else engine.LaneEncoder(lanes)
        codec.code_block(coder, to_lanes(data[a:b], settings.lanes), b - a)
        out.append(coder.finish())
    return out, time.perf_counter() - began, settings.lanes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="*")
    ap.add_argument("--check", action="store_true", help="decode the engine's payload and compare")
    ap.add_argument("--sizes", default="22,18,20", help="the engine's table, ring and match bits")
    args = ap.parse_args()
    sizes = tuple(int(v) for v in args.sizes.split(","))
    texts = inputs(args.specs) if args.specs else [(n, _read(p, a, b)) for n, p, a, b in DEFAULT_TEXTS]
    code(b"warm-up " * 64, sizes, "bits")
    print("| input | lanes | range coder (bpb) | s | engine, predictor mixed last (bpb) | s | change |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, data in texts:
        plain, t0, lanes = code(data, sizes, "bytes")
        mixed, t1, _ = code(data, sizes, "bits")
        if args.check:
            back, _, _ = code(data, sizes, "bits", payloads=mixed)
            assert b"".join(back) == data, f"{name}: the engine's decode differs"
        n0, n1 = sum(map(len, plain)), sum(map(len, mixed))
        print(
            f"| {name} | {lanes} | {8 * n0 / len(data):.4f} | {t0:.1f} | {8 * n1 / len(data):.4f} | {t1:.1f} "
            f"| {100 * (n1 - n0) / n0:+.2f} % |",
            flush=True,
        )


if __name__ == "__main__":
    main()
