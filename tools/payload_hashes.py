"""Payload identity: code a set of inputs at every way of coding and hash each block's payload.

A change that should not change the coded bits (a refactoring, a faster kernel, a thread split)
must leave every hash as recorded. The record is the settings each coding chose (the header's
`settings`, which the decoder follows) and, per block, the SHA-256 of its payload: the platform
record and the header's compression are left out, since they say who coded, not what.

    python tools/payload_hashes.py --write tests/golden/payloads.json        # record (small inputs)
    python tools/payload_hashes.py --check tests/golden/payloads.json        # compare, exit 1 on a change
    python tools/payload_hashes.py --scale 10 --write /tmp/large.json        # 10x the inputs (a script's run)

`tests/test_payload.py` checks the recorded small set; `--scale` makes every input that many times
longer (cut from the same files, repeated where a file is shorter) for a check on larger inputs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

CORPORA = Path(__file__).resolve().parent.parent / "corpora"

# name -> (file, bytes, the Python API's keyword arguments). Between them every way of coding: the
# model's levels, --fast (both engines), --online, frames, the foreign model's start, online mode chosen by `auto`,
# the larger model of the default level and above (from `levels.LARGE_MIN` bytes)
CASES: dict[str, tuple[str, int, dict]] = {
    "default": ("alice29.txt", 8_000, {}),  # (the default model, below `levels.LARGE_MIN`)
    "level1": ("alice29.txt", 8_000, {"level": 1}),
    "level9": ("alice29.txt", 8_000, {"level": 9, "model": "enwiki-h256"}),
    "large": ("alice29.txt", 8_192, {}),  # (`auto`'s larger model, from `levels.LARGE_MIN`)
    "fast": ("alice29.txt", 20_000, {"model": None, "hidden": 0, "engine": "bytes"}),
    "online": ("alice29.txt", 8_000, {"model": None}),
    "online-level1": ("enwik4", 10_000, {"model": None, "level": 1}),
    "frames": ("alice29.txt", 12_000, {"frame_size": 4_096}),
    "lanes": ("alice29.txt", 12_000, {"lanes": 4}),
    "online-lanes": ("enwik4", 10_000, {"model": None, "lanes": 3}),
    "foreign": ("quijote_8k.txt", 16_384, {}),  # (`auto.AUTO_MIN`: the least it probes)
    "auto-online": ("hongloumeng_6k.txt", 16_384, {}),
    "binary-fast": ("calgary_obj1", 21_504, {"model": None, "hidden": 0, "engine": "bytes"}),
    "bits": ("alice29.txt", 20_000, {"model": None, "hidden": 0, "engine": "bits"}),
    "binary-bits": ("calgary_obj1", 21_504, {"model": None, "hidden": 0, "engine": "bits"}),
}


def case_input(file: str, size: int) -> bytes:
    """`size` bytes of `file` from its start, the file repeated where it is shorter."""
    data = (CORPORA / file).read_bytes()
    return (data * (size // len(data) + 1))[:size]


def record(packed: bytes) -> dict:
    """What a stream codes: its header's settings (but the thread count, which changes no bit) and
    its blocks' payload hashes, in order."""
    from dyncompress.format.container import Block, Header, read_frames

    pieces = iter([packed, b""])
    out: dict = {"blocks": []}
    for item in read_frames(lambda n: next(pieces)):
        if isinstance(item, Header):
            out["settings"] = {k: v for k, v in item.meta["settings"].items() if k != "threads"}  # speed only
            out["model"] = (item.meta.get("model") or {}).get("name")
        elif isinstance(item, Block):
            out["blocks"].append([item.orig_len, item.stored, hashlib.sha256(item.payload).hexdigest()[:32]])
    return out


def code_case(name: str, scale: int = 1, threads: int = 1) -> dict:
    import dyncompress

    file, size, kwargs = CASES[name]
    data = case_input(file, size * scale)
    packed = dyncompress.compress(data, threads=threads, device="cpu", **kwargs)
    assert dyncompress.decompress(packed) == data, name
    return record(packed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="record the hashes in this JSON file")
    parser.add_argument("--check", type=Path, help="compare with the hashes recorded in this JSON file")
    parser.add_argument("--scale", type=int, default=1, help="inputs this many times the recorded sizes")
    parser.add_argument("--threads", type=int, default=1, help="coding threads (the bits do not depend on them)")
    parser.add_argument("--only", nargs="*", default=list(CASES), help="these cases only")
    args = parser.parse_args()
    recorded = json.loads(args.check.read_text()) if args.check else {}
    result, changed = {"scale": args.scale}, []
    for name in args.only:
        result[name] = got = code_case(name, args.scale, args.threads)
        same = recorded.get(name) == got if args.check else None
        print(f"{name:14} {len(got['blocks'])} blocks  {'' if same is None else 'same' if same else 'CHANGED'}")
        if same is False:
            changed.append(name)
    if args.write:
        args.write.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if changed:
        print(f"payloads changed: {', '.join(changed)}", file=sys.stderr)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
