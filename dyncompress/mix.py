"""Exact byte statistics beside the network, and the mixer that weighs them (format 3).

The network is one expert among several. The others are counts of what followed a context,
kept in integer tables that encoder and decoder update alike after every byte:

    orders 1 ... 6, 8  the last k bytes of the lane (orders 1 and 2 indexed directly, the others
                     hashed into tables of 2^table_bits rows, each row tagged with 16 more bits
                     of the hash so that a collision reads as an unseen context)
    word             three contexts of words (letters, or bytes >= 128): the current word with the
                     word before it, the current word alone, the current word with the word two back
    match            the longest recent repeat of the last bytes (a hash of the last 6 bytes
                     points into the history; the length is verified and then extended byte by
                     byte), predicting the byte that followed it

A count expert's evidence for byte j is ln(n_j + 1/8) (in units of 2^-12, from a table built with
correctly rounded decimal logarithms; 1/8 rather than 1/2 puts a context's unseen bytes 2.1 nats
below a byte seen once, not 1.1: on 100 kB of Japanese and Chinese text, calgary/obj2 and pic
3 ... 4 % smaller, enwik8 [3.0M, 3.5M) 0.4 % smaller, alice29 0.08 % larger; BENCHMARKS.md); the
match expert's is 1 nat on the predicted byte. The mixer adds them in logit space:

    z_j = sum_i w_i[s] * e_ij        (e_0 = the network's logits, less their maximum)

with weights w per lane that are the sum of one row from each of six tables, chosen by small
contexts (the match length's bucket with the highest order seen; that order with its count bucket
and whether it saw one byte only; the previous byte; hashes of the last two bytes, the last three
and the current word), and learns them online, after every byte, by the gradient of the code
length: each chosen row -= lr * (sum_j p_j e_ij - e_iy), every row at its own rate, which starts
16 times mix_lr and falls to it as the row learns (rarely chosen rows of the hashed sets learn
fast, the busy ones settle). Everything is int64 arithmetic (weights
in units of 2^-16), so every machine gets the same bits; `exact.frequencies` turns z into the
coded frequencies.

All lanes share the tables (one lane's text teaches the others); where two lanes touch one row
in the same step, the lane with the lower index decides a tag, and their counts add (integer
adds commute, so the order of the lanes cannot matter).
"""

from __future__ import annotations

import functools
from decimal import ROUND_HALF_EVEN, Decimal, localcontext

import numpy as np

from .settings import MixSettings

ORDERS = (1, 2, 3, 4, 5, 6, 8)
# word contexts: the current word with the one before it, the current word alone (the rest of a word
# from its start), the current word with the one two back (BENCHMARKS.md, issue 11, fourth session)
WORDS = ("pair", "word", "skip")
HALF_ROWS = ("o3", "word", "skip")  # count tables with half the hashed rows (`table_sizes`)
# the mixer's rates: a weight row starts at RATE_START times the settled rate (mix_lr) and comes down
# to it as RATE_SETTLE / (RATE_SETTLE + its steps): rows seen often learn slowly, rare ones fast
RATE_START, RATE_SETTLE = 16, 64
MATCH_MIN = 6  # bytes hashed to find a match
MATCH_CHECK = 32  # bytes compared backwards to verify one
MATCH_MAX = 65535
MATCH_EDGES = np.array([1, 8, 12, 16, 24, 32, 64, 256], dtype=np.int64)  # length buckets 1 ... 8
MATCH_TRUST = np.array([0, 2, 2, 4, 4, 8, 12, 16, 24], dtype=np.int64) << 14  # initial weight per bucket
COUNT_EDGES = np.array([2, 4, 8, 16, 64], dtype=np.int64)  # buckets of a context's total count
# weight sets chosen by hashes: (what is hashed, salt, 2^bits rows); the current word's hash, the
# last two bytes, the last three (BENCHMARKS.md, format 3: each 0.1 ... 0.2 % on enwik6)
HASHED_SETS = (("pair", 0, 12), ("word", 7, 12), ("triple", 3, 14))
_SET_SALTS = np.array([salt for _, salt, _ in HASHED_SETS], dtype=np.uint64)
_SET_SHIFTS = np.array([64 - bits for _, _, bits in HASHED_SETS], dtype=np.uint64)
NET_FLOOR = -(1 << 17)  # the network's logits less their maximum are clamped at -32 nats
Z_BOUND = 1 << 20  # |z| bound (256 nats) in units of 2^-12
W_BOUND = 1 << 24  # |w| bound (256) in units of 2^-16
ONE = 1 << 12  # one nat of evidence
P1 = np.uint64(0x9E3779B97F4A7C15)
P2 = np.uint64(0xBF58476D1CE4E5B9)


