"""Worker side of the partitioned ranking fit (:mod:`crowdflow.ranking.partitioned`): module-level pass functions.

Every function here is bound with :func:`functools.partial` and pickled to the workers. A partition is read and
encoded once per block (:func:`_encode_part`, held across passes by the executor, :func:`crowdflow.executors.hold`);
the edge-sum and histogram passes run on the held rows (:mod:`crowdflow.ranking.held`); the scan and the final
write pass read the partitions themselves (ids and row outputs need the strings).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from crowdflow.contracts.comparisons import canonical_comparisons
from crowdflow.contracts.errors import InputError
from crowdflow.ranking.held import (
    SKETCH_BINS,
    SKETCH_DECADES,
    SKETCH_LO,
    SKETCH_PER_DECADE,
    HeldRows,
    _compact_outcome,
    encode_block,
    held_histogram,
    held_kept,
    held_sums,
    smallest_levels,
)
from crowdflow.ranking.types import _str

__all__ = ["SKETCH_BINS", "SKETCH_DECADES", "EdgeSums", "LocalRows", "Scan", "keep_local", "to_parquet"]


def _identity(part: pd.DataFrame) -> pd.DataFrame:
    return part  # the reader of fit_trimmed's single in-memory partition


def to_parquet(rows: pd.DataFrame, path: str) -> None:
    """The default writer of the final pass's row files: the frame as it is."""
    rows.to_parquet(path, index=False)


def _total(xs: list[np.ndarray]) -> np.ndarray:
    """``((0 + x₀) + x₁) + …`` element by element (integer arrays as integers)."""
    out = xs[0] + (0 if xs[0].dtype.kind in "iu" else 0.0)
    for x in xs[1:]:
        out = out + x
    return np.asarray(out)


@dataclass(frozen=True)
class EdgeSums:
    """Per-pair sums of (a subset of) the rows, pairs ``u < v`` keyed ``u·n + v`` (sorted, distinct).

    ``count`` rows, ``w = Σw``, ``wy = Σw·y°``, ``wy2 = Σw·y°²`` with the outcome oriented along the pair,
    ``ymin/ymax`` of y°, ``wpos/wneg`` the weight with ``y° > 0`` / ``y° < 0`` and ``ties`` the rows with
    ``y = 0``.
    """

    key: np.ndarray
    count: np.ndarray
    w: np.ndarray
    wy: np.ndarray
    wy2: np.ndarray
    ymin: np.ndarray
    ymax: np.ndarray
    wpos: np.ndarray
    wneg: np.ndarray
    ties: np.ndarray

    @staticmethod
    def combine(parts: Sequence[EdgeSums]) -> EdgeSums:
        """Sum the partitions' sums pair by pair (min/max for ``ymin/ymax``).

        Parts on the same pairs (the usual case at scale: every block holds every pair) are added element by
        element, ``(0 + a) + b + …``: the additions ``numpy.bincount`` makes on their concatenation, in the same
        order (the same bits), without the sort of every key (~0.1 s for two parts of 5·10⁵ pairs).
        """
        if len(parts) > 1 and all(np.array_equal(p.key, parts[0].key) for p in parts[1:]):
            t = {f: _total([getattr(p, f) for p in parts]) for f in ("count", "w", "wy", "wy2", "wpos", "wneg", "ties")}
            ymin = functools.reduce(np.minimum, [p.ymin for p in parts])
            ymax = functools.reduce(np.maximum, [p.ymax for p in parts])
            return EdgeSums(parts[0].key, ymin=np.asarray(ymin), ymax=np.asarray(ymax), **t)
        key = np.concatenate([p.key for p in parts]) if parts else np.zeros(0, np.int64)
        uk, inv = np.unique(key, return_inverse=True)
        ne = uk.size

        def add(name: str) -> np.ndarray:
            return np.bincount(inv, weights=np.concatenate([getattr(p, name) for p in parts]), minlength=ne)

        ymin = np.full(ne, np.inf)
        ymax = np.full(ne, -np.inf)
        if ne:
            np.minimum.at(ymin, inv, np.concatenate([p.ymin for p in parts]))
            np.maximum.at(ymax, inv, np.concatenate([p.ymax for p in parts]))
        cnt = add("count").round().astype(np.int64) if ne else np.zeros(0, np.int64)
        ties = add("ties").round().astype(np.int64) if ne else np.zeros(0, np.int64)
        return EdgeSums(uk, cnt, add("w"), add("wy"), add("wy2"), ymin, ymax, add("wpos"), add("wneg"), ties)


