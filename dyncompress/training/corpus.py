"""Public corpora (manifests, fetch, cache) and byte slices of files.

A manifest (`corpora/manifests/NAME.json`, installed as `dyncompress.corpora`)
names a corpus's download address, size, SHA-1 and standard splits. `fetch`
downloads it (or takes a local copy with `file=`), unpacks it, verifies size
and checksum, and stores it in the user cache; nothing unverified is ever
left there.

Every command that reads text takes a *source*:

    FILE                 the whole file
    FILE:START:END       bytes [START, END) of it (2.5M = 2,500,000; an empty bound: the file's start or end)
    NAME / NAME:SPLIT    a fetched corpus, or one of its splits (enwik8:test)
    NAME:START:END       a range of a fetched corpus

An existing file always wins, so file names that contain colons still work.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass, field
from importlib import resources

from dyncompress import environment
from dyncompress.errors import DyncompressError
from dyncompress.progress import Progress

CHUNK = 1 << 20


class CorpusError(DyncompressError):
    """A corpus or slice that cannot be had: unknown, not fetched, offline, bad checksum, bad range."""


# --- manifests ----------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    name: str
    url: str
    size: int
    sha1: str
    splits: dict[str, tuple[int, int]] = field(default_factory=dict)
    archive: str | None = None  # "zip": the download is a zip holding `member`
    member: str | None = None
    description: str = ""
    licence: str = ""
    homepage: str = ""

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest") -> Manifest:
        try:
            m = cls(
                name=str(d["name"]),
                url=str(d["url"]),
                size=int(d["size"]),
                sha1=str(d["sha1"]).lower(),
                splits={str(k): (int(v[0]), int(v[1])) for k, v in d.get("splits", {}).items()},
                archive=d.get("archive"),
                member=d.get("member"),
                description=str(d.get("description", "")),
                licence=str(d.get("licence", "")),
                homepage=str(d.get("homepage", "")),
            )
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise CorpusError(f"{where}: not a corpus manifest ({e.__class__.__name__}: {e})") from None
        problems = [
            (re.fullmatch(r"[A-Za-z0-9_.-]+", m.name) is None, f"bad name {m.name!r}"),
            (m.size < 0, "negative size"),
            (re.fullmatch(r"[0-9a-f]{40}", m.sha1) is None, "sha1 must be 40 hex digits"),
            (m.archive not in (None, "zip"), f"unknown archive kind {m.archive!r} (zip or none)"),
            (m.archive == "zip" and not m.member, "a zip archive needs its member's name"),
        ]
        for k, (a, b) in m.splits.items():
            problems.append((not 0 <= a <= b <= m.size, f"split {k} [{a}, {b}) is not within the file"))
        for bad, message in problems:
            if bad:
                raise CorpusError(f"{where}: {message}")
        return m


def manifest_dirs() -> list[str]:
    """DYNCOMPRESS_CORPORA entries first, then the installed manifests."""
    extra = [d for d in environment.get("DYNCOMPRESS_CORPORA").split(os.pathsep) if d]
    return extra + [str(resources.files("dyncompress.corpora"))]


def manifests() -> dict[str, Manifest]:
    """Every known corpus by name (the first manifest of a name wins)."""
    found: dict[str, Manifest] = {}
    for directory in manifest_dirs():
        if not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            if not entry.endswith(".json") or entry[:-5] in found:
                continue
            path = os.path.join(directory, entry)
            try:
                with open(path, encoding="utf-8") as f:
                    d = json.load(f)
            except (OSError, ValueError) as e:
                raise CorpusError(f"{path}: unreadable manifest ({e})") from None
            found[entry[:-5]] = Manifest.from_dict(d, path)
    return found


def manifest(name: str) -> Manifest:
    known = manifests()
    if name not in known:
        raise CorpusError(f"unknown corpus {name!r} (known: {', '.join(sorted(known)) or 'none'})")
    return known[name]


# --- the cache ----------------------------------------------------------------------


def cache_dir() -> str:
    """$DYNCOMPRESS_CACHE, else $XDG_CACHE_HOME/dyncompress, else ~/.cache/dyncompress."""
    base = environment.get("DYNCOMPRESS_CACHE")
    if not base:
        xdg = environment.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "dyncompress")
    return os.path.join(base, "corpora")


def cached_path(m: Manifest) -> str:
    return os.path.join(cache_dir(), m.name)


def is_cached(m: Manifest) -> bool:
    """Fetched (fetch verified it; here only the size is checked, which is instant)."""
    path = cached_path(m)
    return os.path.isfile(path) and os.path.getsize(path) == m.size


def sha1_of(path: str, progress: Progress | None = None) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()


def verify(path: str, m: Manifest, progress: Progress | None = None) -> None:
    """Size and SHA-1 as the manifest says, or CorpusError naming both."""
    size = os.path.getsize(path)
    if size != m.size:
        raise CorpusError(f"{m.name}: {size:,} bytes where the manifest says {m.size:,}; not the right file")
    got = sha1_of(path, progress)
    if got != m.sha1:
        raise CorpusError(f"{m.name}: sha1 {got} where the manifest says {m.sha1}; not the right file (or damaged)")


def fetch(m: Manifest, file: str | None = None, progress: Progress | None = None, timeout: float = 30) -> str:
    """Download `m` (or take the local `file`: the corpus itself or its archive), unpack, verify, cache.

    Returns the cached path. On any failure nothing is left in the cache.
    """
    os.makedirs(cache_dir(), exist_ok=True)
    dest = cached_path(m)
    tmp_paths = []

    def temp(kind: str) -> str:
        fd, path = tempfile.mkstemp(prefix=f".{m.name}.", suffix=f".{kind}.tmp", dir=cache_dir())
        os.close(fd)
        tmp_paths.append(path)
        return path

    try:
        if file is None:
            source = temp("download")
            _download(m, source, progress, timeout)
        else:
            if not os.path.isfile(file):
                raise CorpusError(f"{file}: no such file")
            source = file
        if m.archive == "zip" and zipfile.is_zipfile(source):
            unpacked = temp("unpacked")
            _unzip(source, m, unpacked)
            source = unpacked
        elif file is None and m.archive == "zip":
            raise CorpusError(f"{m.name}: the download from {m.url} is not a zip archive")
        if source == file:  # copy the user's file in; never move or change it
            copy = temp("copy")
            shutil.copyfile(file, copy)
            source = copy
        verify(source, m)
        os.chmod(source, 0o644)
        os.replace(source, dest)
        tmp_paths.remove(source)
    except OSError as e:
        raise CorpusError(f"{e.filename or m.name}: {e.strerror or e}") from None
    finally:
        for path in tmp_paths:
            if os.path.exists(path):
                os.unlink(path)
    return dest


def _download(m: Manifest, target: str, progress: Progress | None, timeout: float) -> None:
    hint = f"fetch it elsewhere and register the copy with: dyncompress corpus fetch {m.name} --file PATH"
    try:
        with urllib.request.urlopen(m.url, timeout=timeout) as response, open(target, "wb") as out:
            length = response.headers.get("Content-Length")
            if hasattr(progress, "total") and length and length.isdigit():
                progress.total = int(length)  # a progress bar that shows a share and an ETA
            while chunk := response.read(CHUNK):
                out.write(chunk)
                if progress:
                    progress(len(chunk))
    except urllib.error.URLError as e:
        raise CorpusError(f"cannot download {m.name} from {m.url} ({e.reason}); {hint}") from None
    except (TimeoutError, ConnectionError, urllib.error.ContentTooShortError) as e:
        raise CorpusError(f"cannot download {m.name} from {m.url} ({e}); {hint}") from None


def _unzip(archive: str, m: Manifest, target: str) -> None:
    try:
        with zipfile.ZipFile(archive) as z, z.open(m.member) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out, CHUNK)
    except KeyError:
        raise CorpusError(f"{archive}: the archive holds no {m.member!r}") from None
    except (zipfile.BadZipFile, EOFError) as e:
        raise CorpusError(f"{archive}: damaged zip archive ({e})") from None


# --- sources: files and slices -------------------------------------------------------

_UNITS = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_offset(text: str) -> int:
    """'2500000', '2_500_000', '2.5M', '64k' -> bytes (decimal units, as the splits are written)."""
    m = re.fullmatch(r"(\d[\d_]*(?:\.\d+)?)([kKMG]?)", text.strip())
    if not m:
        raise ValueError(f"not a byte offset: {text!r}")
    number, unit = m.group(1).replace("_", ""), m.group(2)
    value = float(number) * _UNITS[unit] if "." in number else int(number) * _UNITS[unit]
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


@dataclass(frozen=True)
class Source:
    """Bytes [start, end) of the file at `path`; `label` is how the user named it."""

    path: str
    start: int
    end: int
    label: str
    whole: bool = True
    corpus: str | None = None  # the name of the fetched corpus it comes from

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def stem(self) -> str:
        """A path for outputs made from this source: beside a file (f.100-200), in the current
        directory for a cached corpus (enwik8.test)."""
        if self.whole and self.corpus is None:
            return self.path
        base = self.path if self.corpus is None else os.path.basename(self.path)
        if self.whole:
            return base
        split = self.label.rpartition(":")[2]
        if self.corpus is not None and split in manifest(self.corpus).splits:
            return f"{base}.{split}"
        return f"{base}.{self.start}-{self.end}"

    def open(self) -> _SliceReader:
        return _SliceReader(self)

    def read(self) -> bytes:
        with self.open() as r:
            return r.read(self.size)


class _SliceReader:
    """A binary reader over [start, end) of a file."""

    def __init__(self, source: Source) -> None:
        self._file = open(source.path, "rb")
        self._file.seek(source.start)
        self._left = source.size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._file.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> _SliceReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_source(spec: str) -> Source:
    """A file, a slice of one, a fetched corpus or its split (see the module's docstring)."""
    if os.path.exists(spec):
        return _whole(spec, spec)
    parts = spec.rsplit(":", 2)
    if len(parts) == 3 and _is_bound(parts[1]) and _is_bound(parts[2]):
        path, corpus = _file_or_corpus(parts[0], spec)
        size = os.path.getsize(path)
        try:
            start = parse_offset(parts[1]) if parts[1] else 0
            end = parse_offset(parts[2]) if parts[2] else size
        except ValueError as e:
            raise CorpusError(f"{spec}: {e}") from None
        if not start <= end <= size:
            raise CorpusError(f"{spec}: [{start:,}, {end:,}) is not within the file's {size:,} bytes")
        return Source(path, start, end, spec, whole=(start, end) == (0, size), corpus=corpus)
    name, sep, split = spec.rpartition(":")
    if sep and name in manifests():
        m = manifest(name)
        if split not in m.splits:
            raise CorpusError(f"{spec}: {name} has no split {split!r} (splits: {', '.join(m.splits)})")
        start, end = m.splits[split]
        return Source(_file_or_corpus(name, spec)[0], start, end, spec, whole=False, corpus=name)
    if spec in manifests():
        path, corpus = _file_or_corpus(spec, spec)
        return Source(path, 0, m.size if (m := manifest(spec)) else 0, spec, corpus=corpus)
    raise CorpusError(f"{spec}: no such file")


def _is_bound(text: str) -> bool:
    return text == "" or re.fullmatch(r"\d[\d_]*(?:\.\d+)?[kKMG]?", text) is not None


def _whole(path: str, label: str) -> Source:
    if os.path.isdir(path):
        raise CorpusError(f"{label} is a directory")
    return Source(path, 0, os.path.getsize(path), label)


def _file_or_corpus(name: str, spec: str) -> tuple[str, str | None]:
    """An existing file, or the cached copy of a known corpus: (path, corpus name or None)."""
    if os.path.isfile(name):
        return name, None
    known = manifests()
    if name in known:
        m = known[name]
        if not is_cached(m):
            raise CorpusError(f"{spec}: {name} is not fetched yet; run: dyncompress corpus fetch {name}")
        return cached_path(m), name
    raise CorpusError(f"{spec}: no such file" + ("" if name == spec else f" ({name})"))


def absolute_source(spec: str) -> str:
    """`spec` with its file's path made absolute (a fetched corpus's name stays as it is), so that
    a training checkpoint's sources resolve from any working directory."""
    source = parse_source(spec)
    if source.corpus is not None:
        return spec
    if os.path.exists(spec):
        return os.path.abspath(spec)
    _, start, end = spec.rsplit(":", 2)
    return f"{os.path.abspath(source.path)}:{start}:{end}"


def read_source(spec: str) -> tuple[Source, bytes]:
    source = parse_source(spec)
    try:
        return source, source.read()
    except OSError as e:
        raise CorpusError(f"{spec}: {e.strerror or e}") from None
