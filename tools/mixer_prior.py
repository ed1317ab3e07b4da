"""Make a mixer prior (`dyncompress/experts/prior_NAME.npz`): the starting weights of the mixer, every row
of every weight set, as learned on text the shipped model was trained on, and every row's starting step
count (which sets the rate it starts learning at).

Each source is coded alone from the hand-set weights with the shipped model, at the settings the
prior was made with (`PRIORS`, pinned); the rows of every weight set are then averaged over the
codings that stepped them, for the fast mixer and the slow, in integers (rounded half up), so the
file comes out the same on every machine; every row starts at the mean of the steps it took
(floored), at most `SETTLED` steps. Prints the SHA-256 to record in `mix.PRIOR_SHA256`. text4 and
online2 (the rows of the weight sets before the kinds set) were made by this tool's earlier recipes,
which git keeps (`git show 9ccd116:tools/mixer_prior.py`); they ship as data.

    python tools/mixer_prior.py --corpora DIR [--prior text5] [-o dyncompress/experts/prior_text5.npz]
    python tools/mixer_prior.py --corpora DIR --compare text5,text6      # the priors side by side on PANEL
    python tools/mixer_prior.py --corpora DIR --compare none,online2  # online mode's (none: hand-set)

The sources' paths are relative to `--corpora DIR`, the team's corpora folder (`shared/corpora`).
"""

from __future__ import annotations

import argparse
import datetime
import platform
from dataclasses import replace
from pathlib import Path

import numpy as np

from dyncompress.api import resolve_model
from dyncompress.cli.peers import peer_bits
from dyncompress.coding.codec import Codec, encode_block
from dyncompress.coding.measure import measure
from dyncompress.config.levels import make_settings
from dyncompress.config.settings import MIX_PRIORS
from dyncompress.experts.mix import prior_sha256

ROOT = Path(__file__).resolve().parent.parent

# Three kinds of text in the model's training data: prose, Wikipedia markup, Spanish: (path, start,
# end, lanes), each coded at the settings the prior was made with, pinned here so that a later change
# of the default level cannot change a prior's rows.
SOURCES = (
    ("silesia/dickens", 0, 600_000, 8),
    ("wiki/enwiki_2016_sample.xml", 0, 1_000_000, 8),
    ("multilingual/dcc_large/spa/unamuno.txt", 0, 300_000, 7),
)
# text5 and text6: every expert and every weight set at the default (one class: a prior holds one
# weight an input), every row the mean over the codings that stepped it. text6 adds 300 kB of each of
# the model's training texts in Portuguese, Italian, German, French and Russian (`auto` starts text
# in those from it).
KNOBS = dict(mix_lr=0.0003, mix_floor=0.00015, kinds=7)
PRIORS = {
    "text5": (KNOBS, SOURCES),
    "text6": (
        KNOBS,
        SOURCES
        + tuple(
            (f"multilingual/dcc_large/{path}", 0, 300_000, 7)
            for path in (
                "por/escrich.txt",
                "ita/history1.txt",
                "deu/freytag.txt",
                "fra/feval.txt",
                "rus/rachinskii.txt",
            )
        ),
    ),
}
SETTLED = 128  # the most steps a row starts with


# texts none of the priors was made from, for --compare: their first 150 kB each
PANEL = (
    "canterbury/alice29.txt", "canterbury/asyoulik.txt", "calgary/book1", "calgary/news",
    "english_prose/gutenberg_austen.txt", "multilingual/dcc_large/deu/freud.txt",
    "multilingual/dcc_large/zho/digong.txt", "calgary/obj2",
)  # fmt: skip
# online mode's: texts where `auto` chooses it (and two where it does not), none in online2's sources,
# their first 100 kB each
ONLINE_PANEL = (
    "multilingual/dcc_large/zho/digong.txt", "multilingual/zho_simplified_hongloumeng.txt",
    "multilingual/dcc_large/jpn/morley.txt", "multilingual/dcc_large/jpn/mushanokoji1.txt",
    "multilingual/dcc_large/rus/derzhavin.txt", "calgary/obj2", "calgary/pic", "calgary/geo",
    "canterbury/alice29.txt", "calgary/news",
)  # fmt: skip
PANEL_BYTES = {False: 150_000, True: 100_000}


