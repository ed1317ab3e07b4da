"""The count tables: what followed every context, the storage the context experts share.

Every context expert (orders, word, gap, record, column, wrap) keys one or more count tables; a
step's contexts are a row and a tag per lane and table (`Contexts`, filled by `step.contexts`).
This module keeps the rows, reads them as the mixer's evidence (`predict`) and counts the coded
byte in them (`update`).

A table's rows are rows of counts (a count for every byte: the direct tables, the word alone) or
rows of slots: S (byte, count) pairs, then SLOT_TAIL bytes, the row's tag (two bytes,
little-endian), its recent byte and a spare one, so that a row of 30 slots is one 64-byte cache
line (`mix.aligned_zeros`). A row of counts keeps its tag and recent byte in `tags` and `recent`.
A byte not in its row's slots takes the first empty one, or else the first with the lowest count
(what it counted is forgotten). A count once taken never returns to 0 (halving rounds up), so a
row's slots in use come first: the first empty slot ends the row, and every reader stops there.

Lanes that touch the same row in one step are resolved so that their order cannot matter: the
lowest lane decides a tag and the recent byte, counts add.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import NO_REFCOUNTS, ONE, rounded_logs

SLOT_TAIL = 4
COUNT_EDGES = np.array([2, 4, 8, 16, 64], dtype=np.int64)  # buckets of a context's total count


@functools.cache
def log_table(limit: int) -> np.ndarray:
    """round(2^12 * ln(n + 1/8)) for n = 0 ... limit + 1, as int64 (`common.rounded_logs`): the
    evidence of a count n."""
    return np.array(rounded_logs(range(1, 8 * (limit + 2), 8), 8), dtype=np.int64)


class Tables(NamedTuple):
    """counts (n_dense, 256) uint8: the rows of counts, rows 0 ... n_dense - 1, with their tags
    (uint16) and recent bytes (uint8); slot (rows - n_dense, 2 S + SLOT_TAIL) uint8: the rows of
    slots; base (K,) int64: every table's first row; shift (K,) uint64: 64 less a hashed table's
    row bits; ways: the rows of its aligned group a hashed context may take (`choose_rows`); limit:
    a row's counts are halved when one passes it; log: a count's evidence, round(2^12 ln(n + 1/8))."""

    counts: np.ndarray
    slot: np.ndarray
    n_dense: int
    tags: np.ndarray
    recent: np.ndarray
    base: np.ndarray
    shift: np.ndarray
    ways: int
    limit: int
    log: np.ndarray


class Contexts(NamedTuple):
    """One step's contexts: rows and tags (B, K) int64 of every lane's K tables (tag -1: no context,
    nothing read, nothing counted); the first n_seen tables choose the highest context seen."""

    rows: np.ndarray
    tagv: np.ndarray
    K: int
    n_seen: int


@njit(cache=True, inline="always")
def n_slots_of(slot):
    """The (byte, count) pairs of a row of slots."""
    return (slot.shape[1] - SLOT_TAIL) >> 1


@njit(cache=True, inline="always")
def row_tag(tab, row):
    """Row `row`'s tag: from `tags` for a row of counts, from the tail of a row of slots. Both are
    read (`tags` and `slot` have a row at least) and one is chosen: no field read in a branch
    (`common`)."""
    tags, slot, n_dense = tab.tags, tab.slot, tab.n_dense
    dense = row < n_dense
    r, w = 0 if dense else row - n_dense, slot.shape[1]
    own = np.int64(tags[row if dense else 0])
    tail = np.int64(slot[r, w - SLOT_TAIL]) | (np.int64(slot[r, w - SLOT_TAIL + 1]) << 8)
    return own if dense else tail


@njit(cache=True, inline="always")
def set_row_tag(tags, slot, n_dense, row, tag):
    """Row `row` takes tag `tag` (0 ... 2^16 - 1), where `row_tag` reads it. It writes in one of
    two arrays, which the caller reads from `Tables` once, outside its loops (`common`)."""
    if row < n_dense:
        tags[row] = np.uint16(tag)
    else:
        r, w = row - n_dense, slot.shape[1]
        slot[r, w - SLOT_TAIL] = np.uint8(tag & 255)
        slot[r, w - SLOT_TAIL + 1] = np.uint8(tag >> 8)


@njit(cache=True, inline="always")
def row_recent(tab, row):
    """The byte that last followed row `row`'s context (both places read, as `row_tag`)."""
    recent, slot, n_dense = tab.recent, tab.slot, tab.n_dense
    dense = row < n_dense
    own = recent[row if dense else 0]
    tail = slot[0 if dense else row - n_dense, slot.shape[1] - SLOT_TAIL + 2]
    return own if dense else tail