@dataclass(frozen=True)
class _Ctx:
    """What every task gets: the item dictionary (natural order)."""

    items: np.ndarray

    @property
    def n(self) -> int:
        return int(self.items.size)


@dataclass(frozen=True)
class _Rule:
    """Which rows a pass keeps, from the broadcast θ: ``kind='abs'`` keeps ``|r| ≤ cut``; ``kind='upset'``
    drops the rows that contradict θ at ``|d| ≥ cut`` (ties never)."""

    theta: np.ndarray
    cut: float
    kind: Literal["abs", "upset"] = "abs"

    def spec(self) -> tuple[np.ndarray, float, int]:
        """``(θ, cut, kind)`` for the compiled passes (:func:`crowdflow.ranking.held.held_sums`)."""
        return np.ascontiguousarray(self.theta, dtype=np.float64), float(self.cut), 0 if self.kind == "abs" else 1

    def keep(self, u: np.ndarray, v: np.ndarray, yo: np.ndarray) -> np.ndarray:
        d = self.theta[u] - self.theta[v]
        if self.kind == "abs":
            return np.asarray(np.abs(yo - d) <= self.cut)
        return np.asarray(~((yo * d < 0) & (np.abs(d) >= self.cut)))


@dataclass(frozen=True)
class _Rows:
    """One encoded partition: pairs ``u < v``, orientation signs, oriented outcomes and weights."""

    df: pd.DataFrame
    u: np.ndarray
    v: np.ndarray
    sign: np.ndarray
    yo: np.ndarray
    w: np.ndarray


def _canonical(raw: pd.DataFrame) -> pd.DataFrame:
    """:func:`~crowdflow.contracts.comparisons.canonical_comparisons` of one partition; an empty partition (a 0-byte
    file, docs/scale.md) is zero rows, not an error: the whole table's emptiness is checked by the flow."""
    if len(raw) == 0:
        return pd.DataFrame(
            {
                "row_id": np.zeros(0, np.int64),
                "annotator": pd.Series([], dtype=object),
                "item_a": pd.Series([], dtype=object),
                "item_b": pd.Series([], dtype=object),
                "outcome": np.zeros(0),
                "weight": np.zeros(0),
            }
        )
    return canonical_comparisons(raw)


def _read_rows(read: Callable[[Any], pd.DataFrame], ctx: _Ctx, part: Any) -> _Rows:
    """Read, canonicalise and encode one partition with the global dictionary."""
    df = _canonical(read(part))
    index = pd.Index(ctx.items)
    i = index.get_indexer(df["item_a"].to_numpy(dtype=object))
    j = index.get_indexer(df["item_b"].to_numpy(dtype=object))
    if (i < 0).any() or (j < 0).any():
        raise InputError("holds an item id the first pass did not see: the file changed during the run", path=str(part))
    i = i.astype(np.int64)
    j = j.astype(np.int64)
    sign = np.where(i < j, 1.0, -1.0)
    y = df["outcome"].to_numpy(dtype=np.float64)
    return _Rows(df, np.minimum(i, j), np.maximum(i, j), sign, sign * y, df["weight"].to_numpy(dtype=np.float64))


#: The canonical columns a copy must have, with string ids, for the Arrow fast path (:func:`_arrow_part`).
_ID_COLS = ("item_a", "item_b")


