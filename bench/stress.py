"""Stress: many random round trips, in-process and in fresh processes, two workers at a time.

Each trial draws an input (a slice of real text from the corpora, random bytes, a repetitive or
mixed buffer; sizes log-uniform from 0 to --max-size), a mode (the shipped model or online), a
level, lanes, block size and thread count, compresses it and decompresses it, and checks the bytes.
One trial in --fresh-every runs encode and decode as separate `python -m dyncompress` processes
instead. Every failure (a wrong byte, an exception, a refused decode) is counted and written to
--failures with its recipe (seed and settings) so it can be replayed. Prints counts per kind.

    python bench/stress.py --seconds 600 --workers 2 --max-size 1000000
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# the real text trials draw from: the repository's corpora, and more folders where DYNCOMPRESS_STRESS_TEXTS
# names them (separated by the path separator; the recipe of a seed depends on them)
TEXT_DIRS = [
    ROOT / "corpora",
    *(Path(d) for d in os.environ.get("DYNCOMPRESS_STRESS_TEXTS", "").split(os.pathsep) if d),
]
TEXTS = sorted(
    p
    for d in TEXT_DIRS
    for p in (d.rglob("*") if d.is_dir() else [])
    if p.is_file() and p.suffix not in (".json", ".md", ".tsv", ".py") and p.stat().st_size > 1000
)


def recipe(seed: int, max_size: int, fresh_every: int, max_hidden: int = 0) -> dict:
    """What one trial does, from its seed alone (so a failure can be replayed)."""
    rng = np.random.default_rng(seed)
    size = 0 if rng.random() < 0.03 else int(math.exp(rng.uniform(0, math.log(max_size + 1))))
    kind = rng.choice(["text", "text", "text", "random", "repeat", "mixed"])
    online = bool(rng.random() < 0.5)
    r = {"seed": seed, "size": size, "kind": str(kind), "online": online, "fresh": seed % fresh_every == 0}
    # bigger inputs get the cheaper settings, so that a trial stays within seconds to a minute
    cheap = size > 200_000
    r["level"] = int(rng.integers(1, 3)) if cheap else int(rng.integers(1, 10))
    if online and not cheap and r["level"] >= 7 and size > 20_000:
        r["level"] = int(rng.integers(1, 7))
    settings = {}
    if rng.random() < 0.4:
        settings["lanes"] = int(rng.choice([1, 2, 3, 5, 8, 16, 32]))
    if rng.random() < 0.3:
        settings["block_size"] = int(rng.choice([1, 7, 1000, 4096, 65536]))
        if settings["block_size"] < 1000 and size > 3000:
            settings["block_size"] = 1000
    if rng.random() < 0.3:
        settings["segment_len"] = int(rng.choice([1, 3, 8, 16, 40]))
    if online and rng.random() < 0.3:
        settings["rule"] = str(rng.choice(["sgd", "rms", "rms-decay"]))
    elif not online and rng.random() < 0.3:
        settings["rule"] = str(rng.choice(["static", "sgd", "rms", "rms-decay"]))
    if online and rng.random() < 0.2:
        settings["beta1"] = 0.9
    # keep every trial within about a minute: big inputs get many lanes and large segments
    if size > 30_000:
        settings["lanes"] = max(settings.get("lanes", 16), 4 if size <= 200_000 else 16)
        settings["segment_len"] = max(settings.get("segment_len", 16), 16)
    if size > 200_000 and settings.get("rule", "static") != "static":
        settings["rule"] = "static" if not online else "sgd"
    if online and max_hidden:
        settings["hidden"] = int(rng.choice([h for h in (16, 32, 64, 128, 256, 512) if h <= max_hidden] or [16]))
    settings["threads"] = int(rng.integers(1, 3))
    r["settings"] = settings
    return r


def make_input(r: dict) -> bytes:
    rng = np.random.default_rng(r["seed"] + 1)
    n = r["size"]
    if n == 0:
        return b""
    if r["kind"] == "random" or not TEXTS:
        return rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    path = TEXTS[int(rng.integers(len(TEXTS)))]
    text = path.read_bytes()
    start = int(rng.integers(0, max(1, len(text) - n)))
    piece = (text * (n // len(text) + 1))[start : start + n] if len(text) < n else text[start : start + n]
    if r["kind"] == "repeat":
        unit = piece[: max(1, min(len(piece), int(rng.integers(1, 300))))]
        return (unit * (n // len(unit) + 1))[:n]
    if r["kind"] == "mixed":
        noise = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        cut = int(rng.integers(0, n + 1))
        return piece[:cut] + noise[cut:]
    return piece


def run_trial(r: dict) -> tuple[str, str]:
    """('ok' | 'fail', detail)."""
    import dyncompress

    data = make_input(r)
    kwargs = dict(r["settings"], level=r["level"])
    if r["online"]:
        kwargs["model"] = None
    try:
        if r["fresh"]:
            return _fresh(r, data)
        packed = dyncompress.compress(data, **kwargs)
        back = dyncompress.decompress(packed)
    except Exception as e:  # noqa: BLE001  (every failure is counted, none stops the run)
        return "fail", f"{type(e).__name__}: {e} | {traceback.format_exc(limit=3)[-600:]}"
    if back != data:
        return "fail", f"wrong bytes: {len(back)} back for {len(data)}"
    return "ok", ""


def _fresh(r: dict, data: bytes) -> tuple[str, str]:
    args = ["--online"] if r["online"] else []
    args.append(f"-{r['level']}")
    for k, v in r["settings"].items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    cli = [sys.executable, "-m", "dyncompress"]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "input"
        src.write_bytes(data)
        enc = subprocess.run([*cli, "encode", "-q", *args, str(src)], capture_output=True, cwd=tmp)
        if enc.returncode:
            return "fail", f"encode exit {enc.returncode}: {enc.stderr.decode()[-400:]}"
        dec = subprocess.run([*cli, "decode", "-c", str(src) + ".dc"], capture_output=True, cwd=tmp)
        if dec.returncode:
            return "fail", f"decode exit {dec.returncode}: {dec.stderr.decode()[-400:]}"
        if dec.stdout != data:
            return "fail", "wrong bytes (fresh processes)"
    return "ok", ""


def worker(index: int, args: argparse.Namespace, queue: mp.Queue) -> None:
    """Runs trials until the deadline, reporting each to the parent as it ends."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    deadline = time.monotonic() + args.seconds
    seed = args.seed + index
    while time.monotonic() < deadline:
        r = recipe(seed, args.max_size, args.fresh_every, args.max_hidden)
        outcome, detail = run_trial(r)
        queue.put(("trial", r, outcome, detail))
        seed += args.workers
    queue.put(("done", index, None, None))


