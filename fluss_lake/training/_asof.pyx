# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The backward as-of join by an integer key, compiled: for each entity row, the last history record of its key
at or before its time.

Polars' ``join_asof`` with ``by=`` spends most of a training-set pass on one thread grouping both sides. Here the
history's records are grouped by key with an open-addressing hash table and a counting sort (one pass each, the
records of a key keeping their order), and each entity row binary-searches its key's records: no comparison sort
of either side, and the entity rows stay in their order.
"""

from libc.stdint cimport int64_t, uint64_t

import numpy as np

cdef enum:
    ABSENT = -2  # the key has no record in the history
    BEFORE = -1  # the key has records, none at or before the row's time


cdef inline Py_ssize_t _slot(int64_t key, int shift) noexcept nogil:
    return <Py_ssize_t>((<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15) >> shift)


cdef inline Py_ssize_t _find(const int64_t[::1] keys, const int64_t[::1] ids, int64_t key, int shift,
                             Py_ssize_t capacity) noexcept nogil:
    """The slot holding `key`, or the empty slot where it goes (linear probing)."""
    cdef Py_ssize_t i = _slot(key, shift)
    while ids[i] >= 0 and keys[i] != key:
        i = (i + 1) & (capacity - 1)
    return i


def asof_backward(const int64_t[::1] left_keys, const int64_t[::1] left_times,
                  const int64_t[::1] right_keys, const int64_t[::1] right_times):
    """For each left row, the index of the last right row with its key and a time at or before its time:
    ``-1`` if its key's rows are all later, ``-2`` if its key has no right row.

    The right rows of each key must ascend by time (ties: the one to match last); keys and times are any int64.
    """
    cdef Py_ssize_t n = left_keys.shape[0], m = right_keys.shape[0], i, j, s, lo, hi, mid
    cdef int shift = 64 - 4
    cdef Py_ssize_t capacity = 16, used = 0
    table_keys_array = np.empty(capacity, dtype=np.int64)
    table_ids_array = np.full(capacity, -1, dtype=np.int64)
    cdef int64_t[::1] table_keys = table_keys_array
    cdef int64_t[::1] table_ids = table_ids_array
    ids_array = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] ids = ids_array
    cdef int64_t key, t, found
    cdef int64_t[::1] old_keys, old_ids
    for j in range(m):  # each right row's key id: ids in order of first appearance
        if 2 * (used + 1) > capacity:  # keep the table at most half full: grow and re-insert
            old_keys, old_ids = table_keys, table_ids
            capacity *= 2
            shift -= 1
            table_keys_array = np.empty(capacity, dtype=np.int64)
            table_ids_array = np.full(capacity, -1, dtype=np.int64)
            table_keys, table_ids = table_keys_array, table_ids_array
            with nogil:
                for s in range(capacity // 2):
                    if old_ids[s] >= 0:  # keys are distinct: the probe ends at an empty slot
                        i = _find(table_keys, table_ids, old_keys[s], shift, capacity)
                        table_keys[i] = old_keys[s]
                        table_ids[i] = old_ids[s]
        key = right_keys[j]
        i = _find(table_keys, table_ids, key, shift, capacity)
        if table_ids[i] < 0:
            table_keys[i] = key
            table_ids[i] = used
            used += 1
        ids[j] = table_ids[i]
    starts_array = np.zeros(used + 1, dtype=np.int64)
    order_array = np.empty(m, dtype=np.int64)
    out_array = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] starts = starts_array
    cdef int64_t[::1] order = order_array
    cdef int64_t[::1] out = out_array
    cdef int64_t[::1] fill
    with nogil:
        for j in range(m):  # a counting sort of the right rows by key id, stable: a key's rows keep their order
            starts[ids[j] + 1] += 1
        for s in range(used):
            starts[s + 1] += starts[s]
    fill_array = starts_array[:used].copy()
    fill = fill_array
    with nogil:
        for j in range(m):
            order[fill[ids[j]]] = j
            fill[ids[j]] += 1
        for i in range(n):
            key = left_keys[i]
            s = _find(table_keys, table_ids, key, shift, capacity)
            if table_ids[s] < 0:
                out[i] = ABSENT
                continue
            found = table_ids[s]
            t = left_times[i]
            lo = starts[found]
            hi = starts[found + 1]  # the last row at or before t: the first after it, minus one
            while lo < hi:
                mid = (lo + hi) >> 1
                if right_times[order[mid]] <= t:
                    lo = mid + 1
                else:
                    hi = mid
            out[i] = order[lo - 1] if lo > starts[found] else BEFORE
    return out_array
