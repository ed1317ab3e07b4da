"""One coding step of all the experts, compiled: the calls `mix.Experts` makes, each one kernel for
all lanes.

    contexts      every lane's count contexts (rows and tags) from the state after the last byte
    mix_step      the mixer's inputs, its weight rows, the mixed logits and the coded frequencies
    learn         after the byte: the APM's and the mixers' steps, the counts, every expert's state
    mix_parts, learn_parts   the same split over threads (`coding.split`)

The state travels in records (plain tuples, each rebuilt here as its named record: numba reads a
plain tuple's type several times faster than a named one's): `Use` (which experts run),
`history.History`, `counts.Tables`, `counts.Contexts`, the experts' own states `es` = (orders, word,
record, match, ppm, apm; `EXPERT_STATES`), `mixer.State`, the six of them held in one `Records` at
the calls from Python, and `used`, what a step leaves for learning: (E0, base, ent, n_ent, sets, z,
z_fast, z_slow, f_fast, f_slow, f0), the first four the sparse evidence ev (`mixer`). Records hold
no records: numba's parallel loops cannot take a tuple within a tuple (a `Records` they take whole).

Every expert takes part through its module's `predict` (its contexts, or its evidence) and `update`
(its state after the byte); the order below is the order of the tables and of the mixer's inputs:
the network, the count tables (orders, word, gap, record, column, wrap), the run input, ppm, match.
Reads that a step makes before its writes (the match check, the lookups) come first in loops of
their own, so the order of the lanes cannot change a bit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, prange
from numba.core import types
from numba.experimental import structref

from dyncompress.experts import apm, column, counts, gap, history, match, mixer, orders, ppm, record, words, wrap
from dyncompress.experts.common import NO_REFCOUNTS
from dyncompress.experts.counts import Contexts, Tables
from dyncompress.experts.history import History

EXPERT_STATES = ("orders", "word", "record", "match", "ppm", "apm")  # the order of `es`
# where each expert's fields start in `es` (the records' fields one after another)
_AT = np.cumsum([0] + [len(m.State._fields) for m in (orders, words, record, match, ppm, apm)]).tolist()
O0, O1, O2, O3, O4, O5, O6 = _AT


class Use(NamedTuple):
    """Which experts run (`MixSettings.experts`), by name; ring: a history ring is kept, lines: the
    line starts are kept (where an expert running `READS` them); network: the network's logits are
    input 0 (else it is zero for every byte, as allocated: `mix.Experts`)."""

    orders: bool
    word: bool
    gap: bool
    record: bool
    column: bool
    wrap: bool
    match: bool
    ppm: bool
    apm: bool
    ring: bool
    lines: bool
    network: bool


def flat_states(states: tuple) -> tuple:
    """The experts' states (records in EXPERT_STATES' order) as `es`: their fields one after another."""
    return tuple(field for state in states for field in state)


@structref.register
class RecordsType(types.StructRef):
    """numba's type of `Records`: one field per record, each the plain tuple the kernels rebuild."""

    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(t)) for name, t in fields)


class Records(structref.StructRefProxy):
    """The experts' state records in one object (use, h, tab, ctx, es, mx, each a plain tuple), made
    once per reset of the tables (`make_records`). A kernel called from Python takes it as one
    argument: numba then unboxes one pointer a call, not each of the records' some 60 values (arrays
    and scalars), and a parallel loop launches with one value instead of all of them flattened."""


structref.define_proxy(Records, RecordsType, ["use", "h", "tab", "ctx", "es", "mx"])


@njit(cache=True)
def make_records(use, h, tab, ctx, es, mx):
    """`Records` of these records (compiled and cached here: the proxy's own constructor is compiled
    afresh in every process)."""
    return Records(use, h, tab, ctx, es, mx)


@njit(cache=True, inline="always")
def states(es):
    """The experts' states `es` as their records."""
    return (
        orders.State(*es[O0:O1]),
        words.State(*es[O1:O2]),
        record.State(*es[O2:O3]),
        match.State(*es[O3:O4]),
        ppm.State(*es[O4:O5]),
        apm.State(*es[O5:O6]),
    )


@njit(cache=True)
def contexts(st):
    """Every lane's row and tag in every count table, in the tables' order; then, with `ways` > 1,
    every hashed context takes its row in its group (`counts.choose_rows`). st: `Records`."""
    use, h, tab, ctx = Use(*st.use), History(*st.h), Tables(*st.tab), Contexts(*st.ctx)
    o, w, r, _, _, _ = states(st.es)
    for b in range(ctx.rows.shape[0]):
        t = 0
        if use.orders:
            t = orders.predict(b, h, o, tab, ctx, t)
        if use.word:
            t = words.predict(b, h, w, tab, ctx, t)
        if use.gap:
            t = gap.predict(b, h, (), tab, ctx, t)
        if use.record:
            t = record.predict(b, h, r, tab, ctx, t)
        if use.column:
            t = column.predict(b, h, (), tab, ctx, t)
        if use.wrap:
            t = wrap.predict(b, h, (), tab, ctx, t)
    if tab.ways > 1:
        counts.choose_rows(tab, ctx)


