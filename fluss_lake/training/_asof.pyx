# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The backward as-of join by an integer key, compiled: for each entity row, the last history record of its key
at or before its time.

Polars' ``join_asof`` with ``by=`` spends most of a training-set pass on one thread grouping both sides. Here the
history's records are grouped by key with an open-addressing hash table and a counting sort (one pass each, the
records of a key keeping their order), and each entity row binary-searches its key's records: no comparison sort
of either side, and the entity rows stay in their order. The loops run without the interpreter lock, so the joins
of several views can run side by side in threads.
"""

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort

import numpy as np

cdef enum:
    ABSENT = -2  # the key has no record in the history
    BEFORE = -1  # the key has records, none at or before the row's time


cdef struct Table:
    int64_t* keys
    int64_t* ids  # -1: an empty slot
    Py_ssize_t capacity  # a power of two
    int shift  # 64 - log2(capacity): the slot of a key is the top bits of its multiplicative hash
    Py_ssize_t used


cdef inline Py_ssize_t _find(const Table* table, int64_t key) noexcept nogil:
    """The slot holding `key`, or the empty slot where it goes (linear probing)."""
    cdef Py_ssize_t i = <Py_ssize_t>((<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15) >> table.shift)
    while table.ids[i] >= 0 and table.keys[i] != key:
        i = (i + 1) & (table.capacity - 1)
    return i


cdef int _allocate(Table* table, Py_ssize_t capacity, int shift) noexcept nogil:
    """Empty slots for `capacity` keys; -1 if out of memory."""
    cdef Py_ssize_t i
    table.keys = <int64_t*>malloc(capacity * sizeof(int64_t))
    table.ids = <int64_t*>malloc(capacity * sizeof(int64_t))
    if table.keys == NULL or table.ids == NULL:
        return -1
    for i in range(capacity):
        table.ids[i] = -1
    table.capacity, table.shift = capacity, shift
    return 0


cdef int _grow(Table* table) noexcept nogil:
    """Twice the slots, every key re-inserted (keys are distinct: each probe ends at an empty slot)."""
    cdef int64_t* old_keys = table.keys
    cdef int64_t* old_ids = table.ids
    cdef Py_ssize_t old_capacity = table.capacity, s, i
    if _allocate(table, old_capacity * 2, table.shift - 1) < 0:
        free(old_keys)
        free(old_ids)
        return -1
    for s in range(old_capacity):
        if old_ids[s] >= 0:
            i = _find(table, old_keys[s])
            table.keys[i] = old_keys[s]
            table.ids[i] = old_ids[s]
    free(old_keys)
    free(old_ids)
    return 0


cdef struct Record:
    int64_t time
    int64_t tiebreak
    uint32_t row


cdef int _by_time(const void* a, const void* b) noexcept nogil:
    cdef const Record* x = <const Record*>a
    cdef const Record* y = <const Record*>b
    if x.time != y.time:
        return -1 if x.time < y.time else 1
    if x.tiebreak != y.tiebreak:
        return -1 if x.tiebreak < y.tiebreak else 1
    return 0


cdef inline bint _before(int64_t t0, int64_t b0, int64_t t1, int64_t b1) noexcept nogil:
    """Whether (t0, b0) comes strictly before (t1, b1)."""
    return t0 < t1 or (t0 == t1 and b0 < b1)


cdef int _order_keys(const uint32_t* starts, Py_ssize_t keys, uint32_t* order, int64_t* times,
                     const int64_t* tiebreak) noexcept nogil:
    """Each key's records (a run ``starts[s]..starts[s+1]`` of `order`/`times`) put in (time, tiebreak) order;
    without `tiebreak`, by time alone. 1 if two records of a key tie on that order (nothing decides between
    them), -1 if out of memory, else 0. A run already in order (the usual case: a log) is only checked."""
    cdef Py_ssize_t s, k, lo, hi, longest = 0
    cdef Record* scratch = NULL
    cdef int64_t b0, b1
    cdef bint sorted_run
    for s in range(keys):
        lo, hi = starts[s], starts[s + 1]
        sorted_run = True
        for k in range(lo + 1, hi):
            b0 = tiebreak[order[k - 1]] if tiebreak != NULL else 0
            b1 = tiebreak[order[k]] if tiebreak != NULL else 0
            if not _before(times[k - 1], b0, times[k], b1):
                if times[k - 1] == times[k] and b0 == b1:
                    free(scratch)
                    return 1
                sorted_run = False
                break
        if sorted_run:
            continue
        if scratch == NULL or hi - lo > longest:
            free(scratch)
            longest = hi - lo
            scratch = <Record*>malloc(longest * sizeof(Record))
            if scratch == NULL:
                return -1
        for k in range(lo, hi):
            scratch[k - lo].time = times[k]
            scratch[k - lo].tiebreak = tiebreak[order[k]] if tiebreak != NULL else 0
            scratch[k - lo].row = order[k]
        qsort(scratch, hi - lo, sizeof(Record), _by_time)
        for k in range(lo, hi):
            if k > lo and _by_time(&scratch[k - lo - 1], &scratch[k - lo]) == 0:
                free(scratch)
                return 1
            times[k] = scratch[k - lo].time
            order[k] = scratch[k - lo].row
    free(scratch)
    return 0


def asof_backward(const int64_t[::1] left_keys, const int64_t[::1] left_times,
                  const int64_t[::1] right_keys, const int64_t[::1] right_times,
                  const int64_t[::1] right_tiebreak=None, *, bint any_order=False):
    """For each left row, the index of the last right row with its key and a time at or before its time:
    ``-1`` if its key's rows are all later, ``-2`` if its key has no right row.

    By default the right rows of each key must ascend by time (ties: the one to match last); keys and times are
    any int64. With `any_order` they may come in any order: each key's rows are ordered by (time,
    `right_tiebreak`) (by time alone without it), and the result is None if two rows of a key tie on that order
    (the caller must then order them itself).
    """
    cdef Py_ssize_t n = left_keys.shape[0], m = right_keys.shape[0], i, j, s, lo, hi, mid, first
    cdef int ordered = 0
    cdef const int64_t* tiebreak = NULL
    if right_tiebreak is not None:
        if not any_order:
            raise ValueError("asof_backward: right_tiebreak goes with any_order=True")
        if right_tiebreak.shape[0] != m:
            raise ValueError("asof_backward: right_tiebreak must have one value per right row")
        if m:
            tiebreak = &right_tiebreak[0]
    if m >= 2**32 - 1:
        raise ValueError("asof_backward takes fewer than 2**32 - 1 right rows")
    ids_array = np.empty(m, dtype=np.uint32)  # key ids and positions fit 32 bits: half the memory traffic
    cdef uint32_t[::1] ids = ids_array
    cdef Table table
    table.keys = NULL
    table.ids = NULL
    table.used = 0
    cdef int failed = 0
    cdef int64_t key, t
    with nogil:
        failed = _allocate(&table, 16, 64 - 4)
        for j in range(m):  # each right row's key id, in order of first appearance
            if failed:
                break
            key = right_keys[j]
            i = _find(&table, key)
            if table.ids[i] < 0:
                if 2 * (table.used + 1) > table.capacity:  # keep the table at most half full
                    failed = _grow(&table)
                    if failed:
                        break
                    i = _find(&table, key)
                table.keys[i] = key
                table.ids[i] = table.used
                table.used += 1
            ids[j] = <uint32_t>table.ids[i]
    if failed:
        free(table.keys)
        free(table.ids)
        raise MemoryError("asof_backward: no memory for the key table")
    starts_array = np.zeros(table.used + 1, dtype=np.uint32)
    fill_array = np.empty(table.used, dtype=np.uint32)
    order_array = np.empty(m, dtype=np.uint32)
    times_array = np.empty(m, dtype=np.int64)  # the right times in key order: the searches read them in a row
    out_array = np.empty(n, dtype=np.int64)
    cdef uint32_t[::1] starts = starts_array
    cdef uint32_t[::1] fill = fill_array
    cdef uint32_t[::1] order = order_array
    cdef int64_t[::1] times = times_array
    cdef int64_t[::1] out = out_array
    with nogil:
        for j in range(m):  # a counting sort of the right rows by key id, stable: a key's rows keep their order
            starts[ids[j] + 1] += 1
        for s in range(table.used):
            starts[s + 1] += starts[s]
            fill[s] = starts[s]
        for j in range(m):
            order[fill[ids[j]]] = <uint32_t>j
            times[fill[ids[j]]] = right_times[j]
            fill[ids[j]] += 1
        if any_order and m:
            ordered = _order_keys(&starts[0], table.used, &order[0], &times[0], tiebreak)
    if ordered:
        free(table.keys)
        free(table.ids)
        if ordered < 0:
            raise MemoryError("asof_backward: no memory to order the records")
        return None
    with nogil:
        for i in range(n):
            key = left_keys[i]
            s = _find(&table, key)
            if table.ids[s] < 0:
                out[i] = ABSENT
                continue
            first = starts[table.ids[s]]
            lo = first
            hi = starts[table.ids[s] + 1]
            t = left_times[i]
            while lo < hi:  # the first record after t; the one before it is the match
                mid = (lo + hi) >> 1
                if times[mid] <= t:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > first:
                out[i] = <int64_t>order[lo - 1]
            else:
                out[i] = BEFORE
    free(table.keys)
    free(table.ids)
    return out_array
