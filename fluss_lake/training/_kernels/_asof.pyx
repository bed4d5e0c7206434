# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The backward as-of join by an integer key, compiled: for each entity row, the last history record of its key
at or before its time.

Polars' ``join_asof`` with ``by=`` spends most of a training-set pass on one thread grouping both sides. Here the
history's records are grouped by key with an open-addressing hash table and a counting sort (one pass each, the
records of a key keeping their order), and each entity row binary-searches its key's records: no comparison sort
of either side, and the entity rows stay in their order. The loops run without the interpreter lock, so the joins
of several views can run side by side in threads.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort

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


cdef int _insert_all(Table* table, const int64_t* keys, Py_ssize_t n, uint32_t* ids) noexcept nogil:
    """Each of `n` keys' id (in order of first appearance), inserted into `table`; -1 if out of memory."""
    cdef Py_ssize_t j, i
    cdef int64_t key
    for j in range(n):
        key = keys[j]
        i = _find(table, key)
        if table.ids[i] < 0:
            if 2 * (table.used + 1) > table.capacity:  # keep the table at most half full
                if _grow(table) < 0:
                    return -1
                i = _find(table, key)
            table.keys[i] = key
            table.ids[i] = table.used
            table.used += 1
        ids[j] = <uint32_t>table.ids[i]
    return 0


cdef int _key_table(Table* table, const int64_t* keys, Py_ssize_t n, uint32_t* ids) noexcept nogil:
    """A hash table of `n` keys, each one's id (numbered as first seen) in `ids`; -1 if out of memory (nothing
    left to free then)."""
    table.keys = NULL
    table.ids = NULL
    table.used = 0
    if _allocate(table, 16, 64 - 4) < 0 or _insert_all(table, keys, n, ids) < 0:
        free(table.keys)
        free(table.ids)
        table.keys = NULL
        table.ids = NULL
        return -1
    return 0


cdef void _sort_run(int64_t* times, uint32_t* rows, Py_ssize_t count, Record* scratch) noexcept nogil:
    """`count` (time, row) pairs sorted by time (ties in any order): insertion sort for short runs, else qsort."""
    cdef Py_ssize_t k, h
    cdef int64_t t
    cdef uint32_t r
    if count <= 24:
        for k in range(1, count):
            t, r = times[k], rows[k]
            h = k
            while h > 0 and times[h - 1] > t:
                times[h], rows[h] = times[h - 1], rows[h - 1]
                h -= 1
            times[h], rows[h] = t, r
        return
    for k in range(count):
        scratch[k].time, scratch[k].tiebreak, scratch[k].row = times[k], 0, rows[k]
    qsort(scratch, count, sizeof(Record), _by_time)
    for k in range(count):
        times[k], rows[k] = scratch[k].time, scratch[k].row


cdef int _sort_groups(const uint32_t* starts, Py_ssize_t groups, Py_ssize_t longest, int64_t* times,
                      uint32_t* rows) noexcept nogil:
    """Each group's (time, row) pairs (group `s` at ``starts[s]:starts[s + 1]``, at most `longest`) sorted by
    time, leaving a group already in order as it is; -1 if out of memory."""
    cdef Py_ssize_t s, k, end
    cdef Record* scratch = NULL
    if longest > 24:
        scratch = <Record*>malloc(longest * sizeof(Record))
        if scratch == NULL:
            return -1
    for s in range(groups):
        k = starts[s]
        end = starts[s + 1]
        while k + 1 < end and times[k] <= times[k + 1]:
            k += 1
        if k + 1 < end:
            _sort_run(&times[starts[s]], &rows[starts[s]], end - starts[s], scratch)
    free(scratch)
    return 0


cdef struct KeyState:
    int64_t last  # the key's latest right row so far (-1: none yet)
    int64_t last_time  # its time
    uint32_t next  # the key's next left row to answer (a position in the grouped left rows)
    uint32_t end  # one past the key's last left row