@functools.cache
def log_table(limit: int) -> np.ndarray:
    """round(2^12 * ln(n + 1/8)) for n = 0 ... limit + 1, as int64. Decimal's ln is correctly
    rounded, so the table is the same on every machine (and ties cannot occur: the logarithm of
    a rational other than 1 is irrational)."""
    with localcontext() as ctx:
        ctx.prec = 40
        logs = [(Decimal(8 * n + 1) / 8).ln() * ONE for n in range(limit + 2)]
        values = [int(v.to_integral_value(ROUND_HALF_EVEN)) for v in logs]
    return np.array(values, dtype=np.int64)


def _mix64(x: np.ndarray) -> np.ndarray:
    """A 64-bit hash of uint64 values (wrapping multiplies: the same on every machine)."""
    x = (x ^ (x >> np.uint64(31))) * P1
    return (x ^ (x >> np.uint64(29))) * P2


def table_sizes(tb: int, orders: bool, words: bool) -> list[int]:
    """Rows of every count table: orders 1 and 2 direct, the rest hashed, 2^tb rows each but for
    those in HALF_ROWS. Halving order 3's, the word's and the skip pair's rows keeps the default
    level's tables under 256 MB, for 0.03 % on alice29 and 0.12 % on enwik8 [3.0M, 3.5M)."""
    names = ([f"o{k}" for k in ORDERS] if orders else []) + (list(WORDS) if words else [])
    direct = {"o1": 256, "o2": 1 << 16}
    return [direct.get(n, (1 << tb) >> (n in HALF_ROWS)) for n in names]


def table_bytes(s: MixSettings, lanes: int) -> int:
    """The most memory the experts' tables take with these settings (what `info` states)."""
    return Experts(s, lanes).memory() if s.expert_names else 0


