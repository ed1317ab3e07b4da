"""The experts' per-byte work (`mix.Experts`), compiled by numba: one call per step for all lanes.

Every value here is an integer (int64, or uint64 for the hashes, whose multiplies wrap), so the
compiled code computes what the equations in `mix` say on every machine; nothing rounds but the
network's logits, once, half to even. Lanes that touch the same row in one step are resolved
the way `mix` documents: the lowest lane decides a tag, a recent byte and a match slot, counts add.
Reads that the equations make before a step's writes (the match check, the lookups) come first in
loops of their own, so the order of the lanes cannot change a bit.

Constants come in as arguments or module globals of explicit dtype: numba types a uint64 mixed
with a Python int as float64, which would round a hash.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from dyncompress import kernel_cache  # noqa: F401  (before any kernel is made: its cache stamp, all kernel sources)
from dyncompress.network.int_kernels import floor_log2

U4, U8, U16, U29, U31, U64 = np.uint64(4), np.uint64(8), np.uint64(16), np.uint64(29), np.uint64(31), np.uint64(64)
MASK16 = np.uint64(0xFFFF)
MASK8 = np.uint64(0xFF)
MASK24 = np.uint64(0xFFFFFF)
P1 = np.uint64(0x9E3779B97F4A7C15)
P2 = np.uint64(0xBF58476D1CE4E5B9)
ONE_U = np.uint64(1)
PPM_BITS = 40  # the PPM input's probabilities, in units of 2^-40
REC_SALT = np.uint64(0x5851F42D4C957F2D)
COL_SALT = np.uint64(0x2545F4914F6CDD1D)
WRAP_SALT = np.uint64(0x94D049BB133111EB)
REC_VOTES = 16  # a record length takes over after this many votes
REC_FRESH = 32  # the record context is used while the length had a vote within this many records
N_KINDS = 9  # `fine_kind`'s kinds
WIDE_LEAD = 0xE0  # the first byte of a UTF-8 character of 3 or 4 bytes (CJK and the like): a word of its own


@njit(cache=True, inline="always")
def mix64(x):
    x = (x ^ (x >> U31)) * P1
    return (x ^ (x >> U29)) * P2


# A row of slots (`count_bytes`): S (byte, count) pairs, then SLOT_TAIL bytes: its tag (two bytes,
# little-endian), its recent byte and a spare one. Only the functions below read or write the tail
# (`touch_rows` reads a row's last byte to bring the row in).
SLOT_TAIL = 4


@njit(cache=True, inline="always")
def n_slots_of(slot):
    """The (byte, count) pairs of a row of the slot table."""
    return (slot.shape[1] - SLOT_TAIL) >> 1


@njit(cache=True, inline="always")
def row_tag(ct, tags, row):
    """Count table row `row`'s tag: from `tags` for a row of counts, from the tail of a row of slots."""
    counts, slot, n_dense = ct
    if row < n_dense:
        return np.int64(tags[row])
    r, w = row - n_dense, slot.shape[1]
    return np.int64(slot[r, w - SLOT_TAIL]) | (np.int64(slot[r, w - SLOT_TAIL + 1]) << 8)


@njit(cache=True, inline="always")
def set_row_tag(ct, tags, row, tag):
    """Row `row` takes tag `tag` (0 ... 2^16 - 1), where `row_tag` reads it."""
    counts, slot, n_dense = ct
    if row < n_dense:
        tags[row] = np.uint16(tag)
    else:
        r, w = row - n_dense, slot.shape[1]
        slot[r, w - SLOT_TAIL] = np.uint8(tag & 255)
        slot[r, w - SLOT_TAIL + 1] = np.uint8(tag >> 8)


@njit(cache=True, inline="always")
def row_recent(ct, recent, row):
    """The byte that last followed row `row`'s context (`recent` for a row of counts, the slot row's
    byte after its tag)."""
    counts, slot, n_dense = ct
    if row < n_dense:
        return recent[row]
    return slot[row - n_dense, slot.shape[1] - SLOT_TAIL + 2]


@njit(cache=True, inline="always")
def set_row_recent(ct, recent, row, byte):
    """Row `row`'s recent byte becomes `byte`, where `row_recent` reads it."""
    counts, slot, n_dense = ct
    if row < n_dense:
        recent[row] = np.uint8(byte)
    else:
        slot[row - n_dense, slot.shape[1] - SLOT_TAIL + 2] = np.uint8(byte)


@njit(cache=True, inline="always")
def is_letter(c):
    """Whether byte c (int64) is a letter of a word: a ... z, A ... Z, or a byte >= 128."""
    return (97 <= (c | 32) <= 122) or c >= 128


@njit(cache=True, inline="always")
def byte_kind(c):
    """A byte's kind (c: int64) for the wrap context: 0 space, 1 a letter (`is_letter`), 2 a digit,
    3 a line feed or carriage return, 4 another control, 5 the rest (punctuation)."""
    if c == 32:
        return 0
    if is_letter(c):
        return 1
    if 48 <= c <= 57:
        return 2
    if c == 10 or c == 13:
        return 3
    return 4 if c < 32 else 5


@njit(cache=True, inline="always")
def fine_kind(c):
    """A byte's kind (c: int64) for the mixer's kinds set: `byte_kind`'s, with the letters split into
    small ASCII letters (1), capitals (6), UTF-8's lead bytes (7) and its continuation bytes (8)."""
    k = byte_kind(c)
    if k == 1 and c >= 65:
        if c <= 90:
            return 6
        if c >= 0xC0:
            return 7
        if c >= 128:
            return 8
    return k