@njit(cache=True, inline="always")
def set_row_recent(recent, slot, n_dense, row, byte):
    """Row `row`'s recent byte becomes `byte`, where `row_recent` reads it (arrays as `set_row_tag`)."""
    if row < n_dense:
        recent[row] = np.uint8(byte)
    else:
        slot[row - n_dense, slot.shape[1] - SLOT_TAIL + 2] = np.uint8(byte)


@njit(cache=True, inline="always")
def row_total(tab, row):
    """The sum of row `row`'s counts (a row of slots: of its slots in use)."""
    total = np.int64(0)
    if row < tab.n_dense:
        for j in range(256):
            total += np.int64(tab.counts[row, j])
        return total
    r = row - tab.n_dense
    for q in range(n_slots_of(tab.slot)):
        c = np.int64(tab.slot[r, 2 * q + 1])
        if c == 0:
            break
        total += c
    return total


@njit(cache=True, inline="always")
def group_first(row, table_base, ways):
    """The first row of `row`'s group of `ways` (aligned within its table, which starts at table_base)."""
    return ((row - table_base) & ~np.int64(ways - 1)) + table_base


@njit(cache=True, **NO_REFCOUNTS)
def choose_rows(tab, ctx):
    """Every hashed context (tag >= 0) takes its row among the `ways` rows of its aligned group
    (row numbers within the table equal but for the low log2(ways) bits): the first whose tag is
    the context's, else, a context not in any, the one whose counts sum least (the first of those),
    which `update` then starts afresh. The direct tables' rows keep theirs (their tags and the
    contexts' are all 0). It reads the tables only, as they were after the last byte, so every
    lane's choice is its own; two lanes that choose one row for different contexts are settled as
    `update` settles any such pair (the lower lane's tag)."""
    rows, tagv = ctx.rows, ctx.tagv
    for b in range(rows.shape[0]):
        for t in range(rows.shape[1]):
            row = rows[b, t]
            tag = tagv[b, t]
            if tag < 0 or row_tag(tab, row) == tag:  # (a direct table's rows: tag 0, always its own)
                continue
            first = group_first(row, tab.base[t], tab.ways)
            best, least = row, np.int64(-1)
            for way in range(tab.ways):
                r = first + way
                if row_tag(tab, r) == tag:
                    best = r
                    break
                total = row_total(tab, r)
                if least < 0 or total < least:
                    best, least = r, total
            rows[b, t] = best


@njit(cache=True)
def touch(tab, rows, lo, hi):
    """Read one byte of every cache line of the rows lanes lo ... hi - 1 are about to read (and
    their tags), all at once, so that their misses overlap instead of coming one row at a time (a
    prefetch; returns a sum so that the reads stay)."""
    counts, slot, tags, n_dense = tab.counts, tab.slot, tab.tags, tab.n_dense  # (outside the loops: `common`)
    last = slot.shape[1] - 1
    total = 0
    for b in range(lo, hi):
        for t in range(rows.shape[1]):
            row = rows[b, t]
            if row < n_dense:
                total += np.int64(tags[row])
                for j in range(0, 256, 64):
                    total += np.int64(counts[row, j])
            else:  # a row of slots with its tail: its first and last byte (one line at the default's 64 bytes)
                r = row - n_dense
                total += np.int64(slot[r, 0]) + np.int64(slot[r, last])
    return total


