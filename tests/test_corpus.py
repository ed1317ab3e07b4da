"""Corpora: manifests, verified fetch into the cache (local copy, archive, download), offline failure, slices."""

import hashlib
import json
import os
import socket
import zipfile

import pytest

from conftest import CORPORA, corpus, run_cli
from dyncompress.training.corpus import (
    CorpusError,
    Manifest,
    cache_dir,
    cached_path,
    fetch,
    manifest,
    parse_offset,
    parse_source,
    read_source,
)

ALICE = CORPORA / "alice29.txt"


@pytest.fixture
def mini(tmp_path, monkeypatch):
    """A corpus named `mini` (Alice) with a manifest in $DYNCOMPRESS_CORPORA and a private cache."""
    data = corpus("alice29.txt")
    manifests, cache = tmp_path / "manifests", tmp_path / "cache"
    manifests.mkdir()
    archive = tmp_path / "mini.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("mini.txt", data)
    n = len(data)
    record = {
        "name": "mini",
        "url": archive.as_uri(),
        "archive": "zip",
        "member": "mini.txt",
        "size": n,
        "sha1": hashlib.sha1(data).hexdigest(),
        "splits": {"train": [0, n - 20000], "valid": [n - 20000, n - 10000], "test": [n - 10000, n]},
    }
    (manifests / "mini.json").write_text(json.dumps(record))
    env = {"DYNCOMPRESS_CORPORA": str(manifests), "DYNCOMPRESS_CACHE": str(cache)}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return record, archive, env, tmp_path


def write_manifest(directory, **changes):
    record = json.loads((directory / "manifests" / "mini.json").read_text())
    record.update(changes)
    (directory / "manifests" / "mini.json").write_text(json.dumps(record))


def leftovers() -> list[str]:
    return sorted(os.listdir(cache_dir())) if os.path.isdir(cache_dir()) else []


def test_shipped_enwik8_manifest_has_the_standard_file_and_splits():
    m = manifest("enwik8")
    assert (m.size, m.sha1) == (100_000_000, "57b8363b814821dc9d47aa4d41f58733519076b2")
    assert m.splits == {"train": (0, 90_000_000), "valid": (90_000_000, 95_000_000), "test": (95_000_000, 100_000_000)}
    assert m.url.startswith("https://") and m.archive == "zip" and m.member == "enwik8"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sha1": "abc"}, "40 hex"),
        ({"splits": {"test": [0, 10**9]}}, "not within"),
        ({"member": None}, "member"),
        ({"archive": "rar"}, "archive"),
    ],
)
def test_bad_manifests_are_refused(change, message):
    good = {"name": "x", "url": "https://e/x.zip", "archive": "zip", "member": "x", "size": 10, "sha1": "0" * 40}
    Manifest.from_dict(good)
    with pytest.raises(CorpusError, match=message):
        Manifest.from_dict({**good, **change})
    with pytest.raises(CorpusError, match="not a corpus manifest"):
        Manifest.from_dict({"name": "x"})


def test_offsets():
    assert parse_offset("2.5M") == 2_500_000
    assert parse_offset("64k") == 64_000
    assert parse_offset("1_000") == 1000
    for bad in ("1.5", "-3", "ten", "3T"):
        with pytest.raises(ValueError):
            parse_offset(bad)


def test_file_slices_read_exactly_those_bytes(tmp_path):
    data = corpus("alice29.txt")
    src, got = read_source(f"{ALICE}:10k:12_500")
    assert got == data[10_000:12_500] and (src.start, src.end, src.whole) == (10_000, 12_500, False)
    assert read_source(f"{ALICE}::100")[1] == data[:100]
    assert read_source(f"{ALICE}:152000:")[1] == data[152_000:]
    whole = parse_source(f"{ALICE}:0:")
    assert whole.whole and whole.stem == str(ALICE)
    assert parse_source(f"{ALICE}:100:200").stem == f"{ALICE}.100-200"
    with pytest.raises(CorpusError, match="not within"):
        parse_source(f"{ALICE}:100:999999999")
    with pytest.raises(CorpusError, match="not within"):
        parse_source(f"{ALICE}:200:100")
    with pytest.raises(CorpusError, match="no such file"):
        parse_source(str(tmp_path / "missing.txt:0:10"))
    odd = tmp_path / "a:1:2"  # an existing file always wins over slice syntax
    odd.write_bytes(b"colons")
    assert read_source(str(odd))[1] == b"colons"