@njit(cache=True)
def context_rows(last, word, n_orders, use_words, use_gap, masks, salts, shift, base, rows, tagv, use_record, hist, hb,
                 pos, rec, use_column, use_wrap, lines, ct, tags, ways):  # fmt: skip
    """(B, K) rows and tags of every lane's count contexts: orders 1, 2 and the gap pair (the two
    bytes before the last) direct, the rest hashed; the record context (the byte one record back,
    and the record's length) only where a lane has a record length that reaches back into its
    history and had a vote within the last REC_FRESH records, else tag -1 (no context: nothing
    read, nothing counted); the column context (the column, up to 255, and the byte above it in the
    line before, 256 where that line was shorter or is no longer in the history); the wrap context
    (the column with the kinds of the last two bytes, `byte_kind`). A hashed context then takes its
    row among `ways` (`choose_rows`)."""
    n = np.int64(1) << hb
    for b in range(last.shape[0]):
        t = 0
        for i in range(n_orders):
            if i < 2:  # the last byte or two themselves, no tag
                rows[b, t] = np.int64(last[b] & masks[i]) + base[t]
                tagv[b, t] = 0
            else:
                h = mix64((last[b] & masks[i]) + salts[i])
                rows[b, t] = np.int64(h >> shift[t]) + base[t]
                tagv[b, t] = np.int64((h >> U16) & MASK16)
            t += 1
        if use_words:
            w0, w1, w2 = word[b, 0], word[b, 1], word[b, 2]
            cur = mix64(w0)
            keys = (cur + w1 * P1, w0 + P1, cur + w2 * P1 + P2)
            for key in keys:
                h = mix64(key)
                rows[b, t] = np.int64(h >> shift[t]) + base[t]
                tagv[b, t] = np.int64((h >> U16) & MASK16)
                t += 1
        if use_gap:
            rows[b, t] = np.int64((last[b] >> U8) & MASK16) + base[t]
            tagv[b, t] = 0
            t += 1
        if use_record:
            r = rec[b, 4]
            if r > 0 and pos[b] >= r and pos[b] - rec[b, 5] <= r * REC_FRESH:
                above = np.uint64(hist[(np.int64(b) << hb) | ((pos[b] - r) & (n - 1))])
                h = mix64((np.uint64(r) << U16 | above << U8) + REC_SALT)
                rows[b, t] = np.int64(h >> shift[t]) + base[t]
                tagv[b, t] = np.int64((h >> U16) & MASK16)
            else:
                rows[b, t] = base[t]
                tagv[b, t] = -1
            t += 1
        col = min(pos[b] - lines[b, 0], 255)  # (the column and wrap contexts')
        if use_column:
            above = np.uint64(256)
            at = lines[b, 1] + col
            if at < lines[b, 0] and pos[b] - at < n:
                above = np.uint64(hist[(np.int64(b) << hb) | (at & (n - 1))])
            h = mix64((above << U16 | np.uint64(col) << U8) + COL_SALT)
            rows[b, t] = np.int64(h >> shift[t]) + base[t]
            tagv[b, t] = np.int64((h >> U16) & MASK16)
            t += 1
        if use_wrap:
            kinds = byte_kind(np.int64(last[b] & MASK8)) * 8 + byte_kind(np.int64((last[b] >> U8) & MASK8))
            h = mix64((np.uint64(kinds) << U16 | np.uint64(col) << U8) + WRAP_SALT)
            rows[b, t] = np.int64(h >> shift[t]) + base[t]
            tagv[b, t] = np.int64((h >> U16) & MASK16)
    if ways > 1:
        choose_rows(rows, tagv, base, ct, tags, ways)


@njit(cache=True, inline="always")
def slot_total(slot, r):
    """The sum of a row of slots' counts (its slots in use: `count_bytes`)."""
    total = np.int64(0)
    for q in range(n_slots_of(slot)):
        c = np.int64(slot[r, 2 * q + 1])
        if c == 0:
            break
        total += c
    return total


@njit(cache=True, inline="always")
def row_total(counts, r):
    """The sum of a row of counts."""
    total = np.int64(0)
    for j in range(256):
        total += np.int64(counts[r, j])
    return total


@njit(cache=True, inline="always")
def group_first(row, table_base, ways):
    """The first row of `row`'s group of `ways` (aligned within its table, which starts at table_base)."""
    return ((row - table_base) & ~np.int64(ways - 1)) + table_base


@njit(cache=True)
def choose_rows(rows, tagv, base, ct, tags, ways):
    """Every hashed context (B, K; tag >= 0) takes its row among the `ways` rows of its aligned group
    (row numbers within the table equal but for the low log2(ways) bits): the first whose tag is
    the context's, else, a context not in any, the one whose counts sum least (the first of those),
    which `count_bytes` then starts afresh. The direct tables' rows keep theirs (their tags and
    the contexts' are all 0). The hashed tables of rows of counts (the word alone) choose as
    those of slots.
    It reads the tables only, as they were after the last byte, so every lane's choice is its own
    and the lanes' order cannot matter; two lanes that choose one row for different contexts are
    settled as `count_bytes` settles any such pair (the lower lane's tag)."""
    counts, slot, n_dense = ct
    for b in range(rows.shape[0]):
        for t in range(rows.shape[1]):
            row = rows[b, t]
            tag = tagv[b, t]
            if tag < 0 or row_tag(ct, tags, row) == tag:  # (a direct table's rows: tag 0, always its own)
                continue
            first = group_first(row, base[t], ways)
            best, least = row, np.int64(-1)
            for way in range(ways):
                r = first + way
                if row_tag(ct, tags, r) == tag:
                    best = r
                    break
                total = slot_total(slot, r - n_dense) if r >= n_dense else row_total(counts, r)
                if least < 0 or total < least:
                    best, least = r, total
            rows[b, t] = best


@njit(cache=True)
def touch_rows(ct, tags, rows, lo, hi):
    """Read one byte of every cache line of the rows lanes lo ... hi - 1 are about to read (and
    their tags), all at once, so that their misses overlap instead of coming one row at a time (a
    prefetch; returns a sum so that the reads stay). ct: the count tables (`count_bytes`)."""
    counts, slot, n_dense = ct
    total = 0
    for b in range(lo, hi):
        for t in range(rows.shape[1]):
            row = rows[b, t]
            if row < n_dense:
                total += np.int64(tags[row])
                for j in range(0, 256, 64):
                    total += np.int64(counts[row, j])
            else:  # a row of slots, its tag and recent byte with it: its first and last byte (one line
                # where rows are 64 bytes, as the default's are)
                total += np.int64(slot[row - n_dense, 0]) + np.int64(slot[row - n_dense, slot.shape[1] - 1])
    return total


