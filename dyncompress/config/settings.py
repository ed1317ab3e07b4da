"""Every setting of a coded stream, and the one place they are resolved.

`Settings` is what the decoder needs to repeat the encoder; all of it goes into
the file's header and comes back through `Settings.from_dict`. Parts of the
predictor with settings of their own (today the update rule, `AdaptSettings`)
are nested dataclasses; `from_dict`, `to_dict` and the flat keyword overrides
(`lr=...` reaches `adapt.lr`) handle any nested config the same way, so a new
part adds a field, not a special case.

`make_settings` resolves a level, a model's recorded defaults, the input's size
and explicit overrides into one `Settings`. The API, the measuring commands,
`tune` and the command line all call it; nothing else decides a setting.
"""

from __future__ import annotations

import functools
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING

from dyncompress.format.container import MAX_BLOCK_SIZE

if TYPE_CHECKING:
    from dyncompress.config.model import Model
    from dyncompress.config.shape import MLSTMShape

DEFAULT_MODEL = "enwiki-h256"  # the model `encode` uses unless told otherwise (an installed name)
FOREIGN_MODEL = "multi-h256"  # the model `auto` starts text in other European languages from (`auto`)
AUTO_MODEL = "auto"  # the default start: DEFAULT_MODEL, or online mode where it does not fit (`auto`)
RULES = ("static", "sgd", "rms", "rms-decay")
# The exact arithmetic (`network.fixed`) keeps every sum below 2^53 for networks up to this size and
# segments of up to this many bytes (lanes x segment_len): the weight gradients sum that many.
MAX_HIDDEN = 1024
MAX_BATCH = 1 << 14
MAX_LORA_RANK = 64
MAX_RATE_HALF = 1 << 24  # steps
LORA_MATRICES = ("w_mh", "w_m", "w_out")  # the matrices LoRA can adapt, in the side weights' order
# Independent frames: every frame of the input starts from the model (or the online seed) afresh,
# so frames code and decode in parallel and alone.
FRAME_SIZE = 1 << 22
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class AdaptSettings:
    """The dynamic-evaluation update rule (`exact.ExactAdapter` in the codec, `adapt.Adapter` in float)."""

    rule: str = "rms"
    lr: float = 3e-3
    beta1: float = 0.0  # momentum (0: none)
    beta2: float = 0.99
    eps: float = 1e-8
    decay: float = 1e-4  # lambda of rms-decay; the other rules ignore it
    clip: float = 1.0  # max gradient norm per segment; 0 disables
    # Sparse dynamic evaluation (Krause et al. 2018): > 0 freezes the network and adapts only a
    # k x k matrix M on the first k hidden units, h' = h + M h (zero at the start). 0: adapt all.
    sparse: int = 0
    # LoRA (Hu et al. 2021, as TLM adapts): > 0 freezes the network and adapts rank-r factors A B added
    # to the matrices in lora_on (B zero at the start). 0: adapt all.
    lora: int = 0
    lora_on: str = "w_mh,w_m,w_out"
    # TLM's weighting (Hu et al. 2025): > 0 weights the segment's update by S = tlm_lambda *
    # PPL / P0 when it cost more than log2 P0 = tlm_bits bits per byte, else skips its backward pass
    # (0: every segment weighs 1). tlm_lanes: each lane by its own S, as the paper (measured worse:
    # a segment is skipped only when every lane is below P0, and lanes below it stop adapting).
    tlm_bits: float = 0.0
    tlm_lambda: float = 1.0
    tlm_lanes: bool = False
    # TLM against the stream's own cost (> 0, instead of tlm_bits): a segment's threshold is
    # tlm_relative times the running mean cost per byte of the segments before it (an integer moving
    # average, 1/16 per segment), so the share skipped no longer depends on how hard the text is.
    tlm_relative: float = 0.0
    # The rate of the rule's steps on the stream (online mode's network, LoRA's factors, sparse's
    # matrix: the weights a calibrated RMS_g does not cover) at its t-th step: lr H / (H + t), halved
    # after H = rate_half steps (0: lr throughout). Why it falls: at a constant rate the LoRA factors
    # drift on a long input.
    rate_half: int = 2000

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown rule {self.rule!r} ({', '.join(RULES)})")
        if self.lr < 0 or self.decay < 0:
            raise ValueError("learning rate and decay must be >= 0")
        if self.sparse < 0:
            raise ValueError("the sparse matrix's size must be >= 0 (0: adapt the whole network)")
        if not 0 <= self.rate_half <= MAX_RATE_HALF:
            raise ValueError(f"the rate's half-life must be 0 ... {MAX_RATE_HALF} steps (0: a constant rate)")
        if not 0 <= self.tlm_bits <= 8:
            raise ValueError("the TLM threshold must be 0 ... 8 bits per byte (0: off)")
        if not 0 <= self.tlm_relative <= 4:
            raise ValueError("the relative TLM threshold must be 0 ... 4 times the running cost (0: off)")
        if self.tlm_bits and self.tlm_relative:
            raise ValueError("TLM's threshold is absolute (tlm_bits) or relative (tlm_relative): choose one")
        if not 0 < self.tlm_lambda <= 64:
            raise ValueError("the TLM weight lambda must be in (0, 64]")
        if not 0 <= self.lora <= MAX_LORA_RANK:
            raise ValueError(f"the LoRA rank must be 0 ... {MAX_LORA_RANK} (0: adapt the whole network)")
        if not self.lora_names or not set(self.lora_names) <= set(LORA_MATRICES):
            raise ValueError(f"LoRA adapts some of {', '.join(LORA_MATRICES)}, not {self.lora_on!r}")
        if self.sparse and self.lora:
            raise ValueError("sparse and LoRA adaptation are alternatives: choose one")
        if self.rule == "static" and (self.frozen or self.tlm):
            raise ValueError("sparse, LoRA and TLM updates need an adaptive rule, not static")

    @property
    def lora_names(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.lora_on.split(",") if n.strip())

    @property
    def tlm(self) -> bool:
        """TLM weights (and skips) the segments' updates, by an absolute or a relative threshold."""
        return bool(self.tlm_bits or self.tlm_relative)

    @property
    def frozen(self) -> bool:
        """The network's own weights stay as trained: only side weights (sparse M, LoRA factors) adapt."""
        return bool(self.sparse or self.lora)


