"""Golden files: .dc files written by released versions keep decoding, and the encoder still
writes them byte for byte (a file format is a promise).

format2/NAME.dc was written from NAME.src by `tools/golden_files.py` (format 2, exact arithmetic): every
version that reads format 2, on every machine, must decode it exactly and re-encode the source
with the recorded settings to the same header (less the platform record) and the same blocks
(format 5 ends a stream with a frame index and a longer end marker).
That is checked here in fresh processes under three kernel sets (the machine's best, which also
re-encodes; AVX2; ATen's generic kernels with MKL limited to SSE4.2) and two thread counts. On a CPU
without AVX-512 the first two are one set: it runs once, with one thread.

format1/NAME.dc was written by dyncompress 0.2.0 (float32, format 1). This version does not read
format 1: it must say so in one line naming the release that does, and write nothing.

format6/NAME.dc, the 0.4 line's format (`tools/golden_files.py ... --format 6`), decodes and is
reproduced in this process (the bitwise engine, the fast level's statistics, online mode, the default
model's 16-bit step).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dyncompress
from conftest import run_cli
from dyncompress.api import resolve_model
from dyncompress.config.settings import Settings
from dyncompress.format.container import VERSION, FormatError, parse_header

GOLDEN = Path(__file__).resolve().parent / "golden"
FORMAT2 = sorted(p.stem for p in (GOLDEN / "format2").glob("*.dc"))
FORMAT1 = sorted(p.stem for p in (GOLDEN / "format1").glob("*.dc"))
FORMAT6 = sorted(p.stem for p in (GOLDEN / "format6").glob("*.dc"))

# Every kernel set decodes; the machine's own also re-encodes (decoding runs the encoder's code path,
# so re-encoding under the others adds time, not coverage: each probe is a fresh process of 11-33 s).
REENCODE = ("best",)
KERNELS = {
    "best": {},  # AVX-512 where the CPU has it, else AVX2
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OMP_NUM_THREADS": "1"},
    "generic": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OMP_NUM_THREADS": "2"},
}
if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
    # the best kernels are the AVX2 ones (or the generic ones): a second probe would run the same code
    # (its 20-40 s buy nothing), so the best probe takes the AVX2 probe's single thread; generic keeps two
    KERNELS["best"] = {"OMP_NUM_THREADS": "1"}
    del KERNELS["avx2"]

PROBE = """
import gc, json, sys
from pathlib import Path
import torch
import dyncompress
from dyncompress.api import resolve_model
from dyncompress.format.container import END_SIZE, index_size, parse_end, parse_frame, parse_header
from dyncompress.config.settings import Settings

gc.freeze()  # the imports need no collecting, neither now nor at exit (a second of it)
results, reencode = {}, sys.argv[1] == "reencode"
for path in sys.argv[2:]:
    packed = Path(path + ".dc").read_bytes()
    source = Path(path + ".src").read_bytes()
    meta, end = parse_header(packed)
    settings = Settings.from_dict(meta["settings"])
    model = resolve_model(meta["model"]["name"]) if meta["model"] else None
    r = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
    try:
        r["decoded"] = dyncompress.decompress(packed) == source
    except dyncompress.DyncompressError as e:
        r["error"] = str(e)
    results[Path(path).name] = r
    if not reencode:
        continue
    again = dyncompress.compress(source, model=model, settings=settings)
    meta2, end2 = parse_header(again)
    # the blocks and the end marker's totals (format 5 adds a frame index and a stream length)
    marker, old_end = parse_end(again[-END_SIZE:]), parse_frame(packed, len(packed) - 33, 1, 2)[0]
    tail = END_SIZE + index_size(marker.frames)
    r["same_frames"] = again[end2:-tail] == packed[end:-33] and marker.frames == min(1, len(source)) and (
        (marker.total_len, marker.blocks, marker.digest) == (old_end.total_len, old_end.blocks, old_end.digest)
    )
    r["same_meta"] = {**meta2, "platform": None, "format": 2} == {**meta, "platform": None}
