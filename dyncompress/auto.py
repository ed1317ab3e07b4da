"""The start a file codes from when none is asked for: the shipped model, or online mode.

The shipped model learned English and other European text. On data unlike that (Chinese,
Japanese, images, object code, tables of numbers) its prior costs more than it gives, even after
100 kB of adaptation, and a network that starts from online mode's random seed codes smaller.

So the encoder asks the model first: its network alone, as trained (no adaptation, no experts),
codes the input's first PROBE_BYTES in PROBE_LANES lanes. Above ONLINE_ABOVE bits per byte the file
is coded online (ONLINE); else with the model, and text in another European language than English
(`foreign_share`) from the model and mixer prior fine-tuned for those languages (FOREIGN_MODEL,
FOREIGN_PRIOR). The choice is the encoder's alone: the header records the start like any other
setting, and a decoder follows it. The measurements behind each threshold: docs/lab/auto.md.
"""

from __future__ import annotations

import functools

import numpy as np

from dyncompress.config.levels import (
    AUTO_MODEL,
    DEFAULT_LEVEL,
    DEFAULT_MODEL,
    FOREIGN_MODEL,
    MODEL_LEVELS,
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
    that starts with `sample`."""
    if not considered(size, knobs) or not sample:
        return model, {}, None
    bits = probe_bits(model, sample, **{k: knobs[k] for k in ("device", "threads") if knobs.get(k)})
    if bits > ONLINE_ABOVE:
        return None, ONLINE, bits
    foreign = foreign_share(sample) > FOREIGN_SHARE
    if foreign and model.name == DEFAULT_MODEL:
        model = foreign_model() or model
    return model, model_prior(foreign, knobs), bits


@functools.cache
def foreign_model() -> Model | None:
    """FOREIGN_MODEL, loaded once (a batch of files shares it, as it shares the default model); None
    where it is not installed (the default model then starts every text)."""
    try:
        return find_model(FOREIGN_MODEL)
    except ModelError:
        return None


def foreign_share(sample: bytes) -> float:
    """The share of the sample's first PROBE_BYTES that are letters of other languages than English:
    the bytes of two-byte UTF-8 characters (accented Latin letters, Cyrillic, Greek) and Latin-1's
    letters (a byte >= 0xC0 before an ASCII one). Not the three-byte characters: English typography's
    quotes and dashes (and Chinese or Japanese, which the probe sends online)."""
    head = np.frombuffer(sample[:PROBE_BYTES], dtype=np.uint8)
    if not len(head):
        return 0.0
    nxt = np.append(head[1:], 0)
    two = (head >= 0xC2) & (head <= 0xDF) & (nxt >= 0x80) & (nxt <= 0xBF)
    latin1 = (head >= 0xC0) & (nxt < 0x80)
    return float(2 * two.sum() + latin1.sum()) / len(head)


def model_prior(foreign: bool, knobs: dict) -> dict:
    """The mixer prior for a text the model starts (over `knobs`): FOREIGN_PRIOR for a text in another
    language (more than FOREIGN_SHARE of its start other languages' letters, `foreign_share`), else the
    default's; none chosen where the knobs choose the prior or the weight sets it fits."""
    if not foreign or {"prior", "experts", "kinds"} & set(knobs):
        return {}
    return {"prior": FOREIGN_PRIOR}