@njit(cache=True, inline="always")
def predict(b, tab, ctx, ev, m):
    """Lane b's evidence from its K count tables, inputs 1 ... K and the run input K + 1 of the
    mixer (`mixer` keeps it sparse): every byte a row has counted gets an entry log[c] - log[0]
    over the unseen bytes' log[0]; the run input, one nat on the recent byte of the highest
    context seen.
    Returns (the next free entry, the highest context seen (0: none; the first n_seen tables, in
    rising order), its confidence: count bucket (COUNT_EDGES) * 2 + whether it saw one byte)."""
    E0, base, ent, n_ent = ev
    counts, slot, log, rows, tagv = tab.counts, tab.slot, tab.log, ctx.rows, ctx.tagv
    n_slots = n_slots_of(slot)
    words = counts.view(np.uint64)  # (rows, 32): eight counts in a word
    unseen = log[0]  # a count of 0's evidence
    order_seen = 0
    top_total = 0
    top_nonzero = 0
    for t in range(ctx.K):
        row = rows[b, t]
        known = row_tag(tab, row) == tagv[b, t]
        total = 0
        nonzero = 0
        base[b, 1 + t] = unseen  # an unseen byte's evidence, and an entry for each byte seen
        if known and row < tab.n_dense:
            for w in range(32):  # eight counts at a time: most rows hold a few
                if words[row, w] == 0:
                    continue
                for j in range(8 * w, 8 * w + 8):  # every byte written, the count moves on where c > 0
                    c = np.int64(counts[row, j])
                    ent[b, m, 0] = 1 + t
                    ent[b, m, 1] = j
                    ent[b, m, 2] = log[c] - unseen
                    m += np.int64(c != 0)
                    total += c
                    nonzero += np.int64(c != 0)
        elif known:  # a row of slots: the slots in use, the first empty one ends them
            r = row - tab.n_dense
            for q in range(n_slots):
                c = np.int64(slot[r, 2 * q + 1])
                if c == 0:
                    break
                ent[b, m, 0] = 1 + t
                ent[b, m, 1] = slot[r, 2 * q]
                ent[b, m, 2] = log[c] - unseen
                m += 1
                total += c
                nonzero += 1
        if total > 0 and t < ctx.n_seen:  # the highest context seen so far (tables come in rising order)
            order_seen = t + 1
            top_total = total
            top_nonzero = nonzero
    single = 1 if top_nonzero == 1 else 0
    above = 0
    while above < COUNT_EDGES.shape[0] and COUNT_EDGES[above] <= top_total:
        above += 1
    conf = above * 2 + single
    base[b, 1 + ctx.K] = 0
    recent = row_recent(tab, rows[b, max(order_seen - 1, 0)])  # (read, then used: `common`)
    if order_seen > 0:
        ent[b, m, 0] = 1 + ctx.K
        ent[b, m, 1] = recent
        ent[b, m, 2] = ONE
        m += 1
    return m, order_seen, conf


@njit(cache=True, inline="always")
def halve_row(tab, row, limit):
    """Every count of row `row` halved, rounding up (an empty slot stays 0, a count taken never
    returns to 0), and held at most `limit`."""
    if row < tab.n_dense:
        for j in range(256):
            c = np.int64(tab.counts[row, j])
            tab.counts[row, j] = np.uint8(min(c - (c >> 1), limit))
    else:
        r = row - tab.n_dense
        for q in range(n_slots_of(tab.slot)):
            c = np.int64(tab.slot[r, 2 * q + 1])
            tab.slot[r, 2 * q + 1] = np.uint8(min(c - (c >> 1), limit))


