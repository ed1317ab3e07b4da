"""Measuring without writing files: bits per byte by rule, and tuning.

`measure` runs the codec's own loop (`Codec.code_block`, block by block, with
the settings `Compressor` would choose) but hands it a `Tally` instead of a
range coder: a coder that codes nothing and adds up -log2 of the integer
frequency the range coder would have spent on each byte. The estimate is
therefore the real payload size up to the range coder's flush (a few bytes
per block); the file adds its header and frame headers on top.
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from dyncompress.coding.codec import Codec, block_spans, encode_block, frame_spans, to_lanes
from dyncompress.config.levels import make_settings
from dyncompress.config.model import Model
from dyncompress.config.settings import Settings
from dyncompress.config.shape import MLSTMShape
from dyncompress.errors import DyncompressError
from dyncompress.network.exact import side_layout
from dyncompress.network.fixed import FREQ_BITS
from dyncompress.progress import Progress

ROWS = ("static", "sgd", "rms", "rms-decay", "online")  # the paper's table, plus learning from scratch
# The cheaper adaptations (issue 12): rms-decay on a sparse matrix, or weighted and skipped by TLM
# (thresholds in bits per byte: log2 P0), or both.
SPARSE_K = 256
TLM_BITS = 2.2
TLM_RELATIVE = 1.0  # times the running cost per byte: about half the segments skipped
VARIANTS: dict[str, dict] = {
    "sparse": dict(rule="rms-decay", sparse=SPARSE_K),
    "lora-4": dict(rule="rms-decay", lora=4),
    "lora-32": dict(rule="rms-decay", lora=32),
    "lora-out": dict(rule="rms-decay", lora=32, lora_on="w_out", segment_len=32),  # the levels' (OUT_LORA)
    "tlm": dict(rule="rms-decay", tlm_bits=TLM_BITS),
    "tlm-lanes": dict(rule="rms-decay", tlm_bits=TLM_BITS, tlm_lanes=True),
    "tlm-relative": dict(rule="rms-decay", tlm_relative=TLM_RELATIVE),
    "sparse-tlm": dict(rule="rms-decay", sparse=SPARSE_K, tlm_bits=TLM_BITS),
    "lora-tlm": dict(rule="rms-decay", lora=32, tlm_bits=TLM_BITS),
}
LEVEL_ROW = "level"  # what the level adapts, as `encode` codes it (levels -3 ... -9: LoRA on W_out)
ALL_ROWS = (LEVEL_ROW, *ROWS, *VARIANTS)


class Tally:
    """A `coder.Coder` in place of the range coder: the bits it would spend, per step and lane."""

    def __init__(self, lanes: int) -> None:
        self.lanes = lanes
        self.rows: list[np.ndarray] = []
        self.active: list[int] = []  # lanes coded at each step

    def code(self, freqs: np.ndarray, symbols: np.ndarray) -> None:
        row = np.zeros(self.lanes)
        k = len(symbols)
        row[:k] = FREQ_BITS - np.log2(freqs[np.arange(k), symbols])
        self.rows.append(row)
        self.active.append(k)

    def in_coding_order(self) -> np.ndarray:
        """Bits in the order they were coded: step by step, the active lanes of each step."""
        if not self.rows:
            return np.zeros(0)
        return np.concatenate([row[:k] for row, k in zip(self.rows, self.active, strict=True)])

    def per_byte(self, length: int) -> np.ndarray:
        """Bits of every byte in input order (the lanes' layout undone, as `from_lanes` does)."""
        if not self.rows:
            return np.zeros(0)
        return np.stack(self.rows).T.reshape(-1)[:length]


@dataclass
class Measurement:
    label: str
    settings: Settings
    length: int
    bits: float
    seconds: float
    positions: np.ndarray | None = None  # bits of every byte in input order (float32), when asked for
    order: np.ndarray | None = None  # the same bits in the order they were coded (all lanes, step by step)
    segments: int = 0  # gradient steps due (adaptive rules)
    skipped: int = 0  # of them, skipped by TLM (no backward pass)

    @property
    def skip_fraction(self) -> float:
        return self.skipped / self.segments if self.segments else 0.0

    @property
    def flops(self) -> float:
        """Multiply-adds x 2 per byte of the network's forward, backward and update (`flops_per_byte`)."""
        return flops_per_byte(self.settings, self.skip_fraction)

    @property
    def bpb(self) -> float:
        return self.bits / self.length if self.length else 0.0

    @property
    def kbps(self) -> float:
        return self.length / max(self.seconds, 1e-9) / 1e3

    @property
    def payload_bytes(self) -> int:
        return math.ceil(self.bits / 8)


def measure(
    data: bytes,
    settings: Settings,
    model: Model | None,
    label: str = "",
    progress: Progress | None = None,
    positions: bool = False,
) -> Measurement:
    """Bits the codec would spend on `data` with these settings (the encoder's loop, no output)."""
    started = time.perf_counter()

    def fresh() -> Codec:
        try:
            return Codec(settings, model)
        except (ValueError, RuntimeError) as e:  # no GPU, a model of another shape
            raise DyncompressError(str(e)) from None

    codec = fresh()  # a bad setting fails before any work, even on no data
    bits, parts, order, segments, skipped = 0.0, [], [], 0, 0
    for i, (start, end) in enumerate(frame_spans(len(data), settings.frame_size)):
        codec = fresh() if i else codec  # every frame starts afresh
        for offset, stop in block_spans(start, end, settings.block_size):
            bits += _measure_block(codec, data[offset:stop], progress, positions, parts, order)
        if codec.predictor is not None:  # (the bits engine takes no gradient steps)
            segments, skipped = segments + codec.predictor.segments, skipped + codec.predictor.skipped
    seconds = time.perf_counter() - started
    m = Measurement(label, settings, len(data), bits, seconds, segments=segments, skipped=skipped)
    if positions:
        m.positions, m.order = (np.concatenate(p) if p else np.zeros(0, np.float32) for p in (parts, order))
    return m


def flops_per_byte(settings: Settings, skipped: float = 0.0) -> float:
    """The network's floating-point operations per byte (2 per multiply-add of its matmuls; the
    elementwise work, the experts and the mixer not counted): the forward, and for an adaptive rule
    the backward through time and the weight gradients (none for a frozen network's weights, only
    M's with `sparse`, the factors' with `lora`) and the update (a few per adapted weight per segment),
    less the skipped fraction of segments."""
    a = settings.adapt
    H, A = settings.hidden, 256
    side = sum(math.prod(dims) for _, dims in side_layout(settings.shape, a.sparse, a.lora, a.lora_names))
    recurrent = 2 * (H * H + 4 * H * H)  # h W_mh, m W_m
    forward = recurrent + 2 * H * A + 2 * side
    if a.rule == "static":
        return float(forward)
    through_time = recurrent + 2 * H * A + 2 * side  # dh through W_out, W_m, W_mh (and M or the factors)
    if a.frozen:
        weights, adapted = 2 * side, side
    else:
        weights, adapted = recurrent + 2 * H * A + 5 * H, MLSTMShape(H).num_params
    update = 8 * adapted / (settings.lanes * settings.segment_len)
    return forward + (1 - skipped) * (through_time + weights + update)


def _measure_block(codec: Codec, block: bytes, progress, positions: bool, parts: list, order: list) -> float:
    if codec.bits is not None:  # its bits are its code's: coded for real (no cost per byte apart)
        if positions:
            raise DyncompressError("the bits engine does not measure the cost of each byte (--positions)")
        return min(8.0 * len(encode_block(codec, block, progress)), 8.0 * len(block))
    tally = Tally(codec.s.lanes)
    codec.code_block(tally, to_lanes(block, codec.s.lanes), len(block), progress)
    per_byte = tally.per_byte(len(block))
    if positions:
        parts.append(per_byte.astype(np.float32))
        order.append(tally.in_coding_order().astype(np.float32))
    return min(float(per_byte.sum()), 8.0 * len(block))  # a block that would expand is stored


def row_settings(
    row: str, data_len: int, model: Model | None, level: int | None = None, **overrides
) -> tuple[Settings, Model | None]:
    """Settings (and starting model) for one row of the table: a rule with `model`, online, or the
    level as `encode` codes it with `model` (LEVEL_ROW: its own rule, LoRA factors and TLM)."""
    if row == LEVEL_ROW:
        if model is None:
            raise DyncompressError(f"the {row} row needs a pretrained model")
        return make_settings(level=level, size_hint=data_len, model=model, **overrides), model
    if row == "online":
        model = None
    elif model is None:
        raise DyncompressError(f"the {row} row needs a pretrained model")
    elif row in VARIANTS:
        variant = dict(VARIANTS[row])
        if "sparse" in variant:  # at most the network's size
            variant["sparse"] = min(variant["sparse"], model.shape.hidden)
        if "lora" in variant:
            variant["lora"] = min(variant["lora"], model.shape.hidden)
        overrides = {**variant, **overrides}
    else:
        overrides["rule"] = row
    if not {"tlm_bits", "tlm_relative"} & set(overrides):  # a rule's row adapts on every segment (the paper's table)
        overrides["tlm_relative"] = 0.0
    return make_settings(level=level, size_hint=data_len, model=model, **overrides), model


# --- tuning -------------------------------------------------------------------------

# in the order a successive search settles them
TUNABLE = ("lr", "decay", "segment_len", "tlm_bits", "tlm_relative", "tlm_lambda")


def tune(
    data: bytes,
    model: Model | None,
    rule: str,
    grid: dict[str, list],
    search: str = "successive",
    level: int | None = None,
    report: Callable[[dict, Measurement], None] | None = None,
    progress: Callable[[str], Progress | None] | None = None,
    **overrides,
) -> tuple[dict, list[tuple[dict, Measurement]]]:
    """Search `grid` ({knob: values}) for the lowest bits per byte of `rule` on `data`.

    grid: every combination. successive: one knob at a time in the order of TUNABLE (the
    learning rate, the most sensitive, first), the others held at the best found so far
    (at first: the model's defaults for the rule, or the grid's first value when the default
    is not in it). Returns the best point and every point measured, in order.
    """
    unknown = set(grid) - set(TUNABLE)
    if unknown:
        raise ValueError(f"cannot tune {', '.join(sorted(unknown))} (tunable: {', '.join(TUNABLE)})")

    def settings_at(point: dict) -> Settings:
        return make_settings(level=level, size_hint=len(data), model=model, rule=rule, **overrides, **point)

    base = settings_at({})
    a = base.adapt
    defaults = {"lr": a.lr, "decay": a.decay, "segment_len": base.segment_len, "tlm_bits": a.tlm_bits}
    defaults.update(tlm_relative=a.tlm_relative, tlm_lambda=a.tlm_lambda)
    results: list[tuple[dict, Measurement]] = []
    seen: dict[tuple, Measurement] = {}

    def run(point: dict) -> Measurement:
        key = tuple(sorted(point.items()))
        if key not in seen:
            label = ", ".join(f"{k}={v:g}" for k, v in point.items())
            m = measure(data, settings_at(point), model, label, progress(label) if progress else None)
            seen[key] = m
            results.append((dict(point), m))
            if report:
                report(dict(point), m)
        return seen[key]

    knobs = [k for k in TUNABLE if k in grid]
    if search == "grid":
        for values in itertools.product(*(grid[k] for k in knobs)):
            run(dict(zip(knobs, values, strict=True)))
    elif search == "successive":
        best = {k: defaults[k] if defaults[k] in grid[k] else grid[k][0] for k in knobs}
        for k in knobs:
            scores = {v: run({**best, k: v}).bpb for v in grid[k]}
            best[k] = min(scores, key=scores.get)
    else:
        raise ValueError(f"unknown search {search!r} (grid or successive)")
    point, _ = min(results, key=lambda r: r[1].bits)
    return point, results


def save_defaults(model: Model, rule: str, point: dict, record: dict) -> Model:
    """The model with `point` recorded as `rule`'s coding defaults (and how they were found)."""
    defaults = dict(model.info.get("defaults", {}))
    rules = dict(defaults.get("rules", {}))
    rules[rule] = {k: (int(v) if k == "segment_len" else float(v)) for k, v in point.items()}
    defaults["rules"] = rules
    info = dict(model.info, defaults=defaults)
    tuning = dict(info.get("tuning", {}))
    tuning[rule] = record
    info["tuning"] = tuning
    return Model(model.name, model.shape, model.theta, model.ms, info)


def windowed(bits: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean bits per byte over consecutive windows: (window centres, values)."""
    n = len(bits) // window
    if n == 0:
        return np.array([len(bits) / 2]), np.array([bits.mean() if len(bits) else 0.0])
    values = bits[: n * window].reshape(n, window).mean(axis=1)
    return (np.arange(n) + 0.5) * window, values


def cumulative(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bits per byte of the first k bytes, for k = 1 ... n."""
    k = np.arange(1, len(bits) + 1)
    return k, np.cumsum(bits, dtype=np.float64) / k


def plot(measurements: Iterable[Measurement], path: str, title: str, window: int) -> None:
    """Cumulative and windowed bits per byte over the position in the input (needs matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise DyncompressError("--plot needs matplotlib: pip install 'dyncompress[plot]'") from None
    rows = [m for m in measurements if m.positions is not None and len(m.positions)]
    base = next((m for m in rows if m.label == "static"), None)
    panels = 3 if base is not None else 2
    fig, axes = plt.subplots(panels, 1, figsize=(9, 3.6 * panels), constrained_layout=True)
    top, bottom = axes[0], axes[-1]
    start = min(100, max(1, min(len(m.positions) for m in rows) // 10)) if rows else 1
    for i, m in enumerate(rows):
        style = dict(color=f"C{i}", label=m.label)  # one colour per row in every panel
        # the cumulative curves follow coding order (all lanes, step by step): x = bytes the
        # model has seen, which is what adaptation depends on
        x, y = cumulative(m.order)
        top.plot(x[start - 1 :], y[start - 1 :], lw=1.2, **{**style, "label": f"{m.label} ({m.bpb:.3f})"})
        if base is not None and m is not base and m.label != "online":  # online is another scale
            _, y0 = cumulative(base.order)
            axes[1].plot(x[start - 1 :], (y0 - y)[start - 1 :], lw=1.2, **style)
        x, y = windowed(m.positions, window)
        bottom.plot(x, y, lw=1.0, **style)
    top.set_xscale("log")
    top.set_xlabel("bytes coded so far, all lanes (log scale)")
    top.set_ylabel("cumulative bits per byte")
    top.set_title(title)
    if base is not None:
        axes[1].set_xscale("log")
        axes[1].axhline(0, color="grey", lw=0.8)
        axes[1].set_xlabel("bytes coded so far, all lanes (log scale)")
        axes[1].set_ylabel("cumulative bits per byte saved vs static")
    bottom.set_xlabel("position in the input (bytes)")
    bottom.set_ylabel(f"bits per byte, {window:,}-byte windows")
    for ax in axes:
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".png", dir=directory)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
