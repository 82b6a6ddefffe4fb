"""Array helpers shared by the personal-models modules (docs/methods/personal_models.md §6.4).

Per-agent data are stored CSR-style (rows of agent i at ``ptr[i]:ptr[i + 1]``): :func:`ragged` gathers
the rows of a set of agents, :func:`segsum` sums rows per agent, :func:`matvec` applies p×p blocks to
p-vectors in a batch, and :func:`format_ids` lists offending ids in error messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import numpy as np

EPS = np.finfo(np.float64).eps


def ragged(ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the CSR segments ``ptr[idx[k]] : ptr[idx[k] + 1]``.

    Returns
    -------
    seg : numpy.ndarray
        For every gathered position, the k it belongs to.
    pos : numpy.ndarray
        The gathered flat positions.
    """
    starts = ptr[idx]
    lens = ptr[idx + 1] - starts
    seg = np.repeat(np.arange(idx.size), lens)
    offs = np.cumsum(lens) - lens
    pos = np.arange(seg.size) - offs[seg] + starts[seg]
    return seg, pos


def segsum(vals: np.ndarray, seg: np.ndarray, k: int) -> np.ndarray:
    """Sum rows of ``vals`` by segment id (unbuffered, exact per segment)."""
    out = np.zeros((k, *vals.shape[1:]), dtype=np.float64)
    np.add.at(out, seg, vals)
    return out


def format_ids(ids: Iterable[Any], limit: int = 10) -> str:
    """``[a, b, c, … (+k more)]``: the first ``limit`` ids of an error message."""
    ids = list(ids)
    shown = ", ".join(str(i) for i in ids[:limit])
    more = f", … (+{len(ids) - limit} more)" if len(ids) > limit else ""
    return f"[{shown}{more}]"


def matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Batched ``m[k] @ v[k]`` for m (K, p, p), v (K, p)."""
    return cast(np.ndarray, np.matmul(m, v[..., None])[..., 0])