def _size_class(n: int) -> str:
    for limit, name in ((0, "size 0"), (1000, "size <=1k"), (30_000, "size <=30k"), (300_000, "size <=300k")):
        if n <= limit:
            return name
    return "size >300k"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-size", type=int, default=1_000_000)
    ap.add_argument("--fresh-every", type=int, default=10, help="one trial in N runs as fresh CLI processes")
    ap.add_argument("--max-hidden", type=int, default=0, help="cap online mode's network (0: the level's)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--grace", type=float, default=120, help="seconds a last trial may run past --seconds")
    ap.add_argument("--failures", type=Path, default=Path("stress-failures.json"))
    args = ap.parse_args(argv)
    started = time.monotonic()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(i, args, queue)) for i in range(args.workers)]
    for p in procs:
        p.start()
    counts, failures, running = Counter(), [], len(procs)
    hard_stop = started + args.seconds + args.grace  # a trial still running then is stopped, not counted
    while running:
        try:
            kind, r, outcome, detail = queue.get(timeout=5)
        except Exception:  # noqa: BLE001  (queue.Empty: check the workers and the clock)
            if time.monotonic() > hard_stop:
                print(f"stopping {running} worker(s) still in a trial after the grace period", flush=True)
                break
            dead = [p for p in procs if not p.is_alive() and p.exitcode]
            if dead:
                counts["fail worker died"] += len(dead)
                print(f"FAILED: {len(dead)} worker(s) died (exit {dead[0].exitcode})", flush=True)
                break
            continue
        if kind == "done":
            running -= 1
            continue
        key = f"{'fresh' if r['fresh'] else 'in-process'} {'online' if r['online'] else 'model'}"
        counts[f"{outcome} {key}"] += 1
        counts[f"{outcome} {_size_class(r['size'])}"] += 1
        counts[f"bytes {outcome}"] += r["size"]
        if outcome == "fail":
            failures.append({**r, "detail": detail})
            print(f"FAILED: {json.dumps(failures[-1])[:1500]}", flush=True)
    for p in procs:
        p.terminate()
        p.join()
    kinds = ("in-process", "fresh", "worker")
    ok = sum(v for k, v in counts.items() if k.startswith("ok ") and k.split()[1] in kinds)
    bad = sum(v for k, v in counts.items() if k.startswith("fail ") and k.split()[1] in kinds)
    print(
        f"stress: {ok + bad} round trips in {time.monotonic() - started:.0f} s, {args.workers} workers, "
        f"seed {args.seed}, sizes 0 ... {args.max_size:,}: {ok} exact, {bad} failed"
    )
    for key in sorted(counts):
        if not key.startswith("bytes"):
            print(f"  {key:28s} {counts[key]}")
    print(f"  bytes round-tripped          {counts['bytes ok']:,}")
    if failures:
        args.failures.write_text(json.dumps(failures, indent=1))
        print(f"failures written to {args.failures}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
