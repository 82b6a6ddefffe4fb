"""The one tie rule of every consensus: a draw that depends only on (task id, class, seed) (issue #38).

A task's winner is the arg-max of its scores (vote counts, weighted votes or posteriors). Scores within
``1e-12 + 1e-12·|top|`` of the top are tied (``numpy.isclose(s, top, 1e-12, 1e-12)``). Two rules pick among them
(docs/methods/skills.md §2.7):

- ``"smallest"``: the tied class that comes first in the label order.
- ``"random"``: the tied class with the largest draw

  .. math::  u(t, l) = \\mathrm{mix}\\big(h(t) \\oplus \\mathrm{mix}(h(l) \\oplus \\mathrm{mix}(s))\\big) / 2^{64},

  where ``h`` is the 64-bit FNV-1a hash of the id's UTF-8 text, ``mix`` is the splitmix64 finaliser (a bijection
  of 64-bit words that spreads every input bit over every output bit) and ``s`` the seed. The draw of a task
  depends on nothing else: not its row, not the other tasks, not the order of the classes. So the inline vote, the
  folded (incremental) vote and a partitioned (Dask) vote that sees the tasks bucket by bucket give the same
  winners bit for bit, whatever the partition. Over tasks, ``u`` behaves as independent uniform draws, so each
  tied class wins with probability 1/k (a fair coin for two); the tests check the frequencies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from crowdflow.compiled import compiled_kernel
from crowdflow.skills.rows import row_argmax, row_max, row_sum
from crowdflow.skills.types import TieBreak

__all__ = ["id_hashes", "pick_winners", "tie_draws", "top_mask"]

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@compiled_kernel
def _fnv1a(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    n = offsets.size - 1
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        h = np.uint64(14695981039346656037)
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * np.uint64(1099511628211)
        out[i] = h
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 words (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def _as_text(ids: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[object]) -> pa.Array:
    """Ids as one Arrow ``large_string`` array (their text: ``str`` of each id)."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if not isinstance(ids, pa.Array):
        values = np.asarray(ids, dtype=object)
        try:
            ids = pa.array(values, type=pa.large_string(), from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            ids = pa.array([str(v) for v in values.tolist()], type=pa.large_string())
    if not pa.types.is_large_string(ids.type):
        ids = ids.cast(pa.large_string())
    return ids


def id_hashes(ids: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[object]) -> np.ndarray:
    """64-bit FNV-1a hash of each id's UTF-8 text (fixed: the same on every host, process and version).

    Parameters
    ----------
    ids : pyarrow.Array, numpy.ndarray or sequence
        Task ids or labels; non-text ids are hashed by their ``str``.

    Returns
    -------
    numpy.ndarray
        (n,) uint64.
    """
    arr = _as_text(ids)
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if arr.null_count:
        raise ValueError("ids to hash must not be null")
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    return _fnv1a(data, np.ascontiguousarray(offsets))


def tie_draws(
    tasks: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[object],
    classes: pa.Array | np.ndarray | Sequence[object],
    seed: int,
) -> np.ndarray:
    """The draw ``u(t, l)`` in [0, 1) of each (task, class) (module docstring).

    Returns
    -------
    numpy.ndarray
        (len(tasks), len(classes)) float64; ``u`` has 53 random bits.
    """
    s = _mix(np.asarray([int(seed) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    c = _mix(id_hashes(classes) ^ s)
    z = _mix(id_hashes(tasks)[:, None] ^ c[None, :])
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def top_mask(scores: np.ndarray) -> np.ndarray:
    """Which scores tie with their row's top: ``|s − top| ≤ 1e-12 + 1e-12·|top|`` (``numpy.isclose``'s rule)."""
    top = row_max(scores)[:, None]
    out: np.ndarray = np.abs(scores - top) <= 1e-12 + 1e-12 * np.abs(top)
    return out


def pick_winners(
    scores: np.ndarray,
    tasks: pa.Array | pa.ChunkedArray | np.ndarray | Sequence[object],
    classes: pa.Array | np.ndarray | Sequence[object],
    tie_break: TieBreak = "random",
    seed: int = 0,
) -> tuple[np.ndarray, int]:
    """The winning class code of each row of a T×M score matrix, and the number of tied rows.

    Parameters
    ----------
    scores : numpy.ndarray
        (T, M) votes, weighted votes or posteriors; row t belongs to ``tasks[t]``, column l to ``classes[l]``.
    tasks : pyarrow.Array, numpy.ndarray or sequence
        (T,) task ids (their text is what the draw depends on).
    classes : pyarrow.Array, numpy.ndarray or sequence
        (M,) labels in the label order.
    tie_break : {"random", "smallest"}
    seed : int

    Returns
    -------
    (numpy.ndarray, int)
        int64 class codes, and how many rows had two or more top classes. Only the tied rows' ids are hashed.

    Raises
    ------
    ValueError
        An unknown ``tie_break``, or ``tasks``/``classes`` not matching the shape of ``scores``.
    """
    if tie_break not in ("random", "smallest"):
        raise ValueError(f"unknown tie_break {tie_break!r}; use 'smallest' or 'random'")
    if scores.ndim != 2 or len(tasks) != scores.shape[0] or len(classes) != scores.shape[1]:
        raise ValueError(f"scores {scores.shape} do not match {len(tasks)} tasks x {len(classes)} classes")
    is_top = top_mask(scores)
    tied = row_sum(is_top) > 1
    ties = int(tied.sum())
    winner = row_argmax(is_top).astype(np.int64)
    if tie_break == "random" and ties:
        rows = np.flatnonzero(tied)
        if isinstance(tasks, pa.Array | pa.ChunkedArray):
            picked: pa.Array | np.ndarray = tasks.take(pa.array(rows))
        else:
            picked = np.asarray(tasks, dtype=object)[rows]
        u = tie_draws(picked, classes, seed)
        winner[rows] = row_argmax(np.where(is_top[rows], u, -1.0))
    return winner, ties
