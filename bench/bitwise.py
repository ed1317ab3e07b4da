"""The bitwise engine alone (`dyncompress.bitwise.engine`) beside PPMd o6, paq8px -8 and the levels.

    python bench/bitwise.py [SPEC ...] [--paq8px PATH] [--levels fast default] [--leave-out MODEL ...]

SPEC is PATH[:START:STOP] (a byte range of the file; STOP may be written 1M, 500k); with none, the
texts of issue 59's list. For each input, in one run on this machine: the engine's payload (no
container: it is not a level yet) encoded and decoded in this process after a warm-up compile, one
thread; PPMd order 6 in process (pyppmd); paq8px -8 and dyncompress at the given levels as
commands on a file of the slice (whole .dc files, start-up included). Bits per byte, and input kB
per second of wall time. Prints a Markdown table for BENCHMARKS.md. --leave-out: the engine without
those models (`engine.MODEL_NAMES`), to see what each is worth.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

from dyncompress.bitwise import engine
from dyncompress.cli.peers import PEERS, BenchRow, bench_command, bench_peer, command_peers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import cpu, dyncompress_peer  # noqa: E402  (this folder's report.py)

CORPORA = Path(os.environ.get("DYNCOMPRESS_CORPORA", Path(__file__).resolve().parents[2] / "shared" / "corpora"))
# issue 59's texts: (name, path in the corpora, first byte, end)
ISSUE_TEXTS = [
    ("enwik6", "enwik8/enwik8_head_3500000", 0, 1_000_000),
    ("enwik8 [3.0M, 3.5M)", "enwik8/enwik8_head_3500000", 3_000_000, 3_500_000),
    ("alice29", "canterbury/alice29.txt", 0, None),
    ("book1", "calgary/book1", 0, None),
    ("Don Quijote 1 MB", "multilingual/spa_gutenberg_pg2000_don_quijote.txt", 0, 1_000_000),
    ("German (freytag) 500 kB", "multilingual/dcc_large/deu/freytag.txt", 0, 500_000),
    ("Russian (rachinskii) 500 kB", "multilingual/dcc_large/rus", 0, 500_000),
    ("hongloumeng 500 kB", "multilingual/zho_simplified_hongloumeng.txt", 0, 500_000),
    ("Japanese (lowndes) 500 kB", "multilingual/dcc_large/jpn/lowndes.txt", 0, 500_000),
    ("calgary/news", "calgary/news", 0, None),
    ("silesia/xml 1 MB", "silesia/xml", 0, 1_000_000),
]


def _size(text: str) -> int:
    scale = {"k": 1000, "K": 1000, "M": 1_000_000}
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def _read(path: Path, start: int, stop: int | None) -> bytes:
    if path.is_dir():  # a folder of novels: its largest
        path = max((p for p in path.iterdir() if p.is_file()), key=lambda p: (p.stat().st_size, p.name))
    return path.read_bytes()[start:stop]


def inputs(specs: list[str]) -> list[tuple[str, bytes]]:
    if not specs:
        return [(name, _read(CORPORA / rel, a, b)) for name, rel, a, b in ISSUE_TEXTS]
    out = []
    for spec in specs:
        path, *rng = spec.split(":")
        a, b = (_size(rng[0]), _size(rng[1])) if rng else (0, None)
        out.append((Path(path).name + (f" [{rng[0]}, {rng[1]})" if rng else ""), _read(Path(path), a, b)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", metavar="SPEC")
    ap.add_argument("--paq8px", help="a paq8px binary (v216, built with its own CMake)")
    ap.add_argument("--levels", nargs="*", default=["fast"], help="dyncompress levels to run beside (default: fast)")
    ap.add_argument("--leave-out", nargs="*", default=[], choices=engine.MODEL_NAMES, metavar="MODEL")
    a = ap.parse_args()
    leave_out = tuple(a.leave_out)
    engine.compress(b"warm-up: compile the engine before timing it")
    paq = [c for c in command_peers(a.paq8px, None) if c.name.startswith("paq8px")]
    commands = [dyncompress_peer(level) for level in a.levels] + paq
    names = ["PPMd o6", *(c.name for c in commands)]
    print(f"{cpu()}, {os.cpu_count()} cores, {datetime.date.today()}; bits per byte; kB/s: input bytes per")
    print("second of wall time (the engine: its payload, in process, one thread; commands: whole files)\n")
    print("| input | bytes | " + " | ".join(names) + " | **engine** | engine / PPMd | engine kB/s enc / dec |")
    print("|---|---:|" + "---:|" * (len(names) + 3))
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in inputs(a.specs):
            src = os.path.join(tmp, "input")
            Path(src).write_bytes(data)
            try:
                rows = [bench_peer(next(p for p in PEERS if p.name == "PPMd o6"), data)]
            except ValueError:  # pyppmd fails to decode some binary files (calgary/pic)
                rows = [BenchRow("PPMd o6")]
            rows += [bench_command(c, src, tmp) for c in commands]
            t0 = time.perf_counter()
            payload = engine.compress(data, leave_out=leave_out)
            t1 = time.perf_counter()
            if engine.decompress(payload, len(data), leave_out=leave_out) != data:
                raise SystemExit(f"{name}: the engine did not decode its own payload")
            t2 = time.perf_counter()
            bpb = [f"{8 * r.size / len(data):.3f}" if r.size else "-" for r in rows]
            ours = 8 * len(payload) / len(data)
            vs_ppmd = f"{ours / (8 * rows[0].size / len(data)) - 1:+.1%}" if rows[0].size else "-"
            kb = len(data) / 1000
            print(f"| {name} | {len(data):,} | " + " | ".join(bpb) + f" | **{ours:.3f}** | {vs_ppmd} | "
                  f"{kb / (t1 - t0):.0f} / {kb / (t2 - t1):.0f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
