"""The self-test under load: the header fingerprint computed in many fresh processes at once.

Every process computes `codec.fingerprint` once (its first call, as `encode` and `decode` do) for
the CLI tests' settings (online, hidden 32, 8 lanes, segments of 8) and reports it, with how
many entries `exact_adapt.floor_sqrt_` had to correct in that run (the library's square root was not
correctly rounded there). All must agree. With --cold the numba cache of the package is removed
before each round, so the processes compile while the others run: the load under which torch's
CPU sqrt once gave 32159.99... for the root of 32160^2 (docs/lab/notebook.md, 2026-12-01).

    python bench/fingerprint_stress.py --rounds 10 --processes 8 --cold
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dyncompress

CHILD = """
from dyncompress.coding import codec
from dyncompress.network import exact_adapt
from dyncompress.config.settings import make_settings
library = exact_adapt.floor_sqrt_
corrected = [0]
def counted(v):
    r = library(v)
    corrected[0] += int((v.sqrt().floor_() != r).sum())
    return r
exact_adapt.floor_sqrt_ = counted
s = make_settings(hidden=32, lanes=8, segment_len=8, device="cpu", size_hint=4227)
print(codec.fingerprint(s, None), corrected[0])
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--processes", type=int, default=8, help="started at once per round")
    ap.add_argument("--cold", action="store_true", help="remove the package's numba cache before each round")
    args = ap.parse_args()
    package = Path(dyncompress.__file__).parent
    prints, corrections = Counter(), Counter()
    for r in range(args.rounds):
        if args.cold:
            for f in [*package.rglob("*.nbi"), *package.rglob("*.nbc")]:
                f.unlink(missing_ok=True)
        procs = [
            subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
            for _ in range(args.processes)
        ]
        for p in procs:
            out, _ = p.communicate()
            fp, n = out.split() if p.returncode == 0 and out.strip() else ("failed", "0")
            prints[fp] += 1
            corrections["corrected" if int(n) else "exact"] += 1
        print(f"round {r + 1}: {dict(prints)} {dict(corrections)}", flush=True)
    print("fingerprints agree" if len(prints) == 1 else "FINGERPRINTS DIFFER")
    sys.exit(0 if len(prints) == 1 else 1)


if __name__ == "__main__":
    main()
