"""The levels, and the one place settings are resolved.

`make_settings` resolves a level, a model's recorded defaults, the input's size and explicit
overrides into one `settings.Settings`. The API, the measuring commands, `tune` and the command line
all call it; nothing else decides a setting.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dyncompress.config.settings import (
    DEFAULT_EXPERTS,
    MIX_PRIORS,
    PRIOR_KINDS,
    AdaptSettings,
    MixSettings,
    Settings,
    apply_overrides,
)

if TYPE_CHECKING:
    from dyncompress.config.model import Model

# The model `encode` starts from unless told otherwise (an installed name): `auto` puts LARGE_MODEL in
# its place at LARGE_LEVELS, FOREIGN_MODEL (FOREIGN_LARGE there), CJK_MODEL or online mode where the
# input asks for them.
DEFAULT_MODEL = "enwiki-h256"
FOREIGN_MODEL = "multi-h256"  # the model `auto` starts text in other European languages from (`auto`)
CJK_MODEL = "cjk-h128"  # the model `auto` starts the Chinese and Japanese text it knows from (`auto`)
# The larger English model: `auto` starts what DEFAULT_MODEL would start from it at LARGE_LEVELS (where
# it is installed), the default level among them. It codes smaller and slower (models/enwiki-h512.md);
# -3 ... -5 keep DEFAULT_MODEL for their speed.
LARGE_MODEL = "enwiki-h512"
LARGE_LEVELS = frozenset({6, 7, 8, 9})
# The larger model for other European languages (LARGE_MODEL fine-tuned as FOREIGN_MODEL was): `auto`
# asks it where LARGE_MODEL has taken DEFAULT_MODEL's place, FOREIGN_MODEL where it is not installed.
FOREIGN_LARGE = "multi-h512"
# It starts inputs of this many bytes or more (or of a size not known yet): the larger network codes
# an input's first kilobytes larger than DEFAULT_MODEL (it catches up between 2 and 8 kB of English),
# and loads and steps at twice the cost.
LARGE_MIN = 8 * 1024
AUTO_MODEL = "auto"  # the default start: DEFAULT_MODEL, or online mode where it does not fit (`auto`)
# The mixer prior a coding starts from (`settings.MIX_PRIORS`; `make_settings`):
NARROWER = {"text5": "text4", "text6": "text4"}
# text5: learned at the default with every expert and weight set, each row the mean over the codings
# that chose it (`tools/mixer_prior.py`), on English prose and Wikipedia; text6: the same with the
# model's training text in Portuguese, Italian, German, French and Russian added, which `auto` chooses
# for text in other languages than English (`auto.FOREIGN_PRIOR`).
DEFAULT_PRIOR = "text5"
# Online mode's: learned in online mode (a random network) on Chinese, Japanese and German text.
ONLINE_PRIOR = "online2"


# -9's count tables: twice the default's rows (433 MiB of tables at most, against 253)
NINE_TABLE_BITS = 20

# Online mode (no model): levels trade ratio for speed like xz/zstd -1 ... -9: the network's size,
# lanes and segment length. `auto`'s online start keeps segments of 32 (`auto.ONLINE`). -1 also runs
# the statistics as the fast level does (LIGHT: no APM, one mixer, one class, each context in its own
# row), at its own mix_lr.
LIGHT = dict(experts=",".join(n for n in DEFAULT_EXPERTS.split(",") if n != "apm"), mixers=1, classes=1, ways=1)
LEVELS: dict[int, dict] = {
    1: dict(hidden=64, lanes=32, segment_len=64, lr=4e-3, **LIGHT),
    2: dict(hidden=64, lanes=16, segment_len=64, lr=4e-3),
    3: dict(hidden=96, lanes=32, segment_len=64, lr=3e-3),
    4: dict(hidden=96, lanes=16, segment_len=64, lr=3e-3),
    5: dict(hidden=96, lanes=16, segment_len=32, lr=3e-3),
    6: dict(hidden=128, lanes=16, segment_len=64, lr=3e-3),
    7: dict(hidden=192, lanes=16, segment_len=32, lr=2e-3),
    8: dict(hidden=384, lanes=16, segment_len=32, lr=1e-3),
    9: dict(hidden=512, lanes=8, segment_len=32, lr=1e-3, table_bits=NINE_TABLE_BITS),
}
DEFAULT_LEVEL = 6

# Levels with a model (its hidden size is fixed): -1, -2 code with the model as trained (forward
# only); -3 ... -9 adapt rank-32 LoRA factors on W_out alone (OUT_LORA: no pass back through the
# steps, so a segment's update costs little), with fewer lanes (more gradient steps per lane, a
# longer history for each lane's match model) and shorter segments as the level rises. -6 ... -9
# start English from the larger model (LARGE_LEVELS), which buys more than fewer lanes do: the
# default is -5's lanes in shorter segments with it, -7 and -8 halve the lanes, -9 codes one lane
# with twice the tables. An explicit rule (--rule, eval's rows) adapts the whole network.
OUT_LORA = dict(lora=32, lora_on="w_out")
MODEL_LEVELS: dict[int, dict] = {
    1: dict(rule="static", lanes=32, segment_len=16),
    2: dict(rule="static", lanes=16, segment_len=16),
    3: dict(OUT_LORA, lanes=16, segment_len=64),
    4: dict(OUT_LORA, lanes=16, segment_len=32),
    5: dict(OUT_LORA, lanes=8, segment_len=64),
    6: dict(OUT_LORA, lanes=8, segment_len=32),
    7: dict(OUT_LORA, lanes=4, segment_len=32),
    8: dict(OUT_LORA, lanes=2, segment_len=32),
    9: dict(OUT_LORA, lanes=1, segment_len=32, table_bits=NINE_TABLE_BITS),
}
MODEL_DEFAULTS = dict(lanes=16, segment_len=16, rule="rms-decay", lr=1e-4, decay=1e-4, eps=1e-8)
# A rule's settings when the model records none for it (`tune -o` records them under
# defaults["rules"]). Plain sgd steps need a rate ~500x the normalised rules': 0.1 was best for
# enwiki-h256 (models/enwiki-h256.md); the others share the model's own rate.
RULE_DEFAULTS: dict[str, dict] = {"sgd": dict(lr=0.1)}
# With experts mixed in, the network's step descends the mixture's code length and wants a smaller
# rate than the model records for coding alone: these factors on the model's rms-decay.
MIXED_FACTORS: dict[str, dict] = {"rms-decay": dict(lr=0.35, decay=10.0)}

# Sparse dynamic evaluation's matrix is adapted with RMSprop statistics gathered on the stream (the
# model's MS_g covers its own weights only): a rate of its own.
SPARSE_DEFAULTS = dict(lr=3e-4)
# LoRA's factors likewise.
LORA_DEFAULTS = dict(lr=1e-3)
# On W_out alone (the levels' OUT_LORA), in segments of 32, with the experts.
LORA_OUT_DEFAULTS = dict(lr=2.5e-3)
FROZEN_NEEDS_MODEL = "sparse and LoRA adaptation adapt a pretrained model; online mode learns the whole network"

# A lane per 40 kB of input at least: a lane needs enough bytes to adapt on.
MIN_LANE_BYTES = 40 * 1024

# The fast level with the engine "bytes" (`encode --fast --engine bytes`, hidden 0): no network, the
# byte statistics and their mixer alone.
# More lanes cost the statistics little and let a step's lanes split over the threads: one lane per
# FAST_LANE_BYTES, at most 64. Every expert but the APM (it halves the speed).
FAST_EXPERTS = LIGHT["experts"]
# One mixer at 3/4 of the rate, not two; each hashed context in its own row (ways 1): both for speed.
FAST = dict(LIGHT, hidden=0, rule="static", lanes=64, mix_lr=0.000375)  # (LIGHT: the four above)
FAST_LANE_BYTES = 8 * 1024
# The fast level's engine (`--fast`, engine "bits"; `--engine bytes` the statistics above, FAST): the
# bitwise engine, no network, one lane; its hash table 2^22 slots of 16 bytes, a ring of 2^24 bytes,
# 2^20 match positions (fewer for a small input: `tables_for_size`).
BITS = dict(hidden=0, rule="static", lanes=1, engine="bits")
BITS_TABLES = dict(table_bits=22, history_bits=24, match_bits=20)


def coded_size(size: int | None, frame_size: int) -> int | None:
    """The longest run one codec sees: the input, or a frame of it if smaller (every frame starts afresh)."""
    if frame_size and (size is None or size > frame_size):
        return frame_size
    return size


# A frame of a longer input codes at three quarters of the level's lanes: what a frame's restart costs
# is mostly its lanes' shorter past, and frames code in parallel, so they can afford slower lanes. The
# fast level keeps its lanes (no network: lanes cost it little).
def frame_lanes(lanes: int) -> int:
    """The lanes of every frame of an input longer than one frame: three quarters of `lanes`."""
    return max(1, lanes * 3 // 4)


def lanes_for_size(lanes: int, size: int, lane_bytes: int = MIN_LANE_BYTES) -> int:
    """Fewer lanes for a small input, one per `lane_bytes` at least: each lane then sees more
    gradient steps."""
    return max(1, min(lanes, size // lane_bytes))


def tables_for_size(mix: MixSettings, size: int) -> dict:
    """Smaller tables for a small input: about as many rows and match slots as it has bytes (at
    least 2^12; four times as many rows of slots, a quarter the size of rows of counts) and twice
    its size of history; its contexts still fit, and it touches fewer pages of memory."""
    bits = size.bit_length()
    return {
        "table_bits": max(12, min(mix.table_bits, bits + 2)),
        "history_bits": max(12, min(mix.history_bits, bits + 1)),
        "match_bits": max(12, min(mix.match_bits, bits)),
    }


MAX_DEFAULT_THREADS = 4


def usable_cores() -> int:
    """The cores this process may use (its affinity where the platform tells it)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_threads() -> int:
    """CPU threads while coding unless told: the cores this process may use, at most 4. (Speed only:
    with the exact arithmetic any count gives the same bits; beyond 4 the small matmuls gain little.)"""
    return max(1, min(MAX_DEFAULT_THREADS, usable_cores()))


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _check_level(level: int) -> None:
    if level not in LEVELS:
        raise ValueError(f"level must be 1 ... 9, not {level}")


