"""The experts' Python side: `Experts` holds every table and record of the exact byte statistics and
their mixer for a number of lanes, and makes the compiled calls (`step`) once per coding step.

The network is one expert among several: counts of what followed a context (orders 1 ... 6 and 8,
three word contexts, the gap pair, the record, column and wrap contexts: `orders`, `words`, `gap`,
`record`, `column`, `wrap`, in the count tables of `counts`), PPM's reading of the order tables
(`ppm`) and the longest recent repeat (`match`), added in logit space by a mixer whose weight rows
are chosen by small contexts and learned after every byte (`mixer`), then refined by an APM (`apm`).
Every value is an integer, so every machine gets the same bits; the package's docstring lists the
modules and how to add an expert, docs/METHOD.md section 3b the method.

Here: the registry (MODULES, CONTEXTS), the table layout (`table_sizes`), the weight sets' layout
and starting weights (hand-set, or a mixer prior learned on text: `MixSettings.prior`, a
`prior_NAME.npz` of the package checked by its SHA-256, made by `tools/mixer_prior.py`). Why each
piece is there, and what it measured: docs/lab/mix.md.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from dyncompress.config.settings import PRIOR_KINDS, MixSettings
from dyncompress.experts import apm, column, counts, gap, history, match, orders, ppm, record, step, words, wrap
from dyncompress.experts.common import N_KINDS
from dyncompress.experts.counts import log_table
from dyncompress.experts.mixer import NET_FLOOR
from dyncompress.network.fixed import ExactnessError, checked_tables

# The registry: every expert by its name in `settings.EXPERTS`, each a module with the same small
# interface (NAME, TABLES, State, make, predict, update; `experts` package: how to add one).
MODULES = {m.NAME: m for m in (orders, words, gap, match, ppm, apm, record, column, wrap)}
# The context experts in the order of their count tables (`step.contexts`): those whose tables choose
# the highest context seen (`SEEN`) first.
CONTEXTS = (orders, words, gap, record, column, wrap)

ORDERS = orders.ORDERS
HALF_ROWS = ("o3", "o8", "word", "skip")  # count tables with half the hashed rows (`table_sizes`)
# the mixer's rates: a weight row starts at RATE_START times mix_lr and comes down as RATE_SETTLE /
# (RATE_SETTLE + its steps) to the rate it settles at (mix_floor): rows
# seen often learn slowly, rare ones fast
RATE_START, RATE_SETTLE = 16, 64
MATCH_EDGES, MATCH_STATES = match.EDGES, match.STATES
MATCH_TRUST = np.array([0, 2, 2, 4, 4, 8, 12, 16, 24], dtype=np.int64) << 14  # initial weight per bucket
COUNT_EDGES = counts.COUNT_EDGES
# the first two weight sets' rows for every order seen (0 ... K tables): one per match length bucket
# (set 0, bucket-major), one per count bucket and deterministic flag (set 1, order-major)
ROWS_A, ROWS_B = len(MATCH_EDGES) + 1, 2 * (len(COUNT_EDGES) + 1)
# weight sets chosen by hashes: (what is hashed, salt, 2^bits rows); the current word's hash, the
# last two bytes, the last three
HASHED_SETS = (("pair", 0, 12), ("word", 7, 12), ("triple", 3, 14))
# a seventh (MixSettings.kinds): the kinds of the last few bytes (`common.fine_kind`)
KINDS_SET = ("kinds", 11, 12)
# an eighth (the state set), indexed directly: a row for every match state (none; else the kind of
# the byte it predicts with its length bucket), order seen and kind of the last byte
Z_BOUND = 1 << 20  # |z| bound (256 nats) in units of 2^-12
W_BOUND = 1 << 24  # |w| bound (256) in units of 2^-16
PPM_TRUST = (1 << 16) // 4  # the PPM input's initial weight
# The mixer priors (settings.MIX_PRIORS), each in the package's prior_NAME.npz: the starting rows of
# every weight set, for the fast mixer and the slow, with every row's starting step count, and the
# SHA-256 of their int64 little-endian bytes (W | W_slow | updates). Made by `tools/mixer_prior.py`.
PRIOR_SHA256 = {
    "text4": "4e87dca0f44552c8eb3fa976bf9da97ba2130ae425cc4a413c0d5223cec6b6fb",
    "online2": "ae323794715df850680df306388d222e338c1765d34082af18d98ec7c2e9952a",
    "text5": "6489c237e30e62a55c40db556a643c4708f1fa2154374742bcb7437cf849bb29",
    "text6": "5d6f7a725d970276b6fa1fea637b5f2f6452482d6c74a144f5f39f8338a02f90",
}


def prior_sha256(*arrays: np.ndarray) -> str:
    """The SHA-256 of a prior's arrays (W, W_slow[, updates]) as int64 little-endian bytes."""
    return hashlib.sha256(b"".join(np.ascontiguousarray(a, dtype="<i8").tobytes() for a in arrays)).hexdigest()