EXPERTS = ("orders", "word", "gap", "match", "ppm", "apm", "record", "column", "wrap")
ALL_EXPERTS = ",".join(EXPERTS)
# The mixer's starting weights learned on text (`mix.load_prior`), by name: the experts each was made
# for (its rows have their shape). A pretrained model's coding starts from DEFAULT_PRIOR where the
# experts are these, online mode's from ONLINE_PRIOR; the fast level (no network) and other experts
# start from the hand-set weights (`mix.Experts`).
MIX_PRIORS = {"text4": ALL_EXPERTS, "online2": ALL_EXPERTS, "text5": ALL_EXPERTS, "text6": ALL_EXPERTS}
# Priors that hold the rows of the kinds and state sets too (made with them), by name: the `kinds` they
# were made with; a coding with other kinds starts from NARROWER[name] instead, whose rows end before
# the kinds set (the rows after start at zero).
PRIOR_KINDS = {"text5": 7, "text6": 7}
NARROWER = {"text5": "text4", "text6": "text4"}
# text5: learned at the default with every expert and weight set, each row the mean over the codings
# that chose it (`tools/mixer_prior.py`), on English prose and Wikipedia; text6: the same with the
# model's training text in Portuguese, Italian, German, French and Russian added, which `auto` chooses
# for text in other languages than English (`auto.FOREIGN_PRIOR`).
DEFAULT_PRIOR = "text5"
# Online mode's: learned in online mode (a random network) on Chinese, Japanese and German text.
ONLINE_PRIOR = "online2"


