"""The experts' worth: bits per byte with all experts, none, and each one left out, beside PPMd.

    python bench/experts.py enwik8:0:1M corpora/alice29.txt       # the ablation
    python bench/experts.py FILE... --all-only --auto              # the start `encode` chooses for
                                                                   # each text (the model, or online)
    python bench/experts.py FILE:0:200k... --rows "all,no ppm"     # chosen rows
    python bench/experts.py FILE --all-only --set table_bits=17    # with settings of make_settings changed

Inputs are named as `dyncompress eval` names them: a path, PATH:START:END for a byte range, or a
fetched corpus (`enwik8:0:1M`, `enwik8:test`; `dyncompress corpus`).

Every row is the codec's own loop (`measure`, as `dyncompress eval` runs it: -log2 p of every
byte, a block that would expand counted as stored), the shipped model at its default level, the
input's size deciding lanes and table sizes as `encode` does. Speeds are of this run only (one
process, rows alternating per input), for comparing rows with each other. PPMd: pyppmd, order 6,
256 MB (7-Zip's `-m0=PPMd:o=6:mem=256m`).
"""

from __future__ import annotations

import argparse
import ast
import platform
import time

from dyncompress.api import resolve_model
from dyncompress.auto import choose_start
from dyncompress.cli.peers import peer_bits
from dyncompress.coding.measure import measure
from dyncompress.config.levels import make_settings
from dyncompress.config.settings import EXPERTS
from dyncompress.training.corpus import read_source


def ppmd_bpb(data: bytes) -> float | None:
    return peer_bits("PPMd o6", data)


def row(data: bytes, model, experts: str, **kw) -> tuple[float, float]:
    settings = make_settings(model=model, size_hint=len(data), device="cpu", experts=experts, **kw)
    m = measure(data, settings, model)
    return m.bits / len(data), len(data) / m.seconds / 1e3


def without(name: str) -> str:
    """Every expert but `name` and those that read its tables (ppm reads the orders')."""
    return ",".join(x for x in EXPERTS if x != name and not (name == "orders" and x == "ppm"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="files, PATH:START:END, or corpus:split (as `eval` takes them)")
    ap.add_argument("--online", action="store_true", help="online mode (no model) instead of the shipped model")
    ap.add_argument("--auto", action="store_true", help="the start encode chooses per input (model or online)")
    ap.add_argument("--all-only", action="store_true", help="only the row with all experts (and PPMd)")
    ap.add_argument("--rows", help="comma-separated rows to run: all, none, 'no EXPERT'")
    ap.add_argument("--set", default="", metavar="K=V,...", help="make_settings overrides, e.g. slots=0,table_bits=17")
    args = ap.parse_args()
    changed = {k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in args.set.split(",") if kv)}
    model = None if args.online else resolve_model("enwiki-h256")
    print(
        f"# {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}, "
        f"{'online' if args.online else 'model enwiki-h256'}{f', {args.set}' if args.set else ''}",
        flush=True,
    )
    every = {"all": ",".join(EXPERTS), "none": "", **{f"no {e}": without(e) for e in EXPERTS}}
    rows = dict(every)
    if args.all_only:
        del rows["none"]
    if args.rows:
        rows = {label: every[label] for label in args.rows.split(",")}
    heads = " | ".join(rows)
    starts = " probe | start |" if args.auto else ""
    print(f"| input | bytes |{starts} PPMd o6 | {heads} | {next(iter(rows))} vs PPMd | kB/s {' / '.join(rows)} |")
    print("|---|---:|" + "---:|---|" * args.auto + "---:|" + "---:|" * len(rows) + "---:|---:|", flush=True)
    for name in args.inputs:
        data = read_source(name)[1]
        start, online, probe = (model, {}, None)
        if args.auto:
            start, online, probe = choose_start(model, data, len(data), {})
        results = {label: row(data, start, experts, **online, **changed) for label, experts in rows.items()}
        ppmd = ppmd_bpb(data)
        bpb = " | ".join(f"{results[label][0]:.4f}" for label in rows)
        first = next(iter(rows))
        gain = results[first][0] / ppmd - 1
        speed = " / ".join(f"{results[label][1]:.1f}" for label in rows)
        chosen = f" {probe or 0:.2f} | {start.name if start else 'online'} |" if args.auto else ""
        print(f"| {name} | {len(data):,} |{chosen} {ppmd:.4f} | {bpb} | {gain:+.1%} | {speed} |", flush=True)


if __name__ == "__main__":
    main()
