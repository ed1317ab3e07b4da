"""Make a mixer prior (`dyncompress/experts/prior_NAME.npz`): the starting weights of the mixer, every row
of every weight set, as learned on text the shipped model was trained on, and from text3 on every
row's starting step count (which sets the rate it starts learning at).

Each source is coded alone from the hand-set weights with the shipped model, at the settings the
prior was made with (`PRIORS`, pinned); the rows of every weight set (match bucket with order seen,
order seen with its count bucket, previous byte, and the hashes of the last two bytes, the current
word and the last three) are then averaged over the sources, for the fast mixer and the slow, in
integers (rounded half up), so the file comes out the same on every machine. A prior with settled
rates (text3, online1) also starts every row at the mean of the steps it took in the three codings (floored),
at most `settled` steps. Prints the SHA-256 to record in `mix.PRIOR_SHA256` (every shipped prior
comes out with its recorded hash, 2026-12-04). text1 ... text3 and online1 were made for the experts
before the wrap table (`settings.MIX_PRIORS`); text4 and online2 are text3 and online1 widened for it
(`mix.widen_prior`), not made here; text5 and text6 hold every expert's and every weight set's rows.

    python tools/mixer_prior.py [--prior text5] [-o dyncompress/experts/prior_text5.npz]
    python tools/mixer_prior.py --compare text2,text3      # the priors side by side on PANEL
    python tools/mixer_prior.py --compare none,online1     # online mode's (none: hand-set) on ONLINE_PANEL

(Alone on a 2-core CPU: text1, three times 300 kB, about 1.5 minutes; text2 and text3, 1.9 MB, about 2;
--compare, about a minute per prior; in online mode, on ONLINE_PANEL, about seven.)
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
from dyncompress.config.settings import MIX_PRIORS, make_settings
from dyncompress.experts.mix import load_prior, prior_sha256

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "corpora"  # the team's corpora, beside the repository (training text)

# Three kinds of text in the model's training data: prose, Wikipedia markup, Spanish, each coded
# at the settings the prior was made with, pinned here so that a later change of the default level
# cannot change a prior's rows (each piece's lanes as the default gave them then). text1: 300 kB of
# each at the default of 2026-12-03 (the whole network, TLM 1.1, 8 lanes); text2: 600 kB of the
# prose, 1 MB of the markup (the kind of text the model was trained on most), 300 kB of the Spanish
# at the default of 2026-12-04 (LoRA on W_out, a lane per 40 kB); text3: text2's rows, every row
# starting at the mean of the steps it took, at most 128 (it starts at the rate it had learned down
# to rather than 16 times the settled rate: on eight texts of 150 kB 0.09 ... 1.2 % smaller; at most
# 32 or 64 steps, or the mean itself, gained less, docs/lab/notebook.md).
SETTLED = {"text3": 128}  # the most steps a row of these priors starts with (the others start at 0)
ROWS_FROM = {"text3": "text2"}  # priors whose rows are another's: their file names it (checked equal)
PRIORS = {
    "text1": (
        dict(rule="rms-decay", tlm_relative=1.1),
        (
            ("silesia/dickens", 0, 300_000, 8),
            ("wiki/enwiki_2016_sample.xml", 0, 300_000, 8),
            ("multilingual/dcc_large/spa/unamuno.txt", 0, 300_000, 8),
        ),
    ),
    "text2": (
        dict(level=6),
        (
            ("silesia/dickens", 0, 600_000, 8),
            ("wiki/enwiki_2016_sample.xml", 0, 1_000_000, 8),
            ("multilingual/dcc_large/spa/unamuno.txt", 0, 300_000, 7),
        ),
    ),
}
PRIORS["text3"] = PRIORS["text2"]
# online1: online mode's (a random network, `online=True`: no model), learned on other languages
# than the one the model was trained on, where online mode is chosen (`auto`)
PRIORS["online1"] = (
    dict(online=True),
    (
        ("multilingual/dcc_large/zho/hua.txt", 0, 200_000, 4),
        ("multilingual/dcc_large/jpn/lowndes.txt", 0, 200_000, 4),
        ("multilingual/dcc_large/deu/freytag.txt", 0, 200_000, 4),
    ),
)
SETTLED["online1"] = 128
# text5 and text6: every expert and every weight set (the kinds and state sets' rows too) at the
# default of 2026-12-05 (one class: a prior holds one weight an input), every row the mean over the
# codings that stepped it (VISITED; a plain mean pulled the rows one text never chose toward the
# hand-set start: enwik6 1.64173 against 1.64093, garrett 2.06103 against 2.05997 with text6's
# sources). text5 from text2's sources; text6 from those and 300 kB of each of the model's training
# texts in Portuguese, Italian, German, French and Russian (`auto` starts text in those from it)
VISITED = {"text5", "text6"}
PRIORS["text5"] = (dict(mix_lr=0.0003, mix_floor=0.00015, kinds=7, state_set=True), PRIORS["text2"][1])
PRIORS["text6"] = (
    PRIORS["text5"][0],
    PRIORS["text2"][1]
    + tuple(
        (f"multilingual/dcc_large/{path}", 0, 300_000, 7)
        for path in ("por/escrich.txt", "ita/history1.txt", "deu/freytag.txt", "fra/feval.txt", "rus/rachinskii.txt")
    ),
)
SETTLED["text5"] = SETTLED["text6"] = 128


# texts none of the priors was made from, for --compare: their first 150 kB each
PANEL = (
    "canterbury/alice29.txt", "canterbury/asyoulik.txt", "calgary/book1", "calgary/news",
    "english_prose/gutenberg_austen.txt", "multilingual/dcc_large/deu/freud.txt",
    "multilingual/dcc_large/zho/digong.txt", "calgary/obj2",
)  # fmt: skip
# online mode's: texts where `auto` chooses it (and two where it does not), none in online1's sources,
# their first 100 kB each
ONLINE_PANEL = (
    "multilingual/dcc_large/zho/digong.txt", "multilingual/zho_simplified_hongloumeng.txt",
    "multilingual/dcc_large/jpn/morley.txt", "multilingual/dcc_large/jpn/mushanokoji1.txt",
    "multilingual/dcc_large/rus/derzhavin.txt", "calgary/obj2", "calgary/pic", "calgary/geo",
    "canterbury/alice29.txt", "calgary/news",
)  # fmt: skip
PANEL_BYTES = {False: 150_000, True: 100_000}


def compare(names: list[str], model) -> None:
    """Bytes of every PANEL text at the default level with each prior in `names` (the first is the
    reference; none: the hand-set start), PPMd order 6 beside them; online mode's priors on
    ONLINE_PANEL in online mode."""
    online = any(PRIORS.get(n, ({},))[0].get("online") for n in names)
    model, panel, size = (None, ONLINE_PANEL, PANEL_BYTES[True]) if online else (model, PANEL, PANEL_BYTES[False])
    print(f"# tools/mixer_prior.py --compare, {datetime.date.today()}, {platform.machine()}")
    print(f"| text (first {size // 1000} kB) | PPMd o6 bits/byte | " + " | ".join(f"{n} bytes" for n in names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    totals = np.zeros(len(names))
    priors = ["" if n == "none" else n for n in names]
    for path in panel:
        data = (SHARED / path).read_bytes()[:size]
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
    knobs = {"classes": 1, "mix_lr": 0.0005, "kinds": 0, **knobs}  # (and the six sets before the kinds set)
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
    ap.add_argument("--compare", metavar="A,B,...", help="measure these shipped priors on PANEL instead")
    args = ap.parse_args()
    output = args.output or ROOT / "dyncompress" / "experts" / f"prior_{args.prior}.npz"
    model = resolve_model("enwiki-h256")
    if args.compare:
        compare(args.compare.split(","), model)
        return
    knobs, sources = PRIORS[args.prior]
    learned = []
    for path, start, end, lanes in sources:
        data = (SHARED / path).read_bytes()[start:end]
        learned.append(learned_rows(data, model, lanes, MIX_PRIORS[args.prior], **knobs))
        print(f"coded {path} [{start:,}, {end:,})", flush=True)
    n = len(learned)
    W, W_slow = ((2 * sum(rows[i] for rows in learned) + n) // (2 * n) for i in (0, 1))
    if args.prior in VISITED:  # a row's mean over the codings that stepped it (the others left it as it started)
        seen = np.stack([rows[2] > 0 for rows in learned]).astype(np.int64)[:, :, None]  # (n, rows, 1)
        k = seen.sum(axis=0)
        sums = [2 * sum(rows[i] * seen[j] for j, rows in enumerate(learned)) + k for i in (0, 1)]
        W, W_slow = (
            np.where(k > 0, total // np.maximum(2 * k, 1), w) for total, w in zip(sums, (W, W_slow), strict=True)
        )
    arrays = dict(W=W.astype(np.int32), W_slow=W_slow.astype(np.int32))
    if args.prior in SETTLED:
        arrays["updates"] = np.minimum(sum(rows[2] for rows in learned) // n, SETTLED[args.prior]).astype(np.int32)
    saved = dict(arrays)
    if args.prior in ROWS_FROM:  # the file names the prior with these rows instead of holding them
        base = load_prior(ROWS_FROM[args.prior], W.shape)
        if not (np.array_equal(base[0], W) and np.array_equal(base[1], W_slow)):
            raise SystemExit(f"the rows differ from {ROWS_FROM[args.prior]}'s: cannot take them from it")
        saved = dict(rows_from=np.array(ROWS_FROM[args.prior]), updates=arrays["updates"])
    np.savez_compressed(output, **saved)
    print(f"{output}: rows {W.shape}, sha256 {prior_sha256(*arrays.values())}")


if __name__ == "__main__":
    main()
