"""dyncompress: lossless compression with a byte-level mLSTM that adapts while it codes."""

__version__ = "0.1.0"

from .api import Compressor, Decompressor, compress, decompress, open  # noqa: E402
from .codec import Settings  # noqa: E402
from .errors import DyncompressError  # noqa: E402

__all__ = ["Compressor", "Decompressor", "DyncompressError", "Settings", "compress", "decompress", "open"]