cdef struct KeyIds:
    Table table  # the keys' ids, when they span a large range
    int32_t* direct  # by key - low: the key's id, -1 if none (keys in a small range: a plain array, no hashing)
    int64_t low
    int64_t high
    Py_ssize_t span  # 0: the hash table


cdef Py_ssize_t _number_keys(KeyIds* ids, const int64_t* keys, Py_ssize_t m, uint32_t* out) noexcept nogil:
    """Each of `m` (>= 1) keys' id in `out`, numbered as first seen: the number of distinct keys; -1 if out of
    memory. :func:`_free_ids` frees `ids` in either case."""
    cdef Py_ssize_t i, j, k, count = 0
    ids.table.keys = NULL
    ids.table.ids = NULL
    ids.direct = NULL
    ids.span = 0
    ids.low = ids.high = keys[0]
    for j in range(1, m):
        if keys[j] < ids.low:
            ids.low = keys[j]
        elif keys[j] > ids.high:
            ids.high = keys[j]
    if <uint64_t>ids.high - <uint64_t>ids.low < <uint64_t>(4 * m + 4096):  # dense keys
        ids.span = <Py_ssize_t>(<uint64_t>ids.high - <uint64_t>ids.low) + 1
        ids.direct = <int32_t*>malloc(ids.span * sizeof(int32_t))
        if ids.direct == NULL:
            return -1
        for i in range(ids.span):
            ids.direct[i] = -1
        for j in range(m):
            k = <Py_ssize_t>(<uint64_t>keys[j] - <uint64_t>ids.low)
            if ids.direct[k] < 0:
                ids.direct[k] = <int32_t>count
                count += 1
            out[j] = <uint32_t>ids.direct[k]
        return count
    if _key_table(&ids.table, keys, m, out) < 0:
        return -1
    return ids.table.used


cdef inline Py_ssize_t _key_id(const KeyIds* ids, int64_t key) noexcept nogil:
    """The id :func:`_number_keys` gave `key`, -1 if it was not among the keys."""
    if ids.span:
        if key >= ids.low and key <= ids.high:
            return ids.direct[<Py_ssize_t>(<uint64_t>key - <uint64_t>ids.low)]
        return -1
    return ids.table.ids[_find(&ids.table, key)]


cdef void _free_ids(KeyIds* ids) noexcept nogil:
    free(ids.direct)
    free(ids.table.keys)
    free(ids.table.ids)


cdef int _answer(const uint32_t* right_ids, const int64_t* right_times, const int64_t* tiebreak, Py_ssize_t m,
                 const int32_t* group, KeyState* state, Py_ssize_t groups, const int64_t* times,
                 const uint32_t* rows, bint check, int64_t* out) noexcept nogil:
    """The sweep both joins share: the right rows in their order, each answering its key's left rows (in `state`:
    positions in `times`, grouped by key and ascending within a key) earlier than it with the key's previous
    right row, then the rows at or after a key's last one. An answer goes to ``out[rows[k]]`` (``out[k]`` without
    `rows`). 1 when done; 0 if `check` and a key's right rows do not ascend strictly by (time, `tiebreak`)."""
    cdef Py_ssize_t j, s, k
    cdef int64_t t, previous
    cdef KeyState* st
    for j in range(m):
        s = group[right_ids[j]]
        if s < 0:
            continue  # no left row has this key
        st = &state[s]
        t = right_times[j]
        previous = st.last
        if check and previous >= 0:
            if t < st.last_time or (t == st.last_time and (tiebreak == NULL or tiebreak[j] <= tiebreak[previous])):
                return 0
        k = st.next
        if k < st.end and times[k] < t:
            while k < st.end and times[k] < t:
                out[rows[k] if rows != NULL else k] = previous if previous >= 0 else BEFORE
                k += 1
            st.next = <uint32_t>k
        st.last = j
        st.last_time = t
    for s in range(groups):
        previous = state[s].last
        for k in range(state[s].next, state[s].end):
            out[rows[k] if rows != NULL else k] = previous
    return 1