@njit(cache=True)
def update(tab, ctx, y, k, t_lo, t_hi):
    """Count tables t_lo ... t_hi - 1 take byte y (k lanes): a row whose tag differs starts afresh
    (the lowest lane's tag wins), the lowest lane's byte is the row's recent one, counts add and a
    row past the limit is halved (rounding up) once. A tag of -1 is no context: its row is left
    alone. Every table's rows are its own, so tables can be taken in any grouping
    (`step.learn_parts`). With `ways` > 1 (`choose_rows`), a row that starts afresh halves the
    counts of the other rows of its group, so that a row busy long ago gives way to newer contexts.
    Lanes take their rows in order, the lowest first, so the order in which they fill a row's slots
    is fixed."""
    count_rows(tab, ctx, y, k, t_lo, t_hi, np.empty(k * (t_hi - t_lo), dtype=np.int64))


@njit(cache=True, **NO_REFCOUNTS)
def count_rows(tab, ctx, y, k, t_lo, t_hi, full):
    """`update`'s work; full: room for every (lane, table)'s row (the rows past the limit)."""
    rows, tagv = ctx.rows, ctx.tagv
    counts, slot, n_dense, tags, recent = tab.counts, tab.slot, tab.n_dense, tab.tags, tab.recent
    n_slots = n_slots_of(slot)
    for b in range(k):
        for t in range(t_lo, t_hi):
            row = rows[b, t]
            if tagv[b, t] < 0 or row_tag(tab, row) == tagv[b, t]:
                continue
            claimed = False  # (looked for only where the tag differs: the same outcome, far fewer loops)
            for a in range(b):
                if rows[a, t] == row and tagv[a, t] >= 0:
                    claimed = True
                    break
            if not claimed:  # the row starts afresh (its recent byte is written below)
                if row < n_dense:
                    counts[row, :] = 0
                else:
                    slot[row - n_dense, : 2 * n_slots] = 0
                set_row_tag(tags, slot, n_dense, row, tagv[b, t])
                if tab.ways > 1:  # the other rows of its group age: their counts halved (`choose_rows`)
                    first = group_first(row, tab.base[t], tab.ways)
                    for r in range(first, first + tab.ways):
                        if r != row:
                            halve_row(tab, r, 255)
    for b in range(k - 1, -1, -1):  # the lowest lane writes last
        for t in range(t_lo, t_hi):
            row = rows[b, t]
            if row_tag(tab, row) == tagv[b, t]:
                set_row_recent(recent, slot, n_dense, row, y[b])
    n_full = 0
    for b in range(k):
        for t in range(t_lo, t_hi):
            row = rows[b, t]
            if row_tag(tab, row) != tagv[b, t]:
                continue
            if row < n_dense:
                new = np.int64(counts[row, y[b]]) + 1
                counts[row, y[b]] = np.uint8(min(new, 255))
            else:
                r = row - n_dense
                at = -1
                least, least_c = 0, np.int64(256)
                for q in range(n_slots):  # the slots in use, up to the first empty one (the new byte's)
                    c = np.int64(slot[r, 2 * q + 1])
                    if c == 0:
                        least = q
                        break
                    if np.int64(slot[r, 2 * q]) == y[b]:
                        at = q
                        break
                    if c < least_c:
                        least, least_c = q, c
                if at < 0:  # a new byte: the first empty slot, or the first of the lowest count
                    slot[r, 2 * least] = np.uint8(y[b])
                    slot[r, 2 * least + 1] = 1
                    continue
                new = np.int64(slot[r, 2 * at + 1]) + 1
                slot[r, 2 * at + 1] = np.uint8(min(new, 255))
            if new > tab.limit:
                seen = False
                for f in range(n_full):
                    if full[f] == row:
                        seen = True
                        break
                if not seen:
                    full[n_full] = row
                    n_full += 1
    for f in range(n_full):
        halve_row(tab, full[f], tab.limit)
