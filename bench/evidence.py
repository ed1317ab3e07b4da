"""The count experts' evidence ln(n + a): the default level with a = 1/2 (before) and 1/8 (now),
on the texts where PPMd beat dyncompress (issue 11) and on English, beside PPMd order 6.

    python bench/evidence.py [--a 0.5,0.125]

Inputs: the first 100,000 bytes of each file (calgary/pic from byte 200,000: its first 50 kB are
blank), alice29 whole, enwik8 [3.0M, 3.5M). Run it alone (about 12 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import platform
import time
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path

import numpy as np

import dyncompress.experts.mix as mix
from dyncompress.api import resolve_model
from dyncompress.cli.peers import peer_bits
from dyncompress.coding.measure import measure
from dyncompress.config.settings import make_settings

C = Path(__file__).resolve().parents[2] / "shared" / "corpora"
INPUTS = {
    "calgary/pic": (C / "calgary/pic", 200_000, 300_000),
    "calgary/obj2": (C / "calgary/obj2", 0, 100_000),
    "calgary/geo": (C / "calgary/geo", 0, None),
    "jpn/lowndes": (C / "multilingual/dcc_large/jpn/lowndes.txt", 0, 100_000),
    "zho/digong": (C / "multilingual/dcc_large/zho/digong.txt", 0, 100_000),
    "deu/becker": (C / "multilingual/dcc_large/deu/becker.txt", 0, 100_000),
    "alice29": (C / "canterbury/alice29.txt", 0, None),
    "enwik8 [3.0M, 3.5M)": (C / "enwik8/enwik8_head_3500000", 3_000_000, 3_500_000),
}


def table(a: Decimal):
    def log_table(limit: int) -> np.ndarray:
        with localcontext() as ctx:
            ctx.prec = 40
            logs = [(Decimal(n) + a).ln() * mix.ONE for n in range(limit + 2)]
            return np.array([int(v.to_integral_value(ROUND_HALF_EVEN)) for v in logs], dtype=np.int64)

    return log_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="0.5,0.125")
    args = ap.parse_args()
    constants = [Decimal(a) for a in args.a.split(",")]
    model = resolve_model("enwiki-h256")
    print(f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}; model {model.name}")
    print(f"{'input':<22} {'bytes':>8} {'PPMd o6':>8} " + " ".join(f"{'a=' + str(a):>16}" for a in constants))
    for name, (path, lo, hi) in INPUTS.items():
        data = path.read_bytes()[lo:hi]
        ppmd = peer_bits("PPMd o6", data)
        cells = []
        for a in constants:
            mix.log_table = table(a)
            m = measure(data, make_settings(model=model, size_hint=len(data), threads=2), model, name)
            cells.append(f"{m.bpb:.4f} ({100 * (m.bpb / ppmd - 1):+.1f}%)")
        print(f"{name:<22} {len(data):>8,} {ppmd:>8.4f} " + " ".join(f"{c:>16}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