@dataclass(frozen=True)
class _ArrowPart:
    """One canonical copy read by Arrow: per id column the dictionary indices and values, outcome, weight."""

    table: Any  # pyarrow.Table (every column read, ids dictionary-encoded)
    idx: tuple[np.ndarray, np.ndarray]  # (m,) int32 dictionary indices of item_a, item_b
    values: tuple[np.ndarray, np.ndarray]  # the two dictionaries (object arrays of str)
    y: np.ndarray
    w: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.y.size)


def _is_copy_reader(read: Callable[[Any], pd.DataFrame]) -> bool:
    """Whether ``read`` is the pipeline's reader of canonical copies (the Arrow fast path applies)."""
    from crowdflow.storage.datasets import read_copy

    return read is read_copy


def _dict_column(col: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices int32, values) of a dictionary-encoded string column with no nulls, or None."""
    import pyarrow as pa

    if col.null_count:
        return None
    col = col.unify_dictionaries() if col.num_chunks > 1 else col
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_dictionary(arr.type) or not (
        pa.types.is_string(arr.type.value_type) or pa.types.is_large_string(arr.type.value_type)
    ):
        return None
    return arr.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False), np.asarray(
        arr.dictionary.to_pylist(), dtype=object
    )


def _arrow_part(read: Callable[[Any], pd.DataFrame], part: Any) -> _ArrowPart | None:
    """A canonical copy read by Arrow, ids dictionary-encoded (no Python object per row), when ``read`` is the
    copy reader and the file passes the checks of :func:`_arrow_table`; None otherwise (the caller takes the pandas
    path, which raises the contract's error for a bad file)."""
    if not _is_copy_reader(read) or not isinstance(part, str):
        return None
    import pyarrow.parquet as pq

    names = pq.read_schema(part).names
    if not {"item_a", "item_b", "outcome"} <= set(names) or "winner" in names:
        return None
    return _arrow_table(pq.read_table(part, read_dictionary=list(_ID_COLS)))


def _arrow_table(table: Any) -> _ArrowPart | None:
    """A canonical table's rows without a Python object per row: the ids as dictionary indices (plain string id
    columns are dictionary-encoded here), outcome and weight as float64; None unless the table has string ids
    present and distinct within a row, finite outcomes and finite positive weights (the checks of
    :func:`~crowdflow.contracts.comparisons.canonical_comparisons` that the pandas path would raise on)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = table.column_names
    if not {"item_a", "item_b", "outcome"} <= set(names) or "winner" in names:
        return None
    cols = []
    for c in _ID_COLS:
        col = table.column(c)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = pc.dictionary_encode(col)
        cols.append(_dict_column(col))
    col_a, col_b = cols
    if col_a is None or col_b is None:
        return None
    out = table.column("outcome")
    if not (pa.types.is_floating(out.type) or pa.types.is_integer(out.type)) or out.null_count:
        return None
    y = out.to_numpy().astype(np.float64, copy=False)
    if y.size and not np.isfinite(y).all():
        return None
    if "weight" in names:
        wc = table.column("weight")
        if not (pa.types.is_floating(wc.type) or pa.types.is_integer(wc.type)) or wc.null_count:
            return None
        w = wc.to_numpy().astype(np.float64, copy=False)
        if w.size and not (np.isfinite(w).all() and (w > 0).all()):
            return None
    else:
        w = np.ones(y.size)
    (ia, va), (ib, vb) = col_a, col_b
    # a row comparing an item with itself (the pandas path names it): item_b's dictionary mapped into item_a's
    # (distinct values, so equal strings are equal positions) and the codes compared, no string per row
    if y.size:
        b_in_a = pc.index_in(pa.array(vb, pa.string()), value_set=pa.array(va, pa.string())).fill_null(-1)
        if bool(np.any(b_in_a.to_numpy(zero_copy_only=False)[ib] == ia)):
            return None
    return _ArrowPart(table, (ia, ib), (va, vb), y, w)


def _arrow_codes(ap: _ArrowPart | LocalRows, ctx: _Ctx, part: Any) -> tuple[np.ndarray, np.ndarray]:
    """Global item codes (int64) of both id columns of an Arrow-read copy: the dictionaries mapped once."""
    index = pd.Index(ctx.items)
    codes = []
    for idx, values in zip(ap.idx, ap.values, strict=True):
        look = index.get_indexer(values)
        if (look < 0).any():
            raise InputError(
                "holds an item id the first pass did not see: the file changed during the run", path=str(part)
            )
        codes.append(look.astype(np.int64)[idx])
    return codes[0], codes[1]


#: What the scan of one partition returns: its distinct item ids, its row count, up to three distinct ``|y|``.
Scan = tuple[np.ndarray, int, np.ndarray]


def _scan_rows(rows: _ArrowPart | LocalRows) -> Scan:
    """Distinct item ids, row count and up to three distinct ``|y|`` of rows held as dictionary indices."""
    used = [v[np.bincount(i, minlength=v.size) > 0] for i, v in zip(rows.idx, rows.values, strict=True)]
    ids = pd.unique(np.concatenate(used)) if used else np.zeros(0, dtype=object)
    return np.asarray(ids, dtype=object), int(rows.y.size), smallest_levels(rows.y)


def _scan_part(read: Callable[[Any], pd.DataFrame], part: Any) -> Scan:
    """Pass 1: distinct item ids, row count and up to three distinct ``|y|``."""
    ap = _arrow_part(read, part)
    if ap is not None:
        return _scan_rows(ap)
    df = _canonical(read(part))
    ids = pd.unique(pd.concat([df["item_a"], df["item_b"]], ignore_index=True).to_numpy(dtype=object))
    levels = smallest_levels(df["outcome"].to_numpy(dtype=np.float64))
    return np.asarray(ids, dtype=object), len(df), levels


@dataclass(frozen=True)
class LocalRows:
    """One file's comparisons kept where the file was first read (the fused read, issue #36 part 3).

    The two id columns as indices into the file's own dictionaries (``values``: object arrays of str), the outcome
    in the narrowest dtype that holds it exactly and the weights ((0,) when every weight is 1): ``9 + 8·[weights]``
    to ``16 + 8·[weights]`` bytes a row. :func:`_encode_part` maps them to the global dictionary when it builds a
    block, exactly as it maps a copy read by Arrow, so a block built from these equals one built by reading the
    copies (same rows, same order, same values).
    """

    idx: tuple[np.ndarray, np.ndarray]
    values: tuple[np.ndarray, np.ndarray]
    y: np.ndarray
    w: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.y.size)

    def weights(self) -> np.ndarray:
        return self.w if self.w.size == self.y.size else np.ones(self.y.size)


def keep_local(table: Any) -> tuple[LocalRows | None, Scan | None]:
    """What the first read of a file keeps for the fit (``read_check_copy(encode=...)``): its rows as
    :class:`LocalRows` and their scan, or ``(None, None)`` when the table does not take the Arrow path (then the
    fit scans and encodes the file's copy as before).

    Parameters
    ----------
    table : pyarrow.Table
        The file's canonical columns, as written to its copy.
    """
    ap = _arrow_table(table)
    if ap is None:
        return None, None
    w = np.zeros(0) if bool(np.all(ap.w == 1.0)) else np.ascontiguousarray(ap.w, dtype=np.float64)
    kept = LocalRows(ap.idx, ap.values, _compact_outcome(ap.y), w)
    return kept, _scan_rows(kept)


def _sums(rows: _Rows, n: int, mask: np.ndarray | None) -> EdgeSums:
    u, v, yo, w = rows.u, rows.v, rows.yo, rows.w
    if mask is not None:
        u, v, yo, w = u[mask], v[mask], yo[mask], w[mask]
    uk, inv = np.unique(u * np.int64(n) + v, return_inverse=True)
    ne = uk.size

    def add(x: np.ndarray) -> np.ndarray:
        return np.bincount(inv, weights=x, minlength=ne)

    ymin = np.full(ne, np.inf)
    ymax = np.full(ne, -np.inf)
    np.minimum.at(ymin, inv, yo)
    np.maximum.at(ymax, inv, yo)
    cnt = np.bincount(inv, minlength=ne).astype(np.int64)
    ties = np.bincount(inv, weights=(yo == 0).astype(np.float64), minlength=ne).round().astype(np.int64)
    return EdgeSums(
        uk, cnt, add(w), add(w * yo), add(w * yo * yo), ymin, ymax, add(w * (yo > 0)), add(w * (yo < 0)), ties
    )


@dataclass(frozen=True)
class _KeptSums:
    sums: EdgeSums
    n_changed: int
    capped: float


def _bin_index(x: np.ndarray) -> np.ndarray:
    """Histogram bin of ``x ≥ 0`` on the log grid: 0 below ``SKETCH_LO``, the last bin at or above the top."""
    with np.errstate(divide="ignore"):
        b = np.floor(np.log10(np.maximum(x, 1e-300) / SKETCH_LO) * SKETCH_PER_DECADE) + 1
    return np.asarray(np.clip(b, 0, SKETCH_BINS - 1), dtype=np.int64)


def _bin_lower(b: int | np.ndarray) -> np.ndarray:
    return np.asarray(SKETCH_LO * 10.0 ** ((np.asarray(b, dtype=float) - 1) / SKETCH_PER_DECADE))


def _encode_part(read: Callable[[Any], pd.DataFrame], ctx: _Ctx, parts: list[Any]) -> HeldRows:
    """Read a block's partitions once and encode them (:func:`~crowdflow.ranking.held.encode_block`): what a
    worker holds across the passes.

    A partition may also be a value the first read kept (an object with ``.path``, the copy, and ``.kept``, its
    :class:`LocalRows` or None): its rows are then taken from memory, the copy read only when nothing was kept.
    """
    us, vs, ys, ws = [], [], [], []
    for part in parts:
        kept = getattr(part, "kept", None)
        where = getattr(part, "path", part)
        ap = kept if kept is not None else _arrow_part(read, where)
        if ap is not None:
            i, j = _arrow_codes(ap, ctx, where)
            sign = np.where(i < j, 1.0, -1.0)
            us.append(np.minimum(i, j))
            vs.append(np.maximum(i, j))
            ys.append(sign * ap.y)
            ws.append(ap.weights() if isinstance(ap, LocalRows) else ap.w)
            del ap, i, j, sign
            continue
        rows = _read_rows(read, ctx, where)
        us.append(rows.u)
        vs.append(rows.v)
        ys.append(rows.yo)
        ws.append(rows.w)
        del rows
    return encode_block(np.concatenate(us), np.concatenate(vs), np.concatenate(ys), np.concatenate(ws), ctx.n)


def _held_edges(rule: _Rule | None, prev: _Rule | None, rows: HeldRows) -> _KeptSums:
    """Edge sums of the held rows ``rule`` keeps (all without a rule), the rows whose kept status differs under
    ``prev`` and ``Σ w min(r², cut²)``: one fused compiled loop (:func:`~crowdflow.ranking.held.held_sums`)."""
    keys, cnt, acc, changed, capped = held_sums(
        rows, rule.spec() if rule is not None else None, prev.spec() if prev is not None else None
    )
    a = np.ascontiguousarray(acc.T)
    sums = EdgeSums(keys, cnt[:, 0].copy(), a[0], a[1], a[2], a[3], a[4], a[5], a[6], cnt[:, 1].copy())
    return _KeptSums(sums, changed, capped)


@dataclass(frozen=True)
class _BlockKept:
    """A trimming step's result of one block: ``(Σw, Σw·y°, Σw·y°²)`` of the kept rows for each of the block's
    pairs (in its pair order; ``idx`` None), or only for the pairs at ``idx`` (those with a row whose kept status
    changed since the block's previous step, :func:`~crowdflow.ranking.held.held_kept`), the kept rows and the rows
    whose kept status changed."""

    idx: np.ndarray | None
    acc: np.ndarray
    n_kept: int
    n_changed: int


def _held_kept(rule: _Rule, prev: _Rule | None, changed_only: bool, rows: HeldRows) -> _BlockKept:
    """Trimming-step pass over the held rows (:func:`~crowdflow.ranking.held.held_kept`): per pair of the block
    (or, with ``changed_only``, per pair whose kept rows changed since ``prev``) 24 bytes back, no keys."""
    idx, acc, n_kept, changed = held_kept(
        rows, rule.spec(), prev.spec() if prev is not None else None, changed_only and prev is not None
    )
    return _BlockKept(idx, acc, n_kept, changed)


def _each(fn: Callable[[HeldRows], Any], blocks: list[HeldRows], shared: Any) -> list[Any]:
    """``fn`` on each held block of one group, in order: one task per place holding blocks
    (:func:`crowdflow.executors.on_group_with`; ``shared`` unused)."""
    return [fn(rows) for rows in blocks]


def _held_sketch(theta: np.ndarray, scale: float, rows: HeldRows) -> tuple[np.ndarray, np.ndarray]:
    """Histogram pass over the held rows: the non-empty bins of ``|r|/scale`` and their weights."""
    return held_histogram(rows, np.ascontiguousarray(theta, dtype=np.float64), scale)


@dataclass(frozen=True)
class _Written:
    path: str | None
    n_rows: int
    n_written: int
    out_count: np.ndarray
    out_weight: np.ndarray
    annotators: pd.DataFrame


def _write_part(
    read: Callable[[Any], pd.DataFrame],
    ctx: _Ctx,
    theta: np.ndarray,
    component: np.ndarray,
    n_components: int,
    rule: _Rule | None,
    out_dir: str | None,
    write_all: bool,
    write: Callable[[pd.DataFrame, str], Any],
    job: tuple[int, Any],
) -> _Written:
    """Final pass: residuals against the reported scores and flags; ``write(rows, path)`` writes
    ``part-<k>.parquet`` (:func:`to_parquet`, or the pipeline's writer of final parts)."""
    k, part = job
    ap = _arrow_part(read, part)
    if ap is not None:
        return _write_arrow(ap, ctx, theta, component, n_components, rule, out_dir, write_all, write, k, part)
    rows = _read_rows(read, ctx, part)
    df = rows.df
    flag = ~rule.keep(rows.u, rows.v, rows.yo) if rule is not None else np.zeros(len(df), dtype=bool)
    rc = component[rows.u]
    out_count = np.bincount(rc, weights=flag, minlength=n_components).round().astype(np.int64)
    out_weight = np.bincount(rc, weights=rows.w * flag, minlength=n_components)
    ann = pd.DataFrame({"annotator": df["annotator"].to_numpy(dtype=object), "o": flag.astype(np.int64)})
    ann = ann[ann["annotator"].notna()].groupby("annotator", sort=True)["o"].agg(["size", "sum"]).reset_index()
    path, n_written = None, 0
    if out_dir is not None:
        fitted = rows.sign * (theta[rows.u] - theta[rows.v])
        y = df["outcome"].to_numpy(dtype=np.float64)
        table = pd.DataFrame(
            {
                "part": np.full(len(df), k, dtype=np.int64),
                "row_id": df["row_id"].to_numpy(dtype=np.int64),
                "annotator": _str(df["annotator"].to_numpy(dtype=object)),
                "item_a": _str(df["item_a"].to_numpy(dtype=object)),
                "item_b": _str(df["item_b"].to_numpy(dtype=object)),
                "outcome": y,
                "weight": rows.w,
                "fitted": fitted,
                "residual": y - fitted,
                "is_outlier": flag,
            }
        )[slice(None) if write_all else flag].reset_index(drop=True)
        path = os.path.join(out_dir, f"part-{k:05d}.parquet")
        write(table, path)
        n_written = len(table)
    return _Written(path, len(df), n_written, out_count, out_weight, ann)


def _annotator_counts(ap: _ArrowPart, flag: np.ndarray) -> pd.DataFrame:
    """Per annotator (sorted, missing ids left out) the rows and the flagged rows of an Arrow-read copy."""
    import pyarrow.compute as pc

    empty = pd.DataFrame(
        {"annotator": pd.Series([], dtype=object), "size": np.zeros(0, np.int64), "sum": np.zeros(0, np.int64)}
    )
    if "annotator" not in ap.table.column_names:
        return empty
    enc = pc.dictionary_encode(ap.table.column("annotator")).combine_chunks()
    idx = enc.indices.to_numpy(zero_copy_only=False)
    valid = enc.indices.is_valid().to_numpy(zero_copy_only=False)
    if not valid.all():
        idx, flag = idx[valid], flag[valid]
    idx = idx.astype(np.int64)
    names = np.asarray(enc.dictionary.cast("string").to_pylist(), dtype=object)
    size = np.bincount(idx, minlength=names.size)
    hit = np.bincount(idx, weights=flag, minlength=names.size).round().astype(np.int64)
    live = np.flatnonzero(size > 0)
    order = live[np.argsort(names[live].astype(str), kind="stable")]
    return pd.DataFrame({"annotator": names[order], "size": size[order].astype(np.int64), "sum": hit[order]})


def _write_arrow(
    ap: _ArrowPart,
    ctx: _Ctx,
    theta: np.ndarray,
    component: np.ndarray,
    n_components: int,
    rule: _Rule | None,
    out_dir: str | None,
    write_all: bool,
    write: Callable[[pd.DataFrame, str], Any],
    k: int,
    part: Any,
) -> _Written:
    """:func:`_write_part` on a copy read by Arrow: the same flags, counts and file, strings gathered by code."""
    from crowdflow.ranking.types import _str_take

    i, j = _arrow_codes(ap, ctx, part)
    u, v = np.minimum(i, j), np.maximum(i, j)
    sign = np.where(i < j, 1.0, -1.0)
    yo = sign * ap.y
    m = ap.n_rows
    flag = ~rule.keep(u, v, yo) if rule is not None else np.zeros(m, dtype=bool)
    rc = component[u]
    out_count = np.bincount(rc, weights=flag, minlength=n_components).round().astype(np.int64)
    out_weight = np.bincount(rc, weights=ap.w * flag, minlength=n_components)
    ann = _annotator_counts(ap, flag)
    path, n_written = None, 0
    if out_dir is not None:
        sel = np.arange(m) if write_all else np.flatnonzero(flag)
        if "annotator" in ap.table.column_names:
            annot = _str(ap.table.column("annotator").take(sel).to_numpy(zero_copy_only=False))
        else:
            annot = _str(np.full(sel.size, None, dtype=object))
        fitted = (sign * (theta[u] - theta[v]))[sel]
        y = ap.y[sel]
        table = pd.DataFrame(
            {
                "part": np.full(sel.size, k, dtype=np.int64),
                "row_id": sel.astype(np.int64),
                "annotator": annot,
                "item_a": _str_take(ap.values[0], ap.idx[0][sel]),
                "item_b": _str_take(ap.values[1], ap.idx[1][sel]),
                "outcome": y,
                "weight": ap.w[sel],
                "fitted": fitted,
                "residual": y - fitted,
                "is_outlier": flag[sel],
            }
        )
        path = os.path.join(out_dir, f"part-{k:05d}.parquet")
        write(table, path)
        n_written = len(table)
    return _Written(path, m, n_written, out_count, out_weight, ann)
