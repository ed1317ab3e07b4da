"""Frames on a cluster: the same frame jobs as the worker processes, run by Dask distributed.

    pip install 'dyncompress[cluster]'
    dyncompress encode --cluster tcp://scheduler:8786 big.txt

or from Python, with a client of one's own:

    from distributed import Client
    client = Client("tcp://scheduler:8786")
    packed = dyncompress.compress(data, workers=dyncompress.cluster.executor(client))

Why Dask: its futures are `concurrent.futures` futures (`Client.get_executor`), so the cluster is
one more executor for `parallel.Pool`, with nothing else to learn; it installs in seconds as pure
Python, and a local cluster starts in under a second (Ray's runtime is far heavier for jobs this
coarse). Each job carries its frame, settings and model (a few MB), and returns its blocks; the
cluster's workers need dyncompress (and the model, which travels with the job) and nothing else.
Their arithmetic is exact like ours, so any worker on any machine gives the same bits.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor

from dyncompress.errors import DyncompressError

CONNECT_TIMEOUT = "10s"


def connect(address: str, timeout: str = CONNECT_TIMEOUT):
    """A Dask client of the scheduler at `address` (tcp://host:port, or a scheduler file's path)."""
    try:
        from distributed import Client
    except ImportError:
        raise DyncompressError(
            "--cluster needs Dask distributed, which is not installed: pip install 'dyncompress[cluster]'"
        ) from None
    kind = "scheduler_file" if address.endswith(".json") else "address"
    if kind == "address":  # a client that failed on a bad address hangs 20 s at exit: check it first
        from distributed.comm import parse_address
        from distributed.comm.registry import backends

        try:
            scheme, _ = parse_address(address)
        except ValueError as e:
            raise DyncompressError(f"not a Dask scheduler address: {address} ({e})") from None
        if scheme not in backends:
            known = ", ".join(sorted(backends))
            raise DyncompressError(f"not a Dask scheduler address: {address} (scheme {scheme!r}; known: {known})")
    elif not os.path.isfile(address):
        raise DyncompressError(f"{address}: no such scheduler file")
    try:
        return Client(**{kind: address}, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DyncompressError(f"cannot reach the Dask scheduler at {address}: {detail}") from None


def executor(client, device: str = "cpu") -> Executor:
    """The client's workers as an executor of frame jobs. With `device` cuda, jobs ask for a GPU
    where the workers offer one (`dask worker --resources GPU=1`)."""
    workers = client.scheduler_info()["workers"].values()
    if not workers:
        raise DyncompressError("the Dask cluster has no workers")
    gpus = any(w.get("resources", {}).get("GPU") for w in workers)
    extra = {"resources": {"GPU": 1}} if device == "cuda" and gpus else {}
    ex = client.get_executor(pure=False, **extra)
    ex.slots = sum(client.nthreads().values())  # frames worth keeping in flight: 2 per slot
    return ex
