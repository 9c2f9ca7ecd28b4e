"""numpy's draws of query indices, and the sums of the values they pick, in one compiled pass.

[`recallkit.stats`][recallkit.stats] draws each batch of resamples as scipy does,
``rng.integers(0, width, (m, width))`` from ``numpy.random.default_rng(seed)``, and sums the
values each resample picks. At the size of a large test split (60,502 queries, 10,000
resamples) numpy's draw alone writes 4.8 GB of indices that the gather reads back; here one
numba kernel makes the same draws and adds each value as it is drawn, so that no index is
written:

* the draws are numpy's, word for word: PCG64 (``numpy.random.PCG64``: a 128-bit linear
  congruential state, XSL-RR output), 32-bit words (the low half of each 64-bit output, then the
  high half), bounded by Lemire's multiply-and-reject as ``Generator.integers`` bounds them for
  a width below 2**32 (``numpy/random/src/distributions/distributions.c``); the stream starts
  from the generator's state and leaves the generator where numpy's draws would have left it;
* integer sums are exact in any order; float means are numpy's own, ``np.mean(values[idx],
  axis=-1)``: the pairwise summation of ``numpy/_core/src/umath/loops_utils.h`` (blocks of at
  most 128 summed with eight accumulators, larger ranges split in two at a multiple of 8), then
  the division by the width;
* a median is taken from the counts of each distinct value in the resample: the middle one or
  two, averaged as ``np.median`` averages them;
* the randomization test's swaps are the raw 32-bit words (``rng.integers(0, 2**32,
  dtype=numpy.uint32)``), a pair kept where a word's lowest bit is 1 (scipy's
  ``permutation_test``), summed or counted as they are drawn.

All of it is checked against numpy once per process ([`agrees`][agrees]); where numpy draws or sums
otherwise (another version), the statistics module uses numpy's own calls.

This module needs numpy and numba (no torch).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["Stream", "agrees", "usable"]

_MULT = (2549297995355413924 << 64) + 4865540595714422341  # PCG's default 128-bit multiplier
_MASK64 = (1 << 64) - 1
_BLOCK = 128  # numpy's PW_BLOCKSIZE


@intrinsic
def _lcg(typingctx, hi, lo, inc_hi, inc_lo):
    """PCG64's state step ``state * multiplier + increment`` modulo 2**128 in LLVM's 128-bit
    integers (three multiplies on x86-64), the state and increment as (high, low) uint64 halves;
    returns the new ``(high, low)``."""
    if any(x != types.uint64 for x in (hi, lo, inc_hi, inc_lo)):
        return None
    pair = types.UniTuple(types.uint64, 2)

    def codegen(context, builder, signature, args):
        wide, half = ir.IntType(128), ir.IntType(64)
        shift = ir.Constant(wide, 64)

        def join(h, low):
            return builder.or_(builder.shl(builder.zext(h, wide), shift), builder.zext(low, wide))

        state = builder.add(
            builder.mul(join(args[0], args[1]), ir.Constant(wide, _MULT)), join(args[2], args[3])
        )
        parts = [builder.trunc(builder.lshr(state, shift), half), builder.trunc(state, half)]
        return context.make_tuple(builder, pair, parts)

    return pair(types.uint64, types.uint64, types.uint64, types.uint64), codegen


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _step(hi, lo, inc_hi, inc_lo):  # pragma: no cover - compiled
    """PCG64's next state ``(hi, lo)`` and its 64-bit output (XSL-RR: the halves' xor rotated
    right by the state's top 6 bits)."""
    new_hi, new_lo = _lcg(hi, lo, inc_hi, inc_lo)
    x = new_hi ^ new_lo
    rot = new_hi >> np.uint64(58)
    return new_hi, new_lo, (x >> rot) | (x << ((np.uint64(64) - rot) & np.uint64(63)))


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _next32(hi, lo, inc_hi, inc_lo, has, kept):  # pragma: no cover - compiled
    """numpy's next 32-bit word: the high half kept from the last 64-bit output (``has``,
    ``kept``), else the low half of a new one; returns the new ``hi, lo, has, kept`` and the
    word."""
    if has:
        return hi, lo, False, kept, kept
    hi, lo, bits = _step(hi, lo, inc_hi, inc_lo)
    return hi, lo, True, bits >> np.uint64(32), bits & np.uint64(0xFFFFFFFF)


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _bounded(hi, lo, inc_hi, inc_lo, has, kept, span, threshold):  # pragma: no cover
    """An integer in ``[0, span)`` by Lemire's rejection, as numpy bounds a 32-bit range;
    returns the new ``hi, lo, has, kept`` and the integer."""
    hi, lo, has, kept, word = _next32(hi, lo, inc_hi, inc_lo, has, kept)
    m = word * span
    while (m & np.uint64(0xFFFFFFFF)) < threshold:
        hi, lo, has, kept, word = _next32(hi, lo, inc_hi, inc_lo, has, kept)
        m = word * span
    return hi, lo, has, kept, np.int64(m >> np.uint64(32))


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _block(values, idx, start, n):  # pragma: no cover - compiled
    """numpy's sum of at most 128 values ``values[idx[start:start + n]]``: in order from -0.0
    below 8, else eight accumulators, their pairwise sum, then the rest in order."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += values[idx[start + i]]
        return res
    r0 = values[idx[start]]
    r1 = values[idx[start + 1]]
    r2 = values[idx[start + 2]]
    r3 = values[idx[start + 3]]
    r4 = values[idx[start + 4]]
    r5 = values[idx[start + 5]]
    r6 = values[idx[start + 6]]
    r7 = values[idx[start + 7]]
    i = 8
    stop = n - n % 8
    while i < stop:
        p = start + i
        r0 += values[idx[p]]
        r1 += values[idx[p + 1]]
        r2 += values[idx[p + 2]]
        r3 += values[idx[p + 3]]
        r4 += values[idx[p + 4]]
        r5 += values[idx[p + 5]]
        r6 += values[idx[p + 6]]
        r7 += values[idx[p + 7]]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += values[idx[start + i]]
        i += 1
    return res


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _pairwise(values, idx, n):  # pragma: no cover - compiled
    """numpy's pairwise sum of ``values[idx[:n]]``: a range of more than 128 split in two (the
    first part ``n // 2`` less its remainder modulo 8) and the sums of its parts added. Walked
    with a stack of ranges (numba's cache does not keep recursive functions)."""
    starts = np.empty(128, dtype=np.int64)
    sizes = np.empty(128, dtype=np.int64)
    joins = np.empty(128, dtype=np.bool_)
    sums = np.empty(128, dtype=np.float64)
    starts[0], sizes[0], joins[0] = 0, n, False
    top, kept = 1, 0
    while top > 0:
        top -= 1
        start, size, join = starts[top], sizes[top], joins[top]
        if join:  # both parts summed: the first part's sum plus the second's
            kept -= 1
            sums[kept - 1] = sums[kept - 1] + sums[kept]
        elif size <= _BLOCK:
            sums[kept] = _block(values, idx, start, size)
            kept += 1
        else:
            half = size // 2
            half -= half % 8
            starts[top], sizes[top], joins[top] = start, size, True
            starts[top + 1], sizes[top + 1], joins[top + 1] = start + half, size - half, False
            starts[top + 2], sizes[top + 2], joins[top + 2] = start, half, False
            top += 3
    return sums[0]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _draw(st, span, threshold, out):  # pragma: no cover - compiled
    """``out`` (1-D int64) filled with the next draws; ``st`` holds the state's high and low
    words, the increment's, whether a half word is kept, and that half."""
    hi, lo, inc_hi, inc_lo, has, kept = st[0], st[1], st[2], st[3], st[4] != 0, st[5]
    for i in range(out.shape[0]):
        hi, lo, has, kept, out[i] = _bounded(hi, lo, inc_hi, inc_lo, has, kept, span, threshold)
    st[0], st[1], st[4], st[5] = hi, lo, np.uint64(has), kept


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _sums(st, span, threshold, words, floats, word_sums, means, idx):  # pragma: no cover
    """Per resample ``r`` (a row of ``word_sums``): ``span`` draws; ``word_sums[r, w]`` the sum of
    ``words[w]`` over them, ``means[r, f]`` numpy's mean of ``floats[f]`` over them. One word
    alone is summed as it is drawn; else ``idx`` (``span`` int64) holds a resample's draws while
    each word and float sample reads them. ``st`` as in [`_draw`][_draw]."""
    hi, lo, inc_hi, inc_lo, has, kept = st[0], st[1], st[2], st[3], st[4] != 0, st[5]
    width = np.int64(span)
    n_words = words.shape[0]
    for r in range(word_sums.shape[0]):
        if floats.shape[0] == 0 and n_words == 1:
            acc = np.int64(0)
            word = words[0]
            for _ in range(width):
                hi, lo, has, kept, j = _bounded(hi, lo, inc_hi, inc_lo, has, kept, span, threshold)
                acc += word[j]
            word_sums[r, 0] = acc
            continue
        for i in range(width):
            hi, lo, has, kept, idx[i] = _bounded(hi, lo, inc_hi, inc_lo, has, kept, span, threshold)
        for w in range(n_words):
            acc = np.int64(0)
            word = words[w]
            for i in range(width):
                acc += word[idx[i]]
            word_sums[r, w] = acc
        for f in range(floats.shape[0]):
            means[r, f] = (0.0 + _pairwise(floats[f], idx, width)) / width
    st[0], st[1], st[4], st[5] = hi, lo, np.uint64(has), kept


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _medians(st, span, threshold, codes, uniques, counts, out, idx):  # pragma: no cover
    """Per resample ``r`` (a row of ``out``): ``span`` draws into ``idx``; ``out[r, q]`` the
    median of sample ``q``'s values over them as ``np.median`` gives it, from counts: sample
    ``q``'s value of query ``j`` is ``uniques[q, codes[q, j]]`` (its distinct values, sorted);
    ``counts`` (as long as ``uniques``' rows) is scratch. ``st`` as in [`_draw`][_draw]."""
    hi, lo, inc_hi, inc_lo, has, kept = st[0], st[1], st[2], st[3], st[4] != 0, st[5]
    width = np.int64(span)
    low, high = (width - 1) // 2, width // 2  # the middle order statistics (one when odd)
    for r in range(out.shape[0]):
        for i in range(width):
            hi, lo, has, kept, idx[i] = _bounded(hi, lo, inc_hi, inc_lo, has, kept, span, threshold)
        for q in range(codes.shape[0]):
            counts[:] = 0
            code = codes[q]
            for i in range(width):
                counts[code[idx[i]]] += 1
            out[r, q] = _middle(counts, uniques[q], low, high)
    st[0], st[1], st[4], st[5] = hi, lo, np.uint64(has), kept


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _middle(counts, uniques, low, high):  # pragma: no cover - compiled
    """The median of the values counted (``counts[u]`` of ``uniques[u]``, sorted), as
    ``np.median`` gives it: the mean of the order statistics ``low`` and ``high`` (one when they
    are equal), a zero of either sign coming out as 0.0 (numpy's mean adds them to 0.0)."""
    seen, u = counts[0], 0
    while seen <= low:
        u += 1
        seen += counts[u]
    a = uniques[u]
    while seen <= high:
        u += 1
        seen += counts[u]
    b = uniques[u]
    return 0.0 + a if low == high else (0.0 + (a + b)) / 2.0


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _swapped_medians(st, code_a, code_b, uniques, count_a, count_b, out):  # pragma: no cover
    """Per resample ``r``: ``n`` raw 32-bit words, pair ``i`` kept where word ``i``'s lowest bit
    is 1 and swapped where it is 0; ``out[r]`` the medians of both sides (side a holds ``a[i]``
    where kept and ``b[i]`` where swapped), the values ``uniques[code_a[i]]`` and
    ``uniques[code_b[i]]``. ``st`` as in [`_draw`][_draw]."""
    hi, lo, inc_hi, inc_lo, has, kept = st[0], st[1], st[2], st[3], st[4] != 0, st[5]
    n = code_a.shape[0]
    low, high = (n - 1) // 2, n // 2
    for r in range(out.shape[0]):
        count_a[:] = 0
        count_b[:] = 0
        for i in range(n):
            hi, lo, has, kept, word = _next32(hi, lo, inc_hi, inc_lo, has, kept)
            if word & np.uint64(1):
                count_a[code_a[i]] += 1
                count_b[code_b[i]] += 1
            else:
                count_a[code_b[i]] += 1
                count_b[code_a[i]] += 1
        out[r, 0] = _middle(count_a, uniques, low, high)
        out[r, 1] = _middle(count_b, uniques, low, high)
    st[0], st[1], st[4], st[5] = hi, lo, np.uint64(has), kept


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _words(st, out):  # pragma: no cover - compiled
    """``out`` (1-D uint32) filled with the next raw 32-bit words (``rng.integers(0, 2**32,
    dtype=numpy.uint32)``'s); ``st`` as in [`_draw`][_draw]."""
    hi, lo, inc_hi, inc_lo, has, kept = st[0], st[1], st[2], st[3], st[4] != 0, st[5]
    for i in range(out.shape[0]):
        hi, lo, has, kept, word = _next32(hi, lo, inc_hi, inc_lo, has, kept)
        out[i] = np.uint32(word)
    st[0], st[1], st[4], st[5] = hi, lo, np.uint64(has), kept


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _kept_sums(st, d, sums, starts):  # pragma: no cover - compiled
    """Per resample ``r``: ``n`` raw 32-bit words (``d`` is ``(n, J)``), pair ``i`` kept where
    word ``i``'s lowest bit is 1; ``sums[r, j]`` the sum of ``d[i, j]`` over the kept pairs (in
    index order), ``starts[r]`` the state the resample's words start from (``st``'s six words)."""
    hi, lo, inc_hi, inc_lo, has, kept = st[0], st[1], st[2], st[3], st[4] != 0, st[5]
    n, columns = d.shape
    for r in range(sums.shape[0]):
        starts[r, 0], starts[r, 1], starts[r, 2], starts[r, 3] = hi, lo, inc_hi, inc_lo
        starts[r, 4], starts[r, 5] = np.uint64(has), kept
        if columns == 1:
            acc = 0.0
            for i in range(n):
                hi, lo, has, kept, word = _next32(hi, lo, inc_hi, inc_lo, has, kept)
                acc += d[i, 0] * np.float64(word & np.uint64(1))
            sums[r, 0] = acc
            continue
        for j in range(columns):
            sums[r, j] = 0.0
        for i in range(n):
            hi, lo, has, kept, word = _next32(hi, lo, inc_hi, inc_lo, has, kept)
            if word & np.uint64(1):
                for j in range(columns):
                    sums[r, j] += d[i, j]
    st[0], st[1], st[4], st[5] = hi, lo, np.uint64(has), kept


class Stream:
    """The draws of a ``numpy.random.Generator`` (PCG64) of integers in ``[0, width)`` (and of
    raw 32-bit words, for swaps), made here: each call continues where the last left off, and
    [`sync`][sync] gives the generator the state its own draws would have left.

    Parameters
    ----------
    rng : numpy.random.Generator
        A generator on ``numpy.random.PCG64``.
    width : int
        The number of values drawn from, ``2 <= width < 2**32`` ([`usable`][usable]).
    """

    def __init__(self, rng: np.random.Generator, width: int) -> None:
        self.rng, self.width = rng, width
        state = rng.bit_generator.state
        s, inc = state["state"]["state"], state["state"]["inc"]
        kept = (state["has_uint32"], state["uinteger"])
        self.st = np.array([s >> 64, s & _MASK64, inc >> 64, inc & _MASK64, *kept], dtype=np.uint64)
        self.span = np.uint64(width)
        self.threshold = np.uint64(((1 << 32) - width) % width)

    def integers(self, m: int) -> np.ndarray:
        """``rng.integers(0, width, (m, width))``: an ``(m, width)`` int64 array."""
        out = np.empty(m * self.width, dtype=np.int64)
        _draw(self.st, self.span, self.threshold, out)
        return out.reshape(m, self.width)

    def sums(self, m: int, words: np.ndarray, floats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next ``m`` resamples' sums of each row of ``words`` (``(W, width)`` int64; exact)
        and means of each row of ``floats`` (``(F, width)`` float64; ``np.mean(floats[f][idx],
        axis=-1)`` bit for bit): ``(m, W)`` int64 and ``(m, F)`` float64 arrays."""
        word_sums = np.empty((m, words.shape[0]), dtype=np.int64)
        means = np.empty((m, floats.shape[0]), dtype=np.float64)
        one = words.shape[0] == 1 and floats.shape[0] == 0
        idx = np.empty(0 if one else self.width, dtype=np.int64)
        _sums(self.st, self.span, self.threshold, words, floats, word_sums, means, idx)
        return word_sums, means

    def medians(self, m: int, samples: Sequence[np.ndarray]) -> np.ndarray:
        """The next ``m`` resamples' medians of each sample (1-D float64 arrays of ``width``
        values; ``np.median(sample[idx], axis=-1)`` bit for bit): an ``(m, len(samples))``
        array."""
        uniques, codes = [], []
        for values in samples:
            unique, code = np.unique(values, return_inverse=True)
            uniques.append(unique)
            codes.append(code.reshape(-1))
        table = np.zeros((len(samples), max(u.size for u in uniques)))
        for q, unique in enumerate(uniques):
            table[q, : unique.size] = unique
        out = np.empty((m, len(samples)), dtype=np.float64)
        counts = np.empty(table.shape[1], dtype=np.int64)
        idx = np.empty(self.width, dtype=np.int64)
        _medians(self.st, self.span, self.threshold, np.stack(codes), table, counts, out, idx)
        return out

    def swapped_medians(self, m: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The next ``m`` resamples of swaps of the pairs ``(a[i], b[i])`` (a raw 32-bit word
        each, as [`kept_sums`][kept_sums] draws them): the medians of both sides, ``(m, 2)``
        (``np.median`` of each side bit for bit)."""
        uniques, codes = np.unique(np.concatenate([a, b]), return_inverse=True)
        codes = codes.reshape(-1)
        out = np.empty((m, 2), dtype=np.float64)
        count_a, count_b = (np.empty(uniques.size, dtype=np.int64) for _ in range(2))
        _swapped_medians(self.st, codes[: a.size], codes[a.size :], uniques, count_a, count_b, out)
        return out

    def kept_sums(self, m: int, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The next ``m`` resamples of swaps, ``n`` raw 32-bit words each (``d`` is ``(n, J)``
        float64): per resample the sums of ``d``'s columns over the pairs kept (a word's lowest
        bit 1), ``(m, J)``, and the state it starts from, ``(m, 6)`` (for
        [`kept_row`][kept_row])."""
        sums = np.empty((m, d.shape[1]), dtype=np.float64)
        starts = np.empty((m, 6), dtype=np.uint64)
        _kept_sums(self.st, d, sums, starts)
        return sums, starts

    @staticmethod
    def kept_row(start: np.ndarray, n: int) -> np.ndarray:
        """The ``n`` kept flags (1 kept, 0 swapped; uint32) of the resample that starts from
        ``start`` (a row of [`kept_sums`][kept_sums]'s states)."""
        out = np.empty(n, dtype=np.uint32)
        _words(start.copy(), out)
        return np.bitwise_and(out, 1)

    def sync(self) -> None:
        """Leave the generator where its own draws would have left it."""
        state = self.rng.bit_generator.state
        hi, lo, inc_hi, inc_lo, has, word = (int(v) for v in self.st)
        state["state"] = {"state": (hi << 64) | lo, "inc": (inc_hi << 64) | inc_lo}
        state["has_uint32"], state["uinteger"] = has, word
        self.rng.bit_generator.state = state


@functools.cache
def agrees() -> bool:
    """Whether this numpy draws, averages and takes medians as [`Stream`][Stream] does, checked
    once per process on odd and even widths, a draw ending on half a word, float means of mixed
    magnitudes, swaps, and medians of tied values and zeros of either sign."""
    try:
        for width, m in ((2, 3), (7, 1), (129, 5), (1001, 3), (4096, 2)):
            values = np.random.default_rng(width).standard_normal(width) * np.logspace(-3, 3, width)
            words = np.arange(width, dtype=np.int64)[None, :] * 3
            ours, theirs = np.random.default_rng(7), np.random.default_rng(7)
            stream = Stream(ours, width)
            idx = stream.integers(m)
            sums, means = stream.sums(m, words, values[None, :])
            stream.sync()
            expected = theirs.integers(0, width, (m, width))
            expected_next = theirs.integers(0, width, (m, width))
            if not np.array_equal(idx, expected):
                return False
            if not np.array_equal(sums[:, 0], np.sum(words[0][expected_next], axis=-1)):
                return False
            if not np.array_equal(means[:, 0], np.mean(values[expected_next], axis=-1)):
                return False
            if ours.bit_generator.state != theirs.bit_generator.state:
                return False
            d = values[:, None] * np.array([[1.0, -2.0]])
            sums, starts = stream.kept_sums(m, d)
            words = theirs.integers(0, 1 << 32, size=(m, width), dtype=np.uint32)
            kept = np.bitwise_and(words, 1)
            if not np.array_equal(Stream.kept_row(starts[-1], width), kept[-1]):
                return False
            expected = [
                [np.add.accumulate(np.where(row == 1, c, 0.0))[-1] for c in d.T] for row in kept
            ]
            if not np.array_equal(sums, np.array(expected)):
                return False
            both = Stream(np.random.default_rng(4), 2).swapped_medians(m, values, values[::-1])
            swapped = np.random.default_rng(4).integers(0, 1 << 32, (m, width), np.uint32) & 1 == 0
            side_a = np.where(swapped, values[::-1], values)
            side_b = np.where(swapped, values, values[::-1])
            if not np.array_equal(
                both, np.stack([np.median(side_a, axis=-1), np.median(side_b, axis=-1)], 1)
            ):
                return False
            ties = np.round(values[:, None] * np.array([[1.0, 0.0]]), 0).T
            ties[1, ::3] = -0.0
            stream = Stream(np.random.default_rng(9), width)
            medians = stream.medians(m, list(ties))
            idx = np.random.default_rng(9).integers(0, width, (m, width))
            for q, sample in enumerate(ties):
                if medians[:, q].tobytes() != np.median(sample[idx], axis=-1).tobytes():
                    return False
    except Exception:  # numba or the generator's state not as expected: numpy's own draws
        return False
    return True


def usable(rng: Any, width: int) -> bool:
    """Whether [`Stream`][Stream] makes ``rng.integers(0, width)``'s draws: a PCG64 generator,
    ``2 <= width < 2**32`` (numpy draws nothing for a width of 1), and a numpy that agrees
    ([`agrees`][agrees])."""
    pcg = isinstance(getattr(rng, "bit_generator", None), np.random.PCG64)
    return pcg and 2 <= width < 1 << 32 and agrees()
