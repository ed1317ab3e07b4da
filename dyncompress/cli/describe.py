"""What `info` and `encode -v` print of a stream: its header's settings, model, frames and tables."""

from __future__ import annotations

from dyncompress.cli.files import CHUNK


def describe(name: str, reader) -> str:
    """`info`: the header's record and a walk over the frames (checksums checked, nothing decoded)."""
    from dyncompress.format.container import Block, FrameReader, Header, Index, read_frames

    stream = FrameReader()
    meta, blocks, original, frames = {}, 0, 0, ()
    for frame in read_frames(reader.read, CHUNK, stream):
        if isinstance(frame, Header):
            meta = frame.meta
        elif isinstance(frame, Block):
            blocks += 1
            original += frame.orig_len
        elif isinstance(frame, Index):
            frames = frame.frames
    compressed = stream.offset
    settings = dict(meta.get("settings", {}))
    nested = {k: settings.pop(k) for k in list(settings) if isinstance(settings[k], dict)}  # parts' own configs
    network = ("hidden", "seed")
    lines = [
        f"{name}:",
        f"  original size   {original:,} bytes in {blocks} block(s)",
    ]
    bpb = 8 * compressed / original if original else 0.0
    lines.append(f"  compressed size {compressed:,} bytes ({bpb:.3f} bits/byte)")
    no_network = settings.get("hidden") == 0  # --fast: the statistics alone
    bits = settings.get("engine") == "bits"  # --fast --engine bits: the bitwise engine
    if bits:
        nested.pop("mix", None)  # (only its sizes are read: the engine's line)
    lines += [
        f"  model           {'none' if no_network else _model_line(meta.get('model'))}",
        "  network         "
        + (
            f"none (--fast: the {'bitwise engine' if bits else 'byte statistics'} alone)"
            if no_network
            else ", ".join(f"{k}={settings[k]}" for k in network if k in settings)
        ),
        "  coding          " + ", ".join(f"{k}={v}" for k, v in settings.items() if k not in network),
        *(
            f"  {_PARTS.get(part, part):<15} "
            + ("none (no network)" if no_network and part == "adapt" else _part_line(part, c))
            for part, c in nested.items()
        ),
        *(_bits_lines(meta.get("settings", {})) if bits else _tables_line(meta.get("settings", {}))),
        *_frames_lines(frames, settings.get("frame_size")),
        f"  fingerprint     {meta.get('fingerprint')}",
        "  encoded with    " + ", ".join(f"{k} {v}" for k, v in meta.get("platform", {}).items()),
    ]
    return "\n".join(lines)


_PARTS = {"adapt": "adaptation", "mix": "experts"}  # how `info` titles a nested config (default: its key)


def _part_line(part: str, config: dict) -> str:
    if part == "mix" and not config.get("experts"):
        return "none (the network alone)"
    if part == "mix":  # the mixer's start: a prior's name, or none (the hand-set weights)
        config = {**config, "prior": config.get("prior") or "none"}
    return ", ".join(f"{k}={v}" for k, v in config.items())


MAX_FRAME_LINES = 32


def _frames_lines(frames: tuple[tuple[int, int], ...], frame_size) -> list[str]:
    """The frame index: how many, and where each starts (each decodes alone: decode --range)."""
    if not frames:
        return []
    size = f"at most {frame_size:,} bytes each" if frame_size else "one frame: the whole stream"
    lines = [f"  frames          {len(frames)} ({size})"]
    if len(frames) > 1:
        start = 0
        for i, (orig, packed) in enumerate(frames[:MAX_FRAME_LINES]):
            bpb = 8 * packed / orig
            lines.append(f"    {i + 1:>5}  bytes {start:,} ... {start + orig:,} -> {packed:,} ({bpb:.3f} bits/byte)")
            start += orig
        if len(frames) > MAX_FRAME_LINES:
            lines.append(f"    ... and {len(frames) - MAX_FRAME_LINES} more")
    return lines


def _tables_line(settings: dict) -> list[str]:
    """The memory the experts' tables need to decode (none for the network alone)."""
    from dyncompress.config.settings import MixSettings
    from dyncompress.experts.mix import table_bytes

    try:
        size = table_bytes(MixSettings(**settings["mix"]), int(settings["lanes"]))
    except (KeyError, TypeError, ValueError):
        return []
    return [f"  tables          {size / 2**20:,.0f} MiB at most"] if size else []


def _bits_lines(settings: dict) -> list[str]:
    """The bitwise engine's sizes and the memory its tables need to decode."""
    from dyncompress.bitwise.engine import table_bytes

    try:
        t, r, m = (int(settings["mix"][k]) for k in ("table_bits", "history_bits", "match_bits"))
    except (KeyError, TypeError, ValueError):
        return []
    return [
        f"  engine          bits: 2^{t} slots of 16 bytes, 2^{r} bytes of history, 2^{m} match positions",
        f"  tables          {table_bytes(t, r, m) / 2**20:,.0f} MiB",
    ]


def start_line(name: str, model, probe: float) -> str:
    """What `encode -v` says of the start the probe chose (`auto`)."""
    from dyncompress.auto import CJK_KNOWN, CJK_MODEL, ONLINE_ABOVE, PROBE_BYTES

    what = f"model {model.name}" if model else "online mode"
    return (
        f"{name}: {what}: the model codes the first {PROBE_BYTES // 1024} kB at {probe:.2f} bits/byte "
        f"(online above {ONLINE_ABOVE}; Chinese and Japanese above {CJK_KNOWN} with {CJK_MODEL})"
    )


def _model_line(model) -> str:
    if not model:
        return "online (seeded random start)"
    if isinstance(model, dict):
        return f"{model.get('name')} (sha256 {str(model.get('sha256'))[:16]})"
    return str(model)