cdef int _sweep(const int64_t* left_keys, const int64_t* left_times, Py_ssize_t n,
                const int64_t* right_keys, const int64_t* right_times, const int64_t* tiebreak, Py_ssize_t m,
                bint check, int64_t* out) noexcept nogil:
    """The as-of join in one pass over the right rows in their order, without grouping them.

    The right keys get ids (by position if they span a small range, else in a hash table); the left rows whose
    key has right rows are grouped by key and sorted by time within a key (the others have no record: ABSENT, so
    a pass over one range of a history touches only its keys' rows); then each right row of a key answers that
    key's left rows earlier than it with the key's previous record. 1 when done; 0 if `check` and a key's right
    rows do not ascend by (time, `tiebreak`) (strictly; by time alone without `tiebreak`): the caller must order
    them; -1 if out of memory."""
    cdef KeyIds key_ids
    cdef Py_ssize_t i, j, s, k, end, longest = 0, ids = 0, groups = 0, matched = 0
    cdef int status = 1
    cdef uint32_t* right_ids = <uint32_t*>malloc(m * sizeof(uint32_t))
    cdef int32_t* group = NULL  # by key id: the key's group of left rows, -1 if none
    cdef uint32_t* left_groups = <uint32_t*>malloc(n * sizeof(uint32_t))
    cdef uint32_t* starts = NULL
    cdef uint32_t* rows = NULL
    cdef int64_t* times = NULL
    cdef KeyState* state = NULL
    cdef KeyState* st
    ids = _number_keys(&key_ids, right_keys, m, right_ids) if right_ids != NULL else -1
    if ids < 0 or left_groups == NULL:
        status = -1
    if status == 1:
        group = <int32_t*>malloc(ids * sizeof(int32_t))
        if group == NULL:
            status = -1
    if status == 1:
        for s in range(ids):
            group[s] = -1
        for i in range(n):  # each left row's group (its key's, numbered as first seen), or no record at all
            s = _key_id(&key_ids, left_keys[i])
            if s < 0:
                out[i] = ABSENT
                left_groups[i] = <uint32_t>-1
                continue
            if group[s] < 0:
                group[s] = <int32_t>groups
                groups += 1
            left_groups[i] = <uint32_t>group[s]
            matched += 1
        starts = <uint32_t*>calloc(groups + 1, sizeof(uint32_t))
        rows = <uint32_t*>malloc((matched + 1) * sizeof(uint32_t))
        times = <int64_t*>malloc((matched + 1) * sizeof(int64_t))
        state = <KeyState*>malloc((groups + 1) * sizeof(KeyState))
        if starts == NULL or rows == NULL or times == NULL or state == NULL:
            status = -1
    if status == 1:
        for i in range(n):  # a counting sort of the matched left rows by key, then each key's rows by time
            if left_groups[i] != <uint32_t>-1:
                starts[left_groups[i] + 1] += 1
        for s in range(groups):
            starts[s + 1] += starts[s]
            state[s].next = starts[s]
            longest = max(longest, starts[s + 1] - starts[s])
        for i in range(n):
            if left_groups[i] != <uint32_t>-1:
                st = &state[left_groups[i]]
                rows[st.next] = <uint32_t>i
                times[st.next] = left_times[i]
                st.next += 1
        if _sort_groups(starts, groups, longest, times, rows) < 0:
            status = -1
    if status == 1:
        for s in range(groups):
            state[s].next = starts[s]
            state[s].end = starts[s + 1]
            state[s].last = -1
        status = _answer(right_ids, right_times, tiebreak, m, group, state, groups, times, rows, check, out)
    if right_ids != NULL:
        _free_ids(&key_ids)
    free(right_ids)
    free(group)
    free(left_groups)
    free(starts)
    free(rows)
    free(times)
    free(state)
    return status


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
    if m >= 2**32 - 1 or n >= 2**32 - 1:
        raise ValueError("asof_backward takes fewer than 2**32 - 1 rows a side")
    out_array = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_array
    cdef int swept = 1
    if n == 0:
        return out_array
    if m == 0:
        out_array.fill(ABSENT)
        return out_array
    with nogil:  # the usual case, each key's records already in order: one pass, nothing grouped
        swept = _sweep(&left_keys[0], &left_times[0], n, &right_keys[0], &right_times[0], tiebreak, m, any_order,
                       &out[0])
    if swept < 0:
        raise MemoryError("asof_backward: no memory for the key table")
    if swept == 1:
        return out_array
    ids_array = np.empty(m, dtype=np.uint32)  # key ids and positions fit 32 bits: half the memory traffic
    cdef uint32_t[::1] ids = ids_array
    cdef Table table
    cdef int failed = 0
    cdef int64_t key, t
    with nogil:  # each right row's key id, in order of first appearance
        failed = _key_table(&table, &right_keys[0], m, &ids[0])
    if failed:
        raise MemoryError("asof_backward: no memory for the key table")
    starts_array = np.zeros(table.used + 1, dtype=np.uint32)
    fill_array = np.empty(table.used, dtype=np.uint32)
    order_array = np.empty(m, dtype=np.uint32)
    times_array = np.empty(m, dtype=np.int64)  # the right times in key order: the searches read them in a row
    cdef uint32_t[::1] starts = starts_array
    cdef uint32_t[::1] fill = fill_array
    cdef uint32_t[::1] order = order_array
    cdef int64_t[::1] times = times_array
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


