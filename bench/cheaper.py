"""The cheaper adaptations (issue 12) in the paper's protocol, in miniature.

Tune TLM's threshold on enwik8 [2.5M, 2.5M + --tune-bytes), then report every row on [3.0M, 3.5M):
static, full rms-decay, sparse, TLM weighted / skipped (the segment's S, and each lane's), sparse
with TLM; with the experts mixed in (the default) and with the network alone. Prints bits per
byte, the fraction of backward passes skipped, kB/s, the network's MFLOP per byte, the share of
full dynamic evaluation's saving over static that each row keeps, and its speed against full; PPMd
order 6 on the same slice beside them.

    python bench/cheaper.py [--tune-bytes 200000] [--thresholds 1.8,2.0,2.2,2.4]
    python bench/cheaper.py --rows lora-4,lora-32,lora-tlm --tlm 2.2,1.8   # some rows, thresholds given

Run it alone (about 15 minutes on 2 cores): the speeds are same-run ratios.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from dyncompress.api import resolve_model
from dyncompress.cli.peers import peer_bits
from dyncompress.coding.measure import VARIANTS, measure
from dyncompress.config.settings import EXPERTS, make_settings

ENWIK8 = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "enwik8" / "enwik8_head_3500000"


def ppmd_bpb(data: bytes) -> float | None:
    return peer_bits("PPMd o6", data)


def run(model, data: bytes, label: str, experts: str, **kw):
    s = make_settings(model=model, size_hint=len(data), experts=experts, threads=2, **kw)
    return measure(data, s, model, label)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tune-bytes", type=int, default=200_000)
    ap.add_argument("--thresholds", default="1.8,2.0,2.2,2.4")
    ap.add_argument("--report", default="3000000:3500000")
    ap.add_argument("--rows", help="eval's variant rows to report, beside static and full [all]")
    ap.add_argument("--tlm", help="TLM thresholds (experts mixed in, network alone) instead of tuning them")
    args = ap.parse_args()
    text = ENWIK8.read_bytes()
    tune = text[2_500_000 : 2_500_000 + args.tune_bytes]
    lo, hi = (int(x) for x in args.report.split(":"))
    report = text[lo:hi]
    model = resolve_model("enwiki-h256")
    print(f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}; model {model.name}")
    ppmd = ppmd_bpb(report)
    print(f"report slice [{lo:,}, {hi:,}): PPMd order 6 {ppmd:.4f} bits/byte" if ppmd else "pyppmd not installed")

    given = [float(b) for b in args.tlm.split(",")] if args.tlm else None
    wanted = args.rows.split(",") if args.rows else list(VARIANTS)
    for n, experts in enumerate((",".join(EXPERTS), "")):
        name = "experts mixed in" if experts else "the network alone"
        if given:
            tuned(given[n], wanted, name, experts, model, report, lo, hi)
            continue
        full = run(model, tune, "full", experts)
        print(f"  tune ({name}): full rms-decay: {full.bpb:.4f}, {full.kbps:.2f} kB/s")
        best = None  # the highest threshold (most skipped) within +1 % of full rms-decay on the tuning slice
        for bits in (float(b) for b in args.thresholds.split(",")):
            m = run(model, tune, f"tlm {bits}", experts, tlm_bits=bits)
            skipped = f"{100 * m.skip_fraction:.0f}% skipped"
            print(f"  tune ({name}): tlm_bits {bits}: {m.bpb:.4f}, {skipped}, {m.kbps:.2f} kB/s")
            if m.bpb <= full.bpb * 1.01:
                best = bits
        best = best or min(float(b) for b in args.thresholds.split(","))
        tuned(best, wanted, name, experts, model, report, lo, hi)


def tuned(best: float, wanted: list, name: str, experts: str, model, report: bytes, lo: int, hi: int) -> None:
    """Every row on the report slice, TLM at threshold `best`."""
    rows = {"static": dict(rule="static"), "rms-decay": dict(tlm_relative=0.0)}  # every segment, not the level's
    for label, variant in ((k, v) for k, v in VARIANTS.items() if k in wanted):  # eval's rows, at `best`
        rows[f"{label} {best}" if "tlm_bits" in variant else label] = {
            "tlm_relative": 0.0,
            **variant,
            **({"tlm_bits": best} if "tlm_bits" in variant else {}),
        }
    print(f"\n{name}, [{lo:,}, {hi:,}): ")
    print(f"{'row':<18} {'bits/byte':>9} {'skipped':>7} {'kB/s':>6} {'MFLOP/B':>7} {'saving kept':>11} ", end="")
    print(f"{'speed':>6}")
    results = {}
    for label, kw in rows.items():
        m = results[label] = run(model, report, label, experts, **kw)
        static, full = results.get("static"), results.get("rms-decay")
        kept = speed = ""
        if static and full and label not in ("static",):
            kept = f"{100 * (static.bpb - m.bpb) / (static.bpb - full.bpb):.0f}%"
            speed = f"{m.kbps / full.kbps:.2f}x"
        print(
            f"{label:<18} {m.bpb:>9.4f} {f'{100 * m.skip_fraction:.0f}%':>7} {m.kbps:>6.2f} "
            f"{m.flops / 1e6:>7.2f} {kept:>11} {speed:>6}",
            flush=True,
        )


if __name__ == "__main__":
    main()
