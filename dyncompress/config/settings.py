"""Every setting of a coded stream: the records the header holds.

`Settings` is what the decoder needs to repeat the encoder; all of it goes into
the file's header and comes back through `Settings.from_dict`. Parts of the
predictor with settings of their own (today the update rule, `AdaptSettings`)
are nested dataclasses; `from_dict`, `to_dict` and the flat keyword overrides
(`lr=...` reaches `adapt.lr`) handle any nested config the same way, so a new
part adds a field, not a special case.

The levels, and `make_settings`, which resolves a level, a model's recorded
defaults, the input's size and explicit overrides into one `Settings`: `levels`.
"""

from __future__ import annotations

import functools
import typing
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING

from dyncompress.format.container import MAX_BLOCK_SIZE

if TYPE_CHECKING:
    from dyncompress.config.shape import MLSTMShape

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
# What turns the statistics into bits: "bytes", the byte experts mixed with the network and range-coded
# a byte at a time (`experts`); "bits", the bitwise engine coding a bit at a time (`bitwise`: so far
# without a network, one lane).
ENGINES = ("bytes", "bits")


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

    @property
    def fixed_matrices(self) -> bool:
        """The network's matrices do not change while coding: nothing adapts, or side weights alone."""
        return self.rule == "static" or self.frozen


# Every expert this version knows (`experts.mix.MODULES`), by the name `--experts` takes; a new one
# comes last. The levels run DEFAULT_EXPERTS, spelled out: an expert that joins EXPERTS changes no
# level's bits until a level turns it on (with a mixer prior made for it, in a new format).
EXPERTS = ("orders", "word", "gap", "match", "ppm", "apm", "record", "column", "wrap")
DEFAULT_EXPERTS = "orders,word,gap,match,ppm,apm,record,column,wrap"
# The mixer's starting weights learned on text (`mix.load_prior`), by name: the experts each was made
# for (its rows have their shape). A pretrained model's coding starts from `levels.DEFAULT_PRIOR` where
# the experts are these, online mode's from `levels.ONLINE_PRIOR`; the fast level (no network) and
# other experts start from the hand-set weights (`mix.Experts`).
MIX_PRIORS = {"text4": DEFAULT_EXPERTS, "online2": DEFAULT_EXPERTS, "text5": DEFAULT_EXPERTS, "text6": DEFAULT_EXPERTS}
# Priors that hold the rows of the kinds and state sets too (made with them), by name: the `kinds` they
# were made with; a coding with other kinds starts from `levels.NARROWER[name]` instead, whose rows end
# before the kinds set (the rows after start at zero).
PRIOR_KINDS = {"text5": 7, "text6": 7}


@dataclass(frozen=True)
class MixSettings:
    """The exact byte statistics mixed with the network (`mix.Experts`); no experts is the network
    alone, as format 2 coded."""

    experts: str = DEFAULT_EXPERTS  # comma-separated names from EXPERTS (in its order), or "" for none
    table_bits: int = 19  # rows of each hashed context table: 2^table_bits
    history_bits: int = 23  # bytes of history the match model keeps, all lanes together
    # the match table's slots: 2^match_bits shared by all lanes, and as many where every lane files
    # under its own salt, looked up first (a repeat in the lane's own text wins); 2^19 keeps the
    # default's tables under 256 MB
    match_bits: int = 19
    # a hashed context's row: this many (byte, count) pairs. 30 slots and 2^19 rows keep the
    # default's tables under 256 MB
    slots: int = 30
    # the rows a hashed context may take (`counts.choose_rows`): the `ways` rows of its aligned
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
    # `common.fine_kind`). Its rows start at zero where a prior lacks them, as the eighth set's do
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
    # ENGINES; "bits" sizes its hash table, ring and match table by mix's table_bits, history_bits and
    # match_bits (2^table_bits slots of 16 bytes), and reads no other field of mix (format 6)
    engine: str = "bytes"
    # The network's step in 16-bit integers (`exact.ExactMLSTM`'s step16; headers before it lack it): its matrices'
    # forward copies at 2^-10 and m at 2^-6. For matrices that stay as trained while coding (rule
    # static, or side weights adapting): a pretrained model's levels (`levels.make_settings`).
    step16: bool = False

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.hidden <= MAX_HIDDEN, f"hidden size must be 1 ... {MAX_HIDDEN} (0: no network)"),
            (self.engine in ENGINES, f"unknown engine {self.engine!r} (bytes or bits)"),
            (self.engine == "bytes" or self.hidden == 0, "the bits engine codes without a network so far: hidden 0"),
            (self.engine == "bytes" or self.lanes == 1, "the bits engine codes one lane"),
            (
                self.hidden or self.mix.expert_names or self.engine == "bits",
                "without a network (hidden 0) the experts must be on",
            ),
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
            (
                not self.step16 or (self.hidden and self.adapt.fixed_matrices),
                "the 16-bit step needs a network whose matrices stay as they are (rule static, sparse or LoRA)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def uses_torch(self) -> bool:
        """Whether coding with these settings needs torch: every engine but the bits engine alone (which
        has no network and no byte table; `api` then neither imports torch nor asks it for a GPU)."""
        return self.engine != "bits"

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


def apply_overrides(base, overrides: dict):
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
