"""dyncompress: lossless compression with a byte-level mLSTM that adapts while it codes.

The public names load on first use (PEP 562): `import dyncompress` itself imports no torch;
the first use of `compress`, `Compressor` and the others does (about 1 s). The command line
imports torch only when a command needs it, with Ctrl-C held until it has loaded (`cli_base`),
so an interrupt then is a clean exit. The method: docs/METHOD.md; the file format: docs/FORMAT.md.

The package in layers, each importing only from those above it in this list (`tests/test_imports.py`
checks it, lazy and TYPE_CHECKING imports included):

    errors, environment, progress,    the base: imported from anywhere
    _signals, kernel_cache
    format/      the .dc container
    config/      settings and levels, the network's shape, model files
    network/     the mLSTM: float (training) and exact (coding), its kernels and update rules
    experts/     the byte statistics and the mixer
    bitwise/     the bitwise engine: context mixing a bit at a time, its binary coder
    coding/      the predictor, the coding loop, the range coder, threads, workers, measuring
    training/    training a model on text sources
    api, auto, cluster                 the Python API: streams, the start chosen per input, clusters
    cli/, _entry, __main__             the command line
"""

import importlib

__version__ = "0.4.0.dev0"

_EXPORTS = {
    "Compressor": ("api", "Compressor"),
    "Decompressor": ("api", "Decompressor"),
    "compress": ("api", "compress"),
    "decompress": ("api", "decompress"),
    "open": ("api", "open"),
    "read_range": ("api", "read_range"),
    "Settings": ("config.settings", "Settings"),
    "DyncompressError": ("errors", "DyncompressError"),
    "DEFAULT_MODEL": ("config.levels", "DEFAULT_MODEL"),
    "Model": ("config.model", "Model"),
    "ModelError": ("config.model", "ModelError"),
    "find_model": ("config.model", "find"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dyncompress' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