def compare(names: list[str], model, corpora: Path) -> None:
    """Bytes of every PANEL text at the default level with each prior in `names` (the first is the
    reference; none: the hand-set start), PPMd order 6 beside them; online mode's priors on
    ONLINE_PANEL in online mode."""
    online = any(n.startswith("online") for n in names)
    model, panel, size = (None, ONLINE_PANEL, PANEL_BYTES[True]) if online else (model, PANEL, PANEL_BYTES[False])
    print(f"# tools/mixer_prior.py --compare, {datetime.date.today()}, {platform.machine()}")
    print(f"| text (first {size // 1000} kB) | PPMd o6 bits/byte | " + " | ".join(f"{n} bytes" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    totals = np.zeros(len(names))
    priors = ["" if n == "none" else n for n in names]
    for path in panel:
        data = (corpora / path).read_bytes()[:size]
        s = make_settings(model=model, size_hint=len(data))
        # (each prior with the experts it was made for; none with the default's)
        mixes = [replace(s.mix, prior=n, experts=MIX_PRIORS.get(n, s.mix.experts)) for n in priors]
        sizes = [measure(data, replace(s, mix=mix), model).bits / 8 for mix in mixes]
        totals += sizes
        cells = [f"{sizes[0]:,.0f}"] + [f"{b:,.0f} ({100 * (b / sizes[0] - 1):+.2f} %)" for b in sizes[1:]]
        ppmd = peer_bits("PPMd o6", data)
        print(f"| {path} | {f'{ppmd:.4f}' if ppmd else '-'} | {' | '.join(cells)} |", flush=True)
    cells = [f"{totals[0]:,.0f}"] + [f"{b:,.0f} ({100 * (b / totals[0] - 1):+.2f} %)" for b in totals[1:]]
    print("| all | | " + " | ".join(cells) + " |")


def learned_rows(
    data: bytes, model, lanes: int, experts: str, online=False, **knobs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mixer's rows (W, W_slow) and their step counts after coding `data` with `experts` from the
    hand-set weights (online: in online mode, without the model)."""
    model = None if online else model
    # a prior holds one weight an input (`mix.load_prior`; `Experts.start_weights` repeats it for every byte
    # class), learned at the rate the shipped priors were made at
    knobs = {"classes": 1, **knobs}
    settings = make_settings(
        model=model, size_hint=len(data), threads=1, experts=experts, prior="", lanes=lanes, **knobs
    )
    codec = Codec(settings, model)
    encode_block(codec, data)
    experts = codec.predictor.experts
    return experts.W.copy(), experts.W_slow.copy(), experts.updates.copy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prior", choices=sorted(PRIORS), default="text5")
    ap.add_argument("-o", "--output", type=Path, help="[dyncompress/experts/prior_PRIOR.npz]")
    ap.add_argument("--corpora", type=Path, required=True, help="the folder the sources' paths are relative to")
    ap.add_argument("--compare", metavar="A,B,...", help="measure these shipped priors on PANEL instead")
    args = ap.parse_args()
    output = args.output or ROOT / "dyncompress" / "experts" / f"prior_{args.prior}.npz"
    model = resolve_model("enwiki-h256")
    if args.compare:
        compare(args.compare.split(","), model, args.corpora)
        return
    knobs, sources = PRIORS[args.prior]
    learned = []
    for path, start, end, lanes in sources:
        data = (args.corpora / path).read_bytes()[start:end]
        learned.append(learned_rows(data, model, lanes, MIX_PRIORS[args.prior], **knobs))
        print(f"coded {path} [{start:,}, {end:,})", flush=True)
    n = len(learned)
    W, W_slow = ((2 * sum(rows[i] for rows in learned) + n) // (2 * n) for i in (0, 1))
    # a row's mean over the codings that stepped it (the others left it as it started)
    seen = np.stack([rows[2] > 0 for rows in learned]).astype(np.int64)[:, :, None]  # (n, rows, 1)
    k = seen.sum(axis=0)
    sums = [2 * sum(rows[i] * seen[j] for j, rows in enumerate(learned)) + k for i in (0, 1)]
    W, W_slow = (np.where(k > 0, total // np.maximum(2 * k, 1), w) for total, w in zip(sums, (W, W_slow), strict=True))
    updates = np.minimum(sum(rows[2] for rows in learned) // n, SETTLED)
    arrays = dict(W=W.astype(np.int32), W_slow=W_slow.astype(np.int32), updates=updates.astype(np.int32))
    np.savez_compressed(output, **arrays)
    print(f"{output}: rows {W.shape}, sha256 {prior_sha256(*arrays.values())}")


if __name__ == "__main__":
    main()
