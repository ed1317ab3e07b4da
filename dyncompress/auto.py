"""The start a file codes from when none is asked for: the shipped model, or online mode.

The shipped models learned English, other European languages, Chinese and Japanese. On data
unlike what a model learned (images, object code, tables of numbers) its prior costs more than it
gives, even after 100 kB of adaptation, and a network that starts from online mode's random seed
codes smaller.

The encoder looks at the input's first PROBE_BYTES: Chinese or Japanese (`cjk_share`) asks
CJK_MODEL, another European language than English (`foreign_share`) FOREIGN_MODEL (with its mixer
prior FOREIGN_PRIOR), the rest the default model. Then that model's network alone, as trained (no
adaptation, no experts), codes those bytes in PROBE_LANES lanes: above ONLINE_ABOVE bits per byte
the file is coded online (ONLINE). At LARGE_LEVELS (the default level among them) the default
model's place is LARGE_MODEL's, a larger network that learned the same text, for inputs of
LARGE_MIN bytes or more (`level_model`), and FOREIGN_MODEL's FOREIGN_LARGE's (`foreign_model`).
Text called foreign that has English's commonest words is probed with the English model too, which
starts it where its probe is lower by ENGLISH_AHEAD (English that cites foreign names). CJK_MODEL
learned manuals and documentation; it starts only the text it knows that well (at most CJK_KNOWN
bits per byte), adapted as online mode adapts its network (CJK_START), and other Chinese and
Japanese (novels) is coded online, where it codes smaller. A model that is not installed leaves its
texts to the default model. The choice is the encoder's alone: the header records the start like any
other setting, and a decoder follows it. The measurements behind each threshold: docs/lab/auto.md.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from dyncompress.config.levels import (
    AUTO_MODEL,
    CJK_MODEL,
    DEFAULT_LEVEL,
    DEFAULT_MODEL,
    FOREIGN_LARGE,
    FOREIGN_MODEL,
    LARGE_LEVELS,
    LARGE_MIN,
    LARGE_MODEL,
    MODEL_LEVELS,
    ONLINE_PRIOR,
    make_settings,
)
from dyncompress.config.model import Model, ModelError
from dyncompress.config.model import find as find_model

PROBE_BYTES = 4096
PROBE_LANES = 4
ONLINE_ABOVE = 6.25  # bits per byte of the probe
# online mode's settings when the probe chooses it, over the level's: a network of 128 units
ONLINE = {"hidden": 128, "lr": 3e-3, "segment_len": 32}
# Text the model starts in another language than English: more than FOREIGN_SHARE of its first bytes
# are two-byte UTF-8 characters or Latin-1 letters (`foreign_share`; not the three-byte quotes and
# dashes of English typography); it starts from FOREIGN_MODEL and FOREIGN_PRIOR.
FOREIGN_SHARE = 0.002
FOREIGN_PRIOR = "text6"
# Such text starts from the English model instead where that model's probe costs less than the foreign
# model's by more than this many bits per byte, for each pair (English model, foreign model) `auto`
# probes. multi-h256 codes the mixture better than the English model of its size unless that one's
# probe is clearly ahead; the larger English model beside multi-h256 (FOREIGN_LARGE not installed)
# knows much of what multi-h256 knows (foreign names, some novels) and starts wherever its probe is
# the lower; beside FOREIGN_LARGE (its own fine-tuned copy, on the same text) it starts unless the
# foreign model's probe is clearly ahead (Wikipedia citing foreign names probes alike with both).
ENGLISH_AHEAD = {
    (DEFAULT_MODEL, FOREIGN_MODEL): 0.1,
    (LARGE_MODEL, FOREIGN_MODEL): 0.0,
    (LARGE_MODEL, FOREIGN_LARGE): -0.03,
}
# ... and where at least ENGLISH_WORDS of the sample's words are English's commonest (`english_words`):
# text without them is not English citing foreign names, whatever the probes say (Spanish prose can
# probe alike with LARGE_MODEL and FOREIGN_LARGE, which codes it smaller).
COMMON_ENGLISH = frozenset({b"the", b"and", b"of", b"to", b"that", b"with"})
ENGLISH_WORDS = 0.01
# Chinese or Japanese: more than CJK_SHARE of the first bytes are three-byte characters of the CJK
# blocks (`cjk_share`). CJK_MODEL starts such text where its probe costs at most CJK_KNOWN bits per
# byte, with CJK_START's settings over the level's: the whole network adapted on the stream's own
# statistics, as online mode does, at a rate for a network that starts trained.
CJK_SHARE = 0.25
CJK_KNOWN = 2.5
CJK_START = {"rule": "rms", "lr": 4e-4, "segment_len": 32}
CJK_PRIOR = ONLINE_PRIOR
AUTO_MIN = 16 * 1024  # smaller inputs keep the model (at 4 kB neither start wins throughout)
# knobs that tune the model's adaptation: given any of them, the model is what was asked for
MODEL_KNOBS = frozenset(
    {"rule", "lr", "decay", "eps", "clip", "beta1", "beta2", "sparse", "lora", "lora_on"}
    | {"tlm_bits", "tlm_lambda", "tlm_lanes", "tlm_relative"}
)


def is_auto(model) -> bool:
    """Whether `model` asks for the start chosen here (AUTO_MODEL) rather than naming one."""
    return isinstance(model, str) and model == AUTO_MODEL


def probe_bits(model: Model, sample: bytes, **where) -> float:
    """Bits per byte of the model's network alone, as trained, on `sample`'s first PROBE_BYTES
    (`where`: the device and threads asked for the coding, if any)."""
    from dyncompress.coding.measure import measure

    sample = sample[:PROBE_BYTES]
    settings = make_settings(model=model, rule="static", experts="", lanes=PROBE_LANES, **where)
    return measure(sample, settings, model).bits / max(1, len(sample))


def considered(size: int | None, knobs: dict) -> bool:
    """Whether the probe chooses the start: an input of at least AUTO_MIN bytes (or of a size not
    known yet), a level that adapts (-1 and -2 promise the model's speed), and no knob of the
    model's adaptation. `knobs`: the settings asked for (`level` among them, if one was)."""
    static = MODEL_LEVELS[knobs.get("level") or DEFAULT_LEVEL].get("rule") == "static"
    return (size is None or size >= AUTO_MIN) and not static and not MODEL_KNOBS & set(knobs)


def choose_start(model: Model, sample: bytes, size: int | None, knobs: dict) -> tuple[Model | None, dict, float | None]:
    """(the model, or None for online mode; the settings that go with it over `knobs`; the probe's
    bits per byte, None where there was no probe) for an input of `size` bytes (None: not known)
    that starts with `sample`. `model`: DEFAULT_MODEL, or the model a batch of files starts from."""
    model = level_model(model, size, knobs)
    if not considered(size, knobs) or not sample:
        return model, {}, None
    language = "cjk" if cjk_share(sample) > CJK_SHARE else "foreign" if foreign_share(sample) > FOREIGN_SHARE else ""
    english, where = model, {k: knobs[k] for k in ("device", "threads") if knobs.get(k)}
    if language and model.name in (DEFAULT_MODEL, LARGE_MODEL):
        model = language_model(CJK_MODEL) if language == "cjk" else foreign_model(model.name)
        model = model or english
    bits = probe_bits(model, sample, **where)
    if language == "foreign" and model is not english and english_words(sample) >= ENGLISH_WORDS:
        # English with other languages' names (Wikipedia citing its sources) is still the English model's:
        # it starts where its probe is clearly the lower (ENGLISH_AHEAD)
        english_bits = probe_bits(english, sample, **where)
        if english_bits < bits - ENGLISH_AHEAD[english.name, model.name]:
            model, bits, language = english, english_bits, ""
    cjk = language == "cjk" and model.name == CJK_MODEL
    if bits > (CJK_KNOWN if cjk else ONLINE_ABOVE):
        return None, ONLINE, bits
    if cjk:
        return model, {**CJK_START, **chosen_prior(CJK_PRIOR, knobs)}, bits
    return model, chosen_prior(FOREIGN_PRIOR if language == "foreign" else "", knobs), bits


def level_model(model: Model, size: int | None, knobs: dict) -> Model:
    """LARGE_MODEL in DEFAULT_MODEL's place at LARGE_LEVELS (where it is installed) for an input of
    `size` bytes, at least LARGE_MIN or not known yet: the level chose it, not the probe; else
    `model`. `knobs`: the settings asked for."""
    level = knobs.get("level") or DEFAULT_LEVEL
    if model.name == DEFAULT_MODEL and level in LARGE_LEVELS and (size is None or size >= LARGE_MIN):
        return language_model(LARGE_MODEL) or model
    return model


def foreign_model(english: str) -> Model | None:
    """The installed model for other European languages beside the English model `english`:
    FOREIGN_LARGE beside LARGE_MODEL, else (or where it is not installed) FOREIGN_MODEL."""
    return (english == LARGE_MODEL and language_model(FOREIGN_LARGE)) or language_model(FOREIGN_MODEL)


@functools.cache
def language_model(name: str) -> Model | None:
    """The installed model `name`, loaded once (a batch of files shares it, as it shares the default
    model); None where it is not installed (the default model then starts its texts)."""
    try:
        return find_model(name)
    except ModelError:
        return None


def cjk_share(sample: bytes) -> float:
    """The share of the sample's first PROBE_BYTES in three-byte UTF-8 characters of the CJK blocks,
    U+3000 to U+9FFF (lead bytes E3 to E9: CJK punctuation, kana, the unified ideographs); not the
    E2 block of English typography's quotes and dashes."""
    head = np.frombuffer(sample[:PROBE_BYTES], dtype=np.uint8)
    if not len(head):
        return 0.0
    tail = (head >= 0x80) & (head <= 0xBF)
    lead = (head[:-2] >= 0xE3) & (head[:-2] <= 0xE9) & tail[1:-1] & tail[2:]
    return 3 * float(lead.sum()) / len(head)


def foreign_share(sample: bytes) -> float:
    """The share of the sample's first PROBE_BYTES that are letters of other languages than English:
    the bytes of two-byte UTF-8 characters (accented Latin letters, Cyrillic, Greek) and Latin-1's
    letters (a byte >= 0xC0 before an ASCII one). Not the three-byte characters: English typography's
    quotes and dashes, nor Chinese or Japanese (`cjk_share`)."""
    head = np.frombuffer(sample[:PROBE_BYTES], dtype=np.uint8)
    if not len(head):
        return 0.0
    nxt = np.append(head[1:], 0)
    two = (head >= 0xC2) & (head <= 0xDF) & (nxt >= 0x80) & (nxt <= 0xBF)
    latin1 = (head >= 0xC0) & (nxt < 0x80)
    return float(2 * two.sum() + latin1.sum()) / len(head)


def english_words(sample: bytes) -> float:
    """The share of the words (runs of ASCII letters) of the sample's first PROBE_BYTES that are
    COMMON_ENGLISH's, in any case: a tenth or so in English, even in Wikipedia's pages thick with
    foreign names, and next to none in other European languages (docs/lab/auto.md)."""
    words = re.findall(rb"[A-Za-z]+", sample[:PROBE_BYTES])
    return sum(w.lower() in COMMON_ENGLISH for w in words) / max(1, len(words))


def chosen_prior(prior: str, knobs: dict) -> dict:
    """The mixer prior `prior` (a name; "" for the level's) as a setting over `knobs`; none where the
    knobs choose the prior or the weight sets it fits."""
    if not prior or {"prior", "experts", "kinds"} & set(knobs):
        return {}
    return {"prior": prior}