@njit(cache=True)
def mix_step(logits, st, used, freqs, lo, hi):
    """Lanes lo ... hi - 1 (every lane's mixing is its own: `mix_parts` runs runs of lanes side by
    side): the mixer's inputs from the network's logits (float, units 2^-12) and the experts, the
    weight rows they choose (`used`'s sets, B x 8), the mixed logits z, and from z the coded
    frequencies `freqs` (B, 256); with the APM, the mixer's own go to f0 and the coded ones are those
    of z refined by `apm.predict`. Each mixer's own probabilities (`mixer.shares`) are left for its
    step. First a read of every cache line of the lanes' count rows (`counts.touch`), on the thread
    that mixes them, so that their misses overlap; returns its sum (which keeps the reads)."""
    use, h, tab, ctx, es, mx = st.use, st.h, st.tab, st.ctx, st.es, st.mx
    lanes_ctx = Contexts(*ctx)
    touched = counts.touch(Tables(*tab), lanes_ctx.rows, lo, hi) if lanes_ctx.K else np.int64(0)
    cols = mx[0].shape[1]
    n_in = used[1].shape[1]
    scratch = (
        np.empty(cols, dtype=np.int64),
        np.empty(cols, dtype=np.int64),
        np.empty(cols // n_in, dtype=np.int64),
        np.empty(256, dtype=np.int64),
        np.empty(256, dtype=np.int64),
        np.empty(256, dtype=np.bool_),
        np.empty(256, dtype=np.int64),
    )
    mix_lanes(logits, use, h, tab, ctx, es, mx, used, freqs, lo, hi, scratch)
    h, mx, use_apm, ap = History(*h), mixer.State(*mx), Use(*use).apm, states(es)[5]
    z, z_fast, z_slow, f_fast, f_slow, f0 = used[5:]
    mixer.shares(z_fast[lo:hi], mx.exp, f_fast[lo:hi])
    if mx.two:
        mixer.shares(z_slow[lo:hi], mx.exp, f_slow[lo:hi])
    if not use_apm:
        mixer.frequencies(z[lo:hi], mx.exp, freqs[lo:hi])
        return touched
    mixer.frequencies(z[lo:hi], mx.exp, f0[lo:hi])
    apm.predict(z, f0, h, ap, lo, hi)
    mixer.frequencies(z[lo:hi], mx.exp, freqs[lo:hi])
    return touched


@njit(cache=True, **NO_REFCOUNTS)
def mix_lanes(logits, use, h, tab, ctx, es, mx, used, freqs, lo, hi, scratch):
    """`mix_step`'s loop over lanes lo ... hi - 1: every lane's inputs, weight rows and mixed logits.
    scratch: (weights, weights_slow, common, acc, acc_slow, excl, p), `mix_step`'s."""
    use, h, tab, ctx, mx = Use(*use), History(*h), Tables(*tab), Contexts(*ctx), mixer.State(*mx)
    _, w, _, mt, pp, _ = states(es)
    E0, base, ent, n_ent, sets, z, z_fast, z_slow = used[:8]
    ev = (E0, base, ent, n_ent)
    n_in = base.shape[1]
    excl, p = scratch[5], scratch[6]  # (`ppm.predict`'s; the first five are `mixer.predict`'s)
    scratch = scratch[:5]
    for b in range(lo, hi):
        if use.network:
            mixer.network_input(b, logits, ev, mx.net_floor)
        m, order_seen, conf = 0, 0, 0
        if ctx.K:
            m, order_seen, conf = counts.predict(b, tab, ctx, ev, m)
        if use.ppm:
            m = ppm.predict(b, tab, ctx, pp, ev, 2 + ctx.K, m, excl, p)
        bucket, state = 0, 0
        if use.match:
            m, bucket, state = match.predict(b, h, mt, ev, n_in - 1, m)
        n_ent[b] = m
        mixer.choose(b, mx, sets, ctx.K, (bucket, state, order_seen, conf), h.last[b], w.word[b, 0])
        mixer.predict(b, mx, ev, m, sets, (z, z_fast, z_slow), scratch)


@njit(cache=True, parallel=True)
def mix_parts(parts, logits, st, used, freqs):
    """`mix_step` with the lanes cut into `parts` runs of lanes, one per thread: it only reads the
    tables, and writes each lane's own rows. Every thread reads the count rows it mixes into its own
    cache (not one thread for all: the other core would then read them from this one's)."""
    B = logits.shape[0]
    touched = np.zeros(parts, dtype=np.int64)
    for p in prange(parts):
        touched[p] = mix_step(logits, st, used, freqs, p * B // parts, (p + 1) * B // parts)
    return touched.sum()


@njit(cache=True, **NO_REFCOUNTS)
def advance(use, h, w, r, mt, y, k):
    """Every lane takes byte y: the match extends or ends (every check reads the history before any
    lane writes to it), the history, the record's votes, the word hashes and the last bytes move
    on (then the caller's `match.find`: lanes without a match look one up, every lane files its
    position)."""
    if use.match:
        for b in range(k):
            match.update(b, y[b], h, mt)
    for b in range(k):
        history.write(h, b, y[b], use.ring, use.lines)
        if use.record:
            record.update(b, y[b], h, r)
        if use.word:
            words.update(b, y[b], h, w)
        history.advance(h, b, y[b])


@njit(cache=True)
def learn(st, used, coded, y, k):
    """After byte y (B,) was coded with `coded` (B, 256) for the first k lanes: the APM learns from
    what was coded (before the history moves on), the mixers from their own probabilities, the
    count tables count y, and every expert's state moves on."""
    use, h, tab, ctx, mx = Use(*st.use), History(*st.h), Tables(*st.tab), Contexts(*st.ctx), mixer.State(*st.mx)
    _, w, r, mt, _, ap = states(st.es)
    E0, base, ent, n_ent, sets, _, _, _, f_fast, f_slow, _ = used
    ev = (E0, base, ent, n_ent)
    if use.apm:
        apm.update(coded, y, k, h, ap)
    mixer.update(ev, (f_fast, f_slow), mx, sets, y, k)
    if ctx.K:
        counts.update(tab, ctx, y, k, np.int64(0), ctx.K)
    advance(use, h, w, r, mt, y, k)
    if use.match:
        match.find(k, h, mt)


@njit(cache=True)
def gradient_part(st, used, y, lo, hi, G):
    """`mixer.gradients` of lanes lo ... hi - 1 into G (2, k, columns): the fast mixer's, the slow one's."""
    E0, base, ent, n_ent, _, _, _, _, f_fast, f_slow, _ = used
    mixer.gradients((E0, base, ent, n_ent), (f_fast, f_slow), mixer.State(*st.mx), y, lo, hi, G[0], G[1])


@njit(cache=True)
def learn_section(section, split, st, used, coded, y, k, G):
    """One of `learn_parts`'s two sections: (0) the mixers' steps in the first split[1] weight sets and
    the first split[0] count tables; (1) the APM's step, the other tables and sets, and `advance`."""
    use, h, tab, ctx, mx = Use(*st.use), History(*st.h), Tables(*st.tab), Contexts(*st.ctx), mixer.State(*st.mx)
    _, w, r, mt, _, ap = states(st.es)
    sets = used[4]
    split_tables, split_sets = split
    G = (G[0], G[1])
    if section == 0:
        mixer.steps(G, mx, sets, k, np.int64(0), split_sets)
        if ctx.K:
            counts.update(tab, ctx, y, k, np.int64(0), split_tables)
        return
    if use.apm:
        apm.update(coded, y, k, h, ap)
    if ctx.K and split_tables < ctx.rows.shape[1]:
        counts.update(tab, ctx, y, k, split_tables, ctx.rows.shape[1])
    if split_sets < sets.shape[1]:
        mixer.steps(G, mx, sets, k, split_sets, sets.shape[1])
    advance(use, h, w, r, mt, y, k)
    if use.match:
        match.find(k, h, mt)


@njit(cache=True, parallel=True)
def learn_parts(parts, split, st, used, coded, y, k):
    """`learn`'s kernels in two sections side by side, one per thread (`learn_section`). They touch
    disjoint memory (every weight set and count table its own rows; the APM reads the last bytes
    before `advance` moves them on, in its own section), and each kernel runs as it does alone: the
    same state for any split. Before them, the mixers' gradients, every lane's its own, in `parts`
    runs of lanes."""
    G = np.empty((2, k, st.mx[0].shape[1]), dtype=np.int64)  # (W's columns)
    for p in prange(parts):
        gradient_part(st, used, y, p * k // parts, (p + 1) * k // parts, G)
    for section in prange(2):
        learn_section(np.int64(section), split, st, used, coded, y, k, G)
