"""This checkout beside release 0.2.0 (float32), in one run: sizes and speeds.

    python bench/exact_vs_float.py /tmp/v020/bin/python [--decode alice29] [--online]

The old version runs in its own virtual environment (its python given first), the new one is this
checkout; each encode (and decode) is a fresh process that times only the coding (`compress` /
`decompress` of the API, start-up excluded), versions alternating, every input with each version's
defaults (the shipped model, level 6) and once with the same thread count (1). Inputs: enwik6
(the first 1 MB of enwik8), alice29, 1 MB of Don Quijote, the enwik8 test slice [3.0M, 3.5M).
PPMd (order 6, 7-Zip's text default) beside them, from pyppmd when installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from dyncompress.cli.peers import peer_size

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "corpora"
ENWIK8 = SHARED / "enwik8" / "enwik8_head_3500000"
INPUTS = {
    "enwik6": (ENWIK8, 0, 1_000_000),
    "alice29": (ROOT / "corpora" / "alice29.txt", 0, None),
    "quijote 1MB": (SHARED / "multilingual" / "spa_gutenberg_pg2000_don_quijote.txt", 0, 1_000_000),
    "enwik8 [3.0M,3.5M)": (ENWIK8, 3_000_000, 3_500_000),
}

CHILD = r"""
import json, sys, time
import dyncompress
data = open(sys.argv[1], "rb").read()[int(sys.argv[2]):int(sys.argv[3])]
kw = json.loads(sys.argv[4])
t = time.perf_counter(); packed = dyncompress.compress(data, **kw); enc = time.perf_counter() - t
out = {"size": len(packed), "enc": enc, "n": len(data)}
if sys.argv[5] == "1":
    t = time.perf_counter(); ok = dyncompress.decompress(packed) == data; out["dec"] = time.perf_counter() - t
    out["ok"] = ok
print(json.dumps(out))
"""


def child(python: str, name: str, settings: dict, decode: bool, cwd: str) -> dict:
    path, start, stop = INPUTS[name]
    stop = stop or path.stat().st_size
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if cwd != "/":
        env["PYTHONPATH"] = cwd
    r = subprocess.run(
        [python, "-c", CHILD, str(path), str(start), str(stop), json.dumps(settings), "1" if decode else "0"],
        capture_output=True,
        text=True,
        cwd="/",  # not the checkout: `-c` puts the working directory on sys.path
        env=env,
    )
    if r.returncode:
        raise SystemExit(f"{python} failed on {name}: {r.stderr[-1500:]}")
    return json.loads(r.stdout)


def ppmd(name: str) -> int | None:
    path, start, stop = INPUTS[name]
    return peer_size("PPMd o6", path.read_bytes()[start : stop or None])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old_python", help="python of the virtual environment with release 0.2.0")
    ap.add_argument("--decode", nargs="*", default=["alice29"], help="inputs to time decoding on")
    ap.add_argument("--inputs", nargs="*", default=list(INPUTS))
    ap.add_argument("--one-thread", action=argparse.BooleanOptionalAction, default=True, help="also both at 1 thread")
    ap.add_argument("--online", action="store_true", help="online mode (no model) in both, instead of the defaults")
    args = ap.parse_args()
    start = {"model": None} if args.online else {}
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"# {platform.machine()} {cpu}, {os.cpu_count()} cores, python {platform.python_version()}")
    rows = []
    for name in args.inputs:
        decode = name in args.decode
        runs = (("default", start), ("1 thread", {**start, "threads": 1}))
        for label, settings in runs[: 2 if args.one_thread else 1]:
            label = f"online, {label}" if args.online else label
            old = child(args.old_python, name, settings, decode, "/")
            new = child(sys.executable, name, settings, decode, str(ROOT))
            n = new["n"]
            row = {
                "input": name,
                "settings": label,
                "bytes": n,
                "old_bpb": 8 * old["size"] / n,
                "new_bpb": 8 * new["size"] / n,
                "old_enc": n / old["enc"] / 1e3,
                "new_enc": n / new["enc"] / 1e3,
            }
            if decode:
                row |= {"old_dec": n / old["dec"] / 1e3, "new_dec": n / new["dec"] / 1e3}
                row["exact"] = old["ok"] and new["ok"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        size = ppmd(name)
        if size:
            print(json.dumps({"input": name, "ppmd_o6_bpb": 8 * size / n}), flush=True)
    print("| input | threads | 0.2.0 bpb | this bpb | change | 0.2.0 enc kB/s | this enc kB/s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        change = 100 * (r["new_bpb"] / r["old_bpb"] - 1)
        print(
            f"| {r['input']} | {r['settings']} | {r['old_bpb']:.4f} | {r['new_bpb']:.4f} | {change:+.2f} % "
            f"| {r['old_enc']:.1f} | {r['new_enc']:.1f} | {r['new_enc'] / r['old_enc']:.2f}x |"
        )
    for r in rows:
        if "old_dec" in r:
            print(
                f"decode {r['input']} ({r['settings']}): 0.2.0 {r['old_dec']:.1f} kB/s, this {r['new_dec']:.1f} "
                f"kB/s ({r['new_dec'] / r['old_dec']:.2f}x), both exact: {r['exact']}"
            )


if __name__ == "__main__":
    main()
