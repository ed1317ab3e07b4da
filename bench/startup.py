"""Wall time of short commands, start-up and exit included: this tree against another checkout
(an earlier commit), alternated in one run, each command a fresh `python -m dyncompress`.

    git worktree add /tmp/base HEAD~1       # the baseline
    python bench/startup.py /tmp/base        # 5 rounds of each command in each tree

Commands: encode of 100 bytes (nothing but start-up, the model, the experts' kernels and exit) and
of the 3.7 kB grammar.lsp (calgary). The first run of each tree compiles the experts' kernels for
that checkout (numba caches them beside its source), so one untimed warm-up runs first.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CORPORA = HERE.parent / "shared" / "corpora"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline", type=Path, help="another checkout of dyncompress (a git worktree)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this tree": HERE}
    with tempfile.TemporaryDirectory() as tmp:
        grammar = next(CORPORA.rglob("grammar.lsp")).read_bytes()
        files = {"encode 100 B": Path(tmp, "tiny"), "encode 3.7 kB": Path(tmp, "grammar.lsp")}
        files["encode 100 B"].write_bytes(grammar[:100])
        files["encode 3.7 kB"].write_bytes(grammar)

        def run(where: Path, path: Path) -> float:
            t0 = time.perf_counter()
            # -m with cwd=where: that checkout's package comes first on the path
            r = subprocess.run([sys.executable, "-m", "dyncompress", "encode", "-f", "-c", str(path)],
                               cwd=where, capture_output=True)  # fmt: skip
            if r.returncode != 0:
                sys.exit(f"{where}: {r.stderr.decode().strip()}")
            return time.perf_counter() - t0

        for where in trees.values():
            run(where, files["encode 100 B"])  # warm-up: numba compiles for this checkout
        times = {(t, c): [] for c in files for t in trees}
        for _ in range(args.rounds):
            for c, path in files.items():
                for t, where in trees.items():
                    times[(t, c)].append(run(where, path))
    machine = platform.processor() or platform.machine()
    print(f"# {datetime.date.today()}  {machine}  python {platform.python_version()}")
    print(f"# baseline: {trees['baseline']}")
    for (t, c), v in times.items():
        spread = f"min {min(v):5.2f}   max {max(v):5.2f}   ({len(v)} runs)"
        print(f"{c:14s} {t:10s} median {statistics.median(v):5.2f} s   {spread}")


if __name__ == "__main__":
    main()
