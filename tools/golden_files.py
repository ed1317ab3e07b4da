"""Write golden .dc files with the dyncompress that is importable (run once per released format).

    python tools/golden_files.py tests/golden/format2
    python tools/golden_files.py tests/golden/format6 --format 6 [--only NAME,...]

Format 6 is the format of the 0.4 development line: until 0.4 is released its files are written
anew when a change alters the coded bits on purpose (as `tests/golden/payloads.json` is), and from
the release on they are a promise like format 2's.

Format 2 computes exactly, so any machine writes the same files. (Format 1's files, in
format1/, were written by 0.2.0 under MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default.)
Each case writes NAME.src (the original) and NAME.dc.
"""

import sys
from pathlib import Path

import numpy as np

import dyncompress

CORPORA = Path(__file__).resolve().parents[1] / "corpora"
noise = bytes(np.random.default_rng(9).integers(0, 256, 1200, dtype=np.uint8))
CASES = {
    # online mode, three blocks, the first stored (noise would expand), ragged lanes
    "online-blocks": (
        noise + (CORPORA / "xargs.1").read_bytes()[:2300],
        dict(model=None, hidden=32, lanes=5, segment_len=7, block_size=1200, device="cpu"),
    ),
    # the shipped default model, its default rule (rms-decay), two lanes
    "model-default": ((CORPORA / "grammar.lsp").read_bytes(), dict(lanes=2, device="cpu")),
    # the model as trained (level 2: static), another language
    "model-static": ((CORPORA / "quijote_8k.txt").read_bytes()[:3000], dict(level=2, lanes=3, device="cpu")),
    "empty": (b"", dict(model=None, hidden=16, device="cpu")),
    # online, Adam with momentum (the rms rule's first moment) and rms-decay on stream statistics
    "online-momentum": (
        (CORPORA / "alice29.txt").read_bytes()[:2500],
        dict(model=None, hidden=32, lanes=3, beta1=0.9, device="cpu"),
    ),
    "online-decay": (
        (CORPORA / "fields.c").read_bytes()[:2500],
        dict(model=None, hidden=48, rule="rms-decay", decay=0.01, device="cpu"),
    ),
    # online level 9 (the largest network), and sgd with the model
    "online-level9": ((CORPORA / "alice29.txt").read_bytes()[5000:5600], dict(model=None, level=9, device="cpu")),
    "model-sgd": ((CORPORA / "quijote_8k.txt").read_bytes()[3000:5000], dict(rule="sgd", lanes=2, device="cpu")),
}

CORPUS = lambda name: (CORPORA / name).read_bytes()  # noqa: E731
CASES6 = {
    # the bitwise engine: text, noise (a stored block) and object code, two frames of two blocks
    "bits-frames": (
        CORPUS("xargs.1")[:1000] + noise[:1000] + CORPUS("calgary_obj1")[:1800],
        dict(model=None, hidden=0, engine="bits", block_size=1000, frame_size=2000, device="cpu"),
    ),
    # the fast level's byte statistics (no network), and online mode with the experts
    "fast-bytes": (CORPUS("fields.c")[:3000], dict(model=None, hidden=0, engine="bytes", device="cpu")),
    "online-experts": (CORPUS("quijote_8k.txt")[:2000], dict(model=None, hidden=16, lanes=2, device="cpu")),
    # the default model at the default level: LoRA on W_out, the step in 16-bit integers (step16)
    "model-step16": (CORPUS("grammar.lsp"), dict(lanes=2, device="cpu")),
}

if __name__ == "__main__":
    out = Path(sys.argv[1])
    cases = CASES6 if sys.argv[2:4] == ["--format", "6"] else CASES
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else list(cases)
    for name, (data, settings) in ((k, v) for k, v in cases.items() if k in only):
        packed = dyncompress.compress(data, **settings)
        assert dyncompress.decompress(packed) == data
        (out / f"{name}.src").write_bytes(data)
        (out / f"{name}.dc").write_bytes(packed)
        print(f"{name}: {len(data)} -> {len(packed)} bytes (dyncompress {dyncompress.__version__})")