def group_left(const int64_t[::1] left_keys, const int64_t[::1] left_times):
    """The left rows grouped by key, each key's rows by time, for :func:`asof_grouped` (passes over parts of a
    history join the same left rows: grouped once, each pass then looks up keys, not rows): ``(keys, starts,
    rows, times)``: the distinct keys; where each one's rows begin in `rows`/`times` (one more at the end); the
    row numbers; their times."""
    cdef Py_ssize_t n = left_keys.shape[0], i, s, k, end, longest = 0
    if n >= 2**32 - 1:
        raise ValueError("group_left takes fewer than 2**32 - 1 rows")
    ids_array = np.empty(n, dtype=np.uint32)
    cdef uint32_t[::1] ids = ids_array
    cdef Table table
    cdef int failed = 0
    with nogil:
        failed = _key_table(&table, &left_keys[0] if n else NULL, n, &ids[0] if n else NULL)
    if failed:
        raise MemoryError("group_left: no memory for the key table")
    cdef Py_ssize_t groups = table.used
    keys_array = np.empty(groups, dtype=np.int64)
    starts_array = np.zeros(groups + 1, dtype=np.uint32)
    fill_array = np.empty(groups, dtype=np.uint32)
    rows_array = np.empty(n, dtype=np.uint32)
    times_array = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] keys = keys_array
    cdef uint32_t[::1] starts = starts_array
    cdef uint32_t[::1] fill = fill_array
    cdef uint32_t[::1] rows = rows_array
    cdef int64_t[::1] times = times_array
    with nogil:
        for i in range(n):
            starts[ids[i] + 1] += 1
            keys[ids[i]] = left_keys[i]
        for s in range(groups):
            starts[s + 1] += starts[s]
            fill[s] = starts[s]
            longest = max(longest, starts[s + 1] - starts[s])
        for i in range(n):
            rows[fill[ids[i]]] = <uint32_t>i
            times[fill[ids[i]]] = left_times[i]
            fill[ids[i]] += 1
        failed = n > 0 and _sort_groups(&starts[0], groups, longest, &times[0], &rows[0]) < 0
    free(table.keys)
    free(table.ids)
    if failed:
        raise MemoryError("group_left: no memory to sort the rows")
    return keys_array, starts_array, rows_array, times_array


