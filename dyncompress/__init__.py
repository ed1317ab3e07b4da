"""dyncompress: lossless compression with a byte-level mLSTM that adapts while it codes."""

__version__ = "0.2.0"

from .api import Compressor, Decompressor, compress, decompress, open  # noqa: E402
from .codec import Settings  # noqa: E402
from .errors import DyncompressError  # noqa: E402
from .model import DEFAULT_MODEL, Model, ModelError  # noqa: E402
from .model import find as find_model  # noqa: E402

__all__ = [
    "DEFAULT_MODEL",
    "Compressor",
    "Decompressor",
    "DyncompressError",
    "Model",
    "ModelError",
    "Settings",
    "compress",
    "decompress",
    "find_model",
    "open",
]
