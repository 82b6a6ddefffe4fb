"""Id columns as integer codes: the compiled loops of the skills ingest (issue #36).

A partitioned skills run reads 10⁸ labels as text; what it needs of the text is each task's bucket and which rows
share an id. The loops here work on an Arrow text column's buffers (offsets and bytes), never a Python object a row:

* :func:`text_hashes` — ``pandas.util.hash_array`` of every value (SipHash-2-4 of its UTF-8 bytes with pandas'
  default key, then pandas' mixing): the same 64-bit hash as before, so a task lands in the same bucket;
* :func:`counting_order` — the permutation of a stable sort by a small integer key (the bucket), O(rows);
* :func:`local_codes` — each run's (bucket's) own dictionary of a coded column, in first-seen order;
* :func:`task_worker_order` — the permutation of the stable sort of ``task·W + worker`` (two stable counting
  sorts, :mod:`crowdflow.orders`);
* :func:`may_strip` — whether the id rule could change any value of a column (else it is the identity there).

Each is equal, value for value, to the numpy/pandas expression it replaces (``tests/skills/test_coded.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crowdflow.compiled import compiled_kernel
from crowdflow.orders import task_worker_order as _lsd_order

__all__ = [
    "counting_order",
    "local_codes",
    "may_strip",
    "task_worker_order",
    "text_buffers",
    "text_hashes",
]

_K0 = np.uint64(int.from_bytes(b"01234567", "little"))  # pandas' default hash key "0123456789123456"
_K1 = np.uint64(int.from_bytes(b"89123456", "little"))


def text_buffers(arr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The offsets (int64, ``len + 1``), the bytes (uint8) and the validity (bool, None without nulls) of an Arrow
    ``string``/``large_string``/``binary`` array (chunks combined), without copying the bytes."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    bufs = arr.buffers()
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    off = np.frombuffer(bufs[1], dtype=np.int64 if wide else np.int32)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(0, np.uint8)
    valid = None
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return off.astype(np.int64), data, valid


@compiled_kernel
def _rotl(x: Any, b: int) -> Any:
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@compiled_kernel
def _sipround(v0: np.uint64, v1: np.uint64, v2: np.uint64, v3: np.uint64) -> tuple[Any, Any, Any, Any]:
    v0 = v0 + v1
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 = v2 + v3
    v3 = _rotl(v3, 16) ^ v2
    v0 = v0 + v3
    v3 = _rotl(v3, 21) ^ v0
    v2 = v2 + v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@compiled_kernel
def _siphash(data: np.ndarray, a: int, n: int, k0: Any, k1: Any) -> Any:
    v0 = k0 ^ np.uint64(0x736F6D6570736575)
    v1 = k1 ^ np.uint64(0x646F72616E646F6D)
    v2 = k0 ^ np.uint64(0x6C7967656E657261)
    v3 = k1 ^ np.uint64(0x7465646279746573)
    full = n - n % 8
    for s in range(a, a + full, 8):
        m = np.uint64(0)
        for k in range(8):
            m |= np.uint64(data[s + k]) << np.uint64(8 * k)
        v3 ^= m
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 ^= m
    b = np.uint64(n & 0xFF) << np.uint64(56)
    for k in range(n - full):
        b |= np.uint64(data[a + full + k]) << np.uint64(8 * k)
    v3 ^= b
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0 ^= b
    v2 ^= np.uint64(0xFF)
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


@compiled_kernel
def _text_hashes(offsets: np.ndarray, data: np.ndarray, k0: np.uint64, k1: np.uint64) -> np.ndarray:
    out = np.empty(offsets.size - 1, dtype=np.uint64)
    for i in range(offsets.size - 1):
        v = _siphash(data, offsets[i], offsets[i + 1] - offsets[i], k0, k1)
        v ^= v >> np.uint64(30)  # pandas' redistribution of the 64-bit values
        v *= np.uint64(0xBF58476D1CE4E5B9)
        v ^= v >> np.uint64(27)
        v *= np.uint64(0x94D049BB133111EB)
        v ^= v >> np.uint64(31)
        out[i] = v
    return out


def text_hashes(arr: Any) -> np.ndarray:
    """``pandas.util.hash_array`` of every value of an Arrow text column (SipHash-2-4 of its UTF-8 bytes with
    pandas' default key, then pandas' mixing), on the Arrow buffers. A null gets the hash of the empty text
    (callers drop those rows)."""
    off, data, _ = text_buffers(arr)
    return np.asarray(_text_hashes(off, data, _K0, _K1))


@compiled_kernel
def _edge_blank(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, any_null: bool) -> bool:
    for i in range(offsets.size - 1):
        if any_null and not valid[i]:
            continue
        a, b = offsets[i], offsets[i + 1]
        if b == a:
            return True
        c, d = data[a], data[b - 1]
        if c <= 32 or c >= 127 or d <= 32 or d >= 127:
            return True
    return False


def may_strip(arr: Any) -> bool:
    """Whether the id rule (:func:`crowdflow.contracts.comparisons.id_text`: surrounding blanks stripped, blank text
    missing) could change a value of this Arrow text column: an empty value, or a first or last byte that is an
    ASCII control, space or DEL or not ASCII (every character ``str.strip`` removes is among these). False: the rule
    leaves every value as it is."""
    off, data, valid = text_buffers(arr)
    return bool(_edge_blank(off, data, valid if valid is not None else np.zeros(0, bool), valid is not None))


@compiled_kernel
def _counting_order(key: np.ndarray, n_keys: int) -> np.ndarray:
    start = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(key.size):
        start[key[i] + 1] += 1
    for k in range(n_keys):
        start[k + 1] += start[k]
    order = np.empty(key.size, dtype=np.int64)
    for i in range(key.size):
        k = key[i]
        order[start[k]] = i
        start[k] += 1
    return order


def counting_order(key: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The stable order of ``key`` (integers in ``[0, n_keys)``) and the bounds of each key's run in it.

    ``order`` equals ``np.argsort(key, kind="stable")`` and ``bounds`` equals
    ``np.searchsorted(key[order], np.arange(n_keys + 1))``; O(rows + n_keys).
    """
    key = np.ascontiguousarray(key)
    order = _counting_order(key, int(n_keys))
    bounds = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n_keys), out=bounds[1:])
    return order, bounds