def asof_grouped(grouped, const int64_t[::1] right_keys, const int64_t[::1] right_times,
                 const int64_t[::1] right_tiebreak=None):
    """:func:`asof_backward` with ``any_order=True`` for the left rows :func:`group_left` grouped, in one pass
    over the right rows in their order, for the left rows whose key has right rows only: ``(rows, found)``, the
    left row numbers (grouped by key) and the index of each one's last right row at or before its time (-1:
    none). None if a key's right rows do not ascend strictly by (time, `right_tiebreak`) (by time alone without
    it): the caller then orders them (:func:`asof_backward`)."""
    cdef const int64_t[::1] keys = grouped[0]
    cdef const uint32_t[::1] starts = grouped[1]
    cdef const uint32_t[::1] rows = grouped[2]
    cdef const int64_t[::1] times = grouped[3]
    cdef Py_ssize_t groups = keys.shape[0], m = right_keys.shape[0], i, j, s, k, ids = 0, matched = 0
    cdef const int64_t* tiebreak = NULL
    if right_tiebreak is not None:
        if right_tiebreak.shape[0] != m:
            raise ValueError("asof_grouped: right_tiebreak must have one value per right row")
        if m:
            tiebreak = &right_tiebreak[0]
    if m >= 2**32 - 1:
        raise ValueError("asof_grouped takes fewer than 2**32 - 1 right rows")
    if m == 0 or groups == 0:
        return np.empty(0, dtype=np.uint32), np.empty(0, dtype=np.int64)
    cdef KeyIds key_ids
    cdef int status = 1
    right_ids_array = np.empty(m, dtype=np.uint32)
    cdef uint32_t[::1] right_ids = right_ids_array
    cdef int32_t* group = NULL  # by right key id: the left group with that key, -1 if none
    cdef KeyState* state = NULL
    cdef uint32_t* out_rows = NULL
    cdef int64_t* found = NULL
    cdef int64_t* compact_times = NULL  # the answered rows' times, in result order: the sweep reads them near
    cdef Py_ssize_t answered = 0, c
    with nogil:
        ids = _number_keys(&key_ids, &right_keys[0], m, &right_ids[0])
        if ids < 0:
            status = -1
        if status == 1:
            group = <int32_t*>malloc((ids + 1) * sizeof(int32_t))
            state = <KeyState*>malloc((ids + 1) * sizeof(KeyState))  # by answered key, at most one per right key
            if group == NULL or state == NULL:
                status = -1
        if status == 1:
            for s in range(ids):
                group[s] = -1
            for s in range(groups):  # each left key's right key id: only the keys with right rows are answered
                i = _key_id(&key_ids, keys[s])
                if i >= 0:
                    group[i] = <int32_t>answered
                    state[answered].next = <uint32_t>matched  # positions in the result from here on
                    state[answered].end = <uint32_t>s  # for now: the left group, for the copy below
                    state[answered].last = -1
                    answered += 1
                    matched += starts[s + 1] - starts[s]
            out_rows = <uint32_t*>malloc((matched + 1) * sizeof(uint32_t))
            found = <int64_t*>malloc((matched + 1) * sizeof(int64_t))
            compact_times = <int64_t*>malloc((matched + 1) * sizeof(int64_t))
            if out_rows == NULL or found == NULL or compact_times == NULL:
                status = -1
        if status == 1:
            for c in range(answered):  # the answered groups' rows and times, side by side
                s = state[c].end
                k = state[c].next
                for i in range(starts[s], starts[s + 1]):
                    out_rows[k] = rows[i]
                    compact_times[k] = times[i]
                    k += 1
                state[c].end = <uint32_t>k
            status = _answer(&right_ids[0], &right_times[0], tiebreak, m, group, state, answered, compact_times,
                             NULL, True, found)
    _free_ids(&key_ids)
    free(group)
    free(state)
    free(compact_times)
    if status != 1:
        free(out_rows)
        free(found)
        if status < 0:
            raise MemoryError("asof_grouped: no memory for the key table")
        return None
    out_rows_array = np.empty(matched, dtype=np.uint32)
    found_array = np.empty(matched, dtype=np.int64)
    cdef uint32_t[::1] rows_view = out_rows_array
    cdef int64_t[::1] found_view = found_array
    with nogil:
        for k in range(matched):
            rows_view[k] = out_rows[k]
            found_view[k] = found[k]
    free(out_rows)
    free(found)
    return out_rows_array, found_array
