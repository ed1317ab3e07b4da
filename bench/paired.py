"""Two versions' coding speed in one process, block by block in turn: a paired comparison that the
machine's drift (these machines slow down for minutes at a time) cannot bias.

    python bench/paired.py OLD_TREE FILE [--size 1000000] [--block 50000] [--level default|fast|N] [--model NAME]

OLD_TREE is a source tree of the other version (`git worktree add /tmp/old f395982`). Its package is
copied under another name (`dyncompress_old`, in a temporary folder) so that both import side by
side; each version builds its codec for the first `--size` bytes of FILE at the level and codes the
first block untimed (and a little on one thread: every kernel compiled or loaded), then both encode
the same `--block`-byte blocks in turn, the order alternating, each codec keeping its state from
block to block as a stream's codec does. numba's threads are started once, by the old codec;
the new one's `split` is told so (else it would think them another's and code unsplit). Prints
the ratio of the two versions' total seconds, the median and quartiles of the blocks' ratios, each
part of the step in both (experts: prepare, mix, learn; network: forward, adapt), and whether every
block's payload was the same. `bench/speed.py` times the command line (start-up, I/O, peak memory);
this times the coding alone, far more steadily.
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# module paths in the two layouts: before the package had folders (f395982) and after
LAYOUTS = {
    "flat": {"settings": "settings", "codec": "codec", "model": "model", "split": "split"},
    "folders": {"settings": "config.levels", "codec": "coding.codec", "model": "config.model", "split": "coding.split"},
}


def import_old(tree: str, into: str) -> tuple[str, dict]:
    """OLD_TREE's package copied into `into` as `dyncompress_old` (its absolute imports and
    resource lookups renamed, but for the models and corpora: this installation's) and imported:
    (layout, its modules by role)."""
    target = Path(into) / "dyncompress_old"
    shutil.copytree(Path(tree) / "dyncompress", target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*.py"):
        text = path.read_text()
        # (the models and corpora are data this installation has: `dyncompress.models` stays)
        renamed = re.sub(r"(?<![\w.])dyncompress(?=[.\s\"'])(?!\.models|\.corpora)", "dyncompress_old", text)
        if renamed != text:
            path.write_text(renamed)
    sys.path.insert(0, into)
    layout = "folders" if (target / "coding").is_dir() else "flat"
    return layout, {role: importlib.import_module(f"dyncompress_old.{name}") for role, name in LAYOUTS[layout].items()}


def new_modules() -> dict:
    return {role: importlib.import_module(f"dyncompress.{name}") for role, name in LAYOUTS["folders"].items()}


def codec_for(mods: dict, level: str, size: int, model_name: str | None = None, **overrides):
    """A codec of this version for `size` bytes at `level` ("default", "fast" or a level number), from
    the model `model_name` (None: the default model)."""
    name = model_name or mods["settings"].DEFAULT_MODEL
    model = None if level == "fast" else mods["model"].find(name)
    knobs = (
        {"hidden": 0, "engine": "bytes"} if level == "fast" else {"level": None if level == "default" else int(level)}
    )
    settings = mods["settings"].make_settings(model=model, size_hint=size, **knobs, **overrides)
    return mods["codec"].Codec(settings, model)


def wrap_timed(obj, name: str, key: str, parts: dict[str, float]):
    """Replace `obj`'s attribute `name` (a method of an object or of a class) by a call that adds its
    seconds to parts[key]; returns what was there (to put back)."""
    inner = getattr(obj, name)

    def call(*a, **k):
        began = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            parts[key] += time.perf_counter() - began

    setattr(obj, name, call)
    return inner


def timed(codec, parts: dict[str, float]) -> None:
    """Wrap the codec's step parts so that their seconds add up in `parts`."""
    predictor = codec.predictor
    for name in ("prepare", "mix", "learn"):
        wrap_timed(predictor.experts, name, f"experts.{name}", parts)
    for name in ("forward", "adapt"):
        wrap_timed(predictor.net, name, f"network.{name}", parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", help="source tree of the other version")
    ap.add_argument("file", help="the text (its first --size bytes)")
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--block", type=int, default=50_000)
    ap.add_argument("--level", default="default", help="default, fast, or a level number")
    ap.add_argument("--model", help="the model to start from (default: the default model, whatever the level)")
    a = ap.parse_args()
    os.environ.setdefault("DYNCOMPRESS_COMPILE_AHEAD", "0")
    data = Path(a.file).read_bytes()[: a.size]
    with tempfile.TemporaryDirectory() as tmp:
        layout, old = import_old(a.old, tmp)
        new = new_modules()
        versions = {"old": old, "new": new}
        codecs = {name: codec_for(mods, a.level, len(data), a.model) for name, mods in versions.items()}
        warm = data[: a.block]  # each version compiles (or loads) its kernels before the timing
        versions["old"]["codec"].encode_block(codecs["old"], warm)
        new["split"]._started_by, new["split"]._usable = old["split"]._started_by, old["split"]._usable
        versions["new"]["codec"].encode_block(codecs["new"], warm)
        for mods in versions.values():  # and the kernels of one thread (where a chooser tries it)
            mods["codec"].encode_block(codec_for(mods, a.level, len(data), a.model, threads=1), warm[:2000])
        s = codecs["new"].s
        print(f"{a.level} level: {s.lanes} lanes, {s.threads} threads; old tree {a.old} ({layout} layout)")
        parts = {name: collections.defaultdict(float) for name in versions}
        for name, codec in codecs.items():
            timed(codec, parts[name])
        seconds: dict[str, list[float]] = {"old": [], "new": []}
        same = True
        # two versions' imports make a large heap, and a full collection of it (some 0.2 s) would
        # land in whichever version's block it falls: the setup's objects are frozen, and each
        # block starts after a collection
        gc.collect()
        gc.freeze()
        for i, at in enumerate(range(0, len(data), a.block)):
            block = data[at : at + a.block]
            payloads = {}
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                gc.collect()
                began = time.perf_counter()
                payloads[name] = versions[name]["codec"].encode_block(codecs[name], block)
                seconds[name].append(time.perf_counter() - began)
            same &= payloads["old"] == payloads["new"]
    t_old, t_new = np.array(seconds["old"]), np.array(seconds["new"])
    ratio = t_new / t_old
    print(
        f"{len(ratio)} blocks of {a.block:,} bytes: old {t_old.sum():.2f} s, new {t_new.sum():.2f} s, "
        f"new/old {t_new.sum() / t_old.sum():.3f}; blocks' new/old median {np.median(ratio):.3f} "
        f"(quartiles {np.percentile(ratio, 25):.3f}, {np.percentile(ratio, 75):.3f}); "
        f"payloads {'the same' if same else 'DIFFERENT'}"
    )
    for key in sorted(parts["old"]):
        o, n = parts["old"][key], parts["new"][key]
        print(f"  {key:16} old {o:7.2f} s  new {n:7.2f} s  new/old {n / o if o else float('nan'):.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
