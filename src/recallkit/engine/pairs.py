"""Which reference items are relevant to a query, and which it skips: as codes, never as pairs.

* [`Pairs`][Pairs]: explicit per-query sets of global reference indices (CSR): ground-truth items,
  or candidates to skip (a query's own row, a per-query exclusion list).
* [`LabelPositives`][LabelPositives]: relevance by label code (reference ``j`` is relevant to query
  ``i`` when their codes are equal), compared per chunk and block; positive pairs are never listed
  for the whole problem, so memory does not grow with the class sizes.
* [`Exclusions`][Exclusions]: what each query skips: explicit pairs (its own row, lists) and every
  reference item whose id code equals the query's (several photos of one object). Ids are coded
  like labels, so ten thousand items sharing an id cost one group, not ten thousand pairs.

Reference codes are aligned with the blocks' rows: position ``offset + local`` of a block of the
reference, or the block's own rows for a sharded block (``Block.global_index``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class Pairs:
    """Per-query sets of global reference indices, as CSR.

    ``expand(start, stop)`` returns flat ``(rows, cols)`` tensors for queries ``start:stop``, with
    rows local to the chunk and ``cols`` ascending within a row.
    """

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, num_query: int) -> None:
        self.indptr = indptr
        self.indices = indices
        self.num_query = num_query
        self.is_diagonal = False  # query i paired with reference i only (symmetric)

    @classmethod
    def diagonal(cls, n: int) -> Pairs:
        """Query ``i`` paired with reference ``i``."""
        pairs = cls(torch.arange(n + 1, dtype=torch.int64), torch.arange(n), n)
        pairs.is_diagonal = True
        return pairs

    @classmethod
    def from_lists(cls, lists: Any, num_query: int) -> Pairs:
        """From an ``(n, g)`` array padded with ``-1`` or a list of index lists."""
        if isinstance(lists, np.ndarray) and lists.ndim == 2:
            keep = lists >= 0
            counts = keep.sum(axis=1)
            flat = lists[keep]
        else:
            counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
            flat = np.fromiter(
                (v for x in lists for v in x), dtype=np.int64, count=int(counts.sum())
            )
            keep = flat >= 0
            row = np.repeat(np.arange(len(lists)), counts)[keep]
            counts = np.bincount(row, minlength=len(lists))
            flat = flat[keep]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(torch.from_numpy(indptr), torch.from_numpy(flat.astype(np.int64)), num_query)

    @classmethod
    def from_codes(cls, query_codes: np.ndarray, reference_codes: np.ndarray) -> Pairs:
        """Query ``i`` paired with every reference ``j`` of equal code (``-1``: none)."""
        groups = Groups(np.asarray(reference_codes, dtype=np.int64))
        lo, hi = groups.ranges(np.asarray(query_codes, dtype=np.int64))
        _, cols = groups.expand(lo, hi)
        indptr = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
        return cls(torch.from_numpy(indptr), torch.from_numpy(cols), len(lo))

    @classmethod
    def union(cls, parts: Sequence[Pairs], num_query: int, num_reference: int) -> Pairs:
        """The union of several pair sets, each pair once, columns ascending within a query."""
        keys = []
        for pairs in parts:
            rows, cols = pairs.expand(0, num_query, torch.device("cpu"))
            keys.append(rows * num_reference + cols)
        key = torch.unique(torch.cat(keys)) if keys else torch.empty(0, dtype=torch.int64)
        rows, cols = key // max(num_reference, 1), key % max(num_reference, 1)
        indptr = torch.zeros(num_query + 1, dtype=torch.int64)
        indptr[1:] = torch.bincount(rows, minlength=num_query).cumsum(0)
        return cls(indptr, cols, num_query)

    def counts(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def subset(self, rows: np.ndarray) -> Pairs:
        """The pairs of queries ``rows`` (an int64 array), as queries ``0..len(rows)-1``."""
        counts = self.counts().numpy()[rows]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        starts = self.indptr.numpy()[rows]
        take = np.repeat(starts - indptr[:-1], counts) + np.arange(indptr[-1])
        return Pairs(torch.from_numpy(indptr), self.indices[torch.from_numpy(take)], len(rows))

    def expand(
        self, start: int, stop: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        counts = self.indptr[start + 1 : stop + 1] - self.indptr[start:stop]
        rows = torch.repeat_interleave(torch.arange(stop - start), counts)
        return rows.to(device), self.indices[lo:hi].to(device)


class Groups:
    """Positions of equal codes, grouped: ``members[starts[g]:starts[g+1]]`` (ascending) hold
    code ``uniq[g]``. O(m) memory whatever the number of classes."""

    def __init__(self, codes: np.ndarray) -> None:
        self.members = np.argsort(codes, kind="stable").astype(np.int64)
        self.uniq, first = np.unique(codes[self.members], return_index=True)
        self.starts = np.append(first, len(codes)).astype(np.int64)

    def ranges(self, query_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query code, the ``[lo, hi)`` range of its group in ``members`` (empty if none or
        if the code is negative)."""
        if not len(self.uniq):
            zero = np.zeros(len(query_codes), dtype=np.int64)
            return zero, zero.copy()
        g = np.searchsorted(self.uniq, query_codes)
        gc = np.minimum(g, len(self.uniq) - 1)
        found = (g < len(self.uniq)) & (self.uniq[gc] == query_codes) & (query_codes >= 0)
        lo = np.where(found, self.starts[gc], 0)
        hi = np.where(found, self.starts[gc + 1], 0)
        return lo.astype(np.int64), hi.astype(np.int64)

    def expand(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat ``(rows, members)`` of the ranges, members ascending within a row."""
        sizes = hi - lo
        rows = np.repeat(np.arange(len(lo), dtype=np.int64), sizes)
        begin = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        position = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(begin - lo, sizes)
        return rows, self.members[position]


def _block_key(block: Any) -> tuple[int, int]:
    return (block.offset, block.rows)


def block_codes(codes: np.ndarray, block: Any) -> np.ndarray:
    """The codes of a block's rows (codes are aligned with ``offset + local``, or with the rows
    of a sharded block)."""
    if block.global_index is not None:
        return codes
    return codes[block.offset : block.offset + block.rows]


class Exclusions:
    """What each query skips: explicit pairs (global reference indices) and every reference item
    whose code equals the query's (``-1``: no code). Either part may be absent."""

    def __init__(
        self,
        pairs: Pairs | None = None,
        query_codes: np.ndarray | None = None,
        reference_codes: np.ndarray | None = None,
    ) -> None:
        self.pairs = pairs
        self.query_codes = None
        self.reference_codes = None
        if query_codes is not None:
            self.query_codes = np.ascontiguousarray(query_codes, dtype=np.int64)
            self.reference_codes = np.ascontiguousarray(reference_codes, dtype=np.int64)
        self._groups: dict[tuple[int, int], Groups] = {}

    @classmethod
    def of(
        cls,
        pairs: Sequence[Pairs],
        num_query: int,
        num_reference: int,
        codes: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Exclusions | None:
        """The exclusions of several pair sets and optional id codes; ``None`` when empty."""
        merged = None
        if len(pairs) == 1:
            merged = pairs[0]
        elif pairs:
            merged = Pairs.union(pairs, num_query, num_reference)
        if merged is None and codes is None:
            return None
        return cls(merged, *(codes if codes is not None else (None, None)))

    @property
    def has_codes(self) -> bool:
        return self.query_codes is not None

    def subset(self, rows: np.ndarray) -> Exclusions:
        """The exclusions of queries ``rows`` (an int64 array), as queries ``0..len(rows)-1``."""
        pairs = None if self.pairs is None else self.pairs.subset(rows)
        if self.query_codes is None:
            return Exclusions(pairs)
        return Exclusions(pairs, self.query_codes[rows], self.reference_codes)

    def groups(self, block: Any) -> Groups:
        """The block's reference positions grouped by exclusion code."""
        key = _block_key(block)
        if key not in self._groups:
            self._groups[key] = Groups(block_codes(self.reference_codes, block))
        return self._groups[key]

    def chunk(self, start: int, stop: int, device: torch.device) -> ChunkExclusions:
        return ChunkExclusions(self, start, stop, device)

    def mirrored(self, block: Any, rows: int) -> bool:
        """Whether queries ``0:rows`` (the block's own rows) skip symmetrically: ``i`` skips
        ``j`` exactly when ``j`` skips ``i``."""
        if self.has_codes:
            own = block_codes(self.reference_codes, block)
            if len(own) != rows or not np.array_equal(self.query_codes[:rows], own):
                return False
        if self.pairs is None:
            return True
        if self.pairs.is_diagonal and block.global_index is None and block.offset == 0:
            return True  # (i, i) within the block's own rows: its own mirror image
        r, c = self.pairs.expand(0, rows, torch.device("cpu"))
        local, inside = locals_of(block, c)
        r, local = r[inside].numpy(), local[inside].numpy()
        key = np.sort(r * block.rows + local)
        mirrored = np.sort(local * block.rows + r)
        return bool(np.array_equal(key, mirrored))


class ChunkExclusions:
    """The exclusions of queries ``start:stop``: explicit pairs (chunk-local rows, global
    columns) and the chunk's exclusion codes."""

    def __init__(self, exclusions: Exclusions | None, start: int, stop: int, device) -> None:
        self.exclusions = exclusions
        self.start, self.stop = start, stop
        self.rows_in_chunk = stop - start
        self._csr: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        empty = torch.empty(0, dtype=torch.int64, device=device)
        self.rows, self.cols = empty, empty
        self.query_codes = None
        if exclusions is not None:
            if exclusions.pairs is not None:
                self.rows, self.cols = exclusions.pairs.expand(start, stop, device)
            if exclusions.has_codes:
                self.query_codes = exclusions.query_codes[start:stop]

    @classmethod
    def none(cls, rows: int, device: torch.device) -> ChunkExclusions:
        return cls(None, 0, rows, device)

    @property
    def empty(self) -> bool:
        return self.rows.numel() == 0 and self.query_codes is None

    def in_block(self, block: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rows, local cols, global cols)`` of the explicit pairs that fall in ``block``."""
        local, inside = locals_of(block, self.cols)
        return self.rows[inside], local[inside], self.cols[inside]

    def csr(self, block: Any) -> tuple[np.ndarray, np.ndarray]:
        """The explicit pairs in ``block`` as CSR over the chunk's rows, local columns
        ascending (built once per block: read only)."""
        key = _block_key(block)
        if key not in self._csr:
            self._csr[key] = self._build_csr(block)
        return self._csr[key]

    def _build_csr(self, block: Any) -> tuple[np.ndarray, np.ndarray]:
        rows = self.rows_in_chunk
        r, local, _ = self.in_block(block)
        r, local = r.cpu().numpy(), local.cpu().numpy()
        order = np.lexsort((local, r))
        ptr = np.zeros(rows + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(np.bincount(r, minlength=rows))
        return ptr, np.ascontiguousarray(local[order], dtype=np.int64)

    def code_ranges(self, block: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per chunk row, the ``[lo, hi)`` range of ``members`` (ascending local columns) it
        skips by code: ``(lo, hi, members)``; empty ranges without codes."""
        if self.query_codes is None:
            zero = np.zeros(self.rows_in_chunk, dtype=np.int64)
            return zero, zero.copy(), np.zeros(0, dtype=np.int64)
        groups = self.exclusions.groups(block)
        lo, hi = groups.ranges(self.query_codes)
        return lo, hi, groups.members

    def codes(self, block: Any) -> tuple[np.ndarray, np.ndarray] | None:
        """``(chunk codes, block codes)`` of the code exclusions, or ``None``."""
        if self.query_codes is None:
            return None
        return self.query_codes, block_codes(self.exclusions.reference_codes, block)

    def excluded(self, rows: torch.Tensor, local: torch.Tensor, block: Any) -> torch.Tensor:
        """Which pairs ``(chunk rows, block-local cols)`` are skipped."""
        device = rows.device
        out = torch.zeros(rows.shape, dtype=torch.bool, device=device)
        if rows.numel() == 0:
            return out
        glob = globals_of(block, local)
        if self.rows.numel():
            key = rows * KEY + glob
            gone = torch.sort(self.rows.to(device) * KEY + self.cols.to(device)).values
            pos = torch.searchsorted(gone, key).clamp(max=gone.numel() - 1)
            out |= gone[pos] == key
        codes = self.codes(block)
        if codes is not None:
            q = torch.from_numpy(codes[0]).to(device)[rows]
            r = torch.from_numpy(codes[1]).to(device)[local]
            out |= (q >= 0) & (q == r)
        return out


# (row, column) keys of pairs: row * KEY + column (reference indices stay below 2**40).
KEY = 2**40


def locals_of(block: Any, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Local positions of global indices ``cols`` in ``block`` and the mask of those in it."""
    if block.global_index is None:
        inside = (cols >= block.offset) & (cols < block.offset + block.rows)
        return cols - block.offset, inside
    index = block.global_index.to(cols.device)
    pos = torch.searchsorted(index, cols)
    found = pos < block.rows
    inside = found & (index[pos.clamp(max=max(block.rows - 1, 0))] == cols)
    return pos, inside


def globals_of(block: Any, local: torch.Tensor) -> torch.Tensor:
    """Global reference indices of a block's local columns."""
    if block.global_index is None:
        return local + block.offset
    return block.global_index.to(local.device)[local]


class LabelPositives:
    """Positives by label: reference ``j`` is a positive of query ``i`` when their codes are equal.

    Codes are compared per chunk and block (on the device the chunk runs on); positive pairs are
    never materialised for the whole problem.
    """

    def __init__(self, query_codes: np.ndarray, reference_codes: np.ndarray) -> None:
        self.query_codes = np.ascontiguousarray(query_codes, dtype=np.int64)
        self.reference_codes = np.ascontiguousarray(reference_codes, dtype=np.int64)
        self._groups: dict[tuple[int, int], Groups] = {}
        self._last_ranges: tuple[Any, tuple[np.ndarray, np.ndarray]] | None = None

    def groups(self, block: Any) -> Groups:
        key = _block_key(block)
        if key not in self._groups:
            self._groups[key] = Groups(block_codes(self.reference_codes, block))
        return self._groups[key]

    def block_codes(self, block: Any) -> np.ndarray:
        return block_codes(self.reference_codes, block)

    def pair_count(self, block: Any, start: int, stop: int) -> int:
        lo, hi = self.ranges(block, start, stop)
        return int((hi - lo).sum())

    def ranges(self, block: Any, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Per query of ``start:stop``, the range of its positives in the block's members (the
        last chunk's kept: a chunk's steps ask for them several times; not to be written)."""
        key = (_block_key(block), start, stop)
        last = self._last_ranges  # read once: another thread's chunk may replace it meanwhile
        if last is None or last[0] != key:
            last = (key, self.groups(block).ranges(self.query_codes[start:stop]))
            self._last_ranges = last
        return last[1]

    def num_relevant(self, exclusions: Exclusions | None, block: Any = None) -> np.ndarray:
        """Positives per query minus the skipped ones: ``|{j : label_j = label_i, j not
        skipped by i}|``. ``block`` (a sharded block) maps global columns to its rows."""
        return self.counts(exclusions, block)[0]

    def counts(
        self, exclusions: Exclusions | None, block: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(relevant, candidates)`` per query: the positives it does not skip
        ([`num_relevant`][num_relevant]) and every reference item it does not skip, from one reading
        of the exclusions."""
        whole = block is None
        codes = self.reference_codes
        m = len(codes)
        counts = Groups(codes).ranges(self.query_codes)
        counts = counts[1] - counts[0]
        candidates = np.full(len(counts), m, dtype=np.int64)
        if exclusions is None:
            return counts, candidates
        q_ex = exclusions.query_codes
        r_ex = exclusions.reference_codes
        if exclusions.has_codes:
            # Items that share the query's id: count the (label, id) pairs, and the ids.
            width = int(max(q_ex.max(initial=-1), r_ex.max(initial=-1))) + 1
            joint_r = _joint(codes, r_ex, width)
            lo, hi = Groups(joint_r).ranges(_joint(self.query_codes, q_ex, width))
            counts = counts - (hi - lo)
            lo, hi = Groups(r_ex).ranges(q_ex)
            candidates = candidates - (hi - lo)
        if exclusions.pairs is not None:
            rows, cols = exclusions.pairs.expand(0, exclusions.pairs.num_query, torch.device("cpu"))
            if not whole:
                cols, inside = locals_of(block, cols)
                rows, cols = rows[inside], cols[inside]
            rows, cols = rows.numpy(), cols.numpy()
            fresh = np.ones(len(rows), dtype=bool)
            if exclusions.has_codes:  # not already counted as a shared id
                fresh = ~((q_ex[rows] >= 0) & (r_ex[cols] == q_ex[rows]))
            same = (codes[cols] == self.query_codes[rows]) & fresh
            counts = counts - np.bincount(rows[same], minlength=len(counts))
            candidates = candidates - np.bincount(rows[fresh], minlength=len(counts))
        return counts, candidates


def _joint(labels: np.ndarray, ids: np.ndarray, width: int) -> np.ndarray:
    """One int64 code per ``(label, id)`` pair (both dense non-negative codes); ``-1`` where the
    id is ``-1``."""
    return np.where(ids >= 0, labels * width + ids, -1).astype(np.int64)


@dataclass
class ChunkPairs:
    """A chunk's pairs: chunk-local rows and global reference columns."""

    rows: torch.Tensor
    cols: torch.Tensor

    @classmethod
    def of(cls, pairs: Pairs | None, start: int, stop: int, device: torch.device) -> ChunkPairs:
        if pairs is None:
            empty = torch.empty(0, dtype=torch.int64, device=device)
            return cls(empty, empty)
        return cls(*pairs.expand(start, stop, device))

    def in_block(self, block: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rows, local cols, global cols)`` of the pairs that fall in ``block``."""
        local, inside = locals_of(block, self.cols)
        return self.rows[inside], local[inside], self.cols[inside]
