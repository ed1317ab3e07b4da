"""Two versions of dyncompress side by side, in one run: command start-up, coding speed, sizes.

    python bench/versions.py OLD_TREE [--bytes 300000] [--rounds 3]

OLD_TREE is a source tree of another version (e.g. `git worktree add /tmp/v020 v0.2.0`, with
`models` and `corpora/manifests` linked into its package as `dyncompress/models` and
`dyncompress/corpora`, which is how an installed copy lays them out); the new one is this checkout.
Every figure is a fresh process's wall time, versions alternating, median of `--rounds`: these
machines are noisy, so only ratios from one run mean anything. Encoded files must be identical
when the format has not changed; the script says whether they are.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENWIK8 = ROOT.parent / "shared" / "corpora" / "enwik8" / "enwik8_head_3500000"


def run(tree: str, args: list[str]) -> tuple[float, bytes]:
    """`python -m dyncompress ARGS` from `tree`. Run from / : `-m` puts the working directory first
    on sys.path, and a checkout there would shadow PYTHONPATH."""
    env = dict(os.environ, PYTHONPATH=tree)
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dyncompress", *args], capture_output=True, env=env, cwd="/")
    seconds = time.perf_counter() - started
    if r.returncode not in (0, 2):  # 2: the usage error case, on purpose
        raise SystemExit(f"{tree or 'new'}: dyncompress {' '.join(args)} failed: {r.stderr.decode()[-500:]}")
    return seconds, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="source tree of the other version")
    ap.add_argument("--bytes", type=int, default=300_000, help="enwik8 bytes to code")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    trees = {"old": str(Path(a.old).resolve()), "new": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "enwik"
        text.write_bytes(ENWIK8.read_bytes()[: a.bytes])
        small = Path(tmp) / "small"
        small.write_bytes(ENWIK8.read_bytes()[:4000])
        online_small = ["--online", "--hidden", "32", "--lanes", "8", "--segment-len", "8", "--device", "cpu"]
        check = "import dyncompress; print(dyncompress.__file__)"
        for name, tree in trees.items():
            where = subprocess.run(
                [sys.executable, "-c", check],
                capture_output=True,
                text=True,
                cwd="/",
                env=dict(os.environ, PYTHONPATH=tree),
            ).stdout.strip()
            assert where.startswith(tree), (name, where)
            print(f"{name}: {where}")
        packed = {name: run(tree, ["encode", "-c", *online_small, str(small)])[1] for name, tree in trees.items()}
        for name, blob in packed.items():
            (Path(tmp) / f"small.{name}.dc").write_bytes(blob)
        cases = {  # the arguments for version `name`
            "--version": lambda name: ["--version"],
            "usage error": lambda name: ["encode", "--lanes", "0", str(small)],
            "test, 4 kB online file": lambda name: ["test", str(Path(tmp) / f"small.{name}.dc")],
            f"encode -6, {a.bytes:,} B enwik8": lambda name: ["encode", "-c", "--device", "cpu", str(text)],
            f"encode --online -6, {a.bytes:,} B": lambda name: ["encode", "-c", "--online", str(text)],
        }
        print(f"{'case':<34} {'old s':>8} {'new s':>8} {'new/old':>8}  output")
        for case, make in cases.items():
            times: dict[str, list[float]] = {"old": [], "new": []}
            outs: dict[str, set[str]] = {"old": set(), "new": set()}
            for _ in range(a.rounds):
                for name, tree in trees.items():
                    seconds, out = run(tree, make(name))
                    times[name].append(seconds)
                    outs[name].add(hashlib.sha256(out).hexdigest()[:12])
            old, new = statistics.median(times["old"]), statistics.median(times["new"])
            same = "identical" if outs["old"] == outs["new"] and len(outs["new"]) == 1 else "DIFFERENT"
            print(f"{case:<34} {old:>8.2f} {new:>8.2f} {new / old:>8.2f}  {same}", flush=True)


if __name__ == "__main__":
    main()
