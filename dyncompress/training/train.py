"""Training a model (`dyncompress train`) and calibrating its MS_g (`dyncompress calibrate`).

Training: the corpus files are concatenated (each file's tail held out for
validation) and cut into `batch` contiguous streams. Every step runs `bptt`
bytes of each stream through the network, backpropagates the mean loss through
those steps (truncated BPTT; the state carries on to the next step), clips the
gradient norm and takes an Adam step. The learning rate warms up, then follows a
cosine down to `min_lr`. Validation bits per byte are measured on the held-out
tails with the weights frozen. At every validation the training state is
written beside the model (`MODEL.state`, to `--resume` from) and the model file
itself only when validation improved: the output is the best model seen.

It uses the network (`mlstm.MLSTM`, the float path) directly, with the batch as its
lanes, and the codec's clipping (`adapt.clip_grad_`); a trained model holds exactly
the weights the codec's predictor then starts from.

Calibration (Krause et al. 2018): run the frozen model over text in the codec's
segments (lanes x n bytes), take the gradient of each segment's mean loss as the
codec would (clipped alike), and average g^2 per parameter: MS_g (floored, see
`calibrate`).
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
import torch

from dyncompress import __version__
from dyncompress._signals import held_interrupts
from dyncompress.config.model import Model, ModelError, load, save
from dyncompress.config.settings import TrainConfig
from dyncompress.config.shape import MLSTMShape
from dyncompress.network.adapt import clip_grad_
from dyncompress.network.mlstm import MLSTM, init_params, unflatten, widen
from dyncompress.training.corpus import absolute_source, read_source

LN2 = math.log(2)


def read_corpus(paths: list[str], valid_bytes: int) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Train and valid byte arrays; each file's tail (share of `valid_bytes` by size) is held out.

    `paths`: files, or any source `corpus.parse_source` takes (FILE:START:END, enwik8:train).
    """
    blobs = []
    for path in paths:
        try:
            blobs.append(read_source(path)[1])
        except OSError as e:
            raise ModelError(f"cannot read {path}: {e.strerror or e}") from None
    total = sum(len(b) for b in blobs)
    if total < 2 * valid_bytes or total == 0:
        raise ModelError(f"corpus too small: {total:,} bytes for {valid_bytes:,} held-out bytes")
    train, valid, record = [], [], []
    for path, blob in zip(paths, blobs, strict=True):
        k = len(blob) * valid_bytes // total
        train.append(blob[: len(blob) - k])
        valid.append(blob[len(blob) - k :])
        record.append(
            {
                "file": os.path.basename(path),
                "bytes": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest()[:16],
                "held_out": k,
            }
        )
    join = lambda parts: np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.int64)  # noqa: E731
    return join(train), join(valid), record


def streams(data: np.ndarray, batch: int) -> np.ndarray:
    """(batch, L) contiguous streams of the data (the tail that does not divide is dropped)."""
    L = len(data) // batch
    return data[: L * batch].reshape(batch, L)


def run_steps(net: MLSTM, S: torch.Tensor, start: int, T: int) -> None:
    """Feed bytes S[:, start : start + T] (one stream per lane) through T steps of the network."""
    for t in range(T):
        net.step(S[:, start + t], t)


