# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled inner loops of the KV read path: probing segments, gathering rows, ordering queries.

The numpy versions of these loops cost one pass over every query per step (a probe took ~6 whole-array
operations per segment, a gather two Arrow takes per column); here each query is handled once, in order, with
no temporaries. Callers pass numpy arrays; segment columns are passed as raw addresses of memory-mapped (or
in-memory) buffers that the caller keeps alive for the call.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

import numpy as np

cdef extern from *:
    void prefetch "__builtin_prefetch"(const void* address) nogil

cdef enum:
    AHEAD = 32  # how many queries ahead a loop prefetches what it will read (a probe: half as far, fingerprints)

ctypedef fused index_t:
    uint32_t
    int64_t


cdef inline Py_ssize_t _lower_bound(const index_t[::1] starts, const uint32_t[::1] fingerprints,
                                    const uint64_t[::1] hashes, int shift, uint64_t q) noexcept nogil:
    """``searchsorted(hashes, q, "left")`` through the index: q's directory slot, a scan of the slot's
    fingerprints, then of the full hashes only where the fingerprint equals q's."""
    cdef Py_ssize_t p = <Py_ssize_t>starts[q >> shift]
    cdef Py_ssize_t hi = <Py_ssize_t>starts[(q >> shift) + 1]
    cdef uint32_t top = <uint32_t>(q >> 32)
    while p < hi and fingerprints[p] < top:
        p += 1
    while p < hi and fingerprints[p] == top and hashes[p] < q:
        p += 1
    return p


cdef inline Py_ssize_t _settle(Py_ssize_t i, Py_ssize_t row, int hit, int64_t seg_id, int64_t[::1] seg_of,
                               int64_t[::1] row_of, int64_t[::1] pending, Py_ssize_t m) noexcept nogil:
    """Record query ``i``'s hit at ``row`` (if any) and keep it pending otherwise; returns the new pending count."""
    if hit:
        seg_of[i] = seg_id
        row_of[i] = row
    pending[m] = i
    return m + 1 - hit


