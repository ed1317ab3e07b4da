"""Independent frames: each decodes alone and in any order; workers, a cluster and random access
give the same bytes as one process; a dead worker, Ctrl-C and damage to the index fail cleanly."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import SMALL, corpus, run_cli
from dyncompress import Compressor, DyncompressError, compress, decompress, read_range
from dyncompress.config.levels import make_settings
from dyncompress.format.container import (
    END_SIZE,
    FormatError,
    index_size,
    pack_end,
    pack_index,
    parse_end,
    parse_header,
)

FRAMED = dict(SMALL, hidden=16, lanes=4, frame_size=1200, block_size=400)  # frames of 3 blocks
DATA = corpus("alice29.txt")[:4000]  # 4 frames: 1200 x 3 and 400


@pytest.fixture(scope="module")
def packed() -> bytes:
    return compress(DATA, **FRAMED)


def test_workers_write_the_same_file_and_decode_it(packed):
    """-j 2 codes the frames in two processes: the same bytes as one process, both ways; the progress
    they report adds up to the input."""
    seen = []
    comp = Compressor(size_hint=len(DATA), workers=2, progress=seen.append, **FRAMED)
    try:
        assert comp.compress(DATA) + comp.flush() == packed
    finally:
        comp.close()
    assert sum(seen) == len(DATA)
    assert decompress(packed, workers=2) == decompress(packed) == DATA
    assert len(packed) < len(compress(DATA, **dict(FRAMED, frame_size=0))) * 1.5  # frames cost, not that much


def test_each_frame_decodes_alone_and_in_any_order(packed, tmp_path):
    """Ranges at frame edges and inside frames; the frames read last to first; a damaged frame
    does not stop a range that does not need it (only the frames holding the range are read)."""
    path = tmp_path / "f.dc"
    path.write_bytes(packed)
    spans = [(0, 1), (1190, 1210), (1200, 2400), (2500, 2550), (3599, 4000), (0, 4000), (3999, None), (5, 5)]
    for start, end in spans:
        assert read_range(str(path), start, end) == DATA[start:end], (start, end)
    backwards = [read_range(str(path), a, a + 1200) for a in (3600, 2400, 1200, 0)]
    assert b"".join(reversed(backwards)) == DATA
    # break a byte inside the first frame's payload: the rest still reads, the first is refused
    damaged = bytearray(packed)
    damaged[parse_header(packed)[1] + 50] ^= 0xFF  # 50 bytes into the first frame
    path.write_bytes(bytes(damaged))
    assert read_range(str(path), 2500, 3000) == DATA[2500:3000]
    with pytest.raises(DyncompressError):
        read_range(str(path), 100, 200)
    with pytest.raises(DyncompressError):
        decompress(bytes(damaged))


def test_ranges_span_concatenated_streams_and_refuse_what_is_not_there(packed, tmp_path):
    other = compress(DATA[:1500], **FRAMED)
    path = tmp_path / "two.dc"
    path.write_bytes(packed + other)
    both = DATA + DATA[:1500]
    for start, end in [(3950, 4050), (4000, 5500), (5499, 5500), (50, 5000)]:
        assert read_range(str(path), start, end, workers=2 if start == 50 else None) == both[start:end]
    with pytest.raises(DyncompressError, match="outside"):
        read_range(str(path), 5501, 5502)
    path.write_bytes(packed[:-1])
    with pytest.raises(FormatError):
        read_range(str(path), 0, 10)


def test_the_index_must_match_the_frames(packed):
    """An index or end marker with good checksums but wrong numbers is refused, by the streaming
    decoder and by random access."""
    marker = parse_end(packed[-END_SIZE:])
    body = packed[: -END_SIZE - index_size(marker.frames)]
    frames = [(1200, 0), (1200, 0), (1200, 0), (400, 0)]  # wrong compressed sizes
    index = pack_index(frames)
    forged = body + index + pack_end(marker.total_len, marker.blocks, marker.digest, 4, len(body) + len(index))
    with pytest.raises(FormatError, match="frame index"):
        decompress(forged)
    no_index = body + pack_end(marker.total_len, marker.blocks, marker.digest, 4, len(body))
    with pytest.raises(FormatError, match="frame index"):
        decompress(no_index)


def test_frame_settings_are_checked_and_sized():
    s = make_settings(size_hint=10**7, model=None, frame_size=300_000)
    assert s.block_size == 300_000 and s.frame_size == 300_000  # blocks never cross a frame
    assert make_settings(size_hint=10**7, model=None, frame_size=0).frame_size == 0
    with pytest.raises(ValueError, match="frame size"):
        make_settings(model=None, frame_size=1000, block_size=2000)


def test_format2_files_have_no_index_for_ranges():
    golden = os.path.join(os.path.dirname(__file__), "golden", "format2", "model-default.dc")
    with pytest.raises(FormatError, match="no frame index"):
        read_range(golden, 0, 10)


def _cli_encode(tmp_path, *extra) -> subprocess.CompletedProcess:
    args = ["encode", "-f", "--online", "--hidden", "16", "--lanes", "4", "--segment-len", "8"]
    args += ["--frame-size", "1200", "--block-size", "400"]
    return run_cli(*args, *extra, "-o", tmp_path / "cli.dc", tmp_path / "src")


def test_cli_workers_range_and_info(packed, tmp_path):
    (tmp_path / "src").write_bytes(DATA)
    r = _cli_encode(tmp_path, "-j", "2")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cli.dc").read_bytes() == packed  # the API's one-process file, byte for byte
    r = run_cli("decode", "--range", "1190:1.21k", tmp_path / "cli.dc")
    assert r.returncode == 0 and r.stdout == DATA[1190:1210], r.stderr
    r = run_cli("decode", "-j", "2", "-c", "-", input=packed)  # stdin -> stdout
    assert r.returncode == 0 and r.stdout == DATA, r.stderr
    info = run_cli("info", tmp_path / "cli.dc").stdout.decode()
    assert "frames          4 (at most 1,200 bytes each)" in info and "bytes 3,600 ... 4,000" in info
    for bad in (["--range", "9:3"], ["--range", "5", "-t"]):
        r = run_cli("decode", *bad, tmp_path / "cli.dc")
        assert r.returncode == 2 and b"Traceback" not in r.stderr
    r = run_cli("decode", "--range", "5000:", tmp_path / "cli.dc")
    assert r.returncode == 1 and r.stderr.decode().count("\n") == 1 and "outside" in r.stderr.decode()


def test_many_small_files_are_coded_side_by_side_as_one_process_writes_them(tmp_path):
    """-j 2 over several files of one frame each: every file is a job of one shared pool, and the
    files are those -j 1 writes, byte for byte; failures are reported in their turn; decode and
    of the .dc files likewise (in order, to stdout)."""
    texts = {
        "a.txt": corpus("alice29.txt")[1000:2500],
        "b.txt": corpus("alice29.txt")[90000:91200],
        "empty.txt": b"",
        "c.lsp": corpus("grammar.lsp")[:1000],
        "d.txt": bytes(range(256)) * 3,
    }
    names = ["a.txt", "b.txt", "empty.txt", "x.dc", "nope.txt", "c.lsp", "d.txt"]
    outputs, errors = {}, {}
    for j in ("1", "2"):
        where = tmp_path / f"j{j}"
        where.mkdir()
        for name, data in texts.items():
            (where / name).write_bytes(data)
        (where / "x.dc").write_bytes(b"not mine")
        r = run_cli("encode", "-j", j, "--online", "--hidden", "16", "--lanes", "2", *names, cwd=where)
        assert r.returncode == 1, r.stderr  # x.dc and nope.txt fail; the others are written
        errors[j] = r.stderr.decode().splitlines()
        outputs[j] = {name: (where / f"{name}.dc").read_bytes() for name in texts}
    assert outputs["1"] == outputs["2"]
    assert errors["1"] == errors["2"] and len(errors["2"]) == 2
    assert "x.dc: already has .dc suffix" in errors["2"][0] and "nope.txt" in errors["2"][1]
    # the pool's own answers: each planned file's stream is that file (the empty one and x.dc are not planned)
    from dyncompress.cli.batch import Ahead, encode_plan

    paths = tuple(str(tmp_path / "j2" / name) for name in names)
    ahead = Ahead(paths, 2, encode_plan(None, None, dict(hidden=16, lanes=2), lambda p: p.endswith(".dc")))
    try:
        got = {name: ahead.take(path) for name, path in zip(names, paths, strict=True)}
    finally:
        ahead.close()
    assert {name for name, r in got.items() if r is not None} == {"a.txt", "b.txt", "c.lsp", "d.txt"}
    assert all(got[name][0] == outputs["1"][name] and got[name][2] == texts[name] for name in ("a.txt", "d.txt"))
    packed = [f"{name}.dc" for name in texts]
    r = run_cli("decode", "-j", "2", "-c", *packed, cwd=tmp_path / "j2")
    assert r.returncode == 0 and r.stdout == b"".join(texts.values()), r.stderr
    # --frame-size 0 (every file one frame): a file of at most one block goes to the pool too, and
    # its stream is the one -j 1 writes; a larger one takes the ordinary path
    one = tmp_path / "one"
    one.mkdir()
    for name in ("a.txt", "b.txt"):  # 1500 and 1200 bytes
        (one / name).write_bytes(texts[name])
    knobs = dict(hidden=16, lanes=2, frame_size=0, block_size=1300)
    r = run_cli("encode", "--online", "--hidden", "16", "--lanes", "2", "--frame-size", "0", "--block-size", "1300",
                "a.txt", "b.txt", cwd=one)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ahead = Ahead((str(one / "a.txt"), str(one / "b.txt")), 2, encode_plan(None, None, knobs, lambda p: False))
    try:
        assert ahead.take(str(one / "a.txt")) is None
        assert ahead.take(str(one / "b.txt"))[0] == (one / "b.txt.dc").read_bytes()
    finally:
        ahead.close()


def _workers_of(pid: int) -> list[int]:
    """The worker processes of `pid` (its children, less multiprocessing's resource tracker)."""
    kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    return [int(k) for k in kids if b"resource_tracker" not in open(f"/proc/{k}/cmdline", "rb").read()]


def _started(tmp_path, how: str) -> subprocess.Popen:
    """An encode with two workers, once they are both at work."""
    (tmp_path / "src").write_bytes(corpus("alice29.txt")[:120000])
    args = ["-m", "dyncompress", "encode", "--online", "--hidden", "64", "--frame-size", "20000", "-j", "2"]
    proc = subprocess.Popen(
        [sys.executable, *args, str(tmp_path / "src")],
        stderr=subprocess.PIPE,
        preexec_fn=lambda: (os.setpgrp(), signal.signal(signal.SIGINT, signal.SIG_DFL)),
    )
    deadline = time.time() + 90
    while len(_workers_of(proc.pid)) < 2 or not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        assert time.time() < deadline and proc.poll() is None, how
        time.sleep(0.1)
    time.sleep(2)  # the workers past their start-up, coding
    return proc


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"), reason="Linux /proc")
def test_a_killed_worker_or_ctrl_c_stops_everything_and_leaves_nothing(tmp_path):
    proc = _started(tmp_path, "kill")
    os.kill(_workers_of(proc.pid)[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and err.decode().count("\n") == 1 and "worker process died" in err.decode(), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]

    proc = _started(tmp_path, "ctrl-c")
    workers = _workers_of(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT) and err.decode().strip() == "dyncompress: interrupted", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]
    time.sleep(0.5)
    assert not [w for w in workers if os.path.exists(f"/proc/{w}") and open(f"/proc/{w}/stat").read().split()[2] != "Z"]


def test_a_local_cluster_of_two_workers_codes_the_same_file(packed, tmp_path):
    import distributed  # the test extra installs it

    (tmp_path / "src").write_bytes(DATA)
    environ = dict(os.environ)  # Dask's nanny sets OMP_NUM_THREADS=1 and more in this process's environment
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
            r = _cli_encode(tmp_path, "--cluster", cluster.scheduler_address)
            assert r.returncode == 0, r.stderr
            assert (tmp_path / "cli.dc").read_bytes() == packed
            r = run_cli("decode", "-c", "--cluster", cluster.scheduler_address, tmp_path / "cli.dc")
            assert r.returncode == 0 and r.stdout == DATA, r.stderr
    finally:
        os.environ.clear()
        os.environ.update(environ)
    for address, said in (("foo://x", "not a Dask scheduler address"), ("none.json", "no such scheduler file")):
        r = _cli_encode(tmp_path, "--cluster", address)
        assert r.returncode == 1 and said in r.stderr.decode() and r.stderr.decode().count("\n") == 1, r.stderr
    r = _cli_encode(tmp_path, "--cluster", "tcp://127.0.0.1:1", "-j", "2")
    assert r.returncode == 2 and b"contradict" in r.stderr