class Experts:
    """The count and match experts for `lanes` lanes, with the mixer over them and the network."""

    def __init__(self, s: MixSettings, lanes: int) -> None:
        names = s.expert_names
        self.s, self.B = s, lanes
        self.use_orders, self.use_word, self.use_match = "orders" in names, "word" in names, "match" in names
        B, tb = lanes, s.table_bits
        # count tables: orders 1 and 2 direct, the rest (and word) hashed, one block of rows each
        sizes = table_sizes(tb, self.use_orders, self.use_word)
        self.K = len(sizes)
        self.base = np.cumsum([0] + sizes)[:-1].astype(np.int64)
        self.bits = np.array([max(1, (n - 1).bit_length()) for n in sizes], dtype=np.uint64)
        self.rows = int(sum(sizes))
        self.masks = np.array([(1 << (8 * k)) - 1 for k in ORDERS], dtype=np.uint64)
        self.salts = np.arange(1, len(ORDERS) + 1, dtype=np.uint64) * P2
        self.shift = np.uint64(64) - self.bits
        self.log = log_table(s.count_limit)
        # histories (match model): one ring per lane, 2^hb bytes each
        self.hb = max(10, s.history_bits - max(0, (B - 1).bit_length()))
        # the mixer: inputs net, counts..., run, match. Its weights are the sum of one row from each
        # of six tables, chosen by (match bucket, order seen), (order seen, its count bucket,
        # deterministic?), the previous byte and the hashes of HASHED_SETS.
        self.n_in = 1 + self.K + int(self.K > 0) + int(self.use_match)
        n_a = (len(MATCH_EDGES) + 1) * (self.K + 1)
        n_b = (self.K + 1) * (len(COUNT_EDGES) + 1) * 2
        sizes = [n_a, n_b, 256] + [1 << bits for _, _, bits in HASHED_SETS]
        self.set_base = np.cumsum([0] + sizes[:-1]).astype(np.int64)
        self.n_sets = int(sum(sizes))
        self.w0 = np.zeros((self.n_sets, self.n_in), dtype=np.int64)
        self.w0[:n_a, 0] = 1 << 16
        self.w0[:n_a, 1 : 1 + self.K] = (1 << 16) // 4
        if self.K:
            self.w0[:n_a, 1 + self.K] = (1 << 16) // 2
        if self.use_match:
            # a longer match earns more trust from the start (weights in nats per bucket)
            self.w0[:n_a, -1] = np.repeat(MATCH_TRUST, self.K + 1)
        self.lr = int(round(s.mix_lr * (1 << 20)))  # the rate a weight row settles at (units 2^-20)
        self.lr_start = RATE_START * RATE_SETTLE * self.lr  # over RATE_SETTLE + steps: the rate before it settles
        self.lanes_idx = np.arange(B)
        self.reset()

    def memory(self) -> int:
        """Bytes the tables and histories take at most (pages never touched take none)."""
        match = (self.B << self.hb) + (8 << self.s.table_bits) if self.use_match else 0
        return self.rows * (256 + 2 + 1) + match

    # --- state ----------------------------------------------------------------------

    def reset(self) -> None:
        """Empty tables. They are allocated afresh (zeros from the OS, so only the pages that
        coding touches take memory, and a reset costs nothing)."""
        B = self.B
        self.counts = np.zeros((self.rows, 256), dtype=np.uint8)
        self.tags = np.zeros(self.rows, dtype=np.uint16)
        self.recent = np.zeros(self.rows, dtype=np.uint8)  # the byte that last followed each context
        self.hist = np.zeros((B, 1 << self.hb if self.use_match else 1), dtype=np.uint8)
        # match: 1 + the flat history index that followed each hashed context (0: none yet)
        self.match_table = np.zeros(1 << self.s.table_bits if self.use_match else 1, dtype=np.int64)
        self.W = self.w0.copy()
        self.last = np.zeros(B, dtype=np.uint64)  # the last 8 bytes of every lane
        self.pos = np.zeros(B, dtype=np.int64)  # bytes every lane has seen
        self.word = np.zeros((B, 3), dtype=np.uint64)  # hashes of the current word, the one before, the one before that
        self.updates = np.zeros(self.n_sets, dtype=np.int64)  # steps every weight row has taken
        self.ptr = np.zeros(B, dtype=np.int64)  # match: flat history index of the predicted byte
        self.mlen = np.zeros(B, dtype=np.int64)  # match length (0: none)

    ARRAYS = ("counts", "tags", "recent", "hist", "match_table", "W", "updates", "last", "pos", "word", "ptr", "mlen")

    def state(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k).copy() for k in self.ARRAYS}

    def load(self, state: dict[str, np.ndarray]) -> None:
        for k, v in state.items():
            getattr(self, k)[...] = v

    # --- predicting -----------------------------------------------------------------

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(B, K) table rows and tags of every lane's contexts now."""
        cols = []
        if self.use_orders:
            cols.append((self.last[:, None] & self.masks) + self.salts)
        if self.use_word:
            cur = _mix64(self.word[:, 0])
            pair, alone, skip = cur + self.word[:, 1] * P1, self.word[:, 0] + P1, cur + self.word[:, 2] * P1 + P2
            cols.append(np.stack([pair, alone, skip], axis=1))
        h = _mix64(np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0])
        rows = (h >> self.shift).astype(np.int64)
        tags = ((h >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.uint16)
        if self.use_orders:  # orders 1, 2: the bytes themselves, no tag
            rows[:, :2] = (self.last[:, None] & np.array([0xFF, 0xFFFF], dtype=np.uint64)).astype(np.int64)
            tags[:, :2] = 0
        return rows + self.base, tags

    def mix(self, logits: np.ndarray) -> tuple[np.ndarray, dict]:
        """Network logits (B, 256; units 2^-12) -> mixed logits z (B, 256) int64, and what was used."""
        B = self.B
        E = np.empty((B, self.n_in, 256), dtype=np.int64)
        E[:, 0] = np.maximum(np.rint(logits - logits.max(axis=1, keepdims=True)), NET_FLOOR)
        order_seen = np.zeros(B, dtype=np.int64)
        conf = np.zeros(B, dtype=np.int64)
        rows = tags = None
        if self.K:
            rows, tags = self._rows()
            known = self.tags[rows] == tags  # (B, K)
            c = self.counts[rows]  # (B, K, 256)
            c *= known[:, :, None]
            np.take(self.log, c, out=E[:, 1 : 1 + self.K])
            seen = c.any(axis=2)  # (B, K)
            # the highest context seen: its index + 1 (0: none)
            order_seen = self.K - np.argmax(seen[:, ::-1], axis=1)
            order_seen *= seen.any(axis=1)
            top = np.maximum(order_seen - 1, 0)
            best = c[self.lanes_idx, top]  # (B, 256): the counts of the highest context seen
            total = best.sum(axis=1, dtype=np.int64)
            single = np.count_nonzero(best, axis=1) == 1
            conf = np.searchsorted(COUNT_EDGES, total, side="right") * 2 + single
            E[:, 1 + self.K] = 0
            on = order_seen > 0
            E[on, 1 + self.K, self.recent[rows[self.lanes_idx, top]][on]] = ONE
        bucket = np.zeros(B, dtype=np.int64)
        if self.use_match:
            E[:, -1] = 0
            on = self.mlen > 0
            predicted = self.hist.reshape(-1)[self.ptr]
            E[on, -1, predicted[on]] = ONE
            bucket = np.searchsorted(MATCH_EDGES, self.mlen, side="right")
        keys = {
            "pair": self.last & np.uint64(0xFFFF),
            "triple": self.last & np.uint64(0xFFFFFF),
            "word": self.word[:, 0],
        }
        hashed = np.stack([keys[name] for name, _, _ in HASHED_SETS], axis=1)  # (B, 3): one hash call
        sets = np.empty((B, 3 + len(HASHED_SETS)), dtype=np.int64)
        sets[:, 0] = bucket * (self.K + 1) + order_seen
        sets[:, 1] = order_seen * (2 * len(COUNT_EDGES) + 2) + conf
        sets[:, 2] = self.last & np.uint64(0xFF)
        sets[:, 3:] = _mix64(hashed + _SET_SALTS) >> _SET_SHIFTS
        sets += self.set_base  # (B, 6)
        w = self.W[sets].sum(axis=1)  # (B, n_in)
        z = np.einsum("bi,bij->bj", w, E) >> 16
        np.clip(z, -Z_BOUND, Z_BOUND, out=z)
        return z, {"E": E, "sets": sets, "rows": rows, "tags": tags}

    # --- learning -------------------------------------------------------------------

    def learn(self, used: dict, freqs: np.ndarray, y: np.ndarray, k: int) -> None:
        """After byte y (B,) was coded with `freqs` (B, 256) for the first k lanes: the mixer's
        step, then the tables and histories take y."""
        if k == 0:
            return
        y = y[:k].astype(np.int64)
        lanes = self.lanes_idx[:k]
        E, sets = used["E"][:k], used["sets"][:k]
        # mixer: g_i = sum_j p_j e_ij - e_iy (units 2^-12), exact in int64 (< 2^58)
        expected = np.einsum("bj,bij->bi", freqs[:k], E) >> 24
        g = expected - E[lanes, :, y]
        # every row at its own rate: RATE_START times the settled rate at first, falling as it learns
        rate = np.maximum(self.lr, self.lr_start // (RATE_SETTLE + self.updates[sets]))  # (k, S)
        step = -((g[:, None, :] * rate[:, :, None] + (1 << 15)) >> 16)
        touched = sets.reshape(-1)
        np.add.at(self.W, touched, step.reshape(-1, self.n_in))
        np.add.at(self.updates, touched, 1)
        self.W[touched] = np.clip(self.W[touched], -W_BOUND, W_BOUND)  # only these rows moved
        if self.K:
            self._count(used["rows"][:k], used["tags"][:k], y)
        self._advance(y, k)

    def _count(self, rows: np.ndarray, tags: np.ndarray, y: np.ndarray) -> None:
        rows, tags = rows.reshape(-1), tags.reshape(-1)
        ys = np.repeat(y, self.K)
        first_rows, first = np.unique(rows, return_index=True)  # the lowest lane decides a row's tag
        stale = self.tags[first_rows] != tags[first]
        if stale.any():
            fresh = first_rows[stale]
            self.counts[fresh] = 0
            self.tags[fresh] = tags[first][stale]
        ok = self.tags[rows] == tags
        rows, ys = rows[ok], ys[ok]
        got, first = np.unique(rows, return_index=True)  # the lowest lane's byte is the recent one
        self.recent[got] = ys[first]
        # counts: every (row, byte) once with its number of lanes (uint8: no wrapping adds)
        cells, n = np.unique(rows * 256 + ys, return_counts=True)
        flat = self.counts.reshape(-1)
        new = flat[cells] + n
        flat[cells] = np.minimum(new, 255)
        full = cells[new > self.s.count_limit] >> 8
        if len(full):
            full = np.unique(full)
            halved = self.counts[full] - (self.counts[full] >> 1)  # rounding up: seen stays seen
            self.counts[full] = np.minimum(halved, self.s.count_limit)

    def _advance(self, y: np.ndarray, k: int) -> None:
        lanes = self.lanes_idx[:k]
        uy = y.astype(np.uint64)
        if self.use_match:
            n = 1 << self.hb
            flat = self.hist.reshape(-1)
            # the match so far: extended if it predicted y, else dropped
            on = self.mlen[:k] > 0
            hit = on & (flat[self.ptr[:k]] == y)
            lane_of_ptr = self.ptr[:k] >> self.hb
            self.ptr[:k] = np.where(hit, (lane_of_ptr << self.hb) | ((self.ptr[:k] + 1) & (n - 1)), self.ptr[:k])
            self.mlen[:k] = np.where(hit, np.minimum(self.mlen[:k] + 1, MATCH_MAX), 0)
            self.hist[lanes, self.pos[:k] & (n - 1)] = y
        self.pos[:k] += 1
        self.last[:k] = (self.last[:k] << np.uint64(8)) | uy
        if self.use_word:
            letter = ((y | 32) >= ord("a")) & ((y | 32) <= ord("z")) | (y >= 128)
            low = np.where((y >= ord("A")) & (y <= ord("Z")), y | 32, y).astype(np.uint64)
            cur, prev, before = self.word[:k, 0], self.word[:k, 1], self.word[:k, 2]
            ended = ~letter & (cur != 0)
            self.word[:k, 2] = np.where(ended, prev, before)
            self.word[:k, 1] = np.where(ended, cur, prev)
            self.word[:k, 0] = np.where(letter, (cur ^ low) * P1 + np.uint64(1), np.uint64(0))
        if self.use_match:
            self._find(k)

    def _find(self, k: int) -> None:
        """Lanes without a match look one up by the hash of their last 6 bytes; every lane then
        files its own position under that hash."""
        n = 1 << self.hb
        lanes = self.lanes_idx[:k]
        h = _mix64(self.last[:k] & np.uint64((1 << (8 * MATCH_MIN)) - 1))
        slot = (h >> np.uint64(64 - self.s.table_bits)).astype(np.int64)
        here = (lanes << self.hb) | (self.pos[:k] & (n - 1))  # where this lane's next byte goes
        look = (self.mlen[:k] == 0) & (self.pos[:k] >= MATCH_MIN)
        cand = self.match_table[slot] - 1
        look &= cand >= 0
        if look.any():
            back = np.arange(1, MATCH_CHECK + 1)
            c_lane, c_off = cand[look] >> self.hb, cand[look] & (n - 1)
            theirs = self.hist[c_lane[:, None], (c_off[:, None] - back) & (n - 1)]
            ours = self.hist[lanes[look][:, None], (self.pos[:k][look][:, None] - back) & (n - 1)]
            length = np.cumprod(theirs == ours, axis=1).sum(axis=1)
            found = length >= MATCH_MIN
            idx = np.flatnonzero(look)[found]
            self.mlen[idx] = length[found]
            self.ptr[idx] = cand[look][found]
        first_slots, first = np.unique(slot, return_index=True)
        self.match_table[first_slots] = here[first] + 1