print(json.dumps(results))
"""


@pytest.fixture(scope="module", params=list(KERNELS))
def probed(request) -> tuple[str, dict]:
    # one probe at a time: two at once took three times as long on two cores (a probe with two
    # threads waits at every parallel region for a thread that shares its core with the other)
    r = subprocess.run(
        [sys.executable, "-c", PROBE, "reencode" if request.param in REENCODE else "decode"]
        + [str(GOLDEN / "format2" / n) for n in FORMAT2],
        capture_output=True,
        env=dict(os.environ, **KERNELS[request.param]),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return request.param, json.loads(r.stdout)


def test_golden_files_are_there():
    assert {"online-blocks", "model-default", "model-static", "empty", "online-level9"} <= set(FORMAT2)
    for name in FORMAT2:
        meta, _ = parse_header((GOLDEN / "format2" / f"{name}.dc").read_bytes())
        assert meta["platform"]["dyncompress"].startswith("0.3.")
    assert {"online-blocks", "model-default", "model-static", "empty"} <= set(FORMAT1)


@pytest.mark.parametrize("name", FORMAT2)
def test_format2_golden_file_decodes_exactly_and_is_reproduced(probed, name):
    kernels, results = probed
    r = results[name]
    if kernels == "generic":
        assert r["capability"] == "DEFAULT" and r["threads"] == 2
    if kernels == "avx2":
        assert r["capability"] in ("AVX2", "DEFAULT"), r  # DEFAULT on a CPU without AVX2
    if KERNELS[kernels].get("OMP_NUM_THREADS") == "1":
        assert r["threads"] == 1, r
    assert r.get("decoded") is True, r
    if kernels in REENCODE:
        assert r["same_meta"] and r["same_frames"], r


@pytest.mark.parametrize("name", FORMAT1)
def test_format1_file_is_refused_in_one_line_naming_the_release_that_reads_it(name, tmp_path):
    packed = (GOLDEN / "format1" / f"{name}.dc").read_bytes()
    with pytest.raises(FormatError, match=r"format 1.*dyncompress 0\.2\.0") as e:
        parse_header(packed)
    assert "\n" not in str(e.value) and f"reads format {VERSION}" in str(e.value)
    src = tmp_path / f"{name}.dc"
    src.write_bytes(packed)
    r = run_cli("decode", str(src))
    assert r.returncode != 0 and not (tmp_path / name).exists()
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "0.2.0" in lines[0] and "Traceback" not in lines[0], lines


def test_info_of_a_format2_file_says_it_has_no_experts():
    r = run_cli("info", GOLDEN / "format2" / "model-default.dc")
    assert r.returncode == 0, r.stderr
    assert b"experts         none (the network alone)" in r.stdout and b"tables" not in r.stdout


@pytest.mark.parametrize("name", FORMAT6)
def test_format6_golden_file_decodes_exactly_and_is_reproduced(name):
    """Format 6 (the bitwise engine beside the byte statistics): each file decodes to its source, and
    the source encoded again with the recorded settings gives the same header (less the platform
    record) and the same frames. (The kernel sets other than this machine's: test_cli's and
    test_bitwise's portability tests.)"""
    packed = (GOLDEN / "format6" / f"{name}.dc").read_bytes()
    source = (GOLDEN / "format6" / f"{name}.src").read_bytes()
    assert dyncompress.decompress(packed) == source
    meta, end = parse_header(packed)
    assert meta["format"] == 6
    model = resolve_model(meta["model"]["name"]) if meta["model"] else None
    again = dyncompress.compress(source, model=model, settings=Settings.from_dict(meta["settings"]))
    meta2, end2 = parse_header(again)
    assert {**meta2, "platform": None} == {**meta, "platform": None}
    assert again[end2:] == packed[end:]


def test_format6_golden_files_are_there():
    assert {"bits-frames", "fast-bytes", "online-experts", "model-step16"} <= set(FORMAT6)
    meta, _ = parse_header((GOLDEN / "format6" / "bits-frames.dc").read_bytes())
    assert meta["settings"]["engine"] == "bits"
    meta, _ = parse_header((GOLDEN / "format6" / "model-step16.dc").read_bytes())
    assert meta["settings"]["step16"] and meta["settings"]["adapt"]["lora_on"] == "w_out"