def probe_indexed(const index_t[::1] starts, const uint32_t[::1] fingerprints, const uint64_t[::1] hashes,
                  int shift, const uint64_t[::1] queries, int64_t[::1] pending, int64_t[::1] seg_of,
                  int64_t[::1] row_of, int64_t seg_id):
    """Look for the ``pending`` queries (positions into ``queries``) in one indexed segment: a hit sets
    ``seg_of``/``row_of``; the queries still missing are compacted to the front of ``pending`` (in order) and
    their count returned.

    A query reads its directory slot, scans the slot's 32-bit fingerprints (one or two on average: two
    branch-free steps, a loop only for crowded slots; ``fingerprints`` has one padding entry) and reads the
    mapped hash column only where a fingerprint matches. Slots and fingerprints of later queries are
    prefetched.
    """
    cdef Py_ssize_t k, i, p, n = pending.shape[0], rows = hashes.shape[0], m = 0
    cdef uint64_t q
    cdef int hit
    with nogil:
        for k in range(n):
            if k + AHEAD < n:  # the slot of a later query, then the fingerprints of a nearer one
                prefetch(&starts[queries[pending[k + AHEAD]] >> shift])
            if k + AHEAD // 2 < n:
                prefetch(&fingerprints[starts[queries[pending[k + AHEAD // 2]] >> shift]])
            if k + AHEAD // 4 < n:
                prefetch(&hashes[starts[queries[pending[k + AHEAD // 4]] >> shift]])
            i = pending[k]
            q = queries[i]
            p = _lower_bound(starts, fingerprints, hashes, shift, q)
            hit = p < rows and fingerprints[p] == <uint32_t>(q >> 32) and hashes[p] == q  # equal top bits: same slot
            m = _settle(i, p, hit, seg_id, seg_of, row_of, pending, m)
    return m


def probe_sorted(const uint64_t[::1] hashes, const uint64_t[::1] queries, int64_t[::1] pending,
                 int64_t[::1] seg_of, int64_t[::1] row_of, int64_t seg_id):
    """Like :func:`probe_indexed` for a segment without an index (a small one): binary search."""
    cdef Py_ssize_t k, i, lo, hi, mid, n = pending.shape[0], rows = hashes.shape[0], m = 0
    cdef uint64_t q
    cdef int hit
    with nogil:
        for k in range(n):
            i = pending[k]
            q = queries[i]
            lo = 0
            hi = rows
            while lo < hi:
                mid = (lo + hi) >> 1
                if hashes[mid] < q:
                    lo = mid + 1
                else:
                    hi = mid
            hit = lo < rows and hashes[lo] == q
            m = _settle(i, lo, hit, seg_id, seg_of, row_of, pending, m)
    return m


ctypedef fused word_t:
    uint64_t
    uint32_t
    uint16_t
    uint8_t


cdef inline Py_ssize_t _visit(const int64_t[::1] order, bint ordered, Py_ssize_t k) noexcept nogil:
    """The query visited ``k``-th: ``order[k]``, or ``k`` itself when there is no order."""
    return order[k] if ordered else k


cdef void _gather_words(word_t* dst, const int64_t[::1] seg_of, const int64_t[::1] row_of,
                        const int64_t[::1] order, bint ordered, const uint64_t[::1] addresses) noexcept nogil:
    """:func:`gather_fixed` for one word width, prefetching the value of the query ``AHEAD`` visits later."""
    cdef Py_ssize_t k, i, s, n = seg_of.shape[0]
    for k in range(n):
        if k + AHEAD < n:
            i = _visit(order, ordered, k + AHEAD)
            if seg_of[i] >= 0:
                prefetch(<const word_t*>addresses[seg_of[i]] + row_of[i])
        i = _visit(order, ordered, k)
        s = seg_of[i]
        dst[i] = (<const word_t*>addresses[s])[row_of[i]] if s >= 0 else 0


def gather_fixed(const int64_t[::1] seg_of, const int64_t[::1] row_of, const int64_t[::1] order,
                 const uint64_t[::1] addresses, int itemsize, uint8_t[::1] out):
    """``out[i] = column_of_segment[seg_of[i]][row_of[i]]`` for fixed-width values of ``itemsize`` bytes
    (``addresses[s]``: the segment's value buffer); zero bytes where ``seg_of[i] < 0``. Queries are visited in
    ``order`` (the probe's hash order, so each segment is read front to back), or their own order when
    ``order`` is empty (as in a merge, whose output order already reads its inputs front to back); the same
    holds for the other gathers."""
    cdef Py_ssize_t k, i, s, n = seg_of.shape[0]
    cdef bint ordered = order.shape[0] == n  # an empty order: the queries' own order
    cdef uint8_t* dst = &out[0] if out.shape[0] else NULL
    with nogil:
        if itemsize == 8:
            _gather_words(<uint64_t*>dst, seg_of, row_of, order, ordered, addresses)
        elif itemsize == 4:
            _gather_words(<uint32_t*>dst, seg_of, row_of, order, ordered, addresses)
        elif itemsize == 2:
            _gather_words(<uint16_t*>dst, seg_of, row_of, order, ordered, addresses)
        elif itemsize == 1:
            _gather_words(<uint8_t*>dst, seg_of, row_of, order, ordered, addresses)
        else:
            for k in range(n):
                i = _visit(order, ordered, k)
                s = seg_of[i]
                if s >= 0:
                    memcpy(dst + i * itemsize, <const uint8_t*>addresses[s] + row_of[i] * itemsize, itemsize)
                else:
                    memset(dst + i * itemsize, 0, itemsize)


def gather_strings(const int64_t[::1] seg_of, const int64_t[::1] row_of, const int64_t[::1] order,
                   const uint64_t[::1] offset_addresses, const uint64_t[::1] data_addresses, const uint8_t[::1] wide):
    """Gather variable-width values (string/binary): returns ``(offsets int64[n + 1], data uint8)`` of an Arrow
    large-string array in query order (empty where ``seg_of[i] < 0``). ``wide[s]`` says whether segment
    ``s`` has 64-bit offsets; offset addresses already account for the array's slice offset. Segments are
    read in ``order``."""
    cdef Py_ssize_t k, i, s, n = seg_of.shape[0]
    cdef bint ordered = order.shape[0] == n  # an empty order: the queries' own order
    cdef int64_t start, stop, total = 0
    offsets_arr = np.empty(n + 1, dtype=np.int64)
    starts_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] offsets = offsets_arr
    cdef int64_t[::1] starts = starts_arr
    with nogil:
        offsets[0] = 0
        for k in range(n):  # lengths (in offsets[i + 1]) and source starts
            if k + AHEAD < n and seg_of[_visit(order, ordered, k + AHEAD)] >= 0:
                i = _visit(order, ordered, k + AHEAD)
                prefetch(<const uint8_t*>offset_addresses[seg_of[i]] + row_of[i] * (8 if wide[seg_of[i]] else 4))
            i = _visit(order, ordered, k)
            s = seg_of[i]
            start = 0
            stop = 0
            if s >= 0:
                if wide[s]:
                    start = (<const int64_t*>offset_addresses[s])[row_of[i]]
                    stop = (<const int64_t*>offset_addresses[s])[row_of[i] + 1]
                else:
                    start = (<const int32_t*>offset_addresses[s])[row_of[i]]
                    stop = (<const int32_t*>offset_addresses[s])[row_of[i] + 1]
            starts[i] = start
            offsets[i + 1] = stop - start
        for i in range(n):
            total += offsets[i + 1]
            offsets[i + 1] = total
    data_arr = np.empty(total, dtype=np.uint8)
    cdef uint8_t[::1] data = data_arr
    cdef uint8_t* dst = &data[0] if total else NULL
    with nogil:
        for k in range(n):
            if k + AHEAD < n and seg_of[_visit(order, ordered, k + AHEAD)] >= 0:
                i = _visit(order, ordered, k + AHEAD)
                prefetch(<const uint8_t*>data_addresses[seg_of[i]] + starts[i])
            i = _visit(order, ordered, k)
            s = seg_of[i]
            if s >= 0 and offsets[i + 1] > offsets[i]:
                memcpy(dst + offsets[i], <const uint8_t*>data_addresses[s] + starts[i], offsets[i + 1] - offsets[i])
    return offsets_arr, data_arr


def gather_valid(const int64_t[::1] seg_of, const int64_t[::1] row_of, const int64_t[::1] order,
                 const uint64_t[::1] addresses, const int64_t[::1] bit_offsets, uint8_t[::1] out):
    """``out[i]`` = 1 where row ``row_of[i]`` of segment ``seg_of[i]`` is valid (not null) in a column whose
    validity bitmap is at ``addresses[s]`` (0: no bitmap, all valid; ``bit_offsets[s]``: the array's offset);
    0 where ``seg_of[i] < 0``."""
    cdef Py_ssize_t k, i, s, n = seg_of.shape[0]
    cdef bint ordered = order.shape[0] == n  # an empty order: the queries' own order
    cdef int64_t b
    with nogil:
        for k in range(n):
            i = _visit(order, ordered, k)
            s = seg_of[i]
            if s < 0:
                out[i] = 0
            elif addresses[s] == 0:
                out[i] = 1
            else:
                b = row_of[i] + bit_offsets[s]
                out[i] = ((<const uint8_t*>addresses[s])[b >> 3] >> (b & 7)) & 1


def build_directory(const uint64_t[::1] hashes, int shift, index_t[::1] starts, uint32_t[::1] fingerprints):
    """Fill a segment index in one pass over the sorted hashes: ``starts[b]`` = the first row whose hash has
    top bits ``b`` (``starts[-1]`` = rows), ``fingerprints[r]`` = the top 32 bits of row ``r``'s hash (one more
    entry, ``0xFFFFFFFF``, pads the end)."""
    cdef Py_ssize_t r, rows = hashes.shape[0], slots = starts.shape[0] - 1
    cdef Py_ssize_t b = 0, slot
    with nogil:
        fingerprints[rows] = 0xFFFFFFFF  # padding: a probe may read one entry past its slot
        for r in range(rows):
            fingerprints[r] = <uint32_t>(hashes[r] >> 32)
            slot = <Py_ssize_t>(hashes[r] >> shift)
            while b <= slot:
                starts[b] = <index_t>r
                b += 1
        while b <= slots:
            starts[b] = <index_t>rows
            b += 1


def radix_order(const uint64_t[::1] queries, int bits, int64_t[::1] order):
    """A stable order of the queries by their top ``bits`` hash bits (a counting sort): a probe visiting them in
    this order reads every segment front to back."""
    cdef Py_ssize_t i, n = queries.shape[0], buckets = (<Py_ssize_t>1) << bits
    cdef int shift = 64 - bits
    counts_arr = np.zeros(buckets + 1, dtype=np.int64)
    cdef int64_t[::1] counts = counts_arr
    cdef int64_t total = 0, c
    with nogil:
        for i in range(n):
            counts[(queries[i] >> shift) + 1] += 1
        for i in range(1, buckets + 1):
            total += counts[i]
            counts[i] = total
        for i in range(n):
            c = counts[queries[i] >> shift]
            order[c] = i
            counts[queries[i] >> shift] = c + 1


def lower_bounds(const index_t[::1] starts, const uint32_t[::1] fingerprints, const uint64_t[::1] hashes,
                 int shift, const uint64_t[::1] queries, const int64_t[::1] order, int64_t[::1] out):
    """``searchsorted(hashes, q, "left")`` of every query through the segment index (range scans of prefix
    lookups), visiting queries in ``order``: the slot, its fingerprints, then full hashes of equal fingerprints."""
    cdef Py_ssize_t k, i, p, n = order.shape[0]
    with nogil:
        for k in range(n):
            if k + AHEAD < n:
                prefetch(&starts[queries[order[k + AHEAD]] >> shift])
            if k + AHEAD // 2 < n:
                prefetch(&fingerprints[starts[queries[order[k + AHEAD // 2]] >> shift]])
            i = order[k]
            p = _lower_bound(starts, fingerprints, hashes, shift, queries[i])
            out[i] = p


def merge_runs(const uint64_t[::1] addresses, const int64_t[::1] lengths, int64_t[::1] order, uint64_t[::1] merged):
    """Merge sorted ``uint64`` runs (``addresses[s]``, ``lengths[s]``; newest run first) into hash order:
    ``merged`` gets the hashes, ``order`` their positions in the runs laid end to end. Equal hashes come newest
    run first, exactly as a stable argsort of the concatenated runs orders them, in one pass over the rows
    instead of a sort plus a random gather."""
    cdef Py_ssize_t k = lengths.shape[0], s, best, out = 0
    cdef int64_t[64] pos
    cdef int64_t[64] base
    cdef uint64_t head, best_head
    cdef int64_t total = 0
    if k > 64:
        raise ValueError("merge_runs merges at most 64 runs")
    for s in range(k):
        pos[s] = 0
        base[s] = total
        total += lengths[s]
    with nogil:
        while out < total:
            best = -1
            best_head = 0
            for s in range(k):
                if pos[s] < lengths[s]:
                    head = (<const uint64_t*>addresses[s])[pos[s]]
                    if best < 0 or head < best_head:
                        best = s
                        best_head = head
            merged[out] = best_head
            order[out] = base[best] + pos[best]
            pos[best] += 1
            out += 1