@functools.cache
def load_prior(name: str, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mixer prior `name`'s starting rows (W, W_slow) and every row's starting step count,
    checked against the hash recorded here and against the `shape` the experts need (read-only
    arrays)."""
    from importlib import resources

    file = f"prior_{name}.npz"
    try:
        with resources.files("dyncompress.experts").joinpath(file).open("rb") as f, np.load(f) as npz:
            arrays = [npz[k].astype(np.int64) for k in ("W", "W_slow", "updates")]
    except (OSError, KeyError, ValueError) as e:
        raise ExactnessError(f"cannot read the mixer prior {name} ({file}): {e}") from None
    got = prior_sha256(*arrays)
    if got != PRIOR_SHA256[name]:
        raise ExactnessError(f"mixer prior {file} hashes to {got[:16]}, not {PRIOR_SHA256[name][:16]}: reinstall")
    W, W_slow, updates = arrays
    if W.shape != shape or W_slow.shape != shape or updates.shape != shape[:1]:
        raise ExactnessError(f"mixer prior {name} has rows {W.shape}, not the {shape} its experts need")
    W.flags.writeable = W_slow.flags.writeable = updates.flags.writeable = False
    return W, W_slow, updates


def prior_rows(name: str, shape: tuple[int, int], zero_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The starting rows (W, W_slow, step counts) of every weight set, `shape` (sets, n_in), from the
    prior `name`. A prior made before the kinds and state sets (not in `settings.PRIOR_KINDS`) holds all
    but the last `zero_rows` (those sets', where there are any): they start at zero (adding nothing to
    the sum of rows), with no steps taken (the rate of a new row). Read-only."""
    if name in PRIOR_KINDS:  # (every set's rows: made with them)
        zero_rows = 0
    arrays = load_prior(name, (shape[0] - zero_rows, shape[1]))
    if not zero_rows:
        return arrays
    out = tuple(np.concatenate([a, np.zeros((zero_rows, *a.shape[1:]), dtype=a.dtype)]) for a in arrays)
    for a in out:
        a.flags.writeable = False
    return out


def byte_classes(n: int) -> np.ndarray:
    """Every byte's class for the mixer's weights (`MixSettings.classes`), (256,) int64: 1, one class;
    7: digits, capitals, small letters (ASCII), UTF-8's continuation bytes (0x80 ... 0xBF), the lead
    bytes of 2-byte characters (0xC0 ... 0xDF), of 3- and 4-byte ones (0xE0 ... 0xFF), and the
    rest (space, punctuation, controls)."""
    out = np.zeros(256, dtype=np.int64)
    if n == 7:
        out[ord("0") : ord("9") + 1] = 1
        out[ord("A") : ord("Z") + 1] = 2
        out[ord("a") : ord("z") + 1] = 3
        out[0x80:0xC0], out[0xC0:0xE0], out[0xE0:] = 4, 5, 6
    return out


def table_sizes(tb: int, *used: bool) -> list[int]:
    """Rows of every count table of the context experts `used` (in CONTEXTS' order; those not given are
    not used): orders 1 and 2 and the gap pair direct, the rest hashed, 2^tb rows each but for those
    in HALF_ROWS and the tables of contexts not seen (`SEEN`: record, column, wrap), 2^(tb - 4).
    Halving order 3's, the word's and the skip pair's rows keeps the default level's tables under
    256 MB; halving order 8's makes room for the APM's (previous byte, byte) table. The word alone
    keeps rows of counts (COUNTED) where the other hashed tables have rows of slots, at most
    COUNTED_ROWS of them."""
    used = (*used, *[False] * (len(CONTEXTS) - len(used)))
    sizes = []
    for module, on in zip(CONTEXTS, used, strict=True):
        for name in module.TABLES if on else ():
            rows = DIRECT.get(name, (1 << tb) >> (name in HALF_ROWS)) if module.SEEN else (1 << tb) >> 4
            sizes.append(min(rows, COUNTED_ROWS) if name in COUNTED else rows)
    return sizes


DIRECT = {"o1": 256, "o2": 1 << 16, "gap": 1 << 16}  # the count tables indexed by their bytes themselves
# A hashed table that keeps rows of counts where the others have slots: the current word alone (at a
# word's start, any letter follows: too many bytes for a row of slots), in 2^16 rows at most
COUNTED, COUNTED_ROWS = ("word",), 1 << 16


def in_counts(name: str) -> bool:
    """Whether count table `name` keeps rows of 256 counts (else rows of `MixSettings.slots` slots)."""
    return name in DIRECT or name in COUNTED


def table_names(*used: bool) -> list[str]:
    """The count tables in the order `step.contexts` fills them, of the context experts `used` (in
    CONTEXTS' order: orders, word, gap, record, column, wrap; those not given are not used)."""
    used = (*used, *[False] * (len(CONTEXTS) - len(used)))
    return [name for module, on in zip(CONTEXTS, used, strict=True) if on for name in module.TABLES]


def dense_evidence(ev: tuple, b: int) -> np.ndarray:
    """Lane b's evidence (n_in, 256) from the sparse form `step.mix_step` leaves (for
    inspection: the kernels read the sparse form)."""
    E0, base, ent, n_ent = ev
    out = np.repeat(base[b][:, None], 256, axis=1)
    out[0] = E0[b]
    for i, j, d in ent[b, : n_ent[b]]:
        out[i, j] += d
    return out


def aligned_zeros(rows: int, width: int, align: int = 64) -> np.ndarray:
    """A (rows, width) uint8 array of zeros that starts on an `align`-byte boundary (zeros from the
    OS, as np.zeros gives: pages never touched take no memory)."""
    flat = np.zeros(rows * width + align, dtype=np.uint8)
    skip = -flat.ctypes.data % align
    return flat[skip : skip + rows * width].reshape(rows, width)


def table_bytes(s: MixSettings, lanes: int) -> int:
    """The most memory the experts' tables take with these settings (what `info` states)."""
    return Experts(s, lanes).memory() if s.expert_names else 0


class Experts:
    """The count and match experts for `lanes` lanes, with the mixer over them and the network.
    Without a network (`network` False: `--fast`) the mixer's input 0 is zero for every byte: its
    evidence stays as allocated and `mix`'s logits are not read."""

    def __init__(self, s: MixSettings, lanes: int, network: bool = True) -> None:
        self.s, self.B = s, lanes
        self.parts = 1  # runs of lanes `mix` is split into, one per thread (`split`)
        self.used = {name: name in s.expert_names for name in MODULES}  # every registered expert: on?
        on = [m for m in MODULES.values() if self.used[m.NAME]]
        self.use_match, self.use_apm = self.used["match"], self.used["apm"]
        self.use_lines = any("lines" in m.READS for m in on)  # (the history keeps where lines start)
        self.use_hist = any("ring" in m.READS for m in on)  # (the history keeps a ring)
        self.match_bits = s.match_bits  # the match table's slots: 2^match_bits shared, as many the lanes' own
        self.n_ppm = len(ORDERS) if self.used["ppm"] else 0  # MixSettings: ppm reads the order tables
        B, tb = lanes, s.table_bits
        # count tables: the context experts' in CONTEXTS' order, those that choose the highest context
        # seen first (`table_sizes`)
        kinds = [self.used[m.NAME] for m in CONTEXTS]
        sizes = table_sizes(tb, *kinds)
        self.K = len(sizes)
        self.n_seen = sum(len(m.TABLES) for m in CONTEXTS if self.used[m.NAME] and m.SEEN)
        # rows of 256 counts for the direct tables and the word alone; the other hashed ones' rows are
        # s.slots (byte, count) pairs. The rows of counts come first in the row numbers.
        self.n_slots = s.slots
        dense = [in_counts(name) for name in table_names(*kinds)]
        order = sorted(range(self.K), key=lambda t: not dense[t])
        starts = np.cumsum([0] + [sizes[t] for t in order])[:-1]
        self.base = np.zeros(self.K, dtype=np.int64)
        self.base[order] = starts
        self.n_dense = int(sum(n for n, d in zip(sizes, dense, strict=True) if d))
        self.bits = np.array([max(1, (n - 1).bit_length()) for n in sizes], dtype=np.uint64)
        self.rows = int(sum(sizes))
        self.shift = np.uint64(64) - self.bits
        self.log = log_table(s.count_limit)
        self.exp = checked_tables()[2]
        # histories (match model): one ring per lane, 2^hb bytes each
        self.hb = max(10, s.history_bits - max(0, (B - 1).bit_length()))
        # the mixer: inputs net, counts..., run, ppm, match. Its weights are the sum of one row from each
        # of six tables, chosen by (match bucket, order seen), (order seen, its count bucket,
        # deterministic?), the previous byte and the hashes of HASHED_SETS; a seventh (KINDS_SET); an
        # eighth, the state set (MATCH_STATES x (K + 1) x N_KINDS rows).
        self.n_in = 1 + self.K + int(self.K > 0) + int(self.n_ppm > 0) + int(self.use_match)
        n_a, n_b = ROWS_A * (self.K + 1), ROWS_B * (self.K + 1)
        hashed = (*HASHED_SETS, KINDS_SET)
        self.set_salts = np.array([salt for _, salt, _ in hashed], dtype=np.uint64)
        self.set_shifts = np.array([64 - bits for _, _, bits in hashed], dtype=np.uint64)
        state_rows = MATCH_STATES * (self.K + 1) * N_KINDS
        sizes = [n_a, n_b, 256] + [1 << bits for _, _, bits in hashed] + [state_rows]
        self.set_base = np.cumsum([0] + sizes[:-1]).astype(np.int64)
        self.n_sets = int(sum(sizes))
        # `learn_parts` steps the first split_sets weight sets and updates the first split_tables count
        # tables in one section, the rest beside `advance` (and the APM's step) in the other. With the
        # APM (the costliest) all of them go to the first; without it, half the tables, and the small
        # sets there, the hashed ones (and the state set) here (--fast on the enwik8 slice: 194 ... 196
        # kB/s, against 187 ... 191 with the first hashed set there too and 187 with all six)
        self.split_tables = self.K if self.use_apm else (self.K + 1) // 2
        self.split_sets = len(sizes) if self.use_apm else 3  # (the small sets: n_a, n_b, the previous byte's)
        self.w0 = np.zeros((self.n_sets, self.n_in), dtype=np.int64)
        self.w0[:n_a, 0] = 1 << 16
        self.w0[:n_a, 1 : 1 + self.K] = (1 << 16) // 4
        if self.K:
            self.w0[:n_a, 1 + self.K] = (1 << 16) // 2
        if self.n_ppm:
            self.w0[:n_a, 2 + self.K] = PPM_TRUST
        if self.use_match:
            # a longer match earns more trust from the start (weights in nats per bucket)
            self.w0[:n_a, -1] = np.repeat(MATCH_TRUST, self.K + 1)
        self.w0_slow = self.w0  # (only read: reset copies them)
        self.updates0 = np.zeros(self.n_sets, dtype=np.int64)  # every row's step count at the start
        if s.prior:  # every set's rows as learned on text (read-only, shared: reset copies them)
            zero_rows = sum(sizes[3 + len(HASHED_SETS) :])  # (the kinds and state sets' rows: `prior_rows`)
            self.w0, self.w0_slow, self.updates0 = prior_rows(s.prior, (self.n_sets, self.n_in), zero_rows)
        # a weight for every input and byte class (MixSettings.classes): column i * C + c, every class
        # starting from the input's weight (C = 1: one weight an input, as before classes)
        self.cls = byte_classes(s.classes)
        self.two = s.mixers == 2  # a second mixer at half the rate, the logits averaged (`mixer.predict`)
        lr = int(round(s.mix_lr * (1 << 20)))  # units 2^-20
        self.lr_start = RATE_START * RATE_SETTLE * lr  # over RATE_SETTLE + steps: the rate before it settles
        # the rate a weight row settles at: mix_floor's, reached after RATE_START * RATE_SETTLE * mix_lr /
        # mix_floor steps
        self.lr = int(round(s.mix_floor * (1 << 20)))
        # scratch for one step (what `mix` used, read by `learn`)
        # the evidence, sparse (`mixer`): the network's logits less their maximum, every
        # other input's value for most bytes, and (input, byte, difference) for the rest (|e| <= 2^18)
        self._ev = (
            np.zeros((B, 256), dtype=np.int32),
            np.zeros((B, self.n_in), dtype=np.int64),
            np.zeros((B, self.n_in * 256 + 8, 3), dtype=np.int32),
            np.zeros(B, dtype=np.int64),
        )
        self._sets = np.zeros((B, len(self.set_base)), dtype=np.int64)
        self._rows = np.zeros((B, max(self.K, 1)), dtype=np.int64)
        self._tags = np.zeros((B, max(self.K, 1)), dtype=np.int64)
        self._f0 = np.zeros((B, 256), dtype=np.int64)  # the mixer's own frequencies (before the APM)
        # the two mixers' logits and frequencies (what each learns from)
        self._z_fast, self._z_slow = (np.zeros((B, 256), dtype=np.int64) for _ in range(2))
        # each mixer's own probabilities (units 2^-24) for its gradient: int32 halves what it streams
        self._f_fast, self._f_slow = (np.zeros((B, 256), dtype=np.int32) for _ in range(2))
        self._ctx = (self._rows, self._tags, self.K, self.n_seen)  # (`counts.Contexts`)
        self._use = tuple(step.Use(**self.used, ring=self.use_hist, lines=self.use_lines, network=network))
        self.reset()

    def memory(self) -> int:
        """Bytes the tables and histories take at most (pages never touched take none)."""
        hist = self.B << self.hb if self.use_hist else 0
        match = self.match_table.nbytes if self.use_match else 0
        rows = self.n_dense * (256 + 2 + 1) + (self.rows - self.n_dense) * (2 * self.n_slots + counts.SLOT_TAIL)
        return rows + hist + match + self.apm.nbytes + self.apm2.nbytes

    # --- state ----------------------------------------------------------------------

    def reset(self) -> None:
        """Empty tables. They are allocated afresh (zeros from the OS, so only the pages that
        coding touches take memory, and a reset costs nothing)."""
        B, s = self.B, self.s
        self._ready = False  # (`prepare`)
        self.counts = np.zeros((self.n_dense, 256), dtype=np.uint8)
        # rows of slots, each with its tag and recent byte (`counts`), from a 64-byte boundary: a row of
        # 30 slots is one cache line
        self.slot = aligned_zeros(max(self.rows - self.n_dense, 1), 2 * self.n_slots + counts.SLOT_TAIL)
        self.tags = np.zeros(max(self.n_dense, 1), dtype=np.uint16)  # the rows of counts' tags
        self.recent = np.zeros(max(self.n_dense, 1), dtype=np.uint8)  # the byte that last followed each context
        h = history.make(B, self.hb, self.use_hist)
        self.hist, self.pos, self.last, self.lines = h.hist, h.pos, h.last, h.lines
        self.W, self.W_slow = self.start_weights()
        self.updates = self.updates0.copy()  # steps every weight row has taken (its rate: `mixer.steps`)
        es = [
            MODULES[name].make(s, B, self.hb, name in s.expert_names) for name in ("orders", "word", "record", "match")
        ]
        es.append(ppm.make(s, B, self.hb, self.n_ppm > 0))
        es.append(apm.make(s, B, self.hb, self.use_apm, Z_BOUND))
        self.word = es[1].word
        self.rec_at, self.rec = es[2].at, es[2].rec
        self.match_table, self.ptr, self.mlen = es[3].table, es[3].ptr, es[3].mlen
        self.apm, self.apm2, self._apm_at = es[5].apm, es[5].apm2, es[5].at
        # the records the kernels take (`step`), as plain tuples, held in one `step.Records`
        self._tab = (
            self.counts, self.slot, self.n_dense, self.tags, self.recent, self.base, self.shift, s.ways,
            s.count_limit, self.log,
        )  # fmt: skip
        mx = (
            self.W, self.W_slow, self.updates, self.cls, self.two, self.lr, self.lr_start, RATE_SETTLE, W_BOUND,
            self.set_base, self.set_salts, self.set_shifts, s.kinds, self.exp, Z_BOUND, NET_FLOOR,
        )  # fmt: skip
        self._st = step.make_records(self._use, tuple(h), self._tab, self._ctx, step.flat_states(es), mx)

    def start_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Both mixers' starting weights (W, W_slow), every byte class's column its input's weight
        in w0 and w0_slow (kept as one column an input: 48 MB less at seven classes)."""
        return tuple(np.repeat(w, self.s.classes, axis=1) for w in (self.w0, self.w0_slow))

    ARRAYS = (
        "counts", "slot", "tags", "recent", "hist", "match_table", "W", "W_slow", "updates", "last", "pos", "word",
        "ptr", "mlen", "apm", "apm2", "rec_at", "rec", "lines",
    )  # fmt: skip

    def state(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self.ARRAYS}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self._ready = False
        for k, v in state.items():
            getattr(self, k)[...] = v

    def row_tag(self, row: int) -> int:
        """Count table row `row`'s tag (for inspection: `counts.row_tag`)."""
        return int(counts.row_tag(counts.Tables(*self._tab), row))

    def row_counts(self, row: int) -> np.ndarray:
        """Count table row `row`'s count of every byte (256,), from a row of counts or of slots
        (for inspection: the kernels read the rows themselves)."""
        if row < self.n_dense:
            return self.counts[row].astype(np.int64)
        out = np.zeros(256, dtype=np.int64)
        for byte, count in self.slot[row - self.n_dense, : 2 * self.n_slots].reshape(-1, 2):
            if count:  # (an empty slot's count is 0; a row's bytes are distinct)
                out[byte] = count
        return out

    # --- predicting -----------------------------------------------------------------

    def prepare(self) -> None:
        """This step's count contexts (rows and tags, from the state after the last byte). `mix`
        prepares itself where this was not called."""
        if self.K:
            step.contexts(self._st)
        self._ready = True

    def mix(self, logits: np.ndarray) -> tuple[np.ndarray, dict]:
        """Network logits (B, 256; units 2^-12) -> the coded frequencies (B, 256) int64 of the mixed
        logits z (`fixed.frequencies` of z), and what was used (z, the evidence and the rows chosen;
        the latter kept until the next call, for `learn`)."""
        if not self._ready:
            self.prepare()
        self._ready = False
        B = self.B
        z = np.empty((B, 256), dtype=np.int64)
        freqs = np.empty((B, 256), dtype=np.int64)
        used = (*self._ev, self._sets, z, self._z_fast, self._z_slow, self._f_fast, self._f_slow, self._f0)
        records = (self._st, used, freqs)
        if self.parts > 1:
            step.mix_parts(self.parts, np.ascontiguousarray(logits), *records)
        else:
            step.mix_step(np.ascontiguousarray(logits), *records, 0, B)
        mixer_freqs = self._f0 if self.use_apm else freqs
        return freqs, {
            "z": z, "ev": self._ev, "sets": self._sets, "rows": self._rows, "tags": self._tags, "f0": mixer_freqs,
            "f_fast": self._f_fast, "f_slow": self._f_slow, "used": used,
        }  # fmt: skip

    # --- learning -------------------------------------------------------------------

    def learn(self, used: dict, freqs: np.ndarray, y: np.ndarray, k: int) -> None:
        """After byte y (B,) was coded with `freqs` (B, 256) for the first k lanes: the mixer's
        step, then the tables and histories take y."""
        if k == 0:
            return
        y = np.ascontiguousarray(y[:k], dtype=np.int64)
        coded = np.ascontiguousarray(freqs, dtype=np.int64)
        records = (self._st, used["used"], coded, y, k)
        if self.parts > 1:  # the same kernels, side by side (`split`, `step.learn_parts`)
            step.learn_parts(self.parts, (self.split_tables, self.split_sets), *records)
        else:
            step.learn(*records)
