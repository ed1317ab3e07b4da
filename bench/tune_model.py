"""Pick a model's coding defaults (rule, learning rate, decay) on tuning text, never on benchmark files.

    python bench/tune_model.py MODEL.dcm --grid '[{"rule": "rms-decay", "lr": 1e-4, "decay": 1e-4}, ...]'

Tuning text (none of it is trained on or benchmarked): the held-out tail of the
2016 Wikipedia sample (the model's own validation slice), Calgary book2 (English
prose) and a Spanish novel from the DCC set that the model did not train on.
Prints each point's bits per byte on each text and their mean (the model's
ideal code length: no header, no coder overhead). Issue 4's `dyncompress tune`
will replace this script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from dyncompress.coding.codec import Codec, encode_block
from dyncompress.config.model import load
from dyncompress.config.settings import make_settings

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"
TEXTS = {
    "wiki-tail": ("wiki/enwiki_2016_sample.xml", -38_000, None),  # held out in training
    "book2": ("calgary/book2", 0, 150_000),
    "verdugo-es": ("multilingual/dcc_large/spa/verdugo.txt", 20_000, 170_000),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--grid", required=True, help="JSON list of settings dicts")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = load(args.model)
    texts = {k: (SHARED / p).read_bytes()[a:b] for k, (p, a, b) in TEXTS.items()}
    print("| point | " + " | ".join(texts) + " | mean |")
    for point in json.loads(args.grid):
        row = []
        for data in texts.values():
            settings = make_settings(model=model, size_hint=len(data), device="cpu", **point)
            codec = Codec(settings, model)
            encode_block(codec, data)
            row.append(codec.nats / 0.6931471805599453 / len(data))
        cells = " | ".join(f"{v:.4f}" for v in row)
        print(f"| {json.dumps(point)} | {cells} | {sum(row) / len(row):.4f} |", flush=True)


if __name__ == "__main__":
    main()