def test_fetch_downloads_unzips_and_verifies(mini):
    record, _, _, _ = mini
    m = manifest("mini")
    seen = []
    path = fetch(m, progress=seen.append)
    assert open(path, "rb").read() == corpus("alice29.txt")
    assert sum(seen) > 0 and leftovers() == ["mini"]
    src, data = read_source("mini:test")
    assert data == corpus("alice29.txt")[record["splits"]["test"][0] :]
    assert src.corpus == "mini" and src.stem == "mini.test"
    assert read_source("mini:100:200")[1] == corpus("alice29.txt")[100:200]
    assert read_source("mini")[1] == corpus("alice29.txt")


@pytest.mark.parametrize("kind", ["raw", "zip"])
def test_fetch_registers_a_local_copy(mini, kind):
    _, archive, _, _ = mini
    local = str(ALICE) if kind == "raw" else str(archive)
    before = open(local, "rb").read()
    path = fetch(manifest("mini"), file=local)
    assert open(path, "rb").read() == corpus("alice29.txt")
    assert open(local, "rb").read() == before  # the user's file is copied, never moved
    assert leftovers() == ["mini"]


def test_wrong_checksum_is_refused_and_nothing_is_cached(mini):
    _, _, _, tmp_path = mini
    write_manifest(tmp_path, sha1=hashlib.sha1(b"something else").hexdigest())
    with pytest.raises(CorpusError, match="sha1 .* where the manifest says"):
        fetch(manifest("mini"), file=str(ALICE))
    with pytest.raises(CorpusError, match="sha1"):
        fetch(manifest("mini"))
    with pytest.raises(CorpusError, match="not fetched yet; run: dyncompress corpus fetch mini"):
        parse_source("mini:test")
    write_manifest(tmp_path, size=123, splits={})
    with pytest.raises(CorpusError, match="bytes where the manifest says 123"):
        fetch(manifest("mini"), file=str(ALICE))
    assert leftovers() == []


def test_cli_offline_fetch_fails_in_one_line(mini):
    _, _, env, tmp_path = mini
    with socket.socket() as held:  # a port of our own, bound but never listening: connections are refused
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}/mini.zip"
        write_manifest(tmp_path, url=url)
        r = run_cli("corpus", "fetch", "mini", "--timeout", "5", env=env)
    err = r.stderr.decode()
    assert r.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"dyncompress: cannot download mini from {url}")
    assert "--file PATH" in err and "Traceback" not in err
    assert leftovers() == []
    r = run_cli("corpus", "fetch", "nosuch", env=env)
    assert r.returncode == 1 and "unknown corpus 'nosuch'" in r.stderr.decode()


def test_cli_corpus_fetch_list_path_and_encode_a_split(mini, tmp_path):
    record, archive, env, _ = mini
    r = run_cli("corpus", "path", "mini", env=env)
    assert r.returncode == 1 and "not fetched yet" in r.stderr.decode()
    r = run_cli("corpus", "fetch", "mini", "--file", archive, env=env)
    assert r.returncode == 0 and "verified" in r.stderr.decode(), r.stderr
    r = run_cli("corpus", "path", "mini", env=env)
    assert r.stdout.decode().strip() == cached_path(manifest("mini"))
    listing = run_cli("corpus", "list", env=env).stdout.decode()
    assert "enwik8: 100,000,000 bytes" in listing and "mini:" in listing and "fetched" in listing
    assert "test [95,000,000, 100,000,000)" in listing
    work = tmp_path / "work"
    work.mkdir()
    r = run_cli("encode", "-1", "--lanes", "2", "mini:test", cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    out = work / "mini.test.dc"
    r = run_cli("decode", "-c", out, cwd=work, env=env)
    assert r.stdout == corpus("alice29.txt")[record["splits"]["test"][0] :]
    r = run_cli("encode", "--rm", "-1", f"{ALICE}:0:5000", cwd=work, env=env)
    assert r.returncode == 1 and "--rm does not apply to a slice" in r.stderr.decode()
    assert ALICE.exists()
