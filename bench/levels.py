"""The levels with the default model beside the adaptations they were chosen against (issue 12).

Measures bits per byte (`measure`: the range coder's ideal, no header) and coding kB/s of each row
on a slice of the enwik8 head, in one process, each row after a warm-up on 5 kB, rows repeated
`--repeat` times in turn (the speeds of a shared 2-core machine swing between runs: compare rows
of one run only). PPMd order 6 on the same slice beside them. The saving kept is each row's share
of what full adaptation (the whole network, rms-decay, every segment) saves over the model as
trained (static), at the same lanes.

    python bench/levels.py                                   # the report slice [3.0M, 3.5M), 8 lanes
    python bench/levels.py --slice 2500000:2800000 --rows L1,L2,L3,L4,L5,L6,L7,L8,L9
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from dyncompress.api import resolve_model
from dyncompress.cli.peers import peer_bits
from dyncompress.coding.measure import VARIANTS, measure, row_settings
from dyncompress.config.settings import MODEL_LEVELS, make_settings

HEAD = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "enwik8" / "enwik8_head_3500000"
ROWS = {  # `eval`'s rows (`measure.row_settings`) with knobs, or a level as it is
    "static": ("static", {}),
    "full": ("rms-decay", {}),  # the whole network on every segment
    **{name: (name, {}) for name in VARIANTS},  # sparse, LoRA, TLM ...
    "tlm-1.1": ("rms-decay", dict(tlm_relative=1.1)),  # the default before the LoRA levels
    "tlm-1.0": ("rms-decay", dict(tlm_relative=1.0)),
    **{f"L{level}": (None, dict(level=level)) for level in MODEL_LEVELS},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slice", default="3000000:3500000", help="START:END of the enwik8 head")
    ap.add_argument("--lanes", type=int, default=8, help="lanes of the rows that are not levels")
    ap.add_argument("--rows", default="static,full,L6,L5,tlm-1.1", help=f"from {', '.join(ROWS)}")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.slice.split(":"))
    data = HEAD.read_bytes()[lo:hi]
    model = resolve_model("enwiki-h256")
    print(f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}; enwik8 [{lo:,}, {hi:,})")
    ppmd = peer_bits("PPMd o6", data)
    print(f"PPMd order 6: {ppmd:.4f}" if ppmd is not None else "PPMd: pyppmd not installed")
    results: dict[str, list] = {}
    for _ in range(args.repeat):
        for name in args.rows.split(","):
            row, knobs = ROWS[name]
            if row is None:
                s = make_settings(model=model, size_hint=len(data), threads=2, **knobs)
            else:
                s, _ = row_settings(row, len(data), model, lanes=args.lanes, threads=2, **knobs)
            measure(data[:5000], s, model, name)
            t = time.perf_counter()
            m = measure(data, s, model, name)
            speed = len(data) / (time.perf_counter() - t) / 1000
            results.setdefault(name, []).append((m.bits / len(data), speed, m.skip_fraction))
            a = s.adapt
            what = (
                a.rule
                + (f", sparse {a.sparse}" if a.sparse else "")
                + (f", LoRA {a.lora} on {a.lora_on}" if a.lora else "")
            )
            what += f", TLM {a.tlm_relative or a.tlm_bits}" if a.tlm else ""
            print(f"  {name:12s} {s.lanes:2d} lanes, segments of {s.segment_len:2d}, {what:40s} "
                  f"{m.bits / len(data):.4f}  {speed:6.2f} kB/s", flush=True)  # fmt: skip
    mean = {k: (v[0][0], sum(x[1] for x in v) / len(v), v[0][2]) for k, v in results.items()}
    print("\nrow            bits/byte   kB/s (mean)   skipped   saving kept   speed vs full")
    base, full = mean.get("static"), mean.get("full")
    for name, (bpb, speed, skipped) in mean.items():
        kept = f"{100 * (base[0] - bpb) / (base[0] - full[0]):5.0f} %" if base and full and base != full else ""
        vs = f"{speed / full[1]:5.2f}x" if full else ""
        print(f"  {name:12s} {bpb:.4f}   {speed:6.2f}      {100 * skipped:5.1f} %      {kept:>7}       {vs}")


if __name__ == "__main__":
    main()
