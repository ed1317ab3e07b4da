"""Golden files: .dc files written by released versions keep decoding, and the encoder still
writes them byte for byte (a file format is a promise).

tests/golden/NAME.dc was written by dyncompress 0.2.0 (format 1) from NAME.src, by `make.py`
beside it, under MKL's and ATen's portable kernels (MKL_CBWR=COMPATIBLE,
ATEN_CPU_CAPABILITY=default), so that format 1's floats are those of any x86-64 machine with the
same torch. A fresh process under the same variables decodes each file and re-encodes its source
with the recorded settings. Where that process reproduces the recorded fingerprint (the floats
agree), the decode must be exact and the re-encoded stream identical to the golden one, header
(less the platform record) and every frame; where it does not (another torch build or
architecture), the file must be refused up front in one line. Never a wrong byte.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dyncompress.container import parse_header

GOLDEN = Path(__file__).resolve().parent / "golden"
NAMES = sorted(p.stem for p in GOLDEN.glob("*.dc"))
PORTABLE = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"}

PROBE = """
import json, sys
from pathlib import Path
import dyncompress
from dyncompress.api import resolve_model
from dyncompress.codec import fingerprint
from dyncompress.container import parse_header
from dyncompress.settings import Settings

results = {}
for path in sys.argv[1:]:
    packed = Path(path + ".dc").read_bytes()
    source = Path(path + ".src").read_bytes()
    meta, end = parse_header(packed)
    settings = Settings.from_dict(meta["settings"])
    model = resolve_model(meta["model"]["name"]) if meta["model"] else None
    r = {"fingerprint": fingerprint(settings, model)}
    try:
        r["decoded"] = dyncompress.decompress(packed) == source
    except dyncompress.DyncompressError as e:
        r["error"] = str(e)
    again = dyncompress.compress(source, model=model, settings=settings)
    meta2, end2 = parse_header(again)
    r["same_frames"] = again[end2:] == packed[end:]
    r["same_meta"] = {**meta2, "platform": None} == {**meta, "platform": None}
    results[Path(path).name] = r
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def probed() -> dict:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *(str(GOLDEN / n) for n in NAMES)],
        capture_output=True,
        env=dict(os.environ, **PORTABLE),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return json.loads(r.stdout)


def test_golden_files_are_there():
    assert {"online-blocks", "model-default", "model-static", "empty"} <= set(NAMES)
    for name in NAMES:
        meta, _ = parse_header((GOLDEN / f"{name}.dc").read_bytes())
        assert meta["platform"]["dyncompress"] == "0.2.0" and meta["platform"]["cpu_capability"] == "DEFAULT"


@pytest.mark.parametrize("name", NAMES)
def test_golden_file_decodes_and_is_reproduced(probed, name):
    meta, _ = parse_header((GOLDEN / f"{name}.dc").read_bytes())
    r = probed[name]
    if r["fingerprint"] == meta["fingerprint"]:
        assert r.get("decoded") is True, r
        assert r["same_meta"] and r["same_frames"], r
    else:  # this platform computes other floats: refused, never decoded wrongly
        assert "decoded" not in r and "different floating-point results" in r["error"], r
        assert "\n" not in r["error"]
