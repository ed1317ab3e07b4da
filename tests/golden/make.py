"""Write golden .dc files with the dyncompress that is importable (run once per released format).

    MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default python tests/golden/make.py tests/golden

Those two variables select MKL's and ATen's portable kernels, so that the floats of format 1 (and
with them the fingerprint) are those of any x86-64 machine running the same torch: the test
decodes under the same variables. Each case writes NAME.src (the original) and NAME.dc.
"""

import sys
from pathlib import Path

import numpy as np

import dyncompress

CORPORA = Path(__file__).resolve().parents[2] / "corpora"
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
}

if __name__ == "__main__":
    out = Path(sys.argv[1])
    for name, (data, settings) in CASES.items():
        packed = dyncompress.compress(data, **settings)
        assert dyncompress.decompress(packed) == data
        (out / f"{name}.src").write_bytes(data)
        (out / f"{name}.dc").write_bytes(packed)
        print(f"{name}: {len(data)} -> {len(packed)} bytes (dyncompress {dyncompress.__version__})")