def level_settings(level: int, device: str) -> Settings:
    """Online mode's settings at `level`."""
    _check_level(level)
    return apply_overrides(Settings(device=device), dict(LEVELS[level]))


TLM_THRESHOLDS = ("tlm_bits", "tlm_relative")  # one threshold in two forms (absolute, relative)


def one_tlm_threshold(layer: dict) -> dict:
    """`layer` of knobs such that a TLM threshold it sets replaces the other form of one set before
    it (a model's recorded tlm_bits, a level's tlm_relative, an explicit option); both set at once
    stay as they are (and are refused)."""
    for mine, other in (TLM_THRESHOLDS, TLM_THRESHOLDS[::-1]):
        if layer.get(mine) and other not in layer:
            return {**layer, other: 0.0}
    return layer


def model_settings(
    model: Model,
    level: int,
    device: str,
    rule: str | None = None,
    experts: str | None = None,
    sparse: int | None = None,
    lora: int | None = None,
    lora_on: str | None = None,
) -> Settings:
    """Settings for coding with `model` at `level` (and `rule`, `experts`, `sparse`, `lora`,
    `lora_on`, if given): the model's recorded defaults, those it records for the rule, then the
    level's changes; with experts mixed in, the rule's rates scaled by `MIXED_FACTORS`, except
    those recorded for the rule by `tune -o` (measured as they are). A rule, sparse or LoRA asked
    for replaces the level's LoRA factors (an explicit rule adapts the whole network)."""
    _check_level(level)
    defaults = dict(model.info.get("defaults", {}))
    per_rule = defaults.pop("rules", {})
    at_level = dict(MODEL_LEVELS[level])
    if "lora" in at_level:
        if rule is not None or sparse is not None or lora is not None:  # the LoRA level's factors and segments give way
            for knob in (*OUT_LORA, "segment_len"):
                del at_level[knob]
        else:  # (a rank up to the model's hidden size)
            at_level["lora"] = min(at_level["lora"], model.shape.hidden)
    rule = rule or at_level.get("rule") or defaults.get("rule") or MODEL_DEFAULTS["rule"]
    knobs: dict = {}
    for layer in (MODEL_DEFAULTS, defaults, RULE_DEFAULTS.get(rule, {}), per_rule.get(rule, {}), at_level):
        knobs.update(one_tlm_threshold(layer))
    knobs["rule"] = rule
    if rule == "static":  # nothing to skip
        knobs.update(tlm_bits=0.0, tlm_relative=0.0)
    tuned = per_rule.get(rule, {})  # what `tune -o` measured (with the experts it ran with): as it is
    if MixSettings(**({} if experts is None else {"experts": experts})).expert_names:
        for knob, factor in MIXED_FACTORS.get(rule, {}).items():
            if knob not in tuned and knob not in at_level:
                knobs[knob] = float(f"{knobs[knob] * factor:.3g}")
    if sparse:
        knobs.update(SPARSE_DEFAULTS)
    rank = knobs.get("lora", 0) if lora is None else lora  # the rank asked for, or the level's
    if rank:
        on = lora_on or knobs.get("lora_on", AdaptSettings.lora_on)
        knobs.update(LORA_OUT_DEFAULTS if on == OUT_LORA["lora_on"] else LORA_DEFAULTS)
    return apply_overrides(Settings(hidden=model.shape.hidden, device=device), knobs)