@njit(cache=True, parallel=True)
def touch_parts(parts, ct, tags, rows):
    """`touch_rows` in the runs of lanes `mix_parts` mixes, each on its thread: every thread brings
    in the rows it will read itself (one thread for all was slower: the other core then reads them
    from this one's cache)."""
    B = rows.shape[0]
    total = np.zeros(parts, dtype=np.int64)
    for p in prange(parts):
        total[p] = touch_rows(ct, tags, rows, p * B // parts, (p + 1) * B // parts)
    return total.sum()


@njit(cache=True, inline="always")
def floor_div(top, den, inv):
    """floor(top / den) for 0 <= top < 2^62 and 1 <= den < 2^62 with a quotient below 2^50, given
    inv = 1.0 / den: the float product is within a quarter of the quotient (three roundings, each
    relative 2^-53), so its integer part is off by at most one, which the exact integer remainder
    corrects. The same result as `top // den` on any machine, without a division in the loop
    (which then vectorises: 256 integer divisions cost twice as much)."""
    q = np.int64(np.float64(top) * inv)
    r = top - q * den
    return q + np.int64(r >= den) - np.int64(r < 0)


@njit(cache=True, inline="always")
def ppm_log(v, ln_mant, ln2, floor):
    """ln(v / PPM_ONE) in units of 2^-12 (at least `floor`): v's leading 13 bits from a table of
    correctly rounded logarithms, the power of two in whole units of ln 2."""
    if v <= 0:
        return floor
    l = floor_log2(v)
    m = v >> (l - 12) if l >= 12 else v << (12 - l)
    return max(ln_mant[m - 4096] + (l - PPM_BITS) * ln2, floor)


@njit(cache=True)
def ppm_evidence(b, rows, tagv, n_orders, ct, tags, i, base, ent, m, excl, p, ln_mant, ln2, floor):
    """Lane b's PPM distribution (method C, with exclusion) over the order tables, as log
    probabilities, input i of the mixer (`mix_step`'s evidence: base[b, i] for the bytes no context
    saw, an entry from ent[b, m] on for each byte seen; returns the next free entry): from the
    highest order seen down, each context gives its bytes not yet given (excluded) count / (n + d)
    of what is left and passes on d / (n + d), with n the counts and d the number of those bytes;
    what is left at the end is shared by the bytes no context saw. Probabilities in units of
    2^-PPM_BITS, every division floored. A table of slots (`count_bytes`) gives the same for the
    bytes its slots hold."""
    counts, slot, n_dense = ct
    n_slots = n_slots_of(slot)
    for j in range(256):
        excl[j] = False
        p[j] = 0
    words = counts.view(np.uint64)  # (rows, 32): eight counts in a word
    left = np.int64(1) << PPM_BITS
    for t in range(n_orders - 1, -1, -1):
        row = rows[b, t]
        if row_tag(ct, tags, row) != tagv[b, t]:
            continue
        n = 0
        d = 0
        r = row - n_dense
        if r < 0:
            for w in range(32):  # eight counts at a time, skipping the words of zeros (most)
                if words[row, w] == 0:
                    continue
                for j in range(8 * w, 8 * w + 8):
                    c = np.int64(counts[row, j]) * np.int64(not excl[j])
                    n += c
                    d += np.int64(c != 0)
        else:
            for q in range(n_slots):  # the slots in use (`count_bytes`: a row's first empty slot ends it)
                if slot[r, 2 * q + 1] == 0:
                    break
                c = np.int64(slot[r, 2 * q + 1]) * np.int64(not excl[slot[r, 2 * q]])
                n += c
                d += np.int64(c != 0)
        if n == 0:
            continue
        den = n + d
        inv = 1.0 / np.float64(den)
        if r < 0:
            for w in range(32):
                if words[row, w] == 0:
                    continue
                for j in range(8 * w, 8 * w + 8):  # p_j is 0 where c is, and floor_div(0, ...) is 0
                    c = np.int64(counts[row, j]) * np.int64(not excl[j])
                    p[j] += floor_div(left * c, den, inv)  # left c < 2^48, the quotient <= left <= 2^40
                    excl[j] = excl[j] or c != 0
        else:
            for q in range(n_slots):  # a row's bytes are distinct
                if slot[r, 2 * q + 1] == 0:
                    break
                j = slot[r, 2 * q]
                c = np.int64(slot[r, 2 * q + 1]) * np.int64(not excl[j])
                p[j] += floor_div(left * c, den, inv)
                excl[j] = excl[j] or c != 0
        left = left * d // den
    unseen = 0
    for j in range(256):
        unseen += np.int64(not excl[j])
    rest = ppm_log(left // unseen if unseen else 0, ln_mant, ln2, floor)
    base[b, i] = rest
    seen = excl.view(np.uint64)  # (32,): eight flags in a word
    for w in range(32):
        if seen[w] == 0:
            continue
        for j in range(8 * w, 8 * w + 8):
            if excl[j]:
                ent[b, m, 0] = i
                ent[b, m, 1] = j
                ent[b, m, 2] = ppm_log(p[j], ln_mant, ln2, floor) - rest
                m += 1
    return m


@njit(cache=True, inline="always")
def chosen_weights(b, sets, W, weights):
    """Lane b's weights: every column of W summed over the rows its weight sets chose (`mix_step`;
    rows within +-W_BOUND (`mixer_step`; the starting ones far less): each sum below 2^31)."""
    for col in range(W.shape[1]):
        w = 0
        for s in range(sets.shape[1]):
            w += W[sets[b, s], col]
        weights[col] = np.int32(w)


@njit(cache=True, inline="always")
def mixed_logits(b, E0, base, ent, m, cls, weights, common, acc):
    """acc[j] = sum_i w_i,cls(j) e_ij for lane b (`mix_step`): input i's weight for byte j is the one
    of j's class (column i * C + cls[j] of the weights; C = 1: one weight an input), the evidence
    sparse as `mix_step` keeps it: what every byte of a class gets (sum_i w_i,c base_i), the
    network's logits, then every byte listed, its input's weight times its difference."""
    n_in = base.shape[1]
    C = weights.shape[0] // n_in
    for c in range(C):
        common[c] = 0
    for i in range(n_in):
        for c in range(C):
            common[c] += weights[i * C + c] * base[b, i]
    for j in range(256):
        c = cls[j]
        acc[j] = common[c] + weights[c] * np.int64(E0[b, j])
    for q in range(m):
        i, j, d = ent[b, q, 0], ent[b, q, 1], np.int64(ent[b, q, 2])
        acc[j] += weights[i * C + cls[j]] * d


@njit(cache=True)
def mix_step(
    logits, ev, z, sets, rows, tagv, K, n_seen, use_match, ct, tags, recent, logt, hist, ptr, mlen, last, word, W,
    set_base, set_salts, set_shifts, kinds, match_edges, count_edges, net_floor, one, z_bound, exp,
    freqs, n_ppm, ln_mant, ln2, apm, apm2, f0, apm_at, W_slow, z_fast, z_slow, f_fast, f_slow, two, cls, lo, hi,
):  # fmt: skip
    """Lanes lo ... hi - 1 (every lane's mixing is its own: `mix_parts` runs runs of lanes side by side).
    The mixer's logits z (B, 256) from the network's (float, units 2^-12) and the experts' evidence,
    which it leaves for `mixer_gradients` with the weight rows it chose in `sets` (B, 8: the six of
    `mix`, then the kinds set, whose row the kinds of the last `kinds` bytes choose, then the state
    set, whose row the match's predicted byte's kind and length bucket, the highest order seen and
    the last byte's kind choose directly); and from z
    the coded frequencies (`frequencies`). With `two`, z is the mean of two mixers' logits, z_fast by
    the weights W and z_slow by W_slow (the same rows, learning at half the rate), whose own
    probabilities f_fast and f_slow (`shares`) each learns from (`mixer_learn`); without, z is
    z_fast (W alone; W_slow, z_slow and f_slow are not touched). The first n_seen
    of the K count tables choose the highest context seen (the record context, last, does not).
    n_ppm: the order tables the PPM input reads (0: none).
    With an APM table (rows > 0), the mixer's own frequencies go to f0 and the coded ones are
    those of z refined by `apm_refine`.

    The evidence e_ij of input i for byte j is kept sparse, in ev = (E0, base, ent, n_ent): the
    network's (input 0) whole in E0 (B, 256), every other input's as base[b, i] for every byte but
    those listed in ent[b, :m] (m = n_ent[b]) as (i, j, e_ij - base[b, i]): a context's counts,
    the PPM input's bytes seen, the one byte the match and the recent byte predict. The sums below
    are the sums over all 256 bytes of every input regrouped, in integers: the same values to the
    bit."""
    E0, base, ent, n_ent = ev
    counts, slot, n_dense = ct
    n_slots = n_slots_of(slot)
    n_in = base.shape[1]
    n_count_edges = count_edges.shape[0]
    words = counts.view(np.uint64)  # (rows, 32): eight counts in a word
    unseen = logt[0]  # a count of 0's evidence
    weights = np.empty(W.shape[1], dtype=np.int64)
    weights_slow = np.empty(W.shape[1], dtype=np.int64)
    common = np.empty(W.shape[1] // n_in, dtype=np.int64)
    acc = np.empty(256, dtype=np.int64)
    acc_slow = np.empty(256, dtype=np.int64)
    excl = np.empty(256, dtype=np.bool_)
    p = np.empty(256, dtype=np.int64)
    for b in range(lo, hi):
        top_logit = logits[b, 0]
        for j in range(256):
            top_logit = max(top_logit, logits[b, j])
        for j in range(256):
            E0[b, j] = max(np.int64(np.rint(logits[b, j] - top_logit)), net_floor)
        base[b, 0] = 0
        m = 0
        order_seen = 0
        conf = 0
        if K:
            top_total = 0
            top_nonzero = 0
            for t in range(K):
                row = rows[b, t]
                known = row_tag(ct, tags, row) == tagv[b, t]
                total = 0
                nonzero = 0
                base[b, 1 + t] = unseen  # an unseen byte's evidence, and an entry for each byte seen
                if known and row < n_dense:
                    for w in range(32):  # eight counts at a time: most rows hold a few
                        if words[row, w] == 0:
                            continue
                        for j in range(8 * w, 8 * w + 8):  # every byte written, the count moves on where c > 0
                            c = np.int64(counts[row, j])
                            ent[b, m, 0] = 1 + t
                            ent[b, m, 1] = j
                            ent[b, m, 2] = logt[c] - unseen
                            m += np.int64(c != 0)
                            total += c
                            nonzero += np.int64(c != 0)
                elif known:  # a table of slots: (byte, count) pairs, 0 counts empty
                    r = row - n_dense
                    for q in range(n_slots):  # the slots in use: the first empty one ends them
                        c = np.int64(slot[r, 2 * q + 1])
                        if c == 0:
                            break
                        ent[b, m, 0] = 1 + t
                        ent[b, m, 1] = slot[r, 2 * q]
                        ent[b, m, 2] = logt[c] - unseen
                        m += 1
                        total += c
                        nonzero += 1
                if total > 0 and t < n_seen:  # the highest context seen so far (tables come in rising order)
                    order_seen = t + 1
                    top_total = total
                    top_nonzero = nonzero
            single = 1 if top_nonzero == 1 else 0
            above = 0
            while above < n_count_edges and count_edges[above] <= top_total:
                above += 1
            conf = above * 2 + single
            base[b, 1 + K] = 0
            if order_seen > 0:
                ent[b, m, 0] = 1 + K
                ent[b, m, 1] = row_recent(ct, recent, rows[b, order_seen - 1])
                ent[b, m, 2] = one
                m += 1
        if n_ppm:
            m = ppm_evidence(b, rows, tagv, n_ppm, ct, tags, 2 + K, base, ent, m, excl, p, ln_mant, ln2, net_floor)
        bucket = 0
        if use_match:
            base[b, n_in - 1] = 0
            if mlen[b] > 0:
                ent[b, m, 0] = n_in - 1
                ent[b, m, 1] = hist[ptr[b]]
                ent[b, m, 2] = one
                m += 1
            while bucket < match_edges.shape[0] and match_edges[bucket] <= mlen[b]:
                bucket += 1
        n_ent[b] = m
        sets[b, 0] = bucket * (K + 1) + order_seen + set_base[0]
        sets[b, 1] = order_seen * (2 * n_count_edges + 2) + conf + set_base[1]
        sets[b, 2] = np.int64(last[b] & MASK8) + set_base[2]
        keys = (last[b] & MASK16, word[b, 0], last[b] & MASK24)  # HASHED_SETS: pair, word, triple
        for s in range(3):
            sets[b, 3 + s] = np.int64(mix64(keys[s] + set_salts[s]) >> set_shifts[s]) + set_base[3 + s]
        kind = fine_kind(np.int64(last[b] & MASK8))  # the last byte's (both sets below read it)
        # KINDS_SET: the kinds of the last `kinds` bytes (1 ... 8), four bits each, the last first
        key = np.uint64(kind)
        for j in range(1, kinds):
            key = key << U4 | np.uint64(fine_kind(np.int64((last[b] >> np.uint64(8 * j)) & MASK8)))
        sets[b, 6] = np.int64(mix64(key + set_salts[3]) >> set_shifts[3]) + set_base[6]
        # the state set: (match state, order seen, last byte's kind), one row each
        state = 0  # no match; else its predicted byte's kind with its length bucket (1 ... 8)
        if use_match and mlen[b] > 0:
            state = 1 + fine_kind(np.int64(hist[ptr[b]])) * match_edges.shape[0] + bucket - 1
        sets[b, 7] = (state * (K + 1) + order_seen) * N_KINDS + kind + set_base[7]
        chosen_weights(b, sets, W, weights)
        mixed_logits(b, E0, base, ent, m, cls, weights, common, acc)
        if two:  # the second mixer, over the same rows: z is their mean (rounded down)
            chosen_weights(b, sets, W_slow, weights_slow)
            mixed_logits(b, E0, base, ent, m, cls, weights_slow, common, acc_slow)
            for j in range(256):
                z_fast[b, j] = min(max(acc[j] >> 16, -z_bound), z_bound)
                z_slow[b, j] = min(max(acc_slow[j] >> 16, -z_bound), z_bound)
                z[b, j] = (z_fast[b, j] + z_slow[b, j]) >> 1
        else:
            for j in range(256):
                z_fast[b, j] = min(max(acc[j] >> 16, -z_bound), z_bound)
                z[b, j] = z_fast[b, j]
    shares(z_fast[lo:hi], exp, f_fast[lo:hi])
    if two:
        shares(z_slow[lo:hi], exp, f_slow[lo:hi])
    if apm.shape[0] == 0:
        frequencies(z[lo:hi], exp, freqs[lo:hi])
        return
    frequencies(z[lo:hi], exp, f0[lo:hi])
    apm_refine(z[lo:hi], f0[lo:hi], last[lo:hi], apm, apm2, apm_at[lo:hi], z_bound)
    frequencies(z[lo:hi], exp, freqs[lo:hi])


@njit(cache=True, parallel=True)
def mix_parts(
    parts, logits, ev, z, sets, rows, tagv, K, n_seen, use_match, ct, tags, recent, logt, hist, ptr, mlen, last,
    word, W, set_base, set_salts, set_shifts, kinds, match_edges, count_edges, net_floor, one, z_bound,
    exp, freqs, n_ppm, ln_mant, ln2, apm, apm2, f0, apm_at, W_slow, z_fast, z_slow, f_fast, f_slow, two, cls,
):  # fmt: skip
    """`mix_step` with the lanes cut into `parts` runs of lanes, one per thread (`split`): it only
    reads the tables, and writes each lane's own rows."""
    B = logits.shape[0]
    for p in prange(parts):
        mix_step(
            logits, ev, z, sets, rows, tagv, K, n_seen, use_match, ct, tags, recent, logt, hist, ptr, mlen, last,
            word, W, set_base, set_salts, set_shifts, kinds, match_edges, count_edges, net_floor, one,
            z_bound, exp, freqs, n_ppm, ln_mant, ln2, apm, apm2, f0, apm_at, W_slow, z_fast, z_slow, f_fast, f_slow,
            two, cls,
            p * B // parts, (p + 1) * B // parts,
        )  # fmt: skip


@njit(cache=True, inline="always")
def cost_units(f):
    """-log2(f / 2^24) in units of 2^-8 bits, for f in 1 ... 2^24: the bit length, then the next 8
    bits of f as a straight line between powers of two."""
    l = floor_log2(f)
    mant = ((f << 8) >> l) & 255
    return (24 << 8) - ((l << 8) + mant)


@njit(cache=True)
def apm_refine(z, f0, last, apm, apm2, apm_at, z_bound):
    """The APM stage: every byte's logit z_j gains two corrections read at the byte's cost under
    the mixer (-log2 of f0, half-bit buckets interpolated linearly): one from the row of the
    previous byte (`apm`), one from the row of the previous byte with j itself (`apm2`, 256 rows
    per previous byte). apm_at (B, 256) keeps each byte's bucket and weight (units 2^-7) for
    `apm_learn`."""
    last_bucket = apm.shape[1] - 2
    for b in range(z.shape[0]):
        row = np.int64(last[b] & MASK8)
        for j in range(256):  # the buckets first, in a loop of their own (it vectorises: 2.4 times faster)
            x = cost_units(f0[b, j])
            i, w = x >> 7, x & 127
            beyond = i > last_bucket
            apm_at[b, j] = ((last_bucket if beyond else i) << 8) | (128 if beyond else w)
        for j in range(256):
            i, w = apm_at[b, j] >> 8, apm_at[b, j] & 255
            r2 = (row << 8) | j
            corr = (apm[row, i] * (128 - w) + apm[row, i + 1] * w) >> 7
            corr += (np.int64(apm2[r2, i]) * (128 - w) + np.int64(apm2[r2, i + 1]) * w) >> 7
            z[b, j] = min(max(z[b, j] + corr, -z_bound), z_bound)


@njit(cache=True)
def apm_learn(freqs, y, k, last, apm, apm2, apm_at, lr, lr2, bound):
    """The APM's step after byte y (before `advance`: the row is still the previous byte's): each
    bucket of the previous byte's row moves against its share of the code length's gradient
    p_j - [j = y] summed over j, each bucket of a (previous byte, j) row against j's own share;
    rounded, and the second table's values kept within +-bound."""
    nb = apm.shape[1]
    acc = np.empty(nb, dtype=np.int64)
    for b in range(k):
        row = np.int64(last[b] & MASK8)
        acc[:] = 0
        for j in range(256):
            g = freqs[b, j] - ((np.int64(1) << 24) if j == y[b] else 0)
            i, w = apm_at[b, j] >> 8, apm_at[b, j] & 255
            acc[i] += g * (128 - w)
            acc[i + 1] += g * w
            r2 = (row << 8) | j
            v = np.int64(apm2[r2, i]) - ((g * (128 - w) * lr2 + (np.int64(1) << 28)) >> 29)
            apm2[r2, i] = min(max(v, -bound), bound)
            v = np.int64(apm2[r2, i + 1]) - ((g * w * lr2 + (np.int64(1) << 28)) >> 29)
            apm2[r2, i + 1] = min(max(v, -bound), bound)
        for i in range(nb):
            apm[row, i] -= (acc[i] * lr + (np.int64(1) << 28)) >> 29


@njit(cache=True)
def mixer_gradients(ev, f_fast, f_slow, two, cls, y, lo, hi, G_fast, G_slow):
    """Rows lo ... hi - 1 of G_fast and G_slow (k, n_in * C): lane b's gradient of the code length
    for each weight, sum_{j of class c} p_j e_ij - [y of class c] e_iy for input i's weight of
    class c (column i * C + c; C = 1: sum_j p_j e_ij - e_iy), for each mixer (G_slow only with
    `two`), p its own frequencies (int32, below 2^24; e below 2^18: each product widens to int64),
    from the evidence as `mix_step` keeps it in ev: a class's sum_j p_j e_ij = base_i sum_j p_j
    (over the class) + the listed bytes' p_j (e_ij - base_i), the same integer. Every lane's is its
    own (the weights do not enter it): `learn_parts` computes them in runs of lanes side by side."""
    E0, base, ent, n_ent = ev
    n_in = base.shape[1]
    n_cols = G_fast.shape[1]
    C = n_cols // n_in
    acc = np.empty(n_cols, dtype=np.int64)
    acc_slow = np.empty(n_cols, dtype=np.int64)
    at_y = np.empty(n_cols, dtype=np.int64)
    total = np.empty(C, dtype=np.int64)
    total_slow = np.empty(C, dtype=np.int64)
    for b in range(lo, hi):
        cy = cls[y[b]]
        for c in range(C):
            total[c] = total_slow[c] = acc[c] = acc_slow[c] = at_y[c] = 0
        for j in range(256):
            c = cls[j]
            f, e = np.int64(f_fast[b, j]), np.int64(E0[b, j])
            total[c] += f
            acc[c] += f * e
            if two:
                f_slow_j = np.int64(f_slow[b, j])
                total_slow[c] += f_slow_j
                acc_slow[c] += f_slow_j * e
        at_y[cy] = E0[b, y[b]]
        for i in range(1, n_in):
            for c in range(C):
                acc[i * C + c] = base[b, i] * total[c]
                acc_slow[i * C + c] = base[b, i] * total_slow[c]
                at_y[i * C + c] = base[b, i] if c == cy else 0
        col_run = -1  # the entries come in runs of one input (and class): summed in registers, added at the run's end
        s_fast = s_slow = s_y = 0
        for q in range(n_ent[b]):
            i, j, d = ent[b, q, 0], ent[b, q, 1], np.int64(ent[b, q, 2])
            col = i * C + cls[j]
            if col != col_run:
                if col_run >= 0:
                    acc[col_run] += s_fast
                    acc_slow[col_run] += s_slow
                    at_y[col_run] += s_y
                col_run, s_fast, s_slow, s_y = col, 0, 0, 0
            s_fast += np.int64(f_fast[b, j]) * d
            if two:
                s_slow += np.int64(f_slow[b, j]) * d
            s_y += d * np.int64(j == y[b])
        if col_run >= 0:
            acc[col_run] += s_fast
            acc_slow[col_run] += s_slow
            at_y[col_run] += s_y
        for col in range(n_cols):
            G_fast[b, col] = (acc[col] >> 24) - at_y[col]
            if two:
                G_slow[b, col] = (acc_slow[col] >> 24) - at_y[col]


@njit(cache=True)
def mixer_step(G, sets, k, W, rate, w_bound, s_lo, s_hi):
    """One mixer's step after byte y from its gradients G (`mixer_gradients`), in the weight sets
    s_lo ... s_hi - 1: every chosen row -= rate * g, lane after lane (lanes may share rows), each
    row at its rate (k, S); then the rows are held within +-w_bound. Every set has its own rows."""
    n_in = G.shape[1]
    for b in range(k):
        for s in range(s_lo, s_hi):
            row = sets[b, s]
            for i in range(n_in):
                W[row, i] -= (G[b, i] * rate[b, s] + (1 << 15)) >> 16
    for b in range(k):
        for s in range(s_lo, s_hi):
            row = sets[b, s]
            for i in range(n_in):
                W[row, i] = min(max(W[row, i], -w_bound), w_bound)


@njit(cache=True)
def mixer_steps(G_fast, G_slow, two, sets, k, W, W_slow, updates, lr, lr_start, settle, w_bound, s_lo, s_hi):
    """The mixers' steps from their gradients in the weight sets s_lo ... s_hi - 1, each chosen row
    at its own rate from the steps it had taken before this one: max(lr, lr_start / (settle +
    steps)) for W, half that (each term halved, floored) for W_slow (with `two`). Every set's rows (and their
    step counts) are its own, so the sets can be stepped in any grouping (`learn_parts`)."""
    rate = np.empty(sets.shape, dtype=np.int64)
    for b in range(k):
        for s in range(s_lo, s_hi):
            rate[b, s] = max(lr, lr_start // (settle + updates[sets[b, s]]))
    mixer_step(G_fast, sets, k, W, rate, w_bound, s_lo, s_hi)
    if two:
        for b in range(k):
            for s in range(s_lo, s_hi):
                rate[b, s] = max(lr >> 1, (lr_start >> 1) // (settle + updates[sets[b, s]]))
        mixer_step(G_slow, sets, k, W_slow, rate, w_bound, s_lo, s_hi)
    for b in range(k):
        for s in range(s_lo, s_hi):
            updates[sets[b, s]] += 1


@njit(cache=True)
def mixer_learn(ev, sets, f_fast, f_slow, two, cls, y, k, W, W_slow, updates, lr, lr_start, settle, w_bound):
    """The mixers' steps after byte y (`mixer_steps`), with their gradients from the evidence ev
    (`mix_step`)."""
    G_fast = np.empty((k, W.shape[1]), dtype=np.int64)
    G_slow = np.empty((k, W.shape[1]), dtype=np.int64)
    mixer_gradients(ev, f_fast, f_slow, two, cls, y, 0, k, G_fast, G_slow)
    mixer_steps(G_fast, G_slow, two, sets, k, W, W_slow, updates, lr, lr_start, settle, w_bound, 0, sets.shape[1])


@njit(cache=True)
def count_bytes(rows, tagv, y, k, ct, tags, recent, count_limit, t_lo, t_hi, base, ways):
    """Count tables t_lo ... t_hi - 1 take byte y: a row whose tag differs starts afresh (the lowest
    lane's tag wins), the lowest lane's byte is the row's recent one, counts add and a row past the
    limit is halved (rounding up) once. A tag of -1 is no context: its row is left alone. Every
    table's rows are its own, so tables can be taken in any grouping (`learn_parts`). With `ways`
    > 1 (`choose_rows`), a row that starts afresh halves the counts of the other rows of its
    group (rounding up; base: every table's first row), so that a row busy long ago gives way to
    newer contexts. Lanes take their rows in order.

    ct = (counts, slot, n_dense): rows below n_dense are rows of counts (rows, 256), a count for
    every byte, with their tags and recent bytes in `tags` and `recent`; the rest rows of slot
    (rows - n_dense, 2 S + SLOT_TAIL): S (byte, count) pairs, a count of 0 an empty slot, then the
    row's tag (two bytes, little-endian), its recent byte and a spare byte, so that a row of the default's
    30 slots is one 64-byte cache line (`mix.Experts.reset` aligns them), read in one miss. A byte
    not in its row's slots takes the first empty one, or else the first with the lowest count
    (what it counted is forgotten). Lanes take their bytes in order, the lowest first, so the order
    in which they fill a row's slots is fixed. A count once taken never returns to 0 (halving
    rounds up), so a row's slots in use come first: the first empty slot ends the row, and every
    reader stops there (`test_mix`: rows stay packed)."""
    counts, slot, n_dense = ct
    n_slots = n_slots_of(slot)
    for b in range(k):
        for t in range(t_lo, t_hi):
            row = rows[b, t]
            if tagv[b, t] < 0 or row_tag(ct, tags, row) == tagv[b, t]:
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
                set_row_tag(ct, tags, row, tagv[b, t])
                if ways > 1:  # the other rows of its group age: their counts halved (`choose_rows`)
                    first = group_first(row, base[t], ways)
                    for r in range(first, first + ways):
                        if r != row:
                            halve_row(ct, r, 255)
    for b in range(k - 1, -1, -1):  # the lowest lane writes last
        for t in range(t_lo, t_hi):
            row = rows[b, t]
            if row_tag(ct, tags, row) == tagv[b, t]:
                set_row_recent(ct, recent, row, y[b])
    full = np.empty(k * (t_hi - t_lo), dtype=np.int64)
    n_full = 0
    for b in range(k):
        for t in range(t_lo, t_hi):
            row = rows[b, t]
            if row_tag(ct, tags, row) != tagv[b, t]:
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
            if new > count_limit:
                seen = False
                for f in range(n_full):
                    if full[f] == row:
                        seen = True
                        break
                if not seen:
                    full[n_full] = row
                    n_full += 1
    for f in range(n_full):
        halve_row(ct, full[f], count_limit)


@njit(cache=True, inline="always")
def halve_row(ct, row, limit):
    """Every count of row `row` (of counts or of slots) halved, rounding up (an empty slot stays
    0, a count taken never returns to 0), and held at most `limit`."""
    counts, slot, n_dense = ct
    if row < n_dense:
        for j in range(256):
            c = np.int64(counts[row, j])
            counts[row, j] = np.uint8(min(c - (c >> 1), limit))
    else:
        for q in range(n_slots_of(slot)):
            c = np.int64(slot[row - n_dense, 2 * q + 1])
            slot[row - n_dense, 2 * q + 1] = np.uint8(min(c - (c >> 1), limit))


@njit(cache=True, inline="always")
def vote_record(at, rec, p, longest):
    """One lane's record length after a byte at position p (counted from 1), whose previous three
    positions are `at` (latest first; 0: none): where the byte's last four occurrences are equally
    spaced, 2 ... `longest` apart (at most the history's length), that distance gets a vote. Two
    candidates (rec[0], count rec[1]; rec[2], rec[3]) collect votes, a new distance replacing the
    one with fewer; a candidate with REC_VOTES votes becomes the record length rec[4] and both
    counts start again. rec[5]: the position of the length's latest vote."""
    d = p - at[0]
    if at[2] > 0 and 2 <= d <= longest and d == at[0] - at[1] and d == at[1] - at[2]:
        if d == rec[4]:
            rec[5] = p
        if d == rec[0]:
            rec[1] += 1
        elif d == rec[2]:
            rec[3] += 1
        elif rec[1] > rec[3]:
            rec[2], rec[3] = d, 1
        else:
            rec[0], rec[1] = d, 1
        for c in (0, 2):
            if rec[c + 1] >= REC_VOTES and rec[4] != rec[c]:
                rec[4], rec[5] = rec[c], p
                rec[1], rec[3] = 0, 0
    at[2], at[1], at[0] = at[1], at[0], p


@njit(cache=True, inline="always")
def match_length(hist, hb, cand, b, pos_b, match_check):
    """How many of the bytes before history index `cand` (at most match_check) equal lane b's last ones."""
    n = np.int64(1) << hb
    c_lane, c_off = cand >> hb, cand & (n - 1)
    length = 0
    for back in range(1, match_check + 1):
        theirs = hist[(c_lane << hb) | ((c_off - back) & (n - 1))]
        ours = hist[(np.int64(b) << hb) | ((pos_b - back) & (n - 1))]
        if theirs != ours:
            break
        length += 1
    return length


@njit(cache=True)
def advance(y, k, hb, use_match, use_words, hist, ptr, mlen, pos, last, word, match_table, match_bits, match_min,
            match_check, match_max, use_record, rec_at, rec, longest, use_lines, lines):  # fmt: skip
    """Every lane takes byte y: the match extends or ends, the history, the last bytes and the word
    hashes move on, the record length is voted on, a line feed starts a line (use_lines: the column
    and wrap contexts read where the lines start), and lanes without a
    match look one up; every lane then files its position. The match table has a
    second half of 2^match_bits slots where every lane files under its own salt, looked up first:
    a repeat in the lane's own text wins over a more recent one in another lane's."""
    n = np.int64(1) << hb
    if use_match:
        for b in range(k):  # every check reads the history before any lane writes to it
            if mlen[b] > 0 and np.int64(hist[ptr[b]]) == y[b]:
                ptr[b] = ((ptr[b] >> hb) << hb) | ((ptr[b] + 1) & (n - 1))
                mlen[b] = min(mlen[b] + 1, match_max)
            else:
                mlen[b] = 0
    if use_match or use_record or use_lines:
        for b in range(k):
            hist[(b << hb) | (pos[b] & (n - 1))] = np.uint8(y[b])
    if use_record:
        for b in range(k):
            vote_record(rec_at[b, y[b]], rec[b], pos[b] + 1, longest)
    if use_lines:
        for b in range(k):
            if y[b] == 10:  # a new line starts after it
                lines[b, 1] = lines[b, 0]
                lines[b, 0] = pos[b] + 1
    for b in range(k):
        uy = np.uint64(y[b])
        pos[b] += 1
        last[b] = (last[b] << U8) | uy
        if use_words:
            yy = y[b]
            letter = is_letter(yy)
            low = np.uint64(yy | 32) if 65 <= yy <= 90 else uy
            cur = word[b, 0]
            if cur != 0 and (not letter or yy >= WIDE_LEAD):  # a word ends; a wide character starts one
                word[b, 2] = word[b, 1]
                word[b, 1] = cur
                if letter:
                    cur = np.uint64(0)
            word[b, 0] = (cur ^ low) * P1 + ONE_U if letter else np.uint64(0)
    if not use_match:
        return
    slots = np.empty((k, 2), dtype=np.int64)  # the shared slot, the lane's own
    cands = np.empty((k, 2), dtype=np.int64)
    key_mask = np.uint64((1 << (8 * match_min)) - 1)
    shift = U64 - np.uint64(match_bits)
    size = np.int64(1) << match_bits
    for b in range(k):  # every lookup reads the table before any lane files
        key = last[b] & key_mask
        slots[b, 0] = np.int64(mix64(key) >> shift)
        cands[b, 0] = match_table[slots[b, 0]] - 1
        slots[b, 1] = size + np.int64(mix64(key ^ (np.uint64(b + 1) * P2)) >> shift)
        cands[b, 1] = match_table[slots[b, 1]] - 1
    for b in range(k):
        if mlen[b] != 0 or pos[b] < match_min:
            continue
        for c in range(1, -1, -1):  # the lane's own first
            cand = cands[b, c]
            if cand < 0:
                continue
            length = match_length(hist, hb, cand, b, pos[b], match_check)
            if length >= match_min:
                mlen[b] = length
                ptr[b] = cand
                break
    for b in range(k - 1, -1, -1):  # the lowest lane files last
        here = ((np.int64(b) << hb) | (pos[b] & (n - 1))) + 1
        match_table[slots[b, 0]] = here
        match_table[slots[b, 1]] = here


@njit(cache=True, inline="always")
def exponentials(zb, exp, e):
    """e_j = exp[round(2^-2 (max - z_j))] (half up) for one lane's integer logits zb (256; units
    2^-12), the table's last entry (0) standing for everything beyond its range; returns their sum."""
    cap = exp.shape[0] - 1
    top = zb[0]
    for j in range(256):
        top = max(top, zb[j])
    total = 0
    for j in range(256):
        e[j] = exp[min((top - zb[j] + 2) >> 2, cap)]
        total += e[j]
    return total


@njit(cache=True)
def shares(z, exp, out):
    """Every byte's probability under integer logits z (B, 256; units 2^-12) in units of 2^-24, for
    a mixer's gradient (not coded): the exponentials of `frequencies`, each times one reciprocal
    of their sum, floored (one division per lane, not 256)."""
    e = np.empty(256, dtype=np.int64)
    for b in range(z.shape[0]):
        total = exponentials(z[b], exp, e)
        inv = (np.int64(1) << 56) // total  # exp[0] = 2^32 <= total <= 2^40: 2^16 <= inv <= 2^24
        for j in range(256):
            out[b, j] = (e[j] * inv) >> 32  # below 2^24: out may be int32


@njit(cache=True)
def frequencies(z, exp, out):
    """`exact.frequencies` of integer logits z (B, 256; units 2^-12), in integers: the same
    table index round(2^-2 (max - z)) (half up), the same exponentials, shares and remainder."""
    total_f = np.int64(1) << 24
    share = total_f - 256
    e = np.empty(256, dtype=np.int64)
    for b in range(z.shape[0]):
        total = exponentials(z[b], exp, e)
        inv = 1.0 / np.float64(total)
        best, best_e = 0, np.int64(-1)
        for j in range(256):
            if e[j] > best_e:  # the first most probable byte
                best, best_e = j, e[j]
        given = 0
        for j in range(256):
            f = floor_div(e[j] * share, total, inv) + 1  # e_j <= total: the quotient is below 2^24
            out[b, j] = f
            given += f
        out[b, best] += total_f - given


@njit(cache=True, parallel=True)
def learn_parts(
    parts, use_apm, coded, y, k, last, apm, apm2, apm_at, apm_rate, apm2_rate, z_bound, ev, sets, f_fast, f_slow, two,
    cls, W, W_slow, updates, lr, lr_start, settle, w_bound, count_tables, rows, tagv, ct, tags, recent, count_limit, hb,
    use_match, use_words, hist, ptr, mlen, pos, word, match_table, match_bits, match_min, match_check, match_max,
    use_record, rec_at, rec, longest, use_lines, lines, split_tables, split_sets, base, ways,
):  # fmt: skip
    """`mix.Experts.learn`'s kernels in two sections side by side, one per thread (`split`): the
    mixers' steps in the first `split_sets` weight sets and the first `split_tables` count tables
    in one; the APM's step, the other sets and tables and `advance` in the other. They touch
    disjoint memory (every weight set and count table its own rows; the APM reads the last bytes
    before `advance` moves them on, in its own section), and each kernel runs as it does alone: the
    same state for any split. Before them, the mixers' gradients, every lane's its own, in `parts`
    runs of lanes."""
    G_fast = np.empty((k, W.shape[1]), dtype=np.int64)
    G_slow = np.empty((k, W.shape[1]), dtype=np.int64)
    for p in prange(parts):
        mixer_gradients(ev, f_fast, f_slow, two, cls, y, p * k // parts, (p + 1) * k // parts, G_fast, G_slow)
    for section in prange(2):
        if section == 0:
            mixer_steps(G_fast, G_slow, two, sets, k, W, W_slow, updates, lr, lr_start, settle, w_bound, 0, split_sets)
            if count_tables:
                count_bytes(rows, tagv, y, k, ct, tags, recent, count_limit, 0, split_tables, base, ways)
        else:
            if use_apm:
                apm_learn(coded, y, k, last, apm, apm2, apm_at, apm_rate, apm2_rate, z_bound)
            if count_tables and split_tables < rows.shape[1]:
                count_bytes(rows, tagv, y, k, ct, tags, recent, count_limit, split_tables, rows.shape[1], base, ways)
            if split_sets < sets.shape[1]:
                S = sets.shape[1]
                mixer_steps(
                    G_fast, G_slow, two, sets, k, W, W_slow, updates, lr, lr_start, settle, w_bound, split_sets, S
                )
            advance(
                y, k, hb, use_match, use_words, hist, ptr, mlen, pos, last, word, match_table, match_bits, match_min,
                match_check, match_max, use_record, rec_at, rec, longest, use_lines, lines,
            )  # fmt: skip
