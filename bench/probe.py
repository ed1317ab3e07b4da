"""One encode of the first N bytes of a file with explicit settings: bits per byte only.

Used to tune the defaults (docs/lab/notebook.md, "Tuning"): quicker than benchmark.py because it
skips the header, the decode and the peers. Bits per byte do not depend on machine load,
so several probes may run side by side; their speeds then mean nothing.

    python bench/probe.py FILE BYTES '{"hidden": 256, "lanes": 16, "segment_len": 16, "adapt": {"lr": 1.5e-3}}'
"""

import json
import sys
import time

import torch

from dyncompress.coding.codec import Codec, encode_block
from dyncompress.config.settings import AdaptSettings, Settings


def main() -> None:
    path, limit, knobs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    torch.set_num_threads(1)
    data = open(path, "rb").read()[:limit]
    adapt = AdaptSettings(**knobs.pop("adapt", {}))
    codec = Codec(Settings(**knobs, device="cpu", adapt=adapt))
    t0 = time.perf_counter()
    payload = encode_block(codec, data)
    seconds = time.perf_counter() - t0
    print(f"{sys.argv[3]}  {8 * len(payload) / len(data):.4f} bpb  {len(data) / seconds / 1e3:.1f} kB/s", flush=True)


if __name__ == "__main__":
    main()