def make_settings(
    settings: Settings | None = None,
    *,
    level: int | None = None,
    size_hint: int | None = None,
    model: Model | None = None,
    **overrides,
) -> Settings:
    """Settings from a level (1 ... 9, default 6) and keyword overrides (`lanes=8`, `rule="sgd"`, ...).

    With a `model`, the level works from the model's recorded defaults and the hidden size is the
    model's; without, it sets the online network (`LEVELS`). The device defaults to CUDA when
    available, else the CPU; the threads to the usable cores (at most 4). With `size_hint` (the
    input's length, when known) and no explicit `lanes`, a small input gets fewer lanes
    (`lanes_for_size`): each lane then sees more gradient steps; one cut into frames, three quarters
    of the level's (`frame_lanes`). A complete `settings` is taken as it is (overrides still apply).
    """
    if settings is not None and level is not None:
        raise TypeError("give either settings or a level, not both")
    fast = settings is None and overrides.get("hidden") == 0  # the fast level: lanes for size its own way
    # the fast level's engine is the bitwise one (one lane, its tables) unless engine "bytes" is asked
    bits = settings is None and overrides.get("engine", "bits" if fast else "bytes") == "bits"
    # (the bits engine alone codes on the CPU whatever is there: no need to ask torch for a GPU)
    device = overrides.pop("device", None) or (settings.device if settings else "cpu" if bits else default_device())
    if settings is not None:
        base = settings
    elif model is not None:
        wanted = [overrides.get(k) for k in ("rule", "experts", "sparse", "lora", "lora_on")]
        base = model_settings(model, level or DEFAULT_LEVEL, device, *wanted)
    else:
        base = level_settings(level or DEFAULT_LEVEL, device)
    if model is not None and overrides.get("hidden") == 0:
        raise ValueError("hidden 0 codes without a network, so without a model: model=None (encode --fast)")
    if model is not None and overrides.get("hidden", model.shape.hidden) != model.shape.hidden:
        raise ValueError(f"model {model.name} has {model.shape.hidden} hidden units; --hidden applies to online mode")
    lanes_given = "lanes" in overrides or bits
    if bits:
        overrides = {**FAST, **BITS, **overrides}
        base = apply_overrides(base, dict(BITS_TABLES))
    elif fast:
        overrides = {**FAST, **overrides}
    overrides = one_tlm_threshold(overrides)
    frame_size = overrides.get("frame_size", base.frame_size)
    if settings is None and frame_size and "block_size" not in overrides:
        overrides["block_size"] = min(base.block_size, frame_size)
    # what one codec will see: the input, or a frame of it (a streaming encoder knows the frame size)
    size = coded_size(size_hint, frame_size)
    if settings is None and size is not None and not lanes_given:
        lanes, per_lane = (overrides["lanes"], FAST_LANE_BYTES) if fast else (base.lanes, MIN_LANE_BYTES)
        if not fast and size_hint is not None and size < size_hint:  # cut into frames (`frame_lanes`)
            lanes = frame_lanes(lanes)
        overrides["lanes"] = lanes_for_size(lanes, size, per_lane)
    # tables sized to that, when it fits one block (a streaming encoder knows that size too)
    if settings is None and size is not None and size <= overrides.get("block_size", base.block_size):
        overrides = {**tables_for_size(base.mix, size), **overrides}
    if settings is None and "threads" not in overrides:
        overrides["threads"] = default_threads()
    if settings is None and model is None and (overrides.get("sparse") or overrides.get("lora")):
        raise ValueError(FROZEN_NEEDS_MODEL)
    if settings is None and "prior" not in overrides and not fast:
        # the mixer starts from the weights learned on text, where they fit the experts: a pretrained
        # model's from DEFAULT_PRIOR, online mode's from ONLINE_PRIOR (the fast level has no network)
        experts = overrides.get("experts", base.mix.experts)
        kinds = overrides.get("kinds", base.mix.kinds)
        prior = DEFAULT_PRIOR if model is not None else ONLINE_PRIOR
        if PRIOR_KINDS.get(prior, kinds) != kinds:  # (made with another kinds set: the one before it)
            prior = NARROWER[prior]
        overrides["prior"] = prior if MIX_PRIORS[prior] == experts else ""
    chosen = apply_overrides(base, {**overrides, "device": device})
    if settings is None and model is not None and "step16" not in overrides:
        # a model's matrices that stay as trained step in 16-bit integers
        chosen = replace(chosen, step16=chosen.adapt.fixed_matrices)
    return chosen