def task_worker_order(
    task_idx: np.ndarray, worker_idx: np.ndarray, n_tasks: int, n_workers: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`crowdflow.labels.task_major_order` in O(rows): the stable order of ``task·W + worker`` (two stable
    counting sorts, :func:`crowdflow.orders.task_worker_order`: by worker, then by task) and the sorted keys."""
    task = np.ascontiguousarray(task_idx, dtype=np.int64)
    worker = np.ascontiguousarray(worker_idx, dtype=np.int64)
    order = _lsd_order(task, worker, int(n_tasks), int(n_workers))
    key = task[order] * max(int(n_workers), 1) + worker[order]
    return order, key


@compiled_kernel
def _local_codes(codes: np.ndarray, bounds: np.ndarray, n_dict: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    local = np.empty(codes.size, dtype=np.int32)
    used = np.empty(codes.size, dtype=np.int64)
    used_bounds = np.zeros(bounds.size, dtype=np.int64)
    where = np.full(max(n_dict, 1), -1, dtype=np.int64)
    n_used = 0
    for b in range(bounds.size - 1):
        first = n_used
        for i in range(bounds[b], bounds[b + 1]):
            c = codes[i]
            if where[c] < 0:
                where[c] = n_used - first
                used[n_used] = c
                n_used += 1
            local[i] = where[c]
        for k in range(first, n_used):
            where[used[k]] = -1
        used_bounds[b + 1] = n_used
    return local, used[:n_used].copy(), used_bounds


def local_codes(codes: np.ndarray, bounds: np.ndarray, n_dict: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run ``codes[bounds[b]:bounds[b+1]]`` (codes in ``[0, n_dict)``), codes into the run's own dictionary.

    Returns ``(local, used, used_bounds)``: ``used[used_bounds[b]:used_bounds[b+1]]`` are the codes run b uses, in
    first-seen order, and ``local[i]`` is the position of ``codes[i]`` among them, so
    ``used[used_bounds[b] + local[i]] == codes[i]``.
    """
    return _local_codes(np.ascontiguousarray(codes), np.asarray(bounds, dtype=np.int64), int(n_dict))