@dataclass(frozen=True)
class MixSettings:
    """The exact byte statistics mixed with the network (`mix.Experts`); no experts is the network
    alone, as format 2 coded."""

    experts: str = ALL_EXPERTS  # comma-separated names from EXPERTS, or "" for none
    table_bits: int = 19  # rows of each hashed context table: 2^table_bits
    history_bits: int = 23  # bytes of history the match model keeps, all lanes together
    # the match table's slots: 2^match_bits shared by all lanes, and as many where every lane files
    # under its own salt, looked up first (a repeat in the lane's own text wins); 2^19 keeps the
    # default's tables under 256 MB
    match_bits: int = 19
    # a hashed context's row: this many (byte, count) pairs. 30 slots and 2^19 rows keep the
    # default's tables under 256 MB
    slots: int = 30
    # the rows a hashed context may take (`mix_kernels.choose_rows`): the `ways` rows of its aligned
    # group; a new context takes the one whose counts sum least (1: its own: faster, `LIGHT`); a row
    # that starts afresh halves the group's other rows' counts (`count_bytes`)
    ways: int = 4
    count_limit: int = 250  # a context's counts are halved when one passes this
    # the mixer's learning rate: its weight rows start at 16 times it and come down to mix_floor
    mix_lr: float = 0.0003
    # the rate a weight row settles at, as it keeps coming down from 16 mix_lr with its steps
    mix_floor: float = 0.00015
    # 2: two mixers over the same rows and inputs, the second at half the rate, their logits averaged;
    # 1: one (the fast level: faster, `FAST`)
    mixers: int = 2
    # 7: a weight for every input and class of the byte it weighs (digits, capitals, small letters,
    # UTF-8's continuation bytes, two kinds of lead bytes, the rest; `mix.byte_classes`); 1: one (the
    # fast level: seven cost it a quarter of its speed)
    classes: int = 7
    # the mixer's seventh weight set, chosen by the kinds of the last `kinds` bytes (space, small letter,
    # capital, UTF-8 lead or continuation byte, digit, line end, control, punctuation:
    # `mix_kernels.fine_kind`). Its rows start at zero where a prior lacks them, as the eighth set's do
    # (a row for every match state, highest order seen and kind of the last byte: `mix`)
    kinds: int = 7
    prior: str = ""  # the mixer's starting weights: a name from MIX_PRIORS, or "" for the hand-set ones

    def __post_init__(self) -> None:
        unknown = set(self.expert_names) - set(EXPERTS)
        checks = [
            (not unknown, f"unknown expert(s) {', '.join(sorted(unknown))} (choose from {', '.join(EXPERTS)})"),
            (
                "ppm" not in self.expert_names or "orders" in self.expert_names,
                "the ppm expert reads the orders' tables",
            ),
            (10 <= self.table_bits <= 24, "table bits must be 10 ... 24"),
            (12 <= self.history_bits <= 30, "history bits must be 12 ... 30"),
            (10 <= self.match_bits <= 24, "match bits must be 10 ... 24"),
            (1 <= self.count_limit <= 250, "count limit must be 1 ... 250"),
            (2 <= self.slots <= 64, "slots must be 2 ... 64"),
            (self.ways in (1, 2, 4, 8), "ways must be 1, 2, 4 or 8"),
            (0 <= self.mix_lr <= 1, "mixer learning rate must be 0 ... 1"),
            (0 < self.mix_floor <= 1, "the mixer's settled rate must be in (0, 1]"),
            (self.mixers in (1, 2), "mixers must be 1 or 2"),
            (self.classes in (1, 7), "byte classes must be 1 or 7"),
            (1 <= self.kinds <= 8, "kinds must be 1 ... 8 (the bytes the kinds set reads)"),
            (
                not self.prior or self.prior in MIX_PRIORS,
                f"unknown mixer prior {self.prior!r} (this version knows {', '.join(MIX_PRIORS)})",
            ),
            (
                not self.prior or MIX_PRIORS.get(self.prior) == self.experts,
                f"the mixer prior {self.prior} was made for the experts {MIX_PRIORS.get(self.prior)}",
            ),
            (
                PRIOR_KINDS.get(self.prior, self.kinds) == self.kinds,
                f"the mixer prior {self.prior} was made for kinds {PRIOR_KINDS.get(self.prior)}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def expert_names(self) -> tuple[str, ...]:
        return tuple(name for name in self.experts.split(",") if name)


@dataclass(frozen=True)
class Settings:
    """Everything the decoder needs to repeat the encoder; all of it goes in the header.

    The network's only shape parameter, `hidden`, is a plain field (not a nested config)
    because format 1 records it flat: the header's layout is part of the format.
    """

    hidden: int = 128
    seed: int = 0
    lanes: int = 16
    segment_len: int = 64
    block_size: int = 1 << 20
    frame_size: int = FRAME_SIZE  # bytes per independent frame (a fresh start); 0: one frame, the whole stream
    threads: int = 1  # CPU threads while coding (speed only: the bits are the same with any number)
    device: str = "cpu"
    adapt: AdaptSettings = field(default_factory=AdaptSettings)
    mix: MixSettings = field(default_factory=MixSettings)

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.hidden <= MAX_HIDDEN, f"hidden size must be 1 ... {MAX_HIDDEN} (0: no network)"),
            (self.hidden or self.mix.expert_names, "without a network (hidden 0) the experts must be on"),
            (self.hidden or self.adapt.rule == "static", "without a network (hidden 0) there is nothing to adapt"),
            (self.lanes >= 1, "lanes must be at least 1"),
            (self.segment_len >= 1, "segment length must be at least 1"),
            (self.lanes * self.segment_len <= MAX_BATCH, f"lanes x segment length must be at most {MAX_BATCH}"),
            (self.block_size >= 1, "block size must be at least 1 byte"),
            (self.block_size <= MAX_BLOCK_SIZE, "block size must be at most 1 GiB"),
            (self.frame_size >= 0, "frame size must be at least 0 (0: one frame)"),
            (not 0 < self.frame_size < self.block_size, "the block size must not exceed the frame size"),
            (1 <= self.threads <= 256, "threads must be 1 ... 256"),
            (self.device in DEVICES, f"unknown device {self.device!r} (cpu or cuda)"),
            (self.adapt.sparse <= self.hidden, f"the sparse matrix must be at most the hidden size ({self.hidden})"),
            (self.adapt.lora <= self.hidden, f"the LoRA rank must be at most the hidden size ({self.hidden})"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def shape(self) -> MLSTMShape:
        from dyncompress.config.shape import MLSTMShape

        return MLSTMShape(self.hidden)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Settings:
        """Strict: unknown or missing keys are an error, never silently defaulted."""
        return _from_dict(cls, d)


@dataclass(frozen=True)
class TrainConfig:
    """`dyncompress train`: the defaults are the settings that trained the shipped model."""

    hidden: int = 256
    batch: int = 64
    bptt: int = 64
    steps: int = 10_000
    lr: float = 1e-3  # 2e-3 diverged at batch 128 (models/enwiki-h256.md)
    min_lr: float = 5e-5
    warmup: int = 200
    clip: float = 1.0
    valid_bytes: int = 200_000
    eval_every: int = 500
    seed: int = 0
    minutes: float = 0.0  # > 0: a wall-clock budget; the schedule then runs on elapsed time


# --- nested configs, generically ----------------------------------------------------


@functools.cache
def _nested(cls: type) -> dict[str, type]:
    """The fields of `cls` that are configs of their own: {name: dataclass}."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls) if is_dataclass(hints[f.name])}


def _from_dict(cls: type, d: dict):
    if not isinstance(d, dict) or set(d) != {f.name for f in fields(cls)}:
        raise ValueError("settings in the header do not match this version's fields")
    nested = _nested(cls)
    return cls(**{k: _from_dict(nested[k], v) if k in nested else v for k, v in d.items()})


def _apply(base, overrides: dict):
    """`base` with flat `overrides`: a key that names a field of a nested config goes there."""
    nested = _nested(type(base))
    changes = {}
    for name, sub in nested.items():
        own = {f.name for f in fields(sub)}
        mine = {k: overrides.pop(k) for k in list(overrides) if k in own}
        if mine:
            changes[name] = replace(getattr(base, name), **mine)
    unknown = set(overrides) - {f.name for f in fields(base)}
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    return replace(base, **overrides, **changes)


# --- levels ---------------------------------------------------------------------------

# -9's count tables: twice the default's rows (433 MiB of tables at most, against 253)
NINE_TABLE_BITS = 20

# Online mode (no model): levels trade ratio for speed like xz/zstd -1 ... -9: the network's size,
# lanes and segment length. `auto`'s online start keeps segments of 32 (`auto.ONLINE`). -1 also runs
# the statistics as the fast level does (LIGHT: no APM, one mixer, one class, each context in its own
# row), at its own mix_lr.
LIGHT = dict(experts=",".join(name for name in EXPERTS if name != "apm"), mixers=1, classes=1, ways=1)
LEVELS: dict[int, dict] = {
    1: dict(hidden=64, lanes=32, segment_len=64, lr=4e-3, **LIGHT),
    2: dict(hidden=64, lanes=16, segment_len=64, lr=4e-3),  # 38.9 kB/s, 1.7938
    3: dict(hidden=96, lanes=32, segment_len=64, lr=3e-3),
    4: dict(hidden=96, lanes=16, segment_len=64, lr=3e-3),  # 39.3 kB/s, 1.7896
    5: dict(hidden=96, lanes=16, segment_len=32, lr=3e-3),
    6: dict(hidden=128, lanes=16, segment_len=64, lr=3e-3),  # 37.7 kB/s, 1.7867
    7: dict(hidden=192, lanes=16, segment_len=32, lr=2e-3),
    8: dict(hidden=384, lanes=16, segment_len=32, lr=1e-3),  # 10.0 kB/s, 1.7724
    9: dict(hidden=512, lanes=8, segment_len=32, lr=1e-3, table_bits=NINE_TABLE_BITS),
}
DEFAULT_LEVEL = 6

# Levels with a model (its hidden size is fixed): -1, -2 code with the model as trained (forward
# only); -3 ... -9 adapt rank-32 LoRA factors on W_out alone (OUT_LORA: no pass back through the
# steps, so a segment's update costs little), with fewer lanes (more gradient steps per lane, a
# longer history for each lane's match model) and shorter segments as the level rises. An explicit
# rule (--rule, eval's rows) adapts the whole network.
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

# The fast level (`encode --fast`, hidden 0): no network, the byte statistics and their mixer alone.
# More lanes cost the statistics little and let a step's lanes split over the threads: one lane per
# FAST_LANE_BYTES, at most 64. Every expert but the APM (it halves the speed).
FAST_EXPERTS = LIGHT["experts"]
# One mixer at 3/4 of the rate, not two; each hashed context in its own row (ways 1): both for speed.
FAST = dict(LIGHT, hidden=0, rule="static", lanes=64, mix_lr=0.000375)  # (LIGHT: the four above)
FAST_LANE_BYTES = 8 * 1024


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
    its size of history; its contexts still fit, and it touches fewer pages of memory. (Four times
    the rows: 111 kB of Portuguese 2.1123 -> 2.1085 bits per byte, 140 kB of German 1.9534 ->
    1.9508.)"""
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
    return _apply(Settings(device=device), dict(LEVELS[level]))


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
    return _apply(Settings(hidden=model.shape.hidden, device=device), knobs)


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
    device = overrides.pop("device", None) or (settings.device if settings else default_device())
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
    fast = settings is None and overrides.get("hidden") == 0  # the fast level: lanes for size its own way
    lanes_given = "lanes" in overrides
    if fast:
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
    return _apply(base, {**overrides, "device": device})
