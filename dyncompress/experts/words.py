"""Three contexts of words: the current word with the word before it, the current word alone (the
rest of a word from its start), the current word with the word two back.

A word is a run of letters (`common.is_letter`: ASCII letters, case folded, and bytes >= 128); the
first byte of a UTF-8 character of 3 or 4 bytes (CJK and the like) starts a word of its own.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dyncompress.experts.common import ONE_U, P1, P2, hashed_row, is_letter, mix64

NAME = "word"
TABLES = ("pair", "word", "skip")
SEEN = True  # its tables choose the highest context seen (`counts.Contexts.n_seen`)
READS = ()  # of the history, beyond the position and the last bytes (`history.History`)
WIDE_LEAD = 0xE0  # the first byte of a UTF-8 character of 3 or 4 bytes: a word of its own
NO_SALT = np.uint64(0)


class State(NamedTuple):
    """word (B, 3) uint64: hashes of every lane's current word, the one before, the one before that
    (0: none)."""

    word: np.ndarray


def make(settings, lanes: int, hb: int, used: bool) -> State:
    return State(np.zeros((lanes, 3), dtype=np.uint64))


@njit(cache=True, inline="always")
def predict(b, h, st, tab, ctx, t):
    """Lane b's word contexts into tables t ... t + 2; returns the next table."""
    w0, w1, w2 = st.word[b, 0], st.word[b, 1], st.word[b, 2]
    cur = mix64(w0)
    keys = (cur + w1 * P1, w0 + P1, cur + w2 * P1 + P2)
    for key in keys:
        ctx.rows[b, t], ctx.tagv[b, t] = hashed_row(key, NO_SALT, tab.shift[t], tab.base[t])
        t += 1
    return t


@njit(cache=True, inline="always")
def update(b, y, h, st):
    """Lane b's byte y: a letter extends the current word; anything else ends it (a wide
    character's first byte ends it and starts the next)."""
    letter = is_letter(y)
    low = np.uint64(y | 32) if 65 <= y <= 90 else np.uint64(y)
    cur = st.word[b, 0]
    if cur != 0 and (not letter or y >= WIDE_LEAD):
        st.word[b, 2] = st.word[b, 1]
        st.word[b, 1] = cur
        if letter:
            cur = np.uint64(0)
    st.word[b, 0] = (cur ^ low) * P1 + ONE_U if letter else np.uint64(0)
