"""Model files (.dcm): pretrained weights, their shape, MS_g, and the training record.

    file = MAGIC (8) | version u16 | meta_len u32 | meta (UTF-8 JSON) | arrays | crc32 u32

`meta` names the network shape and, for each array, its dtype, element count and
byte offset within `arrays` (little-endian, one after the other): `theta` (the
flat parameter vector in `mlstm`'s layout) and, once calibrated, `ms` (mean
squared gradients, same layout). It also holds the training record, the
settings the model codes with by default, and a one-line summary.

A model's identity is the SHA-256 of its file: a .dc file records it, and the
decoder refuses a model with any other hash. Installed models live in the
package's `models` folder; `DYNCOMPRESS_MODELS` (os.pathsep-separated
directories) adds more places to look up a name.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from dyncompress import environment
from dyncompress.config.shape import MLSTMShape
from dyncompress.errors import DyncompressError

if TYPE_CHECKING:
    import torch

MAGIC = b"\x89DYNM\r\n\x1a"
VERSION = 1
SUFFIX = ".dcm"
_HEAD = struct.Struct("<8sHI")
_STORE = {"float32": np.float32, "float16": np.float16}


class ModelError(DyncompressError):
    """A model file is missing, unreadable, or not the one a .dc file needs."""


@dataclass
class Model:
    name: str
    shape: MLSTMShape
    theta: torch.Tensor  # float32, CPU
    ms: torch.Tensor | None = None  # mean squared gradients from `calibrate`
    info: dict = field(default_factory=dict)  # training record, defaults, summary, calibration
    sha256: str = ""  # of the file it was loaded from (set by load/save)
    path: str = ""

    def __post_init__(self) -> None:
        if self.theta.numel() != self.shape.num_params:
            raise ModelError(f"model {self.name}: {self.theta.numel()} weights, its shape has {self.shape.num_params}")
        if self.ms is not None and self.ms.shape != self.theta.shape:
            raise ModelError(f"model {self.name}: MS_g has {self.ms.numel()} entries, not {self.theta.numel()}")

    @property
    def summary(self) -> str:
        return str(self.info.get("summary", ""))

    def to_bytes(self, store: str = "float32") -> bytes:
        arrays, specs, offset = [], {}, 0
        for key, tensor in (("theta", self.theta), ("ms", self.ms)):
            if tensor is None:
                continue
            data = tensor.detach().cpu().numpy().astype(np.dtype(_STORE[store]).newbyteorder("<")).tobytes()
            specs[key] = {"dtype": store, "count": int(tensor.numel()), "offset": offset}
            arrays.append(data)
            offset += len(data)
        meta = {"name": self.name, "shape": {"hidden": self.shape.hidden}, "arrays": specs, "info": self.info}
        text = json.dumps(meta, sort_keys=True, ensure_ascii=True).encode()
        body = _HEAD.pack(MAGIC, VERSION, len(text)) + text + b"".join(arrays)
        return body + struct.pack("<I", zlib.crc32(body))


def from_bytes(data: bytes, where: str) -> Model:
    """Parse a model file's bytes; any damage is a ModelError naming `where`."""
    import torch  # (here, not above: the bits engine codes without a model and never loads torch)

    if len(data) < _HEAD.size + 4 or data[:8] != MAGIC:
        raise ModelError(f"{where}: not a dyncompress model file")
    magic, version, meta_len = _HEAD.unpack_from(data)
    if version != VERSION:
        raise ModelError(f"{where}: model format version {version}, this dyncompress reads {VERSION}")
    if struct.unpack("<I", data[-4:])[0] != zlib.crc32(data[:-4]):
        raise ModelError(f"{where}: corrupt model file (checksum mismatch)")
    try:
        meta = json.loads(data[_HEAD.size : _HEAD.size + meta_len])
        base = _HEAD.size + meta_len
        tensors = {}
        for key, spec in meta["arrays"].items():
            dtype = np.dtype(_STORE[spec["dtype"]]).newbyteorder("<")
            start = base + spec["offset"]
            stop = start + spec["count"] * dtype.itemsize
            if stop > len(data) - 4:
                raise ValueError("array runs past the end")
            values = np.frombuffer(data[start:stop], dtype=dtype).astype(np.float32)
            tensors[key] = torch.from_numpy(values.copy())
        return Model(
            name=str(meta["name"]),
            shape=MLSTMShape(int(meta["shape"]["hidden"])),
            theta=tensors["theta"],
            ms=tensors.get("ms"),
            info=dict(meta.get("info", {})),
            sha256=hashlib.sha256(data).hexdigest(),
            path=where,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{where}: corrupt model file ({e})") from None


def load(path: str) -> Model:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ModelError(f"model file {path} not found") from None
    except OSError as e:
        raise ModelError(f"cannot read model {path}: {e.strerror or e}") from None
    return from_bytes(data, path)


def save(model: Model, path: str, store: str = "float32") -> str:
    """Write atomically (temporary file, then rename); sets and returns the model's sha256."""
    data = model.to_bytes(store)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for secrets; a model is for sharing
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    model.sha256, model.path = hashlib.sha256(data).hexdigest(), path
    return model.sha256


def search_dirs() -> list[str]:
    """Where names are looked up: DYNCOMPRESS_MODELS entries first, then the installed models."""
    extra = [d for d in environment.get("DYNCOMPRESS_MODELS").split(os.pathsep) if d]
    return extra + [str(resources.files("dyncompress.models"))]


def installed() -> list[str]:
    """Paths of every model file in the search directories (first of each name wins)."""
    seen, found = set(), []
    for directory in search_dirs():
        if not os.path.isdir(directory):
            continue
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(SUFFIX) and entry[: -len(SUFFIX)] not in seen:
                seen.add(entry[: -len(SUFFIX)])
                found.append(os.path.join(directory, entry))
    return found


def find(name_or_path: str) -> Model:
    """A model by path (anything with a path separator or the .dcm suffix) or by installed name."""
    if os.sep in name_or_path or name_or_path.endswith(SUFFIX) or os.path.isfile(name_or_path):
        return load(name_or_path)
    for directory in search_dirs():
        path = os.path.join(directory, name_or_path + SUFFIX)
        if os.path.isfile(path):
            return load(path)
    names = ", ".join(os.path.basename(p)[: -len(SUFFIX)] for p in installed()) or "none"
    raise ModelError(f"no model named {name_or_path!r} (installed: {names}; or give --model PATH)")


def card_summary(path: str) -> str:
    """The first paragraph of the model's card (`<name>.md` beside it), on one line; '' if none."""
    card = path[: -len(SUFFIX)] + ".md" if path.endswith(SUFFIX) else path + ".md"
    try:
        with open(card, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    for paragraph in text.split("\n\n"):
        lines = [line.strip() for line in paragraph.strip().splitlines()]
        if lines and not lines[0].startswith("#"):
            return " ".join(lines)
    return ""


def predictor_record(model: Model | None) -> dict:
    """What the header says of the starting weights: None for online mode (a seeded random start),
    else the model's name and SHA-256 (every predictor starts from one or the other)."""
    return {"model": None if model is None else {"name": model.name, "sha256": model.sha256}}