@torch.no_grad()
def evaluate(shape: MLSTMShape, theta: torch.Tensor, data: np.ndarray, lanes: int = 64, chunk: int = 256) -> float:
    """Bits per byte of `data` under frozen weights (lanes contiguous streams, state carried)."""
    lanes = max(1, min(lanes, len(data) // 2))
    S = torch.from_numpy(streams(data, lanes)).to(theta.device)
    net = MLSTM(shape, theta, lanes, chunk)
    nats, count = 0.0, 0
    for start in range(0, S.shape[1] - 1, chunk):
        T = min(chunk, S.shape[1] - 1 - start)
        run_steps(net, S, start, T)
        targets = S[:, start + 1 : start + T + 1].T
        nats -= float(net.target_log_probs(T, targets).sum())
        count += targets.numel()
        net.carry(T)
    return nats / count / LN2


class Trainer:
    def __init__(self, config: TrainConfig, files: list[str], device: str = "cpu", init: Model | None = None) -> None:
        """`init`: a model whose weights training starts from (fine-tuning; a fresh optimizer and
        schedule), instead of the seed's random ones; one with fewer hidden units is widened to
        `config.hidden` (`mlstm.widen`: the same function, the new units the seed's)."""
        self.c = config
        if init is not None and init.shape.hidden > config.hidden:
            h = init.shape.hidden
            raise ModelError(f"--init's model has hidden {h}, more than {config.hidden} (give --hidden {h} or more)")
        self.device = torch.device(device)
        self.sources = [absolute_source(f) for f in files]  # (what a checkpoint records)
        self.train_data, self.valid_data, self.corpus = read_corpus(files, config.valid_bytes)
        self.S = torch.from_numpy(streams(self.train_data, config.batch)).to(self.device)
        if self.S.shape[1] <= config.bptt + 1:
            raise ModelError("corpus too small for this batch and bptt")
        self.shape = MLSTMShape(config.hidden)
        # what the weights started from, as the model file records it (a resumed run keeps its first piece's)
        self.init_record = f"{init.name} ({init.sha256[:16]})" if init is not None else None
        self.pieces: list[dict] = []  # every piece of the run: the step it started at, its command
        if init is None:
            theta = init_params(self.shape, config.seed)
        elif init.shape.hidden < config.hidden:  # a larger network that starts as the smaller one
            theta = widen(init.shape, init.theta, config.hidden, config.seed)
        else:
            theta = init.theta
        self.theta = theta.detach().clone().to(self.device)
        self.net = MLSTM(self.shape, self.theta, config.batch, config.bptt)
        self.opt = torch.optim.Adam([self.theta], lr=config.lr)
        self.step = 0
        self.pos = 0  # position within the streams
        self.seconds = 0.0
        self.history: list[dict] = []

    def lr_at(self, step: int) -> float:
        c = self.c
        if step < c.warmup:
            return c.lr * (step + 1) / c.warmup
        frac = (step - c.warmup) / max(1, c.steps - c.warmup)
        if c.minutes > 0:  # whichever budget runs out first ends the schedule
            frac = max(frac, self.seconds / (60 * c.minutes))
        frac = min(1.0, frac)
        return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + math.cos(math.pi * frac))

    def train_step(self) -> float:
        """One TBPTT step; returns the batch's bits per byte."""
        c, net, S = self.c, self.net, self.S
        if self.pos + c.bptt + 1 > S.shape[1]:  # wrap around: next epoch, fresh state
            self.pos = 0
            net.reset_state()
        run_steps(net, S, self.pos, c.bptt)
        targets = S[:, self.pos + 1 : self.pos + c.bptt + 1].T.contiguous()
        weight = torch.full(targets.shape, 1.0 / targets.numel(), device=self.device)
        nats = float(net.backward(c.bptt, targets, weight))
        grad = clip_grad_(net.grad, c.clip)
        for group in self.opt.param_groups:
            group["lr"] = self.lr_at(self.step)
        self.theta.grad = grad
        self.opt.step()
        self.theta.grad = None
        net.carry(c.bptt)
        self.pos += c.bptt
        self.step += 1
        return nats / targets.numel() / LN2

    def validate(self) -> float:
        return evaluate(self.shape, self.theta, self.valid_data)

    # --- checkpoints: a model file plus the optimizer and stream state beside it ---------

    def model(self, name: str, command: str = "") -> Model:
        info = {
            "summary": f"mLSTM hidden {self.c.hidden}, {self.shape.num_params:,} parameters, "
            f"trained on {len(self.train_data):,} bytes x {self.bytes_seen / max(1, len(self.train_data)):.1f} "
            f"passes; held-out {self.history[-1]['valid_bpb']:.3f} bits/byte"
            if self.history
            else f"mLSTM hidden {self.c.hidden} (untrained)",
            "training": {
                "config": asdict(self.c),
                "init": self.init_record,
                "corpus": self.corpus,
                "train_bytes": len(self.train_data),
                "valid_bytes": len(self.valid_data),
                "steps": self.step,
                "bytes_seen": self.bytes_seen,
                "seconds": round(self.seconds, 1),
                "history": self.history,
                "command": command,
                "pieces": self.pieces,
                "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads, device {self.device.type}",
                "dyncompress": __version__,
            },
        }
        return Model(name, self.shape, self.theta.detach().cpu().clone(), None, info)

    @property
    def bytes_seen(self) -> int:
        return self.step * self.c.batch * self.c.bptt

    def save_checkpoint(self, path: str, name: str, command: str, best: bool = True) -> None:
        """The training state (to resume from) always; the model file only when `best` so far."""
        if best:
            save(self.model(name, command), path)
        state = {
            "theta": self.theta.detach().cpu().clone(),
            "step": self.step,
            "pos": self.pos,
            "seconds": self.seconds,
            "history": self.history,
            "config": asdict(self.c),
            "name": name,
            "init": self.init_record,
            "pieces": self.pieces,
            "sources": self.sources,
            "corpus": self.corpus,
            "optimizer": self.opt.state_dict(),
            "h": self.net.state[0].cpu().clone(),  # (a view of the whole segment's record: clone, or torch saves that)
            "c": self.net.state[1].cpu().clone(),
        }
        tmp = path + ".state.tmp"
        torch.save(state, tmp)
        os.replace(tmp, path + ".state")

    def resume(self, path: str) -> None:
        """Continue from the checkpoint beside `path`: the same data (each file's bytes and SHA-256,
        whatever its name now) and the same layout of the streams (hidden, batch, bptt)."""
        state = read_state(path, self.device)
        for key in ("hidden", "batch", "bptt"):
            if state["config"][key] != getattr(self.c, key):
                raise ModelError(
                    f"the checkpoint was trained with {key} {state['config'][key]}, not {getattr(self.c, key)}"
                )
        if "corpus" in state and _data_of(state["corpus"]) != _data_of(self.corpus):
            raise ModelError(f"the checkpoint was trained on other data: {_describe(state['corpus'])}")
        self.theta.copy_(state["theta"])
        self.opt.load_state_dict(state["optimizer"])
        self.step, self.pos, self.seconds = state["step"], state["pos"], state["seconds"]
        self.history = state["history"]
        self.init_record = state.get("init", self.init_record)
        self.pieces = list(state.get("pieces", []))
        self.net.set_state(state["h"], state["c"])

    def run(
        self,
        out: str,
        name: str,
        command: str = "",
        report: Callable[[str, bool], None] | None = None,
        stop_after: float | None = None,
    ) -> Model:
        """Train to `steps` (or `minutes`), validating and checkpointing every `eval_every`.

        `stop_after`: end this piece after so many seconds with a checkpoint, the schedule left for
        `resume`. A Ctrl-C (KeyboardInterrupt) is let through after the step it lands in, once the
        checkpoint of that step is written."""
        c = self.c
        self.pieces.append({"step": self.step, "command": command})
        max_seconds = 60 * c.minutes if c.minutes > 0 else None
        ema, started, last_valid = None, time.monotonic(), float("nan")
        base_seconds = self.seconds
        try:
            while self.step < c.steps:
                with held_interrupts():  # a Ctrl-C waits for the step's end: the state stays whole
                    bpb = self.train_step()
                ema = bpb if ema is None else 0.98 * ema + 0.02 * bpb
                self.seconds = base_seconds + time.monotonic() - started
                done = self.finished
                paused = not done and stop_after is not None and self.seconds - base_seconds >= stop_after
                if self.step % c.eval_every == 0 or done or paused:
                    last_valid = self.validate()
                    if not math.isfinite(last_valid) or not math.isfinite(ema):
                        raise ModelError(f"training diverged at step {self.step} (loss not finite); lower --lr")
                    best = all(last_valid < h["valid_bpb"] for h in self.history)
                    self.history.append(
                        {
                            "step": self.step,
                            "seconds": round(self.seconds, 1),
                            "train_bpb": round(ema, 4),
                            "valid_bpb": round(last_valid, 4),
                        }
                    )
                    self.save_checkpoint(out, name, command, best)
                if report is not None:
                    rate = self.step * c.batch * c.bptt / max(self.seconds, 1e-9) / 1e3
                    eta = (c.steps - self.step) * self.seconds / max(self.step, 1)
                    if max_seconds is not None:
                        eta = min(eta, max_seconds - self.seconds)
                    if stop_after is not None:
                        eta = min(eta, stop_after - (self.seconds - base_seconds))
                    report(
                        f"step {self.step:,}/{c.steps:,}  train {ema:.3f}  valid {last_valid:.3f} bits/byte  "
                        f"lr {self.lr_at(self.step):.2e}  {rate:.1f} kB/s  ETA {eta / 60:.0f} min",
                        self.step % c.eval_every == 0 or done or paused,
                    )
                if done or paused:
                    break
        except KeyboardInterrupt:
            self.save_checkpoint(out, name, command, best=False)
            raise
        return load(out)  # the best validated weights, as written

    @property
    def finished(self) -> bool:
        """Whether the schedule has run out (steps, or minutes when those are the budget)."""
        c = self.c
        return self.step >= c.steps or (c.minutes > 0 and self.seconds >= 60 * c.minutes)


def read_state(path: str, device: str | torch.device = "cpu") -> dict:
    """The training state beside the model file `path` (`path`.state)."""
    try:
        return torch.load(path + ".state", map_location=device, weights_only=True)
    except FileNotFoundError:
        raise ModelError(f"no training state {path}.state to resume from") from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise ModelError(f"{path}.state is not a readable training state ({e})") from None


def _data_of(corpus: list[dict]) -> list[tuple]:
    """What a checkpoint's data are, apart from what the files are called: bytes, hash, held out."""
    return [(f["bytes"], f["sha256"], f["held_out"]) for f in corpus]


def _describe(corpus: list[dict]) -> str:
    return ", ".join(f"{f['file']} ({f['bytes']:,} bytes)" for f in corpus)


def calibrate(
    model: Model,
    data: bytes,
    lanes: int,
    segment_len: int,
    clip: float,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """MS_g: mean over segments of the squared (clipped) gradient of each segment's mean loss."""
    dev = torch.device(device)
    theta = model.theta.to(dev).clone()
    S = torch.from_numpy(streams(np.frombuffer(data, dtype=np.uint8).astype(np.int64), lanes)).to(dev)
    if S.shape[1] < segment_len + 1:
        raise ModelError(f"calibration text too short: {len(data):,} bytes for {lanes} lanes x {segment_len}")
    net = MLSTM(model.shape, theta, lanes, segment_len)
    ms = torch.zeros_like(theta)
    weight = torch.full((segment_len, lanes), 1.0 / (segment_len * lanes), device=dev)
    segments = 0
    for start in range(0, S.shape[1] - segment_len, segment_len):
        run_steps(net, S, start, segment_len)
        net.backward(segment_len, S[:, start + 1 : start + segment_len + 1].T.contiguous(), weight)
        g = clip_grad_(net.grad, clip)
        ms.addcmul_(g, g)
        segments += 1
        net.carry(segment_len)
        if progress is not None:
            progress(segment_len * lanes)
    ms /= segments
    # A byte the text never showed leaves its input row's MS_g at 0, and a step divided by
    # sqrt(0) + eps would throw the model away when that byte comes. Floor every entry at
    # 1e-3 of its tensor's mean: such a row then moves as a byte seen once in a thousand would.
    for view in unflatten(model.shape, ms).values():
        view.clamp_(min=float(view.mean()) * 1e-3 + 1e-30)
    return ms.cpu()
